"""The debugger's notebook side: ``%jax_debug`` (post-mortem), ``jaxnb.breakpoint()`` stops during
cells and training runs, ``%jax_who`` and ``%jax_diff``; the engine side is
:mod:`jaxnb._engine.debug`."""
