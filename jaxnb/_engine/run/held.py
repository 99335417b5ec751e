"""What a run's driver needs to go on without the kernel that started it, held on every engine.

A run that recovers (``--max-failures``) on a named cluster is prepared with the function and
config as cloudpickle bytes and the setup to replay (:mod:`jaxnb._train.handing`); each engine
keeps that spec while it runs. When the kernel is gone, the cluster's supervisor asks a live
engine for it through ipyparallel (:mod:`jaxnb._cluster_driving`): nothing of it is read from a
file.
"""

from __future__ import annotations

from typing import Any

_spec: dict[str, Any] | None = None


def keep(spec: dict[str, Any]) -> None:
    """Hold ``spec`` (only a run that recovers: the others need no driver after the kernel)."""
    global _spec
    _spec = spec if spec.get("recovers") else None


def spec() -> dict[str, Any] | None:
    """The spec of the last run prepared here that recovers, or ``None``."""
    return _spec


def set_pickled(values: dict[str, bytes]) -> None:
    """A replayed ``%jax_push``: set each name to its value, sent as cloudpickle bytes."""
    import cloudpickle

    from jaxnb._engine.run.values import user_namespace

    namespace = user_namespace()
    for name, blob in values.items():
        namespace[name] = cloudpickle.loads(blob)
