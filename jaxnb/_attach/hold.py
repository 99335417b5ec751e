"""``python -m jaxnb hold NAME``: the host's side of ``%jax_cluster attach NAME --via HOST``.

Run over ssh by a kernel on another machine, it takes named cluster ``NAME`` over on this
host as a local kernel's attach does, and stands for that kernel here: the record names this
process as the attached kernel, so the supervisor counts no idle time while it runs, and a
kernel that attaches here later takes it over. It prints one JSON line (the record and the
controller's client connection, whose key the ssh channel carries), then waits: ``detach``
on its stdin leaves the cluster running with no kernel attached; the end of its stdin (the
ssh connection closed, the remote kernel gone) lets go; a take-over is printed as one more
JSON line before it exits. ``{"run": NAME, "folder": PATH, "kind": "run"}`` on its stdin notes
a run the remote kernel started in the record (for ``list`` here, and a kernel here that follows
it). It reads only JSON (no pickle) and runs nothing it is sent.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from typing import Any

from jaxnb._attach import attachment, record, runs
from jaxnb._core import cluster_names as names
from jaxnb._core.errors import ClusterStateError

#: How often it looks whether another kernel took the cluster over.
POLL_SECONDS = 0.5


def _say(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def _connection(path: str) -> dict[str, Any]:
    """The controller's client connection file (0600, JSON; never through a link)."""
    doc = record.read(path)
    if doc is None:
        raise ClusterStateError(f"cannot read the controller's connection file {path} on "
                                f"{socket.gethostname()}")
    return doc


def _run_noted(line: str) -> tuple[str, str, str] | None:
    """``(name, folder, kind)`` from a ``run`` line; None for anything else."""
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    name, folder, kind = doc.get("run"), doc.get("folder"), doc.get("kind")
    if not (isinstance(name, str) and isinstance(folder, str) and os.path.isabs(folder)
            and name == os.path.basename(folder) and kind in (runs.RUN, runs.SEARCH)):
        return None
    return name, folder, kind


def main(name: str) -> int:
    """Attach, print what the remote kernel needs, hold until told or disconnected."""
    if attachment.supervisor_of(name) is None:
        _say({"none": name})
        return 1
    try:
        hold, doc = attachment.take_over(name)
        _say({"record": doc, "connection": _connection(doc["connection"]),
              "host": socket.gethostname()})
    except (ClusterStateError, ValueError, KeyError) as exc:
        _say({"error": str(exc)})
        return 1
    detach = threading.Event()
    ended = threading.Event()

    def listen() -> None:
        for line in sys.stdin:
            if line.strip() == "detach":
                detach.set()
                break
            noted = _run_noted(line)
            if noted is not None:
                doc = record.read(names.record_path(name)) or {}
                attachment.update(hold, runs=runs.added(doc.get("runs"), *noted))
        ended.set()

    threading.Thread(target=listen, name="jaxnb-hold", daemon=True).start()
    while not ended.wait(POLL_SECONDS):
        lost = hold.taken_over()
        if lost is not None:
            _say({"taken_over": lost})
            return 0
    if detach.is_set():
        attachment.detach(hold)
        _say({"detached": time.time()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
