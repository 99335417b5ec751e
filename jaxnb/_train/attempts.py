"""The attempts of one training run: starting the function on every process, following it,
and, after a death or a change of size, the next attempt (restart, replay, resume)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from jaxnb._core import ipp_internals, phases
from jaxnb._core.contract import EngineCall
from jaxnb._core.errors import ClusterStateError, remote_error
from jaxnb._core.file_lock import FileLock
from jaxnb._core.messages import RESET, RESTART
from jaxnb._core.run_limits import count_text
from jaxnb._core.state import Group
from jaxnb._train import handover, run_events
from jaxnb._train.interrupts import InterruptCounter
from jaxnb._train.monitor import Monitor
from jaxnb._train.recovery import NO_CHECKPOINT, Recovery, give_up
from jaxnb._train.resize import Resize
from jaxnb._train.result import Result
from jaxnb._widgets.dashboard import Dashboard

_PREPARE = EngineCall("jaxnb._engine.run.reporting:prepare")
EXECUTE = EngineCall("jaxnb._engine.run.reporting:execute")

#: How long setting a run up on the engines may take (seconds).
PREPARE_TIMEOUT_SECONDS = 60.0

NOT_ANSWERING = (
    "the engines did not take the training run within {timeout:g} s (are they still busy "
    "with an earlier cell?); " + RESET + " or " + RESTART
)

class Attempts:
    """The attempts of one run: the current monitor, stop requests, and recovery."""

    def __init__(self, group: Group, spec: dict[str, Any], result: Result, recovery: Recovery,
                 resize: Resize | None = None):
        self.group, self.spec, self.result, self.recovery = group, spec, result, recovery
        self.resize = resize
        self.monitor: Monitor | None = None
        self.stop_wanted = False
        self.interrupts: InterruptCounter | None = None
        self.ended_in_recovery = ""
        self.resumed: tuple[Any, float] | None = None  # the last failure, when its replay ended
        self.launched = time.monotonic()  # when train() was called: the run's wall time
        self.recovery_seconds = 0.0  # from each death seen to the resumed function's start
        self.lock: FileLock | None = None  # the run folder's, held until the run is concluded
        self.made: list[str] = []  # the folders the run made: removed at its end if left empty

    def request_stop(self) -> None:
        """Stop: the running attempt ends at its next report on every process; a recovery under
        way ends."""
        self.stop_wanted = True
        if self.monitor is not None:
            self.monitor.request_stop()

    def stopping(self) -> bool:
        return self.stop_wanted or (self.interrupts is not None and self.interrupts.count >= 1)

    def next(self, monitor: Monitor) -> Monitor | None:
        """After an attempt ended: the next attempt's monitor, or None (conclude this one)."""
        recovery, result = self.recovery, self.result
        self.time_first_step(monitor)
        resized_at = None if self.resize is None else self.resize.ended_at(monitor)
        if resized_at is not None:
            return self._grow(monitor, resized_at)
        if not recovery.recoverable(monitor):
            return None
        latest = recovery.latest()
        if latest is not None:
            monitor.await_reports(latest.step)
        monitor.finish()  # this attempt's last reports and output
        failure, refuse = recovery.record(monitor)
        failure.phases[phases.DETECT] = monitor.unnoticed_seconds()
        failure.phases[phases.STOP] = monitor.survivors_seconds()
        if refuse is not None:
            run_events.append(result.path, run_events.failure_event(failure))
            give_up(monitor, refuse)
            return None
        dashboard = monitor.dashboard
        dashboard.set_status("recovering", recovery.status(failure, latest))
        print(f"jaxnb: recovering run {result.name!r}: {recovery.status(failure, latest)} "
              f"({count_text(len(recovery.failures), recovery.max_failures)})", file=sys.stderr)
        if latest is None:
            print(NO_CHECKPOINT.format(name=result.name), file=sys.stderr)
        if self.stopping():
            self._ended(monitor, "stopped before the restart")
            return None
        try:
            assert recovery.restart is not None
            phases.add(failure.phases, recovery.restart() if self.resize is None else
                       self.resize.recover(failure))
            replayed = time.monotonic()
        except BaseException as exc:  # the restart or the replay failed: that is the run's end
            error = getattr(exc, "summary", None) or f"{type(exc).__name__}: {exc}"
            run_events.append(result.path, run_events.failure_event(failure))
            give_up(monitor, f"the recovery failed: {str(error).splitlines()[0]}")
            if isinstance(exc, KeyboardInterrupt):
                raise
            return None
        if self.stopping():
            self._ended(monitor, "stopped during the recovery (the cluster was restarted)")
            return None
        failure.resumed_from = None if latest is None else latest.step
        monitor.fill_lost(failure.resumed_from)
        monitor.fill_saved(latest)
        result.rewind(failure.resumed_from)
        dashboard.rewind(failure.resumed_from, recovery.counted())
        return self._resume(monitor, latest, failure, replayed)

    def _grow(self, monitor: Monitor, step: int) -> Monitor | None:
        """Every process ended at the checkpoint of ``step`` for a size change: restart at it."""
        assert self.resize is not None
        monitor.finish()
        monitor.dashboard.set_status("recovering", f"changing size at the checkpoint of step {step}")
        if self.stopping():
            self._ended(monitor, "stopped before the size changed")
            return None
        try:
            record = self.resize.grow(step)
            replayed = time.monotonic()
        except BaseException as exc:  # not even the size it had came back: the run's end
            monitor.gave_up = exc
            if isinstance(exc, KeyboardInterrupt):
                raise
            return None
        self.result.failures.append(record)
        return self._resume(monitor, self.recovery.latest(), record, replayed)

    def _resume(self, monitor: Monitor, latest: Any, failure: Any, replayed: float) -> Monitor:
        """Prepare the function again (from ``latest``) and start the next attempt (``replayed``:
        when the restart and its replay ended, for the first step's phase)."""
        dashboard = monitor.dashboard
        if failure.new_size is not None:
            dashboard.resized(failure.resumed_from or 0, failure.old_size, failure.new_size)
        self.spec.update(resume=latest)
        run_events.append(self.result.path, run_events.failure_event(failure))
        try:
            prepare(self.group, self.spec)
            following = start_attempt(self.group, self.result, dashboard, self)
        except BaseException as exc:
            if monitor.gave_up is None:  # after a size change: this is the run's error
                monitor.gave_up = exc
            else:
                give_up(monitor, f"the recovery failed: {exc}")
            raise
        dashboard.set_status("running", self.recovery.counted())
        self.resumed = (failure, replayed)
        self.recovery_seconds += max(time.time() - failure.time, 0.0)
        return following

    def time_first_step(self, monitor: Monitor) -> None:
        """Note in the last failure its restore and first step, once the resumed attempt
        reported (or ended), and show the recovery's time on the dashboard."""
        if self.resumed is None or monitor.first_report_at is None:
            return
        failure, replayed = self.resumed
        self.resumed = None
        restore = monitor.first_restore
        failure.phases[phases.RESTORE] = restore
        failure.phases[phases.FIRST_STEP] = max(0.0, monitor.first_report_at - replayed - restore)
        failure.phases = phases.in_order(failure.phases)
        failure.seconds = round(sum(failure.phases.values()), 3)
        monitor.dashboard.recovery_took(failure.seconds, phases.largest(failure.phases))

    def _ended(self, monitor: Monitor, how: str) -> None:
        self.ended_in_recovery = how


