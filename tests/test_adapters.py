"""The ``*_internals.py`` adapters fed the shapes other library versions have (milliseconds):
JAX 0.11's 5-argument ``_cache_write``, a missing attribute, a renamed hook, a status code in
place of words. Each keeps the user's call working and says, in one line, what is off."""

from __future__ import annotations

import types

import pytest

from jaxnb._core import optional
from jaxnb._engine import jax_internals as ji


@pytest.fixture(autouse=True)
def _fresh_features():
    for feature in (ji.EVERY_PROCESS_WRITES, ji.JIT_MISSES, "test feature"):
        optional.forget(feature)
    yield
    for feature in (ji.EVERY_PROCESS_WRITES, ji.JIT_MISSES, "test feature"):
        optional.forget(feature)


class Cache:
    """The shape of ``jax._src.compilation_cache``: what ``put_executable_and_time`` got."""

    def __init__(self, fails: bool = False) -> None:
        self.put, self.fails = [], fails

    def put_executable_and_time(self, cache_key, module_name, executable, backend, compile_time):
        if self.fails:
            raise OSError("disk full")
        self.put.append((cache_key, module_name, executable, backend, compile_time))


def compiler_0_11(calls: list) -> types.SimpleNamespace:
    """JAX 0.11's ``_cache_write``: host callbacks go to ``_cache_read`` instead."""
    def _cache_write(cache_key, compile_time_secs, module_name, backend, executable):
        calls.append(("jax", cache_key))
    return types.SimpleNamespace(_cache_write=_cache_write)


def compiler_0_10(calls: list) -> types.SimpleNamespace:
    def _cache_write(cache_key, compile_time_secs, module_name, backend, executable, host_callbacks):
        calls.append(("jax", cache_key, host_callbacks))
    return types.SimpleNamespace(_cache_write=_cache_write)


def test_jax_0_11_writer_shape_is_installed_and_writes_from_other_processes():
    calls, cache = [], Cache()
    compiler = compiler_0_11(calls)
    assert ji.cache_from_every_process(compiler, cache, process_id=lambda: 1) is None
    compiler._cache_write("k", 5.0, "jit_f", "cpu", "exe")  # as JAX 0.11 calls it
    assert cache.put == [("k", "jit_f", "exe", "cpu", 5)] and calls == []
    compiler._cache_write("k2", compile_time_secs=0.0, module_name="m", backend="b", executable="e")
    assert len(cache.put) == 1 and calls == []  # under the minimum compile time: not kept
    assert not optional.problems()


def test_process_0_and_host_callbacks_get_jax_own_writer():
    calls, cache = [], Cache()
    compiler = compiler_0_10(calls)
    assert ji.cache_from_every_process(compiler, cache, process_id=lambda: 0) is None
    compiler._cache_write("k", 5.0, "m", "cpu", "exe", [])
    assert calls == [("jax", "k", [])] and cache.put == []
    other = compiler_0_10(calls2 := [])
    ji.cache_from_every_process(other, cache, process_id=lambda: 1)
    other._cache_write("k", 5.0, "m", "cpu", "exe", ["a callback"])
    assert calls2 == [("jax", "k", ["a callback"])] and cache.put == []


def test_arguments_that_do_not_bind_go_to_jax_own_writer_unchanged():
    calls, cache = [], Cache()
    compiler = compiler_0_11(calls)
    ji.cache_from_every_process(compiler, cache, process_id=lambda: 1)
    with pytest.raises(TypeError):  # what JAX's own writer says of them: not jaxnb's error
        compiler._cache_write("k", 5.0, "m", "cpu", "exe", "one too many")
    assert cache.put == []


def test_a_write_that_fails_never_raises_into_the_jit():
    compiler = compiler_0_11([])
    ji.cache_from_every_process(compiler, Cache(fails=True), process_id=lambda: 1)
    with pytest.warns(UserWarning, match="disk full"):
        assert compiler._cache_write("k", 5.0, "m", "cpu", "exe") is None


def test_absent_parameters_leave_jax_writer_in_place_and_say_why():
    def _cache_write(key, seconds, module_name, backend, executable):  # renamed parameters
        return "jax's own"
    compiler = types.SimpleNamespace(_cache_write=_cache_write)
    why = ji.cache_from_every_process(compiler, Cache(), process_id=lambda: 1)
    assert compiler._cache_write is _cache_write
    assert "lacks cache_key, compile_time_secs" in why
    [line] = optional.problems()
    assert line.startswith(f"{ji.EVERY_PROCESS_WRITES}: off (this JAX's _cache_write(key, seconds")
    assert line.endswith("process 0 writes the cache, as JAX does)") and "\n" not in line


def test_a_missing_attribute_or_put_function_is_a_status_line():
    assert "AttributeError" in ji.cache_from_every_process(types.SimpleNamespace(), Cache(),
                                                           process_id=lambda: 1)
    optional.forget(ji.EVERY_PROCESS_WRITES)
    compiler = compiler_0_11([])
    why = ji.cache_from_every_process(compiler, types.SimpleNamespace(), process_id=lambda: 1)
    assert "put_executable_and_time" in why and len(optional.problems()) == 1


def test_installing_twice_wraps_once():
    calls, cache = [], Cache()
    compiler = compiler_0_11(calls)
    ji.cache_from_every_process(compiler, cache, process_id=lambda: 1)
    first = compiler._cache_write
    ji.cache_from_every_process(compiler, cache, process_id=lambda: 1)
    assert compiler._cache_write is first


