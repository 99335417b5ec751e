"""The supervisor drives a run on when the kernel driving it is gone (``--max-failures``); the
supervisor's entry point (:func:`main`), with this driver.

A run that recovers on a named cluster is named in the cluster's record with the process that
drives it (:mod:`jaxnb._train.handing`). When that kernel is gone (SIGKILLed, restarted), the
supervisor takes the run over, on a thread of its own:

- it holds the cluster as a kernel would (:func:`jaxnb._cluster_attach.adopt`: ipyparallel's
  connection files, nothing else), and asks a live engine for the run's spec (the function and config as
  cloudpickle bytes, the setup to replay) on its control channel: ipyparallel's transport,
  never a file;
- it follows the attempt under way through the run folder (process 0's events,
  :mod:`jaxnb._core.run_reports`) and the processes' liveness (:mod:`jaxnb._failures.detect`);
- on a death it books the failure, restarts the group, replays the setup, resumes the function
  from the latest checkpoint (:class:`~jaxnb._train.recovery.Recovery`'s rules: the limit, a
  failure repeated at the same step), and writes each recovery and the run's end to the run
  folder (:mod:`jaxnb._train.run_events`), where a kernel that attaches later reads them.

What goes wrong is said in the cluster's log and as the run's end (``Result.error``): the run
never waits on a driver that gave up.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import time
import traceback
from typing import Any

from jaxnb._attach import record, supervisor
from jaxnb._core import cluster_names as names

#: How often the run is looked at (its folder, its processes' liveness).
POLL_SECONDS = 0.1
#: After process 0 ended its attempt, how long a death elsewhere may still show.
END_GRACE_SECONDS = 1.0
#: How long the engines may sit idle with the attempt's end not in the run folder.
QUIET_SECONDS = 5.0
#: How long a live engine has to hand over the run's spec; how long until it is asked again.
SPEC_SECONDS = 15.0
SPEC_RETRY_SECONDS = 1.0
GAVE_UP = "the cluster's supervisor could not drive the run on without its kernel: {why}"
NO_END = ("the run's processes stopped running it without writing its end to the run folder "
          "(see the cluster's log and the run folder's permissions)")
STOPPED = "the cluster was stopped while its supervisor drove the run on (its kernel gone)"
NO_SPEC = ("no live engine holds the run's function (its kernel and its engines went before "
           "the cluster had it)")


class Driver:
    """Stands by for one run from its start (:meth:`start`): it holds the run's spec, asked of a
    live engine while the kernel drives the run (an engine that dies with the kernel cannot
    give it any more); :meth:`take_over` once that kernel is gone drives the run to its end."""

    def __init__(self, name: str, entry: dict[str, Any]) -> None:
        self.name, self.entry = name, dict(entry)
        self.run_dir, self.run, self.run_id = entry["run_dir"], entry["run"], entry["run_id"]
        self.cancelled, self.taken = threading.Event(), threading.Event()
        self.spec: dict[str, Any] | None = None
        self.said = False  # the supervisor said it holds the spec
        self.thread = threading.Thread(target=self._main, name=f"jaxnb-drive-{self.run}", daemon=True)
        self.held: Any = None  # jaxnb._cluster_attach.Adopted, once it holds the cluster

    def start(self) -> None:
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def driving(self) -> bool:
        """It drives the run now (the cluster is busy)."""
        return self.taken.is_set() and self.thread.is_alive()

    def take_over(self) -> None:
        """The kernel that drove the run is gone: drive it on."""
        self.entry = dict(self.entry, driver=record.me())
        # no other supervisor pass takes it again
        record.update(names.record_path(self.name), driving=self.entry)
        say(f"driving run {self.run!r} on: its kernel is gone")
        self.taken.set()

    def cancel(self, seconds: float = 5.0) -> None:
        """The run ended in its kernel, or the cluster stops (then the run ends with it)."""
        self.cancelled.set()
        self.thread.join(seconds)

    def _main(self) -> None:
        from jaxnb._train import run_events

        self._stand_by()
        if not self.taken.is_set():
            return  # the kernel drove the run to its end
        try:
            end = self._drive()
            if end is None and self.cancelled.is_set():
                end = run_events.final_end(STOPPED)
        except BaseException as exc:  # said in the log and as the run's end; never silent
            why = (f"{type(exc).__name__}: {getattr(exc, 'summary', None) or exc}".splitlines() or [""])[0]
            say(f"could not drive run {self.run!r} on: {why}\n{traceback.format_exc()}")
            end = run_events.final_end(GAVE_UP.format(why=why))
        if end is not None:
            run_events.append(self.run_dir, end)
            how = end.get("error") or ("stopped" if end.get("stopped") else "finished")
            say(f"run {self.run!r} ended: {how}")
        record.update(names.record_path(self.name), driving=None)
        held, self.held = self.held, None
        if held is not None and held.group.client is not None:
            with contextlib.suppress(Exception):
                held.group.client.close()

    def _stand_by(self) -> None:
        """Until taken over or cancelled: load what driving needs, and the run's spec."""
        while self.spec is None and not (self.cancelled.is_set() or self.taken.is_set()):
            with contextlib.suppress(Exception):  # the engines may not hold it yet: again
                self.spec = _fetched(self.name, self.run_id)
            if self.spec is None:
                self.cancelled.wait(SPEC_RETRY_SECONDS)
        with contextlib.suppress(Exception):  # loaded now: a take-over starts at once (a
            for module in ("jaxnb._cluster", "jaxnb._train.attempts"):  # failure shows then)
                importlib.import_module(module)
        while not (self.cancelled.is_set() or self.taken.wait(POLL_SECONDS)):
            pass

    def _drive(self) -> dict[str, Any] | None:
        """Follow the run to its end, recovering from deaths; its final ``end`` (``None`` when
        the cluster stops meanwhile)."""
        from jaxnb._cluster import JaxCluster
        from jaxnb._cluster_attach import adopt
        from jaxnb._core import run_reports
        from jaxnb._train import run_events
        from jaxnb._train.attempts import EXECUTE, prepare

        self.held = held = adopt(JaxCluster, self.name)
        group = held.group
        group.driving, group.busy_with = self.entry, self.run
        spec = self.spec or _held_spec(group.client, _live_engines(group), self.run_id)
        recovery = _recovery(held, spec, self.entry)
        attempt = _Attempt(run_reports.Tail(run_reports.path(self.run_dir)), None)
        while not self.cancelled.is_set():
            death = attempt.follow(group, self.cancelled)
            if death is None:
                return None if self.cancelled.is_set() else attempt.final()
            failure, refuse = recovery.record(death)
            if refuse is None and spec.get("setup_error"):
                refuse = spec["setup_error"]
            if refuse is not None:
                run_events.append(self.run_dir, run_events.failure_event(failure))
                return run_events.final_end(_summary(death.gave_up, refuse))
            latest = recovery.latest()
            say(f"recovering run {self.run!r}: {recovery.status(failure, latest)}")
            assert recovery.restart is not None
            # an attach waits for the new engines
            record.update(names.record_path(self.name), restarting=time.time())
            try:
                failure.phases.update(recovery.restart())
            finally:
                record.update(names.record_path(self.name), restarting=None)
            failure.resumed_from = None if latest is None else latest.step
            run_events.append(self.run_dir, run_events.failure_event(failure))
            spec.update(resume=latest)
            prepare(group, spec)
            group.busy_with = self.run
            attempt = _Attempt(attempt.tail, group.view.apply_async(EXECUTE))
        return None


