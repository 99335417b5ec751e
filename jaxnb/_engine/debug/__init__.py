"""The debugger's engine side: the failure kept for ``%jax_debug``, ``jaxnb.breakpoint()``, pdb's
commands on this process's frames, and the variables ``%jax_who`` and ``%jax_diff`` compare."""
