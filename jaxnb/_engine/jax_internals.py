"""Every use of JAX's private modules (``jax._src``), in one place (written against jax 0.10).

jaxnb needs a few things JAX does not make public: the state of
``jax.distributed`` (is this process in a group, its coordination client for
the key-value store), whether backends exist yet, and the mesh context that
an interrupted ``jax.set_mesh`` can leave behind, the address gloo uses, jit's cache misses
(JAX's test hook) and the persistent compilation cache's rule that only process 0 writes it.
If a JAX release moves one of them, this is the module to change.

Each read is detected where it is used (attributes, signatures) and guarded: a part that has
moved turns its feature off with one line for ``%jax_cluster status``
(:mod:`jaxnb._core.optional`); nothing here raises into the user's code. Public API is used
first where JAX has one (``jax.distributed.is_initialized``).
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable
from typing import Any

from jaxnb._core.optional import optional, turn_off

#: The JAX version these reads were written against.
WRITTEN_FOR = "0.10"
#: Features this module turns off when JAX has moved their part (their lines in ``status``).
KV_STORE = "key-value store (checkpoint gathers, stop agreement, profiles)"
GLOO_ADDRESS = "gloo on this host's address"
MESH_RESET = "mesh reset on repair"
JIT_MISSES = "step found at its first jitted call"
EVERY_PROCESS_WRITES = "compile cache writes from every process"


def distributed_state() -> Any | None:
    """JAX's ``jax.distributed`` state (``client``, ``coordinator_address``, ``process_id``, …);
    ``None`` when this JAX keeps it elsewhere (the feature is off, with its reason)."""
    try:
        from jax._src import distributed

        return distributed.global_state
    except (ImportError, AttributeError) as exc:
        turn_off(KV_STORE, f"jax._src.distributed.global_state is gone ({exc})")
        return None


def distributed_client() -> Any | None:
    """The coordination-service client of this process's group, or ``None`` outside a group."""
    state = distributed_state()
    if state is None:
        return None
    client = getattr(state, "client", None)
    if client is None and not hasattr(state, "client"):
        turn_off(KV_STORE, "jax._src.distributed.global_state has no client")
    return client


def in_group() -> bool:
    """Whether this process has joined ``jax.distributed`` (public API when JAX has it)."""
    import jax

    is_initialized = getattr(jax.distributed, "is_initialized", None)
    if callable(is_initialized):
        with contextlib.suppress(Exception):
            return bool(is_initialized())
    return distributed_client() is not None


def backends_created() -> bool:
    """True once JAX has created its backends in this process."""
    try:
        from jax._src import xla_bridge
    except ImportError:
        return False
    check = getattr(xla_bridge, "backends_are_initialized", None)
    if callable(check):
        with contextlib.suppress(Exception):
            return bool(check())
    return bool(getattr(xla_bridge, "_backends", None))


def forget_meshes() -> None:
    """Drop meshes left in context (e.g. by a ``jax.set_mesh`` an interrupt cut short)."""
    import jax

    jax.set_mesh(None)
    with optional(MESH_RESET):
        from jax._src import mesh as mesh_lib

        empty = mesh_lib.EMPTY_ENV
        resources = mesh_lib.thread_resources
        if not (hasattr(resources, "stack") and hasattr(resources, "env")):
            raise AttributeError("jax._src.mesh.thread_resources has no stack/env")
        resources.stack = [empty]
        resources.env = empty


def use_gloo_address(address: str) -> None:
    """Make JAX's gloo CPU collectives use ``address`` (``make_gloo_tcp_collectives(hostname=)``)
    instead of resolving the hostname, which on many hosts maps to 127.0.0.1.

    Makes the CPU backend (created later, after ``jax.distributed.initialize``) use ``address``.

    No effect once the CPU backend exists; it is created again after
    ``jax.extend.backend.clear_backends()`` (what a repair does) with the same address. When
    this JAX lacks a part, JAX's own CPU backend stays (the feature is off, with its reason).
    """
    with optional(GLOO_ADDRESS):
        from jax._src import config, distributed, xla_bridge
        from jax._src.lib import _jax

        make_gloo = _jax.make_gloo_tcp_collectives
        if "hostname" not in _parameters(make_gloo, {"hostname"}):
            raise TypeError("make_gloo_tcp_collectives takes no hostname=")
        implementation = config.cpu_collectives_implementation
        make_client, register = xla_bridge.make_cpu_client, xla_bridge.register_backend_factory

        def make_cpu_client() -> Any:
            client = distributed.global_state.client
            collectives = None
            if client is not None and implementation.value == "gloo":
                collectives = make_gloo(distributed_client=client, hostname=address)
            return make_client(collectives)

        # "Backend cpu already initialized": it keeps the address it was made with.
        with contextlib.suppress(RuntimeError):
            register("cpu", make_cpu_client, priority=0, fail_quietly=False)