def _live_engines(group: Any) -> list[int]:
    from jaxnb._failures import detect

    dead = detect.dead_processes(group)
    return [p.engine_id for p in group.processes if p.process_index not in dead]


def _fetched(name: str, run_id: str) -> dict[str, Any] | None:
    """The spec of run ``run_id``, asked of the engines the record names (its own client)."""
    import ipyparallel as ipp

    doc = record.read(names.record_path(name)) or {}
    client = ipp.Client(doc["connection"], timeout=10)
    try:
        return _held_spec(client, [int(p["engine_id"]) for p in doc.get("processes", [])], run_id)
    except RuntimeError:
        return None
    finally:
        client.close()


def _held_spec(client: Any, engines: list[int], run_id: str) -> dict[str, Any]:
    """The spec of run ``run_id`` from the first of ``engines`` that holds it (its control
    channel: it answers while the engine runs the function)."""
    from jaxnb._core import ipp_internals
    from jaxnb._core.contract import EngineCall

    for engine in engines:
        with contextlib.suppress(Exception):
            future = ipp_internals.control_apply(client, engine, EngineCall("jaxnb._engine.run.held:spec"))
            spec = ipp_internals.reply_value(future.result(timeout=SPEC_SECONDS))
            if isinstance(spec, dict) and spec.get("run_id") == run_id:
                return spec
    raise RuntimeError(NO_SPEC)


