"""A run that recovers (``--max-failures``) on a named cluster goes on when its kernel is gone.

The kernel drives it while it lives. To let the cluster's supervisor drive it on after
(:mod:`jaxnb._cluster_driving`), the kernel names the run in the cluster's record (JSON: the run,
its folder, ``max_failures``, the kernel's process) and sends, with the run's spec, the setup to
replay (cells, and pushed values as cloudpickle bytes); every engine holds that spec
(:mod:`jaxnb._engine.run.held`), and the supervisor asks a live engine for it through
ipyparallel. Nothing of it is read from a file.
"""

from __future__ import annotations

from typing import Any

from jaxnb._attach import attachment, record
from jaxnb._core import cluster_names as names
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.state import Group

DRIVEN = ("run {name!r} is still running on this cluster (the cluster drives it on since its "
          "kernel went); follow it with `cluster.result({name!r})` or `%jax_train --attach --name "
          "{name}`, and start the next run once it ended")
NOT_PACKED = ("the setup could not be sent to the engines ({error}), so the cluster cannot "
              "replay it once the kernel is gone")


def hand(group: Group, spec: dict[str, Any], name: str, max_failures: int) -> None:
    """Mark ``spec`` as a run that recovers; on a named cluster, add the setup to replay and
    name the run in the cluster's record (driven by this kernel)."""
    spec["recovers"] = True
    hold = group.attachment
    if hold is None:
        return
    spec["setup"], spec["setup_error"] = _packed(group)
    group.driving = {"run": name, "run_dir": spec["run_dir"], "run_id": spec["run_id"],
                     "max_failures": max_failures, "driver": record.me()}
    attachment.update(hold, driving=group.driving)


def check_free(group: Group) -> None:
    """Refuse a new run while the cluster's supervisor drives one on (its kernel gone)."""
    hold = group.attachment
    doc = None if hold is None else record.read(names.record_path(hold.name))
    entry = (doc or {}).get("driving")
    if isinstance(entry, dict) and entry.get("driver") != record.me() and record.alive(entry.get("driver")):
        raise ClusterStateError(DRIVEN.format(name=entry.get("run")))


def release(group: Group) -> None:
    """The run ended: the record no longer names it."""
    if group.driving is None:
        return
    group.driving = None
    if group.attachment is not None:
        attachment.update(group.attachment, driving=None)


def _packed(group: Group) -> tuple[list[dict[str, Any]], str | None]:
    """The recorded setup as plain steps (a push's values as cloudpickle bytes), and why it
    could not be packed (``None``: it could)."""
    import cloudpickle

    steps: list[dict[str, Any]] = []
    try:
        for step in group.setup.steps:
            if step.kind == "cell":
                steps.append({"kind": "cell", "code": step.code, "timeout": step.timeout})
            else:
                steps.append({"kind": "push",
                              "values": {k: cloudpickle.dumps(v) for k, v in step.values}})
    except Exception as exc:
        return [], NOT_PACKED.format(error=f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
    return steps, None