#: absl status codes (``JaxRuntimeError.error_code``) jaxnb recognises.
DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED = 4, 8


def status_code(error: BaseException) -> int | None:
    """The absl status code of a JAX runtime error (``JaxRuntimeError.error_code``), ``None``
    when this JAX does not give one (the caller then falls back on other evidence)."""
    code = getattr(error, "error_code", None)
    with contextlib.suppress(TypeError, ValueError):
        return int(code) if code is not None and not isinstance(code, bool) else None
    return None


def timed_out(error: BaseException, waited: float, asked: float) -> bool:
    """Whether ``error``, raised by a key-value wait of ``asked`` seconds after ``waited``, is
    its timeout: by status code; without one, a runtime error at the end of the wait."""
    code = status_code(error)
    if code is not None:
        return code == DEADLINE_EXCEEDED
    return isinstance(error, RuntimeError) and waited >= 0.9 * asked


def set_config(name: str, value: Any) -> str | None:
    """``jax.config.update(name, value)``; ``None`` when done, else why not (a name this JAX
    does not know, or a value it refuses)."""
    import jax

    try:
        jax.config.update(name, value)
    except Exception as exc:  # AttributeError: "Unrecognized config option"
        return f"JAX refused {name}={value!r} ({type(exc).__name__}: {exc})"
    return None


def _parameters(fn: Any, assumed: set[str]) -> set[str]:
    """The parameter names of ``fn``; ``assumed`` when a C++ function has no signature."""
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return assumed


#: What jaxnb's cache writer reads of ``_cache_write``'s arguments (by name), and the names of
#: ``put_executable_and_time``'s parameters it passes them as.
WRITE_NEEDS = ("cache_key", "compile_time_secs", "module_name", "backend", "executable")
PUT_NEEDS = ("cache_key", "module_name", "executable", "backend", "compile_time")


def cache_from_every_process(compiler: Any = None, cache: Any = None,
                             process_id: Callable[[], int] | None = None) -> str | None:
    """Let every process write JAX's persistent compilation cache, not only process 0; ``None``
    once installed, else why not (the feature is off: JAX's own writer stays, process 0 writes).

    ``jax._src.compiler._cache_write`` returns at once on a process whose ``process_id`` is not
    0 (to spare shared filesystems concurrent writes). jaxnb's processes write each host's own
    folder under JAX's file lock, and a process's own computations (on its local devices) have
    keys no other process writes. The signatures of ``_cache_write`` and
    ``put_executable_and_time`` are read here, at install: the writer takes any arguments, and
    on process 0, for programs with host callbacks (JAX keeps them out), and whenever the
    arguments do not bind, it calls JAX's own writer. It never raises into the user's jit.
    ``compiler``, ``cache``, ``process_id``: JAX's own by default (tests give other shapes).
    """
    try:
        from jax._src import config

        if compiler is None:
            from jax._src import compiler
        if cache is None:
            from jax._src import compilation_cache as cache
        if process_id is None:
            from jax._src import distributed

            process_id = lambda: distributed.global_state.process_id  # noqa: E731
        original = compiler._cache_write  # noqa: SLF001 - the adapter's one read of it
        put = cache.put_executable_and_time
        min_seconds = config.persistent_cache_min_compile_time_secs
        signature, put_params = inspect.signature(original), _parameters(put, set())
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        return _writes_off(f"{type(exc).__name__}: {exc}")
    if getattr(original, "jaxnb_every_process", False):
        return None
    missing = [n for n in WRITE_NEEDS if n not in signature.parameters]
    missing += [f"put_executable_and_time({n})" for n in PUT_NEEDS if n not in put_params]
    if missing:
        return _writes_off(f"this JAX's _cache_write{signature} lacks {', '.join(missing)}")

    def write(*args: Any, **kwargs: Any) -> Any:
        try:
            given = signature.bind(*args, **kwargs).arguments
            own = process_id() != 0 and not given.get("host_callbacks")
        except Exception:  # in doubt: JAX's own writer
            own = False
        if not own:
            return original(*args, **kwargs)
        try:
            if given["compile_time_secs"] < min_seconds.value:
                return None
            put(**{name: given[name] for name in PUT_NEEDS[:-1]},
                compile_time=int(given["compile_time_secs"]))
        except Exception as exc:  # as JAX does: a cache that cannot be written is no error
            warnings.warn(f"Error writing persistent compilation cache entry: "
                          f"{type(exc).__name__}: {exc}", stacklevel=2)
        return None

    write.jaxnb_every_process = True  # type: ignore[attr-defined]
    compiler._cache_write = write  # noqa: SLF001
    return None