def launch(group: Group, result: Result, total: int | None, attempts: Attempts,
            view: Callable[..., Any] | None = None) -> Monitor:
    """Show the dashboard (or ``view``), start the function on every process, and follow it."""
    on_stop = attempts.request_stop if attempts.interrupts is None else None  # background only
    dashboard = (view or Dashboard)(result.name, group.size, total_steps=total, on_stop=on_stop)
    if attempts.recovery.enabled:
        dashboard.set_recoveries(attempts.recovery.max_failures)
    if attempts.resize is not None:
        dashboard.resized(0, group.size, group.size)  # the process-count track begins
    dashboard.show()
    result.set_stopper(attempts.request_stop)
    result.set_view(dashboard)
    return start_attempt(group, result, dashboard, attempts)


def start_attempt(group: Group, result: Result, dashboard: Dashboard, attempts: Attempts) -> Monitor:
    """Start the prepared function on every process and follow it on ``dashboard``."""
    ar = group.view.apply_async(EXECUTE)
    group.busy_with = result.name
    try:
        monitor = Monitor(group, ar, result, dashboard, recovers=attempts.recovery.has_retries())
    except BaseException:
        group.busy_with = None
        raise
    attempts.monitor = monitor
    handover.track(group, monitor)
    if attempts.stop_wanted:  # asked while the attempt was starting
        monitor.request_stop()
    if attempts.resize is not None:  # a size change asked meanwhile waits for this attempt
        attempts.resize.follow(monitor)
    return monitor


def prepare(group: Group, spec: dict[str, Any]) -> dict[int, Any]:
    """Find the function on every process; raise here if it does not fit; each one's reply."""
    ar = group.view.apply_async(_PREPARE, spec)
    if not ar.wait(PREPARE_TIMEOUT_SECONDS):
        raise ClusterStateError(NOT_ANSWERING.format(timeout=PREPARE_TIMEOUT_SECONDS))
    replies = dict(zip(group.indices, ipp_internals.answers(ar, group.client), strict=True))
    errors = {p: r for p, r in replies.items() if isinstance(r, BaseException)}
    if errors:
        raise remote_error(errors)
    problems = [r["error"] for r in replies.values() if r["error"]]
    if problems:
        raise ValueError(problems[0])
    return replies
