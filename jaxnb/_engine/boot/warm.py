"""Warm spares: a spare imports what the group's engines have imported, so a swap finds it done.

After each cell, a group engine publishes the third-party modules the cell imported
(:func:`watch_cells`: names under a site-packages folder, public, at most two levels deep,
e.g. ``flax.nnx``, ``optax``); the notebook keeps them with the setup and hands them to its
spares (:func:`import_modules`, and ``JAXNB_WARM_MODULES`` for spares started later, with
jaxnb's own training modules: Orbax for restoring). A spare only imports packages: it never
runs the user's code, and never joins a collective before it joins the group. A package that
creates JAX's backends while it is imported would keep the spare from joining
``jax.distributed``: the backends are cleared again.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import site
import sys
import sysconfig
import warnings
from collections.abc import Iterable

from jaxnb._core.contract import ENV_WARM_MODULES, IMPORTED_KEY

#: What a training run's recovery needs of jaxnb itself (Orbax comes with the store).
RUN_MODULES = ("jaxnb._engine.run.reporting", "jaxnb._engine.checkpoint.store")


def package_folders() -> tuple[str, ...]:
    """This interpreter's site-packages folders (where third-party packages live)."""
    found = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    with contextlib.suppress(AttributeError):  # virtualenv's old site.py lacks them
        found.update(site.getsitepackages())
        found.add(site.getusersitepackages())
    return tuple(sorted(os.path.join(os.path.realpath(f), "") for f in found if f))


def third_party(names: Iterable[str], folders: tuple[str, ...]) -> list[str]:
    """Those of ``names`` (loaded modules) that are public, at most two levels deep and loaded
    from one of ``folders``, sorted (a package before its modules)."""
    found = []
    for name in names:
        parts = name.split(".")
        if len(parts) > 2 or any(p.startswith("_") for p in parts) or parts[0] == "jaxnb":
            continue
        path = getattr(sys.modules.get(name), "__file__", None)
        if path and os.path.realpath(path).startswith(folders):
            found.append(name)
    return sorted(found)


def import_modules(names: Iterable[str]) -> int:
    """Import those of ``names`` not imported yet (warnings and failures ignored: warming is
    best effort); how many were imported. JAX's backends, if an import created them, are
    cleared again so that this process can still join ``jax.distributed``."""
    from jaxnb._engine import jax_internals

    had_backends = "jax" in sys.modules and jax_internals.backends_created()
    count = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in sorted(set(names)):
            if name in sys.modules:
                continue
            try:
                importlib.import_module(name)
                count += 1
            except Exception:
                continue
    if not had_backends and "jax" in sys.modules and jax_internals.backends_created():
        import jax.extend

        jax.extend.backend.clear_backends()
    return count


def from_env() -> int:
    """A spare (started with ``JAXNB_WARM_MODULES``): import jaxnb's training modules and the
    group's third-party modules before registering; how many were imported."""
    if ENV_WARM_MODULES not in os.environ:
        return 0
    given = [n for n in os.environ[ENV_WARM_MODULES].split(",") if n]
    return import_modules([*RUN_MODULES, *given])


def watch_cells() -> None:
    """From now on, after each cell that imported third-party modules, publish their names
    (under ``IMPORTED_KEY``, in the cell's reply) for the notebook's spares. Once per engine."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None or getattr(shell, "jaxnb_watching_imports", False):
        return
    folders = package_folders()
    seen = set(sys.modules)
    count = [len(sys.modules)]

    def after_cell() -> None:
        if len(sys.modules) == count[0]:
            return  # nothing imported (the common case: a length compared)
        count[0] = len(sys.modules)
        new = [n for n in list(sys.modules) if n not in seen]
        seen.update(new)
        names = third_party(new, folders)
        if names:
            from ipyparallel.datapub import publish_data

            publish_data({IMPORTED_KEY: names})

    shell.events.register("post_execute", after_cell)  # also after silent cells
    shell.jaxnb_watching_imports = True
