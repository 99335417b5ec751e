"""Every use of JAX's private modules (``jax._src``), in one place (written against jax 0.10).

jaxnb needs a few things JAX does not make public: the state of
``jax.distributed`` (is this process in a group, its coordination client for
the key-value store), whether backends exist yet, and the mesh context that
an interrupted ``jax.set_mesh`` can leave behind, the address gloo uses, and the persistent
compilation cache's rule that only process 0 writes it. If a JAX release moves one of them,
this is the module to change.
"""

from __future__ import annotations

import contextlib
from typing import Any

#: The JAX version these reads were written against.
WRITTEN_FOR = "0.10"


def distributed_state() -> Any:
    """JAX's ``jax.distributed`` state (``client``, ``coordinator_address``, ``process_id``, …)."""
    from jax._src import distributed

    return distributed.global_state


def distributed_client() -> Any | None:
    """The coordination-service client of this process's group, or ``None`` outside a group."""
    try:
        return distributed_state().client
    except ImportError:
        return None


def backends_created() -> bool:
    """True once JAX has created its backends in this process."""
    from jax._src import xla_bridge

    return bool(getattr(xla_bridge, "_backends", None))


def forget_meshes() -> None:
    """Drop meshes left in context (e.g. by a ``jax.set_mesh`` an interrupt cut short)."""
    import jax
    from jax._src import mesh as mesh_lib

    jax.set_mesh(None)
    mesh_lib.thread_resources.stack = [mesh_lib.EMPTY_ENV]
    mesh_lib.thread_resources.env = mesh_lib.EMPTY_ENV


def use_gloo_address(address: str) -> None:
    """Make JAX's gloo CPU collectives use ``address`` (``make_gloo_tcp_collectives(hostname=)``)
    instead of resolving the hostname, which on many hosts maps to 127.0.0.1.

    Makes the CPU backend (created later, after ``jax.distributed.initialize``) use ``address``.

    No effect once the CPU backend exists; it is created again after
    ``jax.extend.backend.clear_backends()`` (what a repair does) with the same address.
    """
    from jax._src import config, distributed, xla_bridge
    from jax._src.lib import _jax

    def make_cpu_client() -> Any:
        client = distributed.global_state.client
        collectives = None
        if client is not None and config.cpu_collectives_implementation.value == "gloo":
            collectives = _jax.make_gloo_tcp_collectives(distributed_client=client, hostname=address)
        return xla_bridge.make_cpu_client(collectives)

    # "Backend cpu already initialized": it keeps the address it was made with.
    with contextlib.suppress(RuntimeError):
        xla_bridge.register_backend_factory("cpu", make_cpu_client, priority=0, fail_quietly=False)


def cache_from_every_process() -> None:
    """Let every process write JAX's persistent compilation cache, not only process 0.

    ``jax._src.compiler._cache_write`` returns at once on a process whose ``process_id`` is not
    0 (to spare shared filesystems concurrent writes). jaxnb's processes write each host's own
    folder under JAX's file lock, and a process's own computations (on its local devices) have
    keys no other process writes. The same checks as JAX's (host callbacks, the minimum compile
    time), then JAX's own ``put_executable_and_time``.
    """
    import warnings

    from jax._src import compilation_cache, compiler, config, distributed

    original = getattr(compiler, "_cache_write")  # noqa: B009 (a private name, read here only)
    if getattr(original, "jaxnb_every_process", False):
        return

    def write(cache_key: str, compile_time_secs: float, module_name: str, backend: Any,
              executable: Any, host_callbacks: Any) -> None:
        if distributed.global_state.process_id == 0 or host_callbacks:
            original(cache_key, compile_time_secs, module_name, backend, executable, host_callbacks)
            return
        if compile_time_secs < config.persistent_cache_min_compile_time_secs.value:
            return
        try:
            compilation_cache.put_executable_and_time(cache_key, module_name, executable, backend,
                                                      int(compile_time_secs))
        except Exception as exc:  # as JAX does: a cache that cannot be written is no error
            warnings.warn(f"Error writing persistent compilation cache entry for "
                          f"'{module_name}': {type(exc).__name__}: {exc}", stacklevel=2)

    write.jaxnb_every_process = True  # type: ignore[attr-defined]
    setattr(compiler, "_cache_write", write)  # noqa: B010


#: JAX's compile events (``jax._src.dispatch``): tracing to a jaxpr, lowering it, XLA's compile.
#: Each is announced at its start (``record_scalar``) and end (``record_event_duration_secs``).
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def on_jit_cache_miss(callback: Any) -> None:
    """Call ``callback()`` on every miss of jit's C++ cache: a jitted function called for the
    first time in this process, or with new shapes. JAX says so through its test hook
    (``jax._src.util.test_event("jit_cpp_cache_miss")``); jaxnb's listener is chained after
    any listener already there."""
    from jax._src import util

    previous = util.test_event_listener

    def listener(name: str, *args: Any) -> None:
        if previous is not None:
            previous(name, *args)
        if name == "jit_cpp_cache_miss":
            callback()

    util.test_event_listener = listener


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

        jitted = pjit._cpp_pjit(fun, found["jit_info"])  # noqa: SLF001
    return jitted, tuple(found.get("args", ())), dict(found.get("kwargs", {}))