def test_a_renamed_test_hook_turns_step_finding_off_in_one_line():
    renamed = types.SimpleNamespace(__name__="jax._src.util", test_event=lambda *a: None,
                                    event_listener=None)
    assert ji.on_jit_cache_miss(lambda: None, util=renamed) is False
    [line] = optional.problems()
    assert line.startswith(f"{ji.JIT_MISSES}: off (JAX's test-event hook is gone")
    assert "step_fn" in line


def test_the_hook_chains_and_a_failing_callback_never_reaches_the_jit():
    seen = []
    util = types.SimpleNamespace(__name__="u", test_event_listener=lambda *a: seen.append(a),
                                 test_event=lambda *a: None)

    def fails() -> None:
        raise RuntimeError("boom")
    assert ji.on_jit_cache_miss(fails, util=util) is True
    util.test_event_listener("jit_cpp_cache_miss", 1)  # as JAX calls it: no exception
    assert seen == [("jit_cpp_cache_miss", 1)]


class StatusError(RuntimeError):
    """The shape of ``jax.errors.JaxRuntimeError``: an absl code beside its text."""

    def __init__(self, text: str, code: int | None) -> None:
        super().__init__(text)
        if code is not None:
            self.error_code = code


def test_key_value_timeouts_are_known_by_status_code_not_words():
    assert ji.timed_out(StatusError("GetKeyValue() timed out (reworded)", 4), 1.0, 1.0)
    assert not ji.timed_out(StatusError("DEADLINE_EXCEEDED in the words only", 14), 1.0, 1.0)
    # Without a code (an older JAX), a runtime error at the end of the slice is its timeout.
    assert ji.timed_out(StatusError("anything", None), 0.95, 1.0)
    assert not ji.timed_out(StatusError("connection refused", None), 0.01, 1.0)
    assert not ji.timed_out(ValueError("x"), 1.0, 1.0)


def test_grpc_resource_exhausted_is_not_a_device_out_of_memory():
    from jaxnb._engine.memory.oom_note import is_out_of_memory
    from jaxnb._failures.out_of_memory import out_of_memory

    grpc = ("RESOURCE_EXHAUSTED: Received message larger than max (8388700 vs. 4194304)\n"
            "Additional GRPC error information from remote target coordination_service")
    assert not is_out_of_memory(StatusError(grpc, 8))
    assert not is_out_of_memory(RuntimeError(grpc))
    assert out_of_memory({1: RuntimeError(grpc)}) == {}
    for text in ("RESOURCE_EXHAUSTED: Out of memory allocating 4398046511104 bytes.",
                 "RESOURCE_EXHAUSTED: Failed to allocate request for 1.00GiB on device ordinal 0",
                 "RESOURCE_EXHAUSTED: XLA:TPU compile error. Ran out of memory in memory space hbm."):
        assert is_out_of_memory(RuntimeError(text)) and out_of_memory({0: RuntimeError(text)})
    assert is_out_of_memory(StatusError("Out of device memory (reworded, no prefix)", 8))


def test_optional_turns_a_failing_feature_off_with_its_first_line():
    with optional.optional("test feature"):
        raise KeyError("gone\nsecond line")
    assert "test feature: off (KeyError: 'gone" in optional.problems()[0]
    assert optional.is_off("test feature")


def test_ipykernel_adapter_on_the_installed_ipykernel():
    from ipykernel.iostream import OutStream

    from jaxnb._core import ipykernel_internals

    assert ipykernel_internals.cell_hash("x = 1\n").isdigit()
    tee = ipykernel_internals.tee_out_stream(lambda: None, lambda back, write: None)
    assert issubclass(tee, OutStream) and tee is not OutStream
    kernel = types.SimpleNamespace(apply_request=print)  # an ipykernel without the table
    assert ipykernel_internals.serve_apply_on_control(kernel) is False
    assert any(line.startswith(ipykernel_internals.CONTROL_APPLY) for line in optional.problems())
    optional.forget(ipykernel_internals.CONTROL_APPLY)
    kernel.control_handlers = {}
    assert ipykernel_internals.serve_apply_on_control(kernel) is True
    assert kernel.control_handlers == {"apply_request": print}


def test_status_lists_the_features_off_once_each():
    from jaxnb._widgets.devices import features_off

    off = "compile cache writes from every process: off (why)"
    procs = [types.SimpleNamespace(process_index=i, compile_cache={"features_off": [off]})
             for i in range(2)]
    procs.append(types.SimpleNamespace(process_index=2, compile_cache={"features_off": []}))
    assert features_off(procs) == [f"{off} on p0, p1"]
    assert features_off(procs[:2]) == [off]


def test_the_oldest_versions_ci_runs_are_pyproject_floors():
    """``.ci/oldest.txt`` (what ``bash dev test oldest`` installs) pins every runtime dependency
    at the floor pyproject.toml gives it: the floors are versions CI runs."""
    from oldest_versions import differences, floors, pins

    assert differences() == []
    assert set(floors()) <= set(pins()) and pins()["jaxlib"] == pins()["jax"]


def test_a_client_without_the_control_route_is_refused_in_one_line_before_sending():
    from jaxnb._core import ipp_internals

    moved = types.SimpleNamespace(session=None, _engines={})  # a release that renamed _send
    why = ipp_internals.control_route_missing(moved)
    assert why.startswith("this ipyparallel's Client has no _send, _control_stream") and "\n" not in why
    with pytest.raises(RuntimeError, match="no _send, _control_stream"):
        ipp_internals.control_apply(moved, 0, print)
