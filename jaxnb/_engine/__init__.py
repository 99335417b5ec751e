"""Code that runs inside the engines (never imports IPython at module level), by concept.

- :mod:`.boot`: what a process does when it starts (the engine and controller entry points,
  the kernel-death watchdog, stack dumps, ``--workdir``, text progress bars);
- :mod:`.group`: this process in the ``jax.distributed`` group (join, describe, reset,
  ``get_context()``, and the key-value store the processes agree through);
- :mod:`.run`: running the user's code (``report``/``should_stop`` in a train function, the
  publisher of reports, cell values for ``%jax_pull``, cell sources for tracebacks);
- :mod:`.checkpoint`: Orbax checkpoints all processes save together, and restore;
- :mod:`.datasets`: ``get_dataset_shard()``, Grain pipelines and their saved positions;
- :mod:`.profile`: ``%%jax_profile``'s traces, recorded and prepared on every process;
- :mod:`.layout`: meshes, shardings and pytrees described for ``%jax_mesh``;
- :mod:`.jax_internals`: every use of JAX's private modules, in one place.

The notebook names these functions by path (``EngineCall("jaxnb._engine.group.process:initialize")``);
it never imports them. The subpackages' ``__init__`` files import nothing, so an engine
loads only the modules it uses.
"""
