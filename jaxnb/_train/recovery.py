"""``max_failures=N`` (``--max-failures N``): survive a dead process by restarting, replaying and resuming.

When a process dies (signal, exit) or its host is lost — and the collectives
of the others fail because of it — the run goes on: the group is restarted with
the same options, the recorded setup is replayed (:mod:`jaxnb._core.replay`), and the
function runs again from the latest checkpoint, exactly as ``--resume`` would
find it, with the same dashboard and the same ``Result``. An exception raised
by the function on a live process is a bug, not a lost process: it is never
retried. A failure that comes back at the same step after a restore (:func:`repeats`), and
the N+1-th failure, end the run naming every cause.
"""

from __future__ import annotations

import dataclasses
import re
import time
import types
from collections.abc import Callable
from typing import Any

from jaxnb._core.errors import ProcessFailure
from jaxnb._core.messages import GROUP_BROKEN, plural
from jaxnb._core.run_folder import Checkpoint, check_fresh_run
from jaxnb._core.run_limits import count_text, exhausted
from jaxnb._core.spelling import example, option
from jaxnb._train.result import Failure

NOT_RETRIED = (
    "not retried: it was raised by the training function on a live process (a bug to fix, "
    "not a lost process); {option} retries only processes that died or hosts that were lost"
)
REPEATED = (
    "the failure repeats at step {step} after a restore from {start}: jaxnb stops retrying "
    "(the loop itself probably ends the process there)"
)
#: A death's step is the newest one the notebook heard of: reports still in flight when a
#: process dies may leave it this many steps behind the step the death came at.
STEP_SLACK = 2
EXHAUSTED = "gave up after {recoveries} ({limit}); every cause, in order: {causes}"
NO_CHECKPOINT = "jaxnb: run {name!r} reported no checkpoint yet; restarting it from step 0"
_PID = re.compile(r" \(pid \d+ on [^)]*\)")

Restart = Callable[[], dict[str, float]]
"""Stop the group, start it again with the same options and replay its setup; the seconds
each phase took (``restart``, ``replay``)."""


def cause_of(failure: BaseException) -> str:
    """One line: who died and how, what followed (the death error's summary, no advice)."""
    summary = getattr(failure, "summary", None) or str(failure)
    first = summary.splitlines()[0] if summary else ""
    return first.replace(f"; {GROUP_BROKEN}", "")


def short_cause(cause: str) -> str:
    """``[p1] killed by SIGKILL`` from ``[p1] (pid 12 on host) was killed by SIGKILL; …``."""
    first = cause.split("; then ")[0]
    return _PID.sub("", first).replace(" was killed", " killed")


def start_text(checkpoint: Checkpoint | None) -> str:
    """``step 10`` (the checkpoint's step), or ``step 0`` without one."""
    return start_text_step(None if checkpoint is None else checkpoint.step)


def start_text_step(step: int | None) -> str:
    return "step 0" if step is None else f"step {step}"


@dataclasses.dataclass
class SeenDeath:
    """A death as :meth:`Recovery.record` books it when no kernel's monitor saw it (the
    supervisor driving a run on): what a monitor gives it, and no more."""

    gave_up: BaseException
    last_step: int | None
    deaths: dict[int, str]
    seen: float = dataclasses.field(default_factory=time.time)
    #: A result whose failures the supervisor does not keep (the run folder does).
    result: Any = dataclasses.field(default_factory=lambda: types.SimpleNamespace(failures=[]))

    def seen_time(self) -> float:
        """When the death was seen, as ``time.time()``."""
        return self.seen


def repeats(previous: Failure, failure: Failure, latest: Checkpoint | None) -> bool:
    """``failure`` came again where ``previous`` did: within :data:`STEP_SLACK` steps of it, and
    before the attempt resumed after it saved a newer checkpoint (``latest``) than it started from."""
    if previous.step is None or failure.step is None or abs(failure.step - previous.step) > STEP_SLACK:
        return False
    return latest is None or (previous.resumed_from is not None and latest.step <= previous.resumed_from)


class Recovery:
    """The recovery policy of one run, and its record (``failures``, also in the Result)."""

    def __init__(self, max_failures: int, restart: Restart | None, run_dir: str, name: str):
        self.max_failures = max_failures
        self.restart = restart
        self.run_dir, self.name = run_dir, name
        self.failures: list[Failure] = []

    @property
    def enabled(self) -> bool:
        return self.max_failures != 0 and self.restart is not None

    def has_retries(self) -> bool:
        """A death now would be recovered from (if nothing else stops it)."""
        return self.enabled and not exhausted(len(self.failures) + 1, self.max_failures)

    def recoverable(self, monitor: Any) -> bool:
        """A death (not a user's exception, a stop or an interrupt) ended this attempt."""
        return (self.enabled and bool(monitor.deaths) and isinstance(monitor.gave_up, ProcessFailure)
                and not monitor.stop_requested and not monitor.interrupted)

    def record(self, monitor: Any) -> tuple[Failure, str | None]:
        """Book the failure; the reason not to recover (limit reached, repeated) or None."""
        cause = cause_of(monitor.gave_up)
        failure = Failure(time=monitor.seen_time(), step=monitor.last_step,
                          processes=tuple(sorted(monitor.deaths)), cause=cause)
        previous = self.failures[-1] if self.failures else None
        self.failures.append(failure)
        monitor.result.failures.append(failure)
        if exhausted(len(self.failures), self.max_failures):
            causes = "; ".join(f"{i}) at step {f.step}: {f.cause}"
                               for i, f in enumerate(self.failures, 1))
            n = self.max_failures
            recoveries = plural(n, "recovery", "recoveries")
            return failure, EXHAUSTED.format(recoveries=recoveries, causes=causes,
                                             limit=example("max_failures", n))
        if previous is not None and repeats(previous, failure, self.latest()):
            return failure, REPEATED.format(step=failure.step, start=start_text_step(previous.resumed_from))
        return failure, None

    def latest(self) -> Checkpoint | None:
        """The checkpoint ``--resume`` would continue from now."""
        return check_fresh_run(self.run_dir, resume=True)

    def status(self, failure: Failure, checkpoint: Checkpoint | None) -> str:
        """``[p1] killed by SIGKILL at step 20; resuming from step 10``."""
        at = f" at step {failure.step}" if failure.step is not None else ""
        return f"{short_cause(failure.cause)}{at}; resuming from {start_text(checkpoint)}"

    def counted(self) -> str:
        """``recovered 1 of 2``."""
        return f"recovered {count_text(len(self.failures), self.max_failures)}"


def give_up(monitor: Any, reason: str) -> None:
    """End the run with the death as its error, saying why it was not recovered."""
    error = monitor.gave_up
    error.summary = f"{error.summary}; {reason}"
    error.args = (error.summary,)


def not_retried(error: BaseException) -> None:
    """Say in ``error``'s message why ``max_failures`` did not retry it."""
    summary = getattr(error, "summary", None)
    said = NOT_RETRIED.format(option=option("max_failures"))
    if summary is None or said in summary:
        return
    error.summary = f"{summary}; {said}"  # type: ignore[attr-defined]
    error.args = (f"{summary}; {said}",)
