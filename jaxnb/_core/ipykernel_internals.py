"""ipykernel's parts that jaxnb relies on beyond its public API, in one place (written against
ipykernel 6.29-7.x).

- the hash in a cell's file name (``ipykernel.compiler.murmur2_x86`` with its seed), to show
  a stack frame's cell line (notebook);
- ``OutStream(..., watchfd=)`` and the ``_original_stdstream_copy`` that ipyparallel's engine
  points its log at, for the engines' stderr tee (:mod:`jaxnb._engine.boot.stderr_tee`);
- ``kernel.control_handlers``, to serve ipyparallel's ``apply_request`` on the control
  channel too (the debugger: :mod:`jaxnb._engine.debug.hooks`);
- ``kernel._shutdown_message``, the reply to the ``shutdown_request`` that ends the kernel,
  whose ``restart`` tells a restart from a shut-down on purpose (:func:`ending_for_good`).

Each is detected where it is used; one that has moved turns its feature off with a line for
``%jax_cluster status`` (:mod:`jaxnb._core.optional`) and never raises into the user's code.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from jaxnb._core.optional import optional, turn_off

#: Features this module turns off when ipykernel has moved their part (their lines in ``status``).
STDERR_TEE = "engine stderr logged before it is shown"
CONTROL_APPLY = "debugger commands on the control channel"
SHUTDOWN_KIND = "an unnamed cluster stopped when its kernel is shut down (not restarted)"


def cell_hash(code: str) -> str | None:
    """The number ipykernel puts in the file name of a cell (a hash of its source); ``None``
    when this ipykernel names cells otherwise."""
    try:
        from ipykernel.compiler import get_tmp_hash_seed, murmur2_x86

        return str(murmur2_x86(code, get_tmp_hash_seed()))
    except Exception:  # ImportError, or another signature: frames show no cell source
        return None


def tee_out_stream(start_tee: Callable[[], tuple[int, int] | None],
                   forward: Callable[[int, Callable[[str], Any]], None]) -> Any:
    """ipykernel's ``OutStream`` class for ipyparallel's ``out_stream_factory``: for stderr,
    with ipykernel off fd 2 (``watchfd=False``) and fd 2 through ``start_tee()`` (which returns
    the descriptor where what was written comes back, and the log's), whose text
    ``forward(back, write)`` hands to the cell; else ipykernel's own class unchanged (the
    feature off)."""
    from ipykernel.iostream import OutStream

    try:
        takes = list(inspect.signature(OutStream.__init__).parameters)
    except (TypeError, ValueError):
        takes = []
    if "watchfd" not in takes:
        turn_off(STDERR_TEE, f"ipykernel's OutStream takes no watchfd= (parameters: {', '.join(takes)})")
        return OutStream

    class TeeOutStream(OutStream):
        """ipykernel's output stream; for ``stderr``, fd 2 goes through the tee."""

        def __init__(self, session: Any, pub_thread: Any, name: str, *args: Any, **kwargs: Any) -> None:
            if name != "stderr":
                super().__init__(session, pub_thread, name, *args, **kwargs)
                return
            super().__init__(session, pub_thread, name, *args, **{**kwargs, "watchfd": False})
            with optional(STDERR_TEE):
                started = start_tee()
                if started is not None:
                    back, log = started
                    # Where ipyparallel then points its own log handlers (as for ipykernel's
                    # capture): the log itself, not fd 2 (which would bring its lines back).
                    self._original_stdstream_copy = log
                    import threading

                    threading.Thread(target=self._forward, args=(back,), name="jaxnb-stderr",
                                     daemon=True).start()

        def _forward(self, back: int) -> None:
            """What reached fd 2, to the cell's stderr (as ipykernel's own thread would)."""
            forward(back, self.write)

    return TeeOutStream


def serve_apply_on_control(kernel: Any) -> bool:
    """Let ``kernel``'s control channel run ipyparallel's ``apply_request`` (ipykernel serves
    it on its own thread); False, with the feature off, when this kernel has no such table."""
    handlers = getattr(kernel, "control_handlers", None)
    apply = getattr(kernel, "apply_request", None)
    if not isinstance(handlers, dict) or apply is None:
        turn_off(CONTROL_APPLY, "this ipykernel has no control_handlers table (or the engine no "
                                "apply_request); jaxnb.breakpoint() does not stop")
        return False
    handlers.setdefault("apply_request", apply)
    return True


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (ipykernel's application is running here)."""
    import sys

    if "ipykernel" not in sys.modules:
        return False
    try:
        from ipykernel.kernelapp import IPKernelApp

        return bool(IPKernelApp.initialized())
    except Exception:
        return False


def ending_for_good() -> bool:
    """At exit of a kernel: True when it was shut down on purpose (a ``shutdown_request`` with
    ``restart`` false, or no request: ``exit()``), False when it restarts. False too, with the
    feature off, when this ipykernel keeps the request elsewhere (a restart is the safe guess:
    the cluster then stops itself after its idle timeout)."""
    try:
        from ipykernel.kernelapp import IPKernelApp

        if not in_kernel():
            return False  # (instance() would make an application here)
        kernel = IPKernelApp.instance().kernel
        if not hasattr(kernel, "_shutdown_message"):
            raise AttributeError("this ipykernel's kernel has no _shutdown_message")
        message: Any = kernel._shutdown_message  # noqa: SLF001 - the adapter's one read of it
        if message is None:
            return True
        return not message["content"]["restart"]
    except Exception as exc:
        turn_off(SHUTDOWN_KIND, f"{type(exc).__name__}: {exc}")
        return False
