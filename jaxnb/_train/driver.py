"""``JaxCluster.train``: run a function on every process with a live dashboard; a `Result`."""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from jaxnb._cells.pull import note_size
from jaxnb._core import ipp_internals
from jaxnb._core.contract import EngineCall
from jaxnb._core.errors import ClusterStateError, remote_error
from jaxnb._core.messages import BUSY, RESET, RESTART
from jaxnb._core.run_folder import check_fresh_run
from jaxnb._core.state import Group, Suspect
from jaxnb._train import dataset_names, function, handover
from jaxnb._train.interrupts import InterruptCounter
from jaxnb._train.monitor import Monitor
from jaxnb._train.result import Result
from jaxnb._widgets.dashboard import Dashboard

_PREPARE = EngineCall("jaxnb._engine.reporting:prepare")
_EXECUTE = EngineCall("jaxnb._engine.reporting:execute")

#: Where runs live unless ``storage`` / ``--storage`` says otherwise.
DEFAULT_STORAGE = "jaxnb_runs"
#: Config keys that give the number of steps (for the dashboard's progress and ETA).
STEP_COUNT_KEYS = ("total_steps", "num_steps", "max_steps")
#: How long setting a run up on the engines may take (seconds).
PREPARE_TIMEOUT_SECONDS = 60.0

NOT_ANSWERING = (
    "the engines did not take the training run within {timeout:g} s (are they still busy "
    "with an earlier cell?); " + RESET + " or " + RESTART
)
FIRST_INTERRUPT = (
    "jaxnb: stopping run {name!r}: every process stops at its next `jaxnb.should_stop()`. "
    "Interrupt again to interrupt the processes."
)
SECOND_INTERRUPT = "jaxnb: interrupting every process (SIGINT); interrupt again to stop waiting."
NO_CHECKPOINT_YET = "jaxnb: run {name!r} has no checkpoint yet; starting it from the beginning"


def train(
    group: Group,
    fn: Callable[..., Any] | str,
    config: Any = None,
    *,
    name: str | None = None,
    storage: str | os.PathLike[str] | None = None,
    resume: bool = False,
    background: bool = False,
    total_steps: int | None = None,
    on_result: Callable[[Result], None] | None = None,
    view: Callable[..., Any] | None = None,
    datasets: Mapping[str, str] | None = None,
) -> Result:
    """Run ``fn()`` or ``fn(config)`` on every process; the `Result` (live if ``background``).

    ``fn`` is a function (sent from the notebook) or the name of one defined on
    the engines. The run lives in ``storage/name`` (default ``./jaxnb_runs/<fn
    name>``); ``resume`` continues it from its latest checkpoint. ``on_result``
    is called with the final Result, before an error is raised. ``total_steps``
    (else an int ``config["total_steps"]``, ``["num_steps"]`` or ``["max_steps"]``)
    gives the dashboard its progress bar and ETA. ``datasets`` maps names to
    engine-side variables for ``jaxnb.get_dataset_shard(name)``. ``view`` (jaxnb) replaces the
    dashboard: called like ``Dashboard(name, size, total_steps=, on_stop=)``,
    it returns an object with Dashboard's ``show/add/refresh/set_status/finish``. A failure on
    any process raises :class:`jaxnb.RemoteError` (its ``.result`` holds the
    history so far).
    """
    handover.wait_if_stopping(group)  # a run asked to stop may take a moment to end
    if group.busy_with:
        raise ClusterStateError(BUSY.format(name=group.busy_with))
    run = function.run_name(fn, name)
    spec = function.package(fn, config)
    spec["datasets"] = dataset_names.check(datasets)
    if spec["pickled"] is not None:
        note_size(f"`{spec['label']}` with what it uses from the notebook", len(spec["pickled"]),
                  group.size)
    run_dir = os.path.abspath(os.path.join(os.fspath(storage or DEFAULT_STORAGE), run))
    resume_from = check_fresh_run(run_dir, resume)
    if resume and resume_from is None:
        print(NO_CHECKPOINT_YET.format(name=run))
    os.makedirs(run_dir, exist_ok=True)
    spec.update(run_dir=run_dir, run_id=uuid.uuid4().hex, resume=resume_from)
    _prepare(group, spec)

    result = Result(run, run_dir)
    result.checkpoint = resume_from  # until the run saves a newer one (it may have nothing left to do)
    total = expected_steps(config, total_steps)
    if background:
        monitor = _launch(group, result, total, background=True, view=view)
        follow = contextvars.copy_context().run  # output goes to the cell that started the run
        threading.Thread(target=follow, args=(_follow_background, monitor, on_result),
                         name=f"jaxnb-train-{run}", daemon=True).start()
        return result
    with InterruptCounter() as ctrl_c:  # from before the run starts: no interrupt is lost
        monitor = _launch(group, result, total, background=False, view=view)
        error = _follow_blocking(monitor, on_result, ctrl_c)
    if error is not None:
        raise error
    return result