def _writes_off(why: str) -> str:
    turn_off(EVERY_PROCESS_WRITES, f"{why}; process 0 writes the cache, as JAX does")
    return why


#: JAX's compile events (``jax._src.dispatch``): tracing to a jaxpr, lowering it, XLA's compile.
#: Each is announced at its start (``record_scalar``) and end (``record_event_duration_secs``).
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def on_jit_cache_miss(callback: Any, util: Any = None) -> bool:
    """Call ``callback()`` on every miss of jit's C++ cache: a jitted function called for the
    first time in this process, or with new shapes. JAX says so through its test hook
    (``jax._src.util.test_event("jit_cpp_cache_miss")``); jaxnb's listener is chained after
    any listener already there. False (and the feature off) when this JAX has no such hook.
    ``util``: the module holding the hook (JAX's own by default)."""
    try:
        if util is None:
            from jax._src import util
        if not (hasattr(util, "test_event_listener") and callable(getattr(util, "test_event", None))):
            raise AttributeError(f"{util.__name__} has no test_event_listener")
    except (ImportError, AttributeError) as exc:
        turn_off(JIT_MISSES, f"JAX's test-event hook is gone ({exc}); give the step with "
                             "jaxnb.report(step_fn=...)")
        return False
    previous = util.test_event_listener

    def listener(name: str, *args: Any) -> None:
        if previous is not None:
            previous(name, *args)
        if name == "jit_cpp_cache_miss":
            with contextlib.suppress(Exception):  # never into the user's jitted call
                callback()

    util.test_event_listener = listener
    return True


def jit_call_in_progress() -> tuple[Any, tuple[Any, ...], dict[str, Any]] | None:
    """The jitted function the user's code is calling on this thread (from a cache-miss
    listener), with the arguments of the call; ``None`` when the call is not the user's (an
    op run eagerly by JAX itself).

    Read from the frame of ``jax._src.pjit``'s ``cache_miss`` (its ``args``, ``kwargs`` and
    the ``fun`` and ``jit_info`` it closes over) and the caller's frame, which holds the
    jitted function.
    """
    import inspect
    import os

    frame = inspect.currentframe()
    marker = os.path.join("jax", "_src", "pjit.py")
    while frame is not None and not (frame.f_code.co_name == "cache_miss"
                                     and frame.f_code.co_filename.endswith(marker)):
        frame = frame.f_back
    if frame is None:
        return None
    found = frame.f_locals
    caller = frame.f_back
    jax_code = os.path.join("jax", "_src", "")
    while caller is not None and jax_code in caller.f_code.co_filename:
        if caller.f_code.co_name not in ("reraise_with_filtered_traceback",):
            return None  # called by JAX itself (an op applied eagerly), not by the user
        caller = caller.f_back
    if caller is None or "fun" not in found or "jit_info" not in found:
        return None
    fun = found["fun"]
    scopes = (caller.f_locals, caller.f_globals)
    jitted = next((v for scope in scopes for v in list(scope.values())
                   if getattr(v, "_fun", None) is fun and hasattr(v, "lower")), None)
    if jitted is None:  # held out of reach (an attribute): the same jit made again
        from jax._src import pjit

        remake = getattr(pjit, "_cpp_pjit", None)
        if remake is None:
            return None
        jitted = remake(fun, found["jit_info"])
    return jitted, tuple(found.get("args", ())), dict(found.get("kwargs", {}))
