"""Follow a running train function: reports to the dashboard and Result, output, failures."""

from __future__ import annotations

import contextvars
import signal
import sys
import threading
import time
from collections import deque
from typing import Any

from jaxnb._cells.live import LiveMerger
from jaxnb._cells.live_panel import LivePanel, NotebookScreen, in_kernel, live_options
from jaxnb._core import ipp_internals
from jaxnb._core.contract import MONITOR_KEY, STOP_SIGNAL
from jaxnb._core.errors import ProcessFailure
from jaxnb._core.messages import label
from jaxnb._core.run_folder import Checkpoint, remember_user_checkpoint, saved_report
from jaxnb._core.state import Group, Suspect
from jaxnb._debug.stops import Stops
from jaxnb._failures import explain, free
from jaxnb._failures.watch import Watch
from jaxnb._train.receive import Receiver
from jaxnb._train.result import Result
from jaxnb._widgets.dashboard import Dashboard

#: How long the notebook waits for news between two looks (seconds).
POLL_SECONDS = 0.02
#: How often the dashboard thread offers a redraw (the dashboard throttles itself too).
REFRESH_SECONDS = 0.05
AT_BREAKPOINT = "jaxnb: interrupted at jaxnb.breakpoint(): interrupting every process"
#: After the last process returned, how long to wait for its last messages.
OUTPUT_WAIT_SECONDS = 10.0
#: After a death, the longest wait for the survivors' reports of the checkpoint a recovery
#: resumes from (sent right after it was saved; see :meth:`Monitor.await_reports`).
REPORTS_GRACE_SECONDS = 1.0


