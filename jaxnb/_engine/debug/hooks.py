"""Set an engine up for the debugger, once, when it joins the group.

* IPython's cell events keep a failed cell's frames (:mod:`.kept`).
* ipyparallel's own ``apply_request`` handler also serves the engine's *control* channel,
  which ipykernel runs on its own thread: so the notebook reaches a process that sits at
  ``jaxnb.breakpoint()`` while its main thread runs the cell (:mod:`.stop`), with
  ipyparallel's messages and sockets (no new ones).
"""

from __future__ import annotations

from jaxnb._engine.debug import kept

_installed = False


def install() -> None:
    """Install the hooks on this engine (nothing outside an ipyparallel engine; once)."""
    global _installed
    if _installed:
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    if shell is None or kernel is None:
        return
    kept.install(shell)
    handlers = getattr(kernel, "control_handlers", None)
    if isinstance(handlers, dict) and hasattr(kernel, "apply_request"):
        handlers.setdefault("apply_request", kernel.apply_request)
    _installed = True