def expected_steps(config: Any, total_steps: int | None) -> int | None:
    """How many steps the run will report, if known: ``total_steps``, else from the config."""
    if total_steps is not None:
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"total_steps must be a positive int, got {total_steps!r}; e.g. 1000")
        return total_steps
    if isinstance(config, Mapping):
        for key in STEP_COUNT_KEYS:
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _launch(group: Group, result: Result, total: int | None, background: bool,
            view: Callable[..., Any] | None = None) -> Monitor:
    """Show the dashboard, start the function on every process, and follow it."""
    following: list[Monitor] = []
    on_stop = (lambda: following[0].request_stop()) if background else None
    dashboard = (view or Dashboard)(result.name, group.size, total_steps=total, on_stop=on_stop)
    dashboard.show()
    ar = group.view.apply_async(_EXECUTE)
    group.busy_with = result.name
    try:
        monitor = Monitor(group, ar, result, dashboard)
    except BaseException:
        group.busy_with = None
        raise
    following.append(monitor)
    handover.track(group, monitor)
    result.set_stopper(monitor.request_stop)
    return monitor


def _prepare(group: Group, spec: dict[str, Any]) -> None:
    """Find the function on every process; raise here if it does not fit."""
    ar = group.view.apply_async(_PREPARE, spec)
    if not ar.wait(PREPARE_TIMEOUT_SECONDS):
        raise ClusterStateError(NOT_ANSWERING.format(timeout=PREPARE_TIMEOUT_SECONDS))
    replies = dict(zip(group.indices, (f.result() for f in ipp_internals.futures(ar)), strict=True))
    errors = {p: r for p, r in replies.items() if isinstance(r, BaseException)}
    if errors:
        raise remote_error(errors)
    problems = [r["error"] for r in replies.values() if r["error"]]
    if problems:
        raise ValueError(problems[0])


def _follow_blocking(
    monitor: Monitor, on_result: Callable[[Result], None] | None, ctrl_c: InterruptCounter
) -> BaseException | None:
    """Poll until the run ends, turning kernel interrupts into stop requests."""
    name = monitor.result.name
    try:
        while not monitor.poll():
            if ctrl_c.count >= 1 and not monitor.stop_requested:
                print(FIRST_INTERRUPT.format(name=name))
                monitor.request_stop()
            if ctrl_c.count >= 2 and not monitor.interrupted:
                print(SECOND_INTERRUPT)
                monitor.interrupt()
    except BaseException as exc:  # third interrupt, or jaxnb itself failed: record, re-raise
        monitor.gave_up = exc
        monitor.group.mark_suspect(Suspect.UNFOLLOWED)
        _conclude(monitor, on_result)
        raise
    return _conclude(monitor, on_result)


def _follow_background(monitor: Monitor, on_result: Callable[[Result], None] | None) -> None:
    try:
        while not monitor.poll():
            pass
    except Exception as exc:  # the thread must always conclude the run
        monitor.gave_up = exc
    error = _conclude(monitor, on_result)
    if error is not None:
        print(f"jaxnb: background run {monitor.result.name!r} failed: "
              f"{getattr(error, 'summary', error)}", file=sys.stderr)


def _conclude(
    monitor: Monitor, on_result: Callable[[Result], None] | None
) -> BaseException | None:
    """Fill in the Result, finish the dashboard, free the engines; the error to raise."""
    result, group = monitor.result, monitor.group
    try:
        errors = monitor.finish()
    finally:
        group.busy_with = None
    error = monitor.gave_up or (remote_error(errors) if errors else None)
    if errors and monitor.gave_up is None:
        group.mark_suspect_after_errors(len(errors), len(monitor.processes))
    summaries = [f.result() for f in monitor.futures.values() if f.done()]
    result.stopped = error is None and any(
        isinstance(s, dict) and s.get("stopped") for s in summaries)
    result.error = error
    if error is not None:
        error.result = result  # type: ignore[attr-defined]
    status, message = _status(result, monitor)
    try:
        monitor.dashboard.finish(status, message)
    finally:
        result.set_done()
        if on_result is not None:
            on_result(result)
    return error


def _status(result: Result, monitor: Monitor) -> tuple[str, str]:
    step = len(result.history)
    if isinstance(result.error, KeyboardInterrupt) or (result.error and monitor.interrupted):
        return "interrupted", f"interrupted after {step} reports"
    if result.error is not None:
        summary = getattr(result.error, "summary", None) or str(result.error)
        return "failed", summary.splitlines()[0]
    if result.stopped:
        return "finished", f"stopped on request after {step} reports"
    return "finished", ""