class Monitor:
    """Polls one run's ``AsyncResult``; :meth:`poll` until it says the run is over.

    The dashboard redraws on its own thread, so drawing never delays the
    booking of reports.
    """

    def __init__(self, group: Group, ar: Any, result: Result, dashboard: Dashboard,
                 recovers: bool = False) -> None:
        """``recovers``: a death will be recovered from (its error need not say where the
        other processes were)."""
        self.group, self.ar, self.result, self.dashboard = group, ar, result, dashboard
        self.processes = group.indices
        explain.mark_logs(group, list(ar.msg_ids))
        self.futures = dict(zip(self.processes, ipp_internals.futures(ar, group.client), strict=True))
        self.md = {p: f.metadata for p, f in self.futures.items()}
        self.receivers = {p: Receiver(self.md[p]["data"]) for p in self.processes}
        # Identical lines as they come; the rest, tidy, at the end (bounded, full logs saved).
        self.out = LiveMerger(self.processes, sys.stdout.write, **live_options("stdout", group.temp_folders))
        self.err = LiveMerger(self.processes, sys.stderr.write, **live_options("stderr", group.temp_folders))
        # Lines that differ between processes, live (as in cells), also for a --background run.
        self.live = LivePanel([self.out.view, self.err.view], NotebookScreen()) if in_kernel() else None
        self.stop_requested = False
        self.interrupted = False
        self.gave_up: BaseException | None = None
        # The same watch as a cell's: deaths, and processes left waiting once one finished.
        self.watch = Watch(group, where_others=not recovers)
        #: jaxnb.breakpoint() in the train function: the prompt, as in a cell.
        self.stops = Stops(group, self.watch, {p: md["data"] for p, md in self.md.items()})
        self._asked_others_to_stop = False
        #: The processes found dead (index -> how they ended), when a death ended the run.
        self.deaths: dict[int, str] = {}
        #: The highest step any process reported (``None`` before the first report).
        self.last_step: int | None = None
        #: When (``time.monotonic()``) the first report of this attempt was booked, and the
        #: seconds its function had spent restoring a checkpoint by then.
        self.first_report_at: float | None = None
        self.first_restore = 0.0
        #: When this attempt started, each process's last report arrived, and a death was seen.
        self.started_at = time.monotonic()
        self._last_seen: dict[int, float] = {}
        self._gave_up_at: float | None = None
        self._finished: dict[int, Any] | None = None
        #: The other processes' reports ahead of process 0's (to fill what a dead process 0 lost).
        self._ahead: dict[int, deque] = {p: deque() for p in self.processes[1:]}
        self._lead_step: int | None = None
        self._samples: dict[int, Any] = {}  # the last sample booked, by process
        self._ended = threading.Event()
        self._refresher = threading.Thread(target=contextvars.copy_context().run,
                                           args=(self._refresh_loop,), name="jaxnb-dashboard",
                                           daemon=True)
        self._refresher.start()

    # ---- requests from the user ------------------------------------------------------

    def request_stop(self) -> None:
        """Ask every process to end the run at the same report (:mod:`jaxnb._engine.run.stopping`)."""
        if self.stop_requested or self.ar.ready():
            return
        self.stop_requested = True
        self.dashboard.set_status("stopping", "asked every process to stop at the same step")
        self._signal(STOP_SIGNAL)

    def interrupt(self) -> None:
        """Interrupt every running process (SIGINT), like an interrupt of a cell."""
        self.interrupted = True
        self.group.mark_suspect(Suspect.RUN_INTERRUPTED)
        self._signal(signal.SIGINT)

    def _signal(self, signum: int) -> None:
        if self._finished is not None:  # this attempt is over: the group may be new engines
            return  # (a recovery's), which a stop or interrupt signal must not reach
        running = [p for p, f in self.futures.items() if not f.done()]
        try:
            free.signal_processes(self.group, running, signum)
        except Exception as exc:  # the run goes on; say why the request did not get through
            print(f"jaxnb: could not signal the engines: {exc}", file=sys.stderr)

    # ---- the loop --------------------------------------------------------------------

    def poll(self) -> bool:
        """Wait a little, take what arrived; True once the run is over (or given up on)."""
        self.ar.wait(POLL_SECONDS)
        self.drain()
        if self.ar.ready():
            self._check_dead()  # a death is the error, whatever the others returned
            return True
        self._check()
        return self.gave_up is not None

    def await_reports(self, step: int, timeout: float = REPORTS_GRACE_SECONDS) -> None:
        """Before a recovery stops the survivors: take their reports up to checkpoint ``step``.
        Every process saved it before reporting it, so a death right after leaves those reports
        in flight, and the run resumes after that step: without them its history would skip it."""
        alive = set(self.processes) - set(self.deaths)
        deadline = time.monotonic() + timeout
        while alive and (self.last_step is None or self.last_step < step) and time.monotonic() < deadline:
            self.ar.wait(POLL_SECONDS)
            self.drain()

    def drain(self) -> None:
        """Book every report and output line that arrived; redraw the dashboard if due."""
        for p, receiver in self.receivers.items():
            records = receiver.take()
            if records:
                now = self._last_seen[p] = time.monotonic()
                if self.first_report_at is None:
                    self.first_report_at = now
                    self.first_restore = float(records[0].get("restore_seconds") or 0.0)
                    if self.group.refill is not None:  # new spares may start now
                        self.group.refill.settle()
                top = max(int(r["step"]) for r in records)
                self.last_step = top if self.last_step is None else max(self.last_step, top)
                if p == self.processes[0]:
                    self._book(records)
                    self._lead_step = int(records[-1]["step"])
                else:
                    self._ahead[p].extend(records)
                self.dashboard.add(records)  # a search's pruner judges them: it may stop the run
        for p, md in self.md.items():  # the latest sample: memory, time parts, FLOPs per step
            sample = md["data"].get(MONITOR_KEY)
            if sample is not None and sample is not self._samples.get(p):
                self._samples[p] = sample
                self.result.add_sample(p, sample)
                self.dashboard.add_sample(p, sample)
        for ahead in self._ahead.values():
            while ahead and self._lead_step is not None and int(ahead[0]["step"]) <= self._lead_step:
                ahead.popleft()
        for p, md in self.md.items():
            self.out.feed(p, md["stdout"] or "")
            self.err.feed(p, md["stderr"] or "")
        if self.live is not None:
            self.live.tick()

    def fill_lost(self, upto: int | None) -> None:
        """Book, for the steps up to ``upto`` whose process-0 report was lost (it died before
        sending it), the report of the lowest process that sent one."""
        if upto is None:
            return
        for p in self.processes[1:]:
            missing = [r for r in self._ahead[p]
                       if (self._lead_step is None or int(r["step"]) > self._lead_step)
                       and int(r["step"]) <= upto]
            if missing:
                self._book(missing)
                self._lead_step = int(missing[-1]["step"])

    def fill_saved(self, checkpoint: Checkpoint | None) -> None:
        """Book the report of ``checkpoint`` from the checkpoint itself when none reached the
        notebook (every process died between the commit and that report)."""
        if checkpoint is None or (self._lead_step is not None and self._lead_step >= checkpoint.step):
            return
        saved = saved_report(checkpoint)
        if saved is not None:
            record = {**saved, "process": self.processes[0], "seq": -1, "checkpoint": checkpoint.path}
            self._book([record])
            self.dashboard.add([record])
            self._lead_step = checkpoint.step

    def _refresh_loop(self) -> None:
        while not self._ended.wait(REFRESH_SECONDS):
            try:
                self.dashboard.refresh()
            except Exception as exc:  # a drawing problem must not end the run
                print(f"jaxnb: the dashboard could not redraw: {exc}", file=sys.stderr)
                return

    def finish(self) -> dict[int, Any]:
        """After the run: take the last messages; the errors by process (once; later calls
        give the same errors)."""
        if self._finished is not None:
            return self._finished
        if self.gave_up is None:
            self.ar.wait_for_output(OUTPUT_WAIT_SECONDS)
        self._ended.set()
        self._refresher.join()
        self.drain()
        if self.live is not None:
            self.live.close()
        self.out.finish()
        self.err.finish()
        for p, r in self.receivers.items():  # summed over the attempts of a recovered run
            self.result.reports[p] = self.result.reports.get(p, 0) + r.count
        missing = {p: r.missing for p, r in self.receivers.items() if r.missing}
        if missing and self.gave_up is None:
            lost = ", ".join(f"{label(p)}: {n}" for p, n in missing.items())
            print(f"jaxnb: some reports did not arrive ({lost})", file=sys.stderr)
        self._finished = self.errors()
        return self._finished

    def errors(self) -> dict[int, Any]:
        """The exception raised by each process that has failed so far."""
        found = {}
        for p, future in self.futures.items():
            if future.done():
                value = future.result()
                if isinstance(value, BaseException):
                    found[p] = value
        return found

    def _book(self, records: list[dict[str, Any]]) -> None:
        result, here = self.result, self.group.via_host is None
        for record in records:
            result.add_report(record["metrics"], int(record["step"]))
            if record.get("checkpoint"):
                result.checkpoint = _checkpoint(record, result.path, here)

    def _check(self) -> None:
        """Give up with the watch's error on a death, or when processes are left waiting."""
        by_process = self._outcomes()
        if not self._asked_others_to_stop and any(o["error"] is not None for o in by_process.values()):
            self._asked_others_to_stop = True
            self._signal(STOP_SIGNAL)  # the others end cleanly at their next report
        done = {p for p, f in self.futures.items() if f.done()}
        try:
            if self.stops.check(done, {p: o["error"] for p, o in by_process.items()}):
                return  # the processes moved on meanwhile: look again at the next poll
        except KeyboardInterrupt:  # at the breakpoint's prompt: end the run as a cell ends
            print(AT_BREAKPOINT, file=sys.stderr)
            self.interrupt()
            return
        try:
            self.watch.check(done, by_process)
        except ProcessFailure as failure:
            self._died(failure)

    def _check_dead(self) -> None:
        """After the run: a death is the error, whatever the others returned."""
        try:
            self.watch.check_dead(self._outcomes())
        except ProcessFailure as failure:
            self._died(failure)

    def _died(self, failure: ProcessFailure) -> None:
        self.deaths = dict(self.watch.dead)
        self.gave_up = failure
        self._gave_up_at = time.monotonic()

    def unnoticed_seconds(self) -> float:
        """From the dead processes' last sign of life (their last report, or this attempt's
        start) to the death seen: an upper bound on how long it went unnoticed."""
        if self._gave_up_at is None:
            return 0.0
        alive_until = max(self._last_seen.get(p, self.started_at) for p in self.deaths or [0])
        return max(0.0, self._seen_at() - alive_until)

    def survivors_seconds(self) -> float:
        """From the death seen to the attempt given up: the survivors stopped (SIGKILL where
        they run), part of stopping the old group."""
        return 0.0 if self._gave_up_at is None else max(0.0, self._gave_up_at - self._seen_at())

    def seen_time(self) -> float:
        """When the death was seen, as ``time.time()`` (now when none was)."""
        return time.time() - (time.monotonic() - self._seen_at()) if self._gave_up_at is not None \
            else time.time()

    def _seen_at(self) -> float:
        seen = self.watch.seen_at
        return seen if seen is not None and self._gave_up_at is not None and seen <= self._gave_up_at \
            else float(self._gave_up_at or 0.0)

    def _outcomes(self) -> dict[int, dict[str, Any]]:
        errors = self.errors()
        return {p: {"error": errors.get(p)} for p in self.processes}


def _checkpoint(record: dict[str, Any], run_dir: str, here: bool) -> Checkpoint:
    """The checkpoint a report names; a user's directory noted in the run's folder when it is on
    this machine (``here``; through ``--via``, noted on the host after the run)."""
    checkpoint = Checkpoint(int(record["step"]), record["checkpoint"],
                            user_managed=bool(record.get("checkpoint_user")))
    if checkpoint.user_managed and here:  # jaxnb's own saves are found on disk; the user's are noted
        remember_user_checkpoint(run_dir, checkpoint.step, checkpoint.path)
    return checkpoint
