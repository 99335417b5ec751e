"""Inside a train function: ``report``, ``get_checkpoint``, ``should_stop`` (Ray Train's words).

The notebook runs a training function in two requests on every engine:
:func:`prepare` (find the function, arm the stop signal) then :func:`execute`
(run it, with every report streamed back and the last batch flushed before
it returns, also when it raises). A run asked to stop ends at the same
``report()`` on every process (:mod:`~jaxnb._engine.run.stopping`), whether or
not the function calls ``should_stop()``: that report raises ``StopRun``, which
:func:`execute` catches.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

from jaxnb._core.run_folder import Checkpoint
from jaxnb._core.spelling import spelled
from jaxnb._engine.checkpoint import crash_points
from jaxnb._engine.datasets import data_run
from jaxnb._engine.group import context
from jaxnb._engine.memory import oom_note
from jaxnb._engine.profile import recording
from jaxnb._engine.run import (
    held,
    journal,
    monitoring,
    reported_dirs,
    resizing,
    restore_clock,
    stopping,
    timing,
    train_function,
)
from jaxnb._engine.run.in_flight import InFlight
from jaxnb._engine.run.publisher import BatchPublisher, datapub_sender, host_metrics
from jaxnb._engine.run.values import user_namespace

#: Checkpoints kept per run by ``report(checkpoint=pytree)``.
KEEP_CHECKPOINTS = 3

OUTSIDE_RUN = (
    "jaxnb.report() works only inside a function run by `%jax_train` or `JaxCluster.train`; "
    "run your function with one of those"
)


@dataclasses.dataclass
class _Run:
    """One training run on this process."""

    run_dir: str
    process: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    resume: Checkpoint | None
    stop: stopping.StopPoints
    run_id: str = ""
    publisher: BatchPublisher | None = None
    count: int = 0
    base_step: int = 0
    store: Any = None  # CheckpointStore, made at the first pytree checkpoint
    in_flight: InFlight = dataclasses.field(default_factory=InFlight)
    #: Messages name the magics' flags (the run was started by ``%jax_train``), else keywords.
    as_flags: bool = False
    #: ``min_processes``: whether to end at a checkpoint for a size change.
    resize: resizing.Agreement | None = None
    #: The step of the last report.
    last_step: int | None = None
    #: The run was ended on request (at ``stop.end``; ``should_stop()`` may have said so).
    stopped: bool = False
    #: ``should_stop()`` was called since the last report: the loop polls, and ends itself.
    polled: bool = False
    keep: int = KEEP_CHECKPOINTS  # the newest checkpoints Orbax keeps (--keep-checkpoints)
    #: A driver recovers the run from a death (``--max-failures``): process 0's journal says so.
    recovers: bool = False


_run: _Run | None = None


# ---- the public, engine-side API ----------------------------------------------------


def report(metrics: dict[str, Any], checkpoint: Any = None, *, step_fn: Any = None) -> None:
    """Send ``metrics`` (Python or JAX scalars) to the notebook, like ``ray.train.report``.

    ``checkpoint`` is a pytree that all processes save together (Orbax, the
    last 3 kept under the run's ``checkpoints`` folder; host-local leaves equal
    on every process are written once, the others once per process), or the path of a
    directory you saved yourself (recorded as is; ``jaxnb.Checkpoint.from_directory``
    works too). The step is
    ``metrics["step"]`` when it is a Python int, else the number of reports
    so far (continuing from the resumed checkpoint's step). It does not wait on
    the device, except to keep at most 4 reported values
    computing (1 with several CPU devices per process).

    Once the run is asked to stop (Stop, an interrupt, a pruned trial), the
    report where every process agreed to end is sent, then ends the function
    (as Ray ends a stopped trial), unless ``should_stop()`` already said True.

    ``step_fn``: the jitted step (or its ``step.trace(...)``, or its FLOPs as a number), once:
    the dashboard's FLOP/s and MFU count the matrix products of its traced program.
    Without it, jaxnb takes the jitted function with the most FLOPs that the function calls. A
    ``batch_size`` (examples per step) or ``tokens`` (tokens per step) metric gives the
    throughput in those units.

    Args:
        metrics: names to numbers (Python or JAX scalars); ``step`` is the step when given.
        checkpoint: a pytree to save with Orbax from every process, or the path of a
            checkpoint directory you wrote; ``None`` saves nothing.
        step_fn: the jitted step, for FLOP/s and MFU (see above); once is enough.

    Raises:
        RuntimeError: called outside a function run by ``%jax_train`` / ``JaxCluster.train``.
        TypeError: ``metrics`` is not a dict.
        ValueError: a checkpoint leaf cannot be saved (a function, a file, a deleted buffer):
            the message names its path, on every process.

    Example:
        >>> jaxnb.report({"loss": loss}, checkpoint=state if step % 50 == 0 else None)  # doctest: +SKIP
    """
    run = _run
    if run is None or run.publisher is None:
        raise RuntimeError(OUTSIDE_RUN)
    if type(metrics) is not dict and not isinstance(metrics, dict):
        raise TypeError(f"jaxnb.report() takes a dict of metrics, got {type(metrics).__name__}")
    run.count += 1
    step = metrics.get("step")
    if type(step) is not int:
        step = _int_or_none(step)
    if step is None:
        step = run.base_step + run.count
    # The copy of the values to the host, their conversion and the publishing are the
    # publisher thread's; the sampling of memory and time too (about once a second).
    values = dict(metrics)  # the publisher replaces the record's copy, never changes this one
    record = {"process": run.process, "seq": run.count - 1, "step": step, "time": time.time(),
              "metrics": values, "checkpoint": None}
    if run.count == 1:  # a recovery's restore phase
        record["restore_seconds"] = restore_clock.seconds
    positions = data_run.record(step, checkpoint is not None)
    monitoring.at_report(step_fn)
    saved = None
    if checkpoint is not None:
        crash_points.reached("saving", step)
        with timing.counting("checkpoint"):
            saved = _save(run, step, checkpoint, positions, record)
        crash_points.reached("committed", step)
        record["checkpoint"] = saved.path
        record["checkpoint_user"] = saved.user_managed
    run.publisher.add(record, now=saved is not None)  # a recovery resumes after that step
    run.last_step = step
    if checkpoint is not None:
        crash_points.reached("reported", step)
    run.in_flight.add(values.values())
    recording.step_reported(step)  # %jax_train --profile-steps: opens/closes the trace window
    if run.resize is not None and saved is not None and not saved.user_managed:
        run.resize.at_checkpoint(step)  # a size change waits for this checkpoint: end here
    if not run.stopped and run.stop.reached():  # after should_stop() said True, reports go on
        run.stopped = True
        if not run.polled:  # a loop polling should_stop() ends at its next poll, and runs what follows
            raise stopping.StopRun(f"the run was asked to stop; every process ends at step {step}")
    run.polled = False


def get_checkpoint() -> Any:
    """The checkpoint this run resumes from (``--resume``, or a recovery), or None.

    It has ``step``, ``path``, ``restore(target=None)`` and, as in Ray,
    ``as_directory()``. Outside a run it is None.

    Example::

        start = jaxnb.get_checkpoint()
        state = start.restore(state) if start else state    # laid out like ``state``
    """
    return _run.resume if _run is not None else None


def should_stop() -> bool:
    """True on every process at the same call once the run was asked to stop (then it stays True).

    A stop is asked by the dashboard's Stop button, ``Result.stop()``, a kernel interrupt or
    a search's pruner. Optional: without it the run ends at a ``report()``. A loop that calls
    it between its reports ends itself (no ``report()`` raises; it says True at the latest at the
    next call), and may still report and save (a last checkpoint) after the loop.
    Outside a run it is False. Every process must call it alike (SPMD).
    """
    run = _run
    if run is None:
        return False
    run.polled = True
    if not run.stopped and run.stop.reached():
        run.stopped = True
    return run.stopped


# ---- the two requests the notebook sends -------------------------------------------


def prepare(spec: dict[str, Any]) -> dict[str, Any]:
    """Set up a run on this process; ``{"error": message}`` when the function does not fit."""
    with spelled(bool(spec.get("as_flags"))):
        return _prepare(spec)


def _prepare(spec: dict[str, Any]) -> dict[str, Any]:
    global _run
    from jaxnb._engine.debug import kept

    _run = None
    context.name_run("")  # named below, once the run is prepared
    held.keep(spec)  # what a driver needs once the kernel is gone (a run that recovers)
    kept.drop()  # a new run: the last failure's frames are not debuggable any more
    try:
        fn, args = train_function.function(spec)
    except (LookupError, TypeError) as exc:
        return {"error": str(exc)}
    process, n = context.process_index(), context.num_processes()
    resume = spec.get("resume")
    try:
        named = data_run.resolve(spec.get("datasets") or {}, user_namespace())
        data_run.start(named, spec["run_dir"], process, n, resume)
    except (LookupError, ValueError) as exc:
        return {"error": str(exc)}
    if process == 0:
        stopping.clear_keys()
        from jaxnb._engine.group import gather

        gather.clear_keys()
    stopping.arm()
    elastic = bool(spec.get("elastic"))
    if elastic:
        resizing.arm()
    context.name_run(os.path.basename(os.path.normpath(spec["run_dir"])))
    _run = _Run(
        run_dir=spec["run_dir"],
        process=process,
        fn=fn,
        args=args,
        resume=resume,
        stop=stopping.StopPoints(spec["run_id"], process, n),
        run_id=str(spec["run_id"]),
        base_step=resume.step if resume is not None else 0,
        as_flags=bool(spec.get("as_flags")),
        resize=resizing.Agreement(str(spec["run_id"]), process, n) if elastic else None,
        keep=int(spec.get("keep_checkpoints") or KEEP_CHECKPOINTS),
        recovers=bool(spec.get("recovers")),
    )
    meshes = resizing.meshes(user_namespace()) if elastic and process == 0 else {}
    return {"error": None, "process": process, "meshes": meshes}


def execute() -> dict[str, Any]:
    """Run the prepared function; every report is published before this returns or raises."""
    global _run
    run = _run
    if run is None:
        raise RuntimeError("no jaxnb training run was prepared on this process")
    sampler = monitoring.start(run.fn)
    record = None if run.process != 0 else journal.opened(
        run.run_dir, run.run_id, None if run.resume is None else run.resume.step, run.recovers)
    run.publisher = BatchPublisher(datapub_sender(), monitor=sampler,
                                   monitor_every=monitoring.SAMPLE_SECONDS,
                                   journal=None if record is None else record.reports)
    run.stop.start()
    restore_clock.reset()
    ok, resized_at, error = False, None, None
    try:
        with spelled(run.as_flags):
            run.fn(*run.args)
        ok = True
    except resizing.ResizeAtCheckpoint as end:  # every process ends here together
        ok, resized_at = True, end.step
    except stopping.StopRun:
        ok = True
    except BaseException as exc:
        from jaxnb._engine.debug import kept

        error = (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0]
        kept.keep(exc)  # for %jax_debug, until the next cell or run here
        oom_note.note_if_out_of_memory(exc, user_namespace())
        raise
    finally:
        monitoring.stop()
        _run = None
        context.name_run("")
        run.stop.finish()
        data_run.end()
        try:
            run.publisher.close()
            if run.store is not None and ok:
                run.store.close()
        finally:
            if record is not None:  # after the last reports and checkpoint: the end comes last
                record.end({"error": error, "stopped": run.stopped, "resized_at": resized_at,
                            "stopped_at": run.last_step if run.stopped else None})
    return {"reports": run.count, "batches": run.publisher.batches, "stopped": run.stopped,
            "stopped_at": run.last_step if run.stopped else None, "resized_at": resized_at}


# ---- helpers -------------------------------------------------------------------------


def _int_or_none(value: Any) -> int | None:
    """An int for ints (not bools) and NumPy integer scalars; None for anything else (JAX values
    stay lazy)."""
    if value is None or isinstance(value, (bool, float)):
        return None
    if isinstance(value, int):
        return int(value)
    try:
        import numpy as np
    except ImportError:
        return None
    return int(value) if isinstance(value, np.integer) else None


def _save(run: _Run, step: int, checkpoint: Any, positions: dict[str, Any] | None,
          record: dict[str, Any]) -> Any:
    from jaxnb._engine.checkpoint.store import CheckpointStore

    if isinstance(checkpoint, Checkpoint):  # Ray style: Checkpoint.from_directory(path)
        checkpoint = checkpoint.path
    if isinstance(checkpoint, (str, os.PathLike)):  # copied into the run folder, as Ray does
        return Checkpoint.from_directory(reported_dirs.kept(run.run_dir, step, checkpoint), step)
    if run.store is None:
        run.store = CheckpointStore(run.run_dir, keep=run.keep, exchange_id=run.run_id)
    # The positions commit with the step, and process 0's report of it: a recovery after every
    # process died before that report reached the notebook still has it for the history.
    report = None if run.process != 0 else {
        "step": step, "time": record["time"], "metrics": host_metrics(record["metrics"])}
    return run.store.save(step, checkpoint, positions, report)
