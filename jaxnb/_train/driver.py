"""``JaxCluster.train``: run a function on every process with a live dashboard; a `Result`."""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from jaxnb._attach import listing
from jaxnb._cells.pull import note_size
from jaxnb._core import run_folder, spelling
from jaxnb._core.errors import ClusterStateError, RemoteError, remote_error
from jaxnb._core.file_lock import FileLock
from jaxnb._core.messages import BUSY
from jaxnb._core.run_limits import KEEP_CHECKPOINTS, check_limits
from jaxnb._core.state import Group, Suspect
from jaxnb._failures import out_of_memory, stale
from jaxnb._train import dataset_names, far_folder, function, handing, handover, run_events
from jaxnb._train.attempts import Attempts, launch, prepare
from jaxnb._train.interrupts import InterruptCounter
from jaxnb._train.monitor import Monitor
from jaxnb._train.recovery import Recovery, Restart, not_retried
from jaxnb._train.resize import Resize, Sizes, check_min_processes
from jaxnb._train.result import Result
from jaxnb._train.run_status import final_status
from jaxnb._train.step_count import expected_steps

#: Where runs live unless ``storage`` / ``--storage`` says otherwise.
DEFAULT_STORAGE = "jaxnb_runs"
FIRST_INTERRUPT = (
    "jaxnb: stopping run {name!r}: every process ends it at the same `jaxnb.report()` (or "
    "`jaxnb.should_stop()`), the next one. Interrupt again to interrupt the processes."
)
SECOND_INTERRUPT = "jaxnb: interrupting every process (SIGINT); interrupt again to stop waiting."
NO_CHECKPOINT_YET = "jaxnb: run {name!r} has no checkpoint yet; starting it from the beginning"
REUSED = ("jaxnb: run {name!r} in {dir} has no checkpoint: it starts over in the same folder (the "
          "earlier run's files there are replaced)")


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
    max_failures: int = 0,
    keep_checkpoints: int = KEEP_CHECKPOINTS,
    restart: Restart | None = None,
    min_processes: int | None = None,
    sizes: Sizes | None = None,
    on_folder: Callable[[str], None] | None = None,
) -> Result:
    """Run ``fn()`` or ``fn(config)`` on every process; the `Result` (live if ``background``).

    ``fn`` is a function (sent from the notebook) or the name of one defined on the engines. The
    run lives in ``storage/name`` (default ``./jaxnb_runs/<fn name>``); ``resume`` continues it
    from its latest checkpoint. ``on_result`` is called with the final Result, before an error is
    raised. ``total_steps`` (else an int ``config["total_steps"]``, ``["num_steps"]`` or
    ``["max_steps"]``) gives the dashboard its progress bar and ETA. ``datasets`` maps names to
    engine-side variables for ``jaxnb.get_dataset_shard(name)``. ``view`` (jaxnb) replaces the
    dashboard: called like ``Dashboard(name, size, total_steps=, on_stop=)``, it returns an object
    with Dashboard's ``show/add/add_sample/refresh/set_status/finish`` (and, with
    ``max_failures``, ``set_recoveries/rewind/recovery_took``). A failure on any process raises
    :class:`jaxnb.RemoteError` (its ``.result`` holds the history so far). ``max_failures``: when
    a process dies or a host is lost, ``restart()`` (stop, start, replay the setup) and resume
    from the latest checkpoint, up to that many times (-1: no limit; :mod:`jaxnb._train.recovery`);
    ``keep_checkpoints``: the newest checkpoints Orbax keeps; with ``min_processes``,
    go on with the processes left (at least that many) and grow back (``sizes`` restarts the
    group at another size: :mod:`jaxnb._train.resize`). ``on_folder`` is called with the run's
    folder once it is open (before the run starts).
    """
    called = time.monotonic()  # the run's wall time (Result.goodput) counts from here
    check_limits(max_failures, keep_checkpoints)
    check_min_processes(min_processes, max_failures, group)
    total = expected_steps(config, total_steps)
    handover.wait_if_stopping(group)  # a run asked to stop may take a moment to end
    if group.busy_with:
        raise ClusterStateError(BUSY.format(name=group.busy_with))
    handing.check_free(group)
    run = function.run_name(fn, name)
    spec = function.package(fn, config)
    spec.update(datasets=dataset_names.check(datasets), keep_checkpoints=keep_checkpoints)
    if spec["pickled"] is not None:
        note_size(f"`{spec['label']}` with what it uses from the notebook", len(spec["pickled"]),
                  group.size)
    made: list[str] = []
    lock: FileLock | None = None
    try:
        if group.via_host is not None:  # attached through --via: the host's folder
            run_dir, earlier, resume_from = far_folder.open_there(
                group, os.fspath(storage or DEFAULT_STORAGE), run, resume)
        else:
            run_dir = os.path.abspath(os.path.join(os.fspath(storage or DEFAULT_STORAGE), run))
            made = run_folder.make(run_dir)  # removed again if the run leaves nothing in it
            lock = run_folder.hold(run_dir)  # one live run per folder, until _conclude releases it
            listing.refuse_if_live_without_kernel(run_dir)  # its kernel died: the engines train it
            earlier = run_folder.left_by_earlier_run(run_dir)
            resume_from = run_folder.check_fresh_run(run_dir, resume)
        if on_folder is not None:  # its cluster's record notes it (a named cluster's `list`)
            on_folder(run_dir)
        if resume and resume_from is None:
            print(NO_CHECKPOINT_YET.format(name=run))
        elif earlier and resume_from is None:
            print(REUSED.format(name=run, dir=os.path.dirname(run_dir)))
        spec.update(run_dir=run_dir, run_id=uuid.uuid4().hex, resume=resume_from,
                    as_flags=spelling.active(), elastic=min_processes is not None)
        if max_failures != 0 and restart is not None:  # the cluster's supervisor may drive it on
            handing.hand(group, spec, run, max_failures)
        prepared = prepare(group, spec)

        result = Result(run, run_dir)
        result.checkpoint = resume_from  # until the run saves a newer one (it may have nothing left)
        resize = None
        if min_processes is not None and sizes is not None:
            resize = Resize(group, min_processes, sizes, run, config)
            resize.meshes = prepared[0].get("meshes") or {}
        attempts = Attempts(group, spec, result, Recovery(max_failures, restart, run_dir, run), resize)
        attempts.lock, attempts.made = lock, made
        attempts.launched = called
        if background:
            monitor = launch(group, result, total, attempts, view=view)
            follow = contextvars.copy_context().run  # output goes to the cell that started the run
            threading.Thread(target=follow, args=(_follow_background, monitor, on_result, attempts),
                             name=f"jaxnb-train-{run}", daemon=True).start()
            return result
        with InterruptCounter() as ctrl_c:  # from before the run starts: no interrupt is lost
            attempts.interrupts = ctrl_c
            monitor = launch(group, result, total, attempts, view=view)
            error = _follow_blocking(monitor, on_result, ctrl_c, attempts)
    except BaseException:
        handing.release(group)
        if lock is not None:  # it never started, or _conclude released it already
            run_folder.release(lock, made)
        raise
    if error is not None:
        raise error
    return result


