"""A run followed from its run folder (``cluster.result(RUN)``, ``%jax_train --attach``): a live
:class:`Result` filled from ``RUN/reports.jsonl`` (:mod:`jaxnb._core.run_reports`), by a kernel
that attached the cluster while the run went on with no kernel listening."""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from typing import Any

from jaxnb._core import run_reports
from jaxnb._core.contract import STOP_SIGNAL
from jaxnb._core.errors import JaxnbError
from jaxnb._core.run_folder import Checkpoint, checkpoint_dir, saved_report
from jaxnb._core.spelling import example
from jaxnb._core.state import Group
from jaxnb._train import run_events
from jaxnb._train.result import Result

#: How often the file is read for new reports (seconds).
POLL_SECONDS = 0.05
#: A followed run whose reports could not be read any more (it may go on).
LEFT = "stopped following run {name!r}, which may go on: {why}"

NO_SUCH_RUN = ("no run {name!r} in {parent} (no {file} there); give the folder the run was "
               "started with ({storage}), or list it with `ls {parent}`")


class RunFailed(JaxnbError):
    """The error of a run followed from its folder: the failing process 0's one line."""


def follow(group: Group, run_dir: str, name: str, dashboard: Any = None,
           tail: run_reports.Tail | None = None) -> Result:
    """The live ``Result`` of the run in ``run_dir``: every report since it began, then its end
    (``dashboard``: shown, fed the reports as they arrive, finished at the end). ``tail`` reads
    its reports file (default: on this machine)."""
    tail = tail or run_reports.Tail(run_reports.path(run_dir))
    if not tail.exists():
        parent = os.path.dirname(run_dir)
        raise FileNotFoundError(NO_SUCH_RUN.format(name=name, parent=parent, file=run_reports.REPORTS_FILE,
                                                   storage=example("storage", "DIR")))
    if dashboard is not None:
        dashboard.show()
    result = Result(name, run_dir)
    result.set_stopper(lambda: stop_run(group))
    result.set_view(dashboard)
    reader = _Reader(result, tail, dashboard)
    reader.step()  # what is there already, before this returns
    if result.running:
        threading.Thread(target=contextvars.copy_context().run, args=(reader.loop,),
                         name=f"jaxnb-follow-{name}", daemon=True).start()
    return result


class _Reader:
    def __init__(self, result: Result, tail: run_reports.Tail, dashboard: Any) -> None:
        self.result, self.tail, self.dashboard = result, tail, dashboard
        self.end: dict[str, Any] | None = None
        self.recovers = False  # the attempt's start said a driver recovers it from a death
        self.stopping = threading.Event()

    def loop(self) -> None:
        try:
            while not self.stopping.wait(POLL_SECONDS) and self.result.running:
                self.step()
        except Exception as exc:  # the file cannot be read any more (an ssh link lost): say so
            result = self.result
            why = (str(exc).splitlines() or [type(exc).__name__])[0]
            result.error = RunFailed(LEFT.format(name=result.name, why=why))
            result.error.result = result  # type: ignore[attr-defined]
            if self.dashboard is not None:
                with contextlib.suppress(Exception):
                    self.dashboard.finish("failed", str(result.error))
            result.set_done()

    def step(self) -> None:
        """Apply what was appended; conclude at an end that nothing follows."""
        records: list[dict[str, Any]] = []
        for event in self.tail.read():
            kind = event.get("kind")
            if kind == "start":
                self.end, self.recovers = None, bool(event.get("recovers"))
                resume = event.get("resume")
                resume = resume if isinstance(resume, int) else None
                recovered = bool(self.result.history)  # else the run's first attempt
                self.result.rewind(resume)
                if self.dashboard is not None and records:
                    self.dashboard.add(records)
                records = []
                if self.dashboard is not None and recovered:
                    self.dashboard.rewind(resume)
                records.extend(self._saved(resume))
            elif kind == "report":
                records.append(self._book(event))
            elif kind == "failure" and (failure := run_events.failure_of(event)) is not None:
                self.result.failures.append(failure)
            elif kind == "end" and (event.get("final") or (
                    event.get("resized_at") is None and not self.recovers)):
                self.end = event  # a run that recovers: its driver's end, after any recovery
        if self.dashboard is not None:
            if records:
                self.dashboard.add(records)
            self.dashboard.refresh()
        if self.end is not None:
            self._conclude(self.end)

    def _book(self, event: dict[str, Any]) -> dict[str, Any]:
        result, step = self.result, int(event["step"])
        found = event.get("metrics")
        metrics: dict[str, Any] = found if isinstance(found, dict) else {}
        result.add_report(metrics, step)
        result.reports[0] = result.reports.get(0, 0) + 1
        if event.get("checkpoint"):
            result.checkpoint = Checkpoint(step, str(event["checkpoint"]),
                                           user_managed=bool(event.get("checkpoint_user")))
        return {"process": 0, "seq": event.get("seq", 0), "step": step,
                "time": float(event.get("time") or 0.0), "metrics": metrics,
                "checkpoint": event.get("checkpoint")}

    def _saved(self, resume: int | None) -> list[dict[str, Any]]:
        """The report of checkpoint ``resume`` kept in the checkpoint, when the file lacks it
        (every process died before process 0 wrote it there)."""
        steps = self.result.steps
        if resume is None or (steps and steps[-1] >= resume):
            return []
        path = os.path.join(checkpoint_dir(self.result.path), str(resume))
        saved = saved_report(Checkpoint(resume, path))
        if saved is None:
            return []
        return [self._book({**saved, "kind": "report", "seq": -1, "checkpoint": path})]

    def _conclude(self, end: dict[str, Any]) -> None:
        result = self.result
        if end.get("error"):
            where = "" if end.get("final") else " on process 0"
            result.error = RunFailed(f"run {result.name!r} failed{where}: {end['error']}")
            result.error.result = result  # type: ignore[attr-defined]
        result.stopped = bool(end.get("stopped")) and result.error is None
        result.stopped_at = end.get("stopped_at") if result.stopped else None
        if self.dashboard is not None:
            status = "failed" if result.error else "stopped" if result.stopped else "finished"
            with contextlib.suppress(Exception):  # a drawing problem must not hold the Result
                self.dashboard.finish(status, str(end.get("error") or ""))
        result.set_done()


def stop_run(group: Group) -> None:
    """``Result.stop()`` of a followed run (or a trial whose search's kernel is gone): ask every
    process to end the run going on at the same report."""
    from jaxnb._failures import free

    free.signal_processes(group, list(group.indices), STOP_SIGNAL)
