"""The supervisor of a named cluster: a small process in its own session (``setsid``), so that
jupyter_client's kill of the kernel's process group does not reach it.

The engines' and the controller's watchdogs watch it instead of the kernel: while it runs,
they outlive any kernel; when it ends (even by SIGKILL), they end too. It ends when asked
(SIGTERM: ``%jax_cluster stop``, ``python -m jaxnb stop NAME``), when its record is gone (a
stop by the kernel), or after ``--idle-timeout`` seconds with no kernel attached and no
request running on the engines (asked of the controller through ipyparallel, the only
channel). Before it ends it SIGKILLs every process its record names and removes the files.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import Any

from jaxnb._attach import record
from jaxnb._core import cluster_names as names

#: How often it looks at its record and at the engines.
POLL_SECONDS = 0.5
#: How long a start may take before the kernel writes the record (then it gives up).
START_SECONDS = 600.0


class _Supervisor:
    def __init__(self, name: str, idle_timeout: float | None, launcher: dict[str, Any]) -> None:
        self.name, self.idle_timeout, self.launcher = name, idle_timeout, launcher
        self.path, self.own = names.record_path(name), names.supervisor_path(name)
        self.idle_since: float | None = None
        self.running = False  # a request runs on the engines (with no kernel attached)
        self.stop_asked = False
        self.client: Any = None
        self.connection: str | None = None
        self.started = time.time()

    def say(self, **extra: Any) -> None:
        record.write(self.own, {"name": self.name, "supervisor": record.me(),
                                "idle_timeout": self.idle_timeout, "idle_since": self.idle_since,
                                "busy": self.running,
                                "started": self.started, **extra})

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
                if self.idle_for(doc) >= (self.idle_timeout if self.idle_timeout is not None
                                          else float("inf")):
                    break
            time.sleep(POLL_SECONDS)
        self.stop(record.read(self.path))

    def idle_for(self, doc: dict[str, Any]) -> float:
        """Seconds with no kernel attached and nothing running (0 while either)."""
        attached = record.alive(doc.get("kernel"))
        running = not attached and self.busy(doc)
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
            queue = self.client.queue_status()
            engines = {p["engine_id"] for p in doc.get("processes", [])}
            return any((queue.get(e) or {}).get("queue", 0) for e in engines)
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


def main() -> None:
    """``python -c '... main()' NAME IDLE_TIMEOUT LAUNCHER_PID LAUNCHER_CREATED``."""
    name = names.check(sys.argv[1])
    idle = None if sys.argv[2] == "none" else float(sys.argv[2])
    launcher = {"pid": int(sys.argv[3]), "created": float(sys.argv[4])}
    supervisor = _Supervisor(name, idle, launcher)

    def asked(*_: object) -> None:
        supervisor.stop_asked = True

    signal.signal(signal.SIGTERM, asked)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a kernel interrupt is not for it
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        supervisor.run()
    finally:
        record.remove(supervisor.own)


if __name__ == "__main__":
    main()