def _follow_blocking(
    monitor: Monitor, on_result: Callable[[Result], None] | None, ctrl_c: InterruptCounter,
    attempts: Attempts,
) -> BaseException | None:
    """Poll until the run ends, turning kernel interrupts into stop requests."""
    name = monitor.result.name
    try:
        while True:
            while not monitor.poll():
                attempts.time_first_step(monitor)
                if ctrl_c.count >= 1 and not monitor.stop_requested:
                    print(FIRST_INTERRUPT.format(name=name))
                    monitor.request_stop()
                if ctrl_c.count >= 2 and not monitor.interrupted:
                    print(SECOND_INTERRUPT)
                    monitor.interrupt()
            following = attempts.next(monitor)
            if following is None:
                break
            monitor = following
    except BaseException as exc:  # third interrupt, or jaxnb itself failed: record, re-raise
        monitor = attempts.monitor or monitor
        monitor.gave_up = exc
        monitor.group.mark_suspect(Suspect.UNFOLLOWED)
        _conclude(monitor, on_result, attempts)
        raise
    return _conclude(monitor, on_result, attempts)


def _follow_background(
    monitor: Monitor, on_result: Callable[[Result], None] | None, attempts: Attempts
) -> None:
    try:
        while True:
            while not monitor.poll():
                attempts.time_first_step(monitor)
            following = attempts.next(monitor)
            if following is None:
                break
            monitor = following
    except Exception as exc:  # the thread must always conclude the run
        monitor = attempts.monitor or monitor
        monitor.gave_up = exc
    error = _conclude(monitor, on_result, attempts)
    if error is not None:
        print(f"jaxnb: background run {monitor.result.name!r} failed: "
              f"{getattr(error, 'summary', error)}", file=sys.stderr)


def _conclude(
    monitor: Monitor, on_result: Callable[[Result], None] | None, attempts: Attempts
) -> BaseException | None:
    """Fill in the Result, finish the dashboard, free the engines; the error to raise."""
    result, group = monitor.result, monitor.group
    if attempts.resize is not None:
        attempts.resize.end()
    try:
        errors = monitor.finish()
    finally:
        group.busy_with = None
    error = monitor.gave_up or (remote_error(errors, stale.cause(group, errors)) if errors else None)
    if isinstance(error, RemoteError):  # one process may have run out of memory: say what filled it
        out_of_memory.explain(group, error, monitor.errors())
    if errors and monitor.gave_up is None:
        group.mark_suspect_after_errors(len(errors), len(monitor.processes))
    summaries = [f.result() for f in monitor.futures.values() if f.done()]
    stopped = [s for s in summaries if isinstance(s, dict) and s.get("stopped")]
    result.stopped = error is None and bool(stopped)
    if result.stopped:  # the step every process ended at (process 0's, the Result's own)
        result.stopped_at = stopped[0].get("stopped_at")
    if attempts.ended_in_recovery:  # Stop or an interrupt during a recovery: a clean end
        error, result.stopped = None, True
    elif error is not None and attempts.recovery.enabled and not monitor.deaths:
        not_retried(error)
    result.error = error
    if error is not None:
        error.result = result  # type: ignore[attr-defined]
    status, message = final_status(result, monitor.interrupted, attempts.ended_in_recovery,
                                   attempts.recovery.counted())
    if attempts.recovery.enabled:  # the run's end, for a kernel that follows it from its folder
        said = None if error is None else str(getattr(error, "summary", error)).splitlines()[0]
        run_events.append(result.path, run_events.final_end(said, result.stopped, result.stopped_at))
    handing.release(group)
    try:
        monitor.dashboard.finish(status, message)
    finally:  # the wall time goes to the end of the run as the notebook shows it
        result.conclude_samples(time.monotonic() - attempts.launched, attempts.recovery_seconds)
        if attempts.lock is not None:  # before set_done: a waiter may start the same run at once
            run_folder.release(attempts.lock, attempts.made)
        elif group.via_host is not None:
            far_folder.after_run(group, result.path, result.checkpoint)
        result.set_done()
        if on_result is not None:
            on_result(result)
    return error
