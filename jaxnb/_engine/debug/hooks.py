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
#: Whether the control channel serves ``apply_request`` here: without it no command could
#: reach a stopped process, so ``jaxnb.breakpoint()`` does not stop (:mod:`.stop`).
control_ready = False


def install() -> None:
    """Install the hooks on this engine (nothing outside an ipyparallel engine; once)."""
    global _installed, control_ready
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
    from jaxnb._core.ipykernel_internals import serve_apply_on_control
    from jaxnb._core.optional import optional

    with optional("post-mortem debugging (%jax_debug)"):
        kept.install(shell)
    control_ready = serve_apply_on_control(kernel)
    _installed = True


def ready() -> bool:
    """Whether ``jaxnb.breakpoint()`` can stop this process (asked by ``%jax_debug -c``)."""
    install()
    return control_ready
