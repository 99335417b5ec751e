"""Follow a running train function: reports to the dashboard and Result, output, failures."""

from __future__ import annotations

import contextvars
import signal
import sys
import threading
from typing import Any

from jaxnb._cells.live import LiveMerger
from jaxnb._cells.live_panel import LivePanel, NotebookScreen, in_kernel, live_options
from jaxnb._core import ipp_internals
from jaxnb._core.contract import STOP_SIGNAL
from jaxnb._core.errors import ProcessFailure
from jaxnb._core.messages import label
from jaxnb._core.run_folder import Checkpoint, remember_user_checkpoint
from jaxnb._core.state import Group, Suspect
from jaxnb._failures import explain, free
from jaxnb._failures.watch import Watch
from jaxnb._train.receive import Receiver
from jaxnb._train.result import Result
from jaxnb._widgets.dashboard import Dashboard

#: How long the notebook waits for news between two looks (seconds).
POLL_SECONDS = 0.02
#: How often the dashboard thread offers a redraw (the dashboard throttles itself too).
REFRESH_SECONDS = 0.05
#: After the last process returned, how long to wait for its last messages.
OUTPUT_WAIT_SECONDS = 10.0


class Monitor:
    """Polls one run's ``AsyncResult``; :meth:`poll` until it says the run is over.

    The dashboard redraws on its own thread, so drawing never delays the
    booking of reports.
    """

    def __init__(self, group: Group, ar: Any, result: Result, dashboard: Dashboard) -> None:
        self.group, self.ar, self.result, self.dashboard = group, ar, result, dashboard
        self.processes = group.indices
        explain.mark_logs(group, list(ar.msg_ids))
        self.futures = dict(zip(self.processes, ipp_internals.futures(ar), strict=True))
        self.md = {p: f.output.metadata for p, f in self.futures.items()}
        self.receivers = {p: Receiver(self.md[p]["data"]) for p in self.processes}
        # Identical lines as they come; the rest, tidy, at the end (bounded, full logs saved).
        self.out = LiveMerger(self.processes, sys.stdout.write, **live_options("stdout"))
        self.err = LiveMerger(self.processes, sys.stderr.write, **live_options("stderr"))
        # Lines that differ between processes, live (as in cells), also for a --background run.
        self.live = LivePanel([self.out.view, self.err.view], NotebookScreen()) if in_kernel() else None
        self.stop_requested = False
        self.interrupted = False
        self.gave_up: BaseException | None = None
        # The same watch as a cell's: deaths, and processes left waiting once one finished.
        self.watch = Watch(group)
        self._asked_others_to_stop = False
        self._ended = threading.Event()
        self._refresher = threading.Thread(target=contextvars.copy_context().run,
                                           args=(self._refresh_loop,), name="jaxnb-dashboard",
                                           daemon=True)
        self._refresher.start()

    # ---- requests from the user ------------------------------------------------------

    def request_stop(self) -> None:
        """Ask every process to stop at the same step (``should_stop()`` turns True)."""
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

    def drain(self) -> None:
        """Book every report and output line that arrived; redraw the dashboard if due."""
        for p, receiver in self.receivers.items():
            records = receiver.take()
            if records:
                if p == self.processes[0]:
                    self._book(records)
                self.dashboard.add(records)
        for p, md in self.md.items():
            self.out.feed(p, md["stdout"] or "")
            self.err.feed(p, md["stderr"] or "")
        if self.live is not None:
            self.live.tick()

    def _refresh_loop(self) -> None:
        while not self._ended.wait(REFRESH_SECONDS):
            try:
                self.dashboard.refresh()
            except Exception as exc:  # a drawing problem must not end the run
                print(f"jaxnb: the dashboard could not redraw: {exc}", file=sys.stderr)
                return

    def finish(self) -> dict[int, Any]:
        """After the run: take the last messages; the errors by process."""
        if self.gave_up is None:
            self.ar.wait_for_output(OUTPUT_WAIT_SECONDS)
        self._ended.set()
        self._refresher.join()
        self.drain()
        if self.live is not None:
            self.live.close()
        self.out.finish()
        self.err.finish()
        self.result.reports = {p: r.count for p, r in self.receivers.items()}
        missing = {p: r.missing for p, r in self.receivers.items() if r.missing}
        if missing and self.gave_up is None:
            lost = ", ".join(f"{label(p)}: {n}" for p, n in missing.items())
            print(f"jaxnb: some reports did not arrive ({lost})", file=sys.stderr)
        return self.errors()

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
        result = self.result
        for record in records:
            result.history.append(record["metrics"])
            if record.get("checkpoint"):
                result.checkpoint = _checkpoint(record, result.path)
        result.metrics = records[-1]["metrics"]

    def _check(self) -> None:
        """Give up with the watch's error on a death, or when processes are left waiting."""
        by_process = self._outcomes()
        if not self._asked_others_to_stop and any(o["error"] is not None for o in by_process.values()):
            self._asked_others_to_stop = True
            self._signal(STOP_SIGNAL)  # the others may stop cleanly at should_stop()
        done = {p for p, f in self.futures.items() if f.done()}
        try:
            self.watch.check(done, by_process)
        except ProcessFailure as failure:
            self.gave_up = failure

    def _check_dead(self) -> None:
        """After the run: a death is the error, whatever the others returned."""
        try:
            self.watch.check_dead(self._outcomes())
        except ProcessFailure as failure:
            self.gave_up = failure

    def _outcomes(self) -> dict[int, dict[str, Any]]:
        errors = self.errors()
        return {p: {"error": errors.get(p)} for p in self.processes}


def _checkpoint(record: dict[str, Any], run_dir: str) -> Checkpoint:
    checkpoint = Checkpoint(int(record["step"]), record["checkpoint"],
                            user_managed=bool(record.get("checkpoint_user")))
    if checkpoint.user_managed:  # jaxnb's own saves are found on disk; the user's are noted
        remember_user_checkpoint(run_dir, checkpoint.step, checkpoint.path)
    return checkpoint
