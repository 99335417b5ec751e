"""The supervisor of a named cluster: a small process in its own session (``setsid``), so that
jupyter_client's kill of the kernel's process group does not reach it.

The engines' and the controller's watchdogs watch it instead of the kernel: while it runs,
they outlive any kernel; when it ends (even by SIGKILL), they end too. A run that recovers
(``--max-failures``) whose kernel is gone, it drives on to its end (``make_driver``:
:class:`jaxnb._cluster_driving.Driver`, which starts it). It ends when asked
(SIGTERM: ``%jax_cluster stop``, ``python -m jaxnb stop NAME``), when its record is gone (a
stop by the kernel), or after ``--idle-timeout`` seconds with no kernel attached and no
request running on the engines (asked of the controller through ipyparallel, the only
channel). Before it ends it SIGKILLs every process its record names and removes the files.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from jaxnb._attach import queue, record
from jaxnb._core import cluster_names as names

#: How often it looks at its record and at the engines.
POLL_SECONDS = 0.5
#: How long a start may take before the kernel writes the record (then it gives up).
START_SECONDS = 600.0


class _Supervisor:
    def __init__(self, name: str, idle_timeout: float | None, launcher: dict[str, Any],
                 make_driver: Callable[[str, dict[str, Any]], Any] | None = None) -> None:
        self.name, self.idle_timeout, self.launcher = name, idle_timeout, launcher
        self.make_driver = make_driver
        self.path, self.own = names.record_path(name), names.supervisor_path(name)
        self.idle_since: float | None = None
        self.running = False  # a request runs on the engines (with no kernel attached)
        self.stop_asked = False
        self.client: Any = None
        self.connection: str | None = None
        self.started = time.time()
        self.said = ""  # the last problem it logged
        self.driver: Any = None  # stands by for a run that recovers; drives it on, its kernel gone
        self.wake: int | None = None  # read end of the pipe a signal wakes it through

    def say(self, **extra: Any) -> None:
        record.write(self.own, {"name": self.name, "supervisor": record.me(),
                                "idle_timeout": self.idle_timeout, "idle_since": self.idle_since,
                                "busy": self.running, "started": self.started,
                                "holds": self.holds(), **extra})

    def holds(self) -> str | None:
        """The run it stands by for, its spec in hand (it can drive it on), or ``None``."""
        driver = self.driver
        return driver.run if driver is not None and driver.spec is not None else None

    def run(self) -> None:
        self.say()
        seen = False
        while not self.stop_asked:
            doc = record.read(self.path)
            if doc is None:
                if seen or (time.time() - self.started > START_SECONDS
                            or not record.alive(self.launcher)):
                    break  # stopped by a kernel (it removed the record), or never started
            else:
                seen = True
                try:
                    self.drive(doc)
                except Exception as exc:  # never the supervisor's end: it still stops the cluster
                    said = f"jaxnb supervisor: could not stand by for a run: {exc!r}"
                    if said != self.said:  # once, not at every look
                        self.said = said
                        print(said, file=sys.stderr, flush=True)
                if self.idle_for(doc) >= (self.idle_timeout if self.idle_timeout is not None
                                          else float("inf")):
                    break
            self.nap(POLL_SECONDS)
        if self.driver is not None:  # the run ends with the cluster
            self.driver.cancel()
        self.stop(record.read(self.path))

    def nap(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when a signal arrives (a stop is then seen at once)."""
        if self.wake is None:
            time.sleep(seconds)
            return
        ready, _, _ = select.select([self.wake], [], [], seconds)
        if ready:
            with contextlib.suppress(OSError):
                os.read(self.wake, 64)

    def drive(self, doc: dict[str, Any]) -> None:
        """Stand by for a run that recovers from its start; drive it on once its kernel is gone."""
        entry, driver = entry_of(doc), self.driver
        if driver is not None:
            if driver.taken.is_set():
                ended = not driver.alive()  # it drove the run to its end
            else:  # the kernel did (its record names no run, or the next one)
                ended = entry is None or entry["run_id"] != driver.run_id
            if ended:
                driver.cancel(0.0)
                self.driver = driver = None
        if entry is None:
            return
        if driver is None:
            if self.make_driver is None:
                return
            self.driver = driver = self.make_driver(self.name, entry)
            driver.start()
        if not driver.taken.is_set() and not record.alive(entry["driver"]):
            driver.take_over()
        if driver.spec is not None and not driver.said:
            driver.said = True
            self.say()  # that it can drive the run on

    def idle_for(self, doc: dict[str, Any]) -> float:
        """Seconds with no kernel attached and nothing running (0 while either)."""
        attached = record.alive(doc.get("kernel"))
        running = not attached and ((self.driver is not None and self.driver.driving())
                                    or self.busy(doc))
        if attached or running:
            if self.idle_since is not None or running != self.running:
                self.idle_since, self.running = None, running
                self.say()
            return 0.0
        if self.running:
            self.running = False
            self.say()
        if self.idle_since is None:
            self.idle_since = float(doc.get("detached_at") or time.time())
            self.say()
        return time.time() - self.idle_since

    def busy(self, doc: dict[str, Any]) -> bool:
        """Whether an engine of the group has a request queued or running (a background run)."""
        try:
            if self.client is None or self.connection != doc["connection"]:  # a restart: anew
                import ipyparallel as ipp

                if self.client is not None:
                    self.client.close()
                self.client, self.connection = None, doc["connection"]
                # on loopback here: where the host's name leads does not matter (ipyparallel
                # would warn, into the log, where it does not resolve)
                info = record.read(doc["connection"])
                if info is None:
                    return False
                info.pop("location", None)
                self.client = ipp.Client(info, timeout=10)
            return queue.busy(self.client, {p["engine_id"] for p in doc.get("processes", [])})
        except Exception:  # the controller is gone or slow: nothing can run there
            return False

    def stop(self, doc: dict[str, Any] | None) -> None:
        """SIGKILL every process the record names; remove its files and the record."""
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
        record.end_listed(doc or {})
        record.remove(self.path, self.own)
        log = names.log_path(self.name)
        with contextlib.suppress(OSError):
            if os.path.getsize(log) == 0:
                record.remove(log)  # nothing went wrong: no log left behind


def entry_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The run that recovers a record names (its ``driving`` entry, well formed), or ``None``."""
    entry = doc.get("driving")
    if not isinstance(entry, dict) or not isinstance(entry.get("driver"), dict):
        return None
    if not all(isinstance(entry.get(k), str) for k in ("run", "run_dir", "run_id")):
        return None
    return entry if isinstance(entry.get("max_failures"), int) else None


def main(make_driver: Callable[[str, dict[str, Any]], Any] | None = None) -> None:
    """``python -c '... main()' NAME IDLE_TIMEOUT LAUNCHER_PID LAUNCHER_CREATED``; ``make_driver``
    stands by for a run that recovers and drives it on once its kernel is gone."""
    name = names.check(sys.argv[1])
    idle = None if sys.argv[2] == "none" else float(sys.argv[2])
    launcher = {"pid": int(sys.argv[3]), "created": float(sys.argv[4])}
    supervisor = _Supervisor(name, idle, launcher, make_driver)

    def asked(*_: object) -> None:
        supervisor.stop_asked = True

    signal.signal(signal.SIGTERM, asked)
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken)  # a signal ends the nap at once (Python writes its number there)
    supervisor.wake = wake
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a kernel interrupt is not for it
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        supervisor.run()
    finally:
        record.remove(supervisor.own)


if __name__ == "__main__":
    main()