class _Attempt:
    """One attempt followed from the run folder (``ar``: its requests, when this driver sent
    them) and from the processes' liveness."""

    def __init__(self, tail: Any, ar: Any) -> None:
        self.tail, self.ar = tail, ar
        self.last_step: int | None = None  # the highest step this attempt reported
        self.end: dict[str, Any] | None = None
        self.final_end: dict[str, Any] | None = None
        self.ended_at: float | None = None
        self.quiet_since: float | None = None  # since when no engine runs it (and it wrote no end)
        self._read()

    def _read(self) -> None:
        for event in self.tail.read():  # from the file's start: the last attempt is under way
            kind = event.get("kind")
            if kind == "start":
                self.end = self.ended_at = self.last_step = None
            elif kind == "report" and isinstance(event.get("step"), int):
                self.last_step = max(self.last_step or event["step"], event["step"])
            elif kind == "end" and event.get("final"):
                self.final_end = event
            elif kind == "end":
                self.end, self.ended_at = event, time.monotonic()

    def follow(self, group: Any, cancelled: threading.Event) -> Any:
        """Wait for this attempt's end (``None``) or a death (a monitor-like record of it)."""
        from jaxnb._failures import detect, watch
        from jaxnb._train.recovery import SeenDeath

        while not cancelled.wait(POLL_SECONDS):
            self._read()
            if self.final_end is not None:  # the kernel ended the run before it went
                return None
            dead = detect.dead_processes(group)
            if dead:
                error = watch.died(group, dead, [])
                return SeenDeath(gave_up=error, last_step=self.last_step, deaths=dead)
            if self.end is not None and (self.ar is None or self.ar.ready()) and (
                    time.monotonic() - (self.ended_at or 0.0) >= END_GRACE_SECONDS):
                return None
            if self.end is None and self._quiet(group):  # its process 0 wrote no end (it could not)
                self.end = {"error": NO_END}
                return None
        return None

    def _quiet(self, group: Any) -> bool:
        """Whether no engine has run this attempt for a while (its requests are done)."""
        try:
            if self.ar is not None:
                running = not self.ar.ready()
            else:
                queues = group.client.queue_status()
                running = any((queues.get(p.engine_id) or {}).get("queue", 0) for p in group.processes)
        except Exception:  # the controller did not answer: look again
            running = True
        if running:
            self.quiet_since = None
            return False
        self.quiet_since = self.quiet_since or time.monotonic()
        return time.monotonic() - self.quiet_since >= QUIET_SECONDS

    def final(self) -> dict[str, Any] | None:
        """The run's end: process 0's (its error, or its stop); ``None`` when the kernel wrote
        it already."""
        from jaxnb._train import run_events

        if self.final_end is not None:
            return None
        end = self.end or {}
        return run_events.final_end(end.get("error"), bool(end.get("stopped")), end.get("stopped_at"))


def _recovery(held: Any, spec: dict[str, Any], entry: dict[str, Any]) -> Any:
    """The run's recovery policy, with the recoveries its folder records and a restart that
    replays the setup the kernel sent (pushes as cloudpickle bytes)."""
    from jaxnb._core.contract import EngineCall
    from jaxnb._core.replay import Replay, Step
    from jaxnb._train import run_events
    from jaxnb._train.recovery import Recovery

    group = held.group
    steps = []
    for step in spec.get("setup") or []:
        if step.get("kind") == "cell":
            steps.append(Step("cell", code=str(step["code"]), timeout=step.get("timeout")))
        else:
            steps.append(Step("push", values=tuple(dict(step.get("values") or {}).items())))
    group.setup = Replay(steps)

    def push(values: dict[str, Any]) -> None:
        group.view.apply_sync(EngineCall("jaxnb._engine.run.held:set_pickled"), values)

    recovery = Recovery(entry["max_failures"], lambda: held.restart(push), entry["run_dir"], entry["run"])
    recovery.failures = [f for f in run_events.failures_in(entry["run_dir"]) if f.processes]
    return recovery


def _summary(error: Any, reason: str) -> str:
    first = (str(getattr(error, "summary", None) or error).splitlines() or [""])[0]
    return f"{first}; {reason}"


def say(line: str) -> None:
    """One line in the cluster's log (the supervisor's stderr)."""
    print(f"jaxnb supervisor {time.strftime('%H:%M:%S')}: {line}", file=sys.stderr, flush=True)


def main() -> None:
    """The supervisor of a named cluster (:mod:`jaxnb._attach.supervisor`), driving runs on."""
    supervisor.main(Driver)
