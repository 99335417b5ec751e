"""``python -m jaxnb hold NAME``: the host's side of ``%jax_cluster attach NAME --via HOST``.

Run over ssh by a kernel on another machine, it takes named cluster ``NAME`` over on this
host as a local kernel's attach does, and stands for that kernel here: the record names this
process as the attached kernel, so the supervisor counts no idle time while it runs, and a
kernel that attaches here later takes it over. It prints one JSON line (the record and the
controller's client connection, whose key the ssh channel carries), then waits: ``detach``
on its stdin leaves the cluster running with no kernel attached; the end of its stdin (the
ssh connection closed, the remote kernel gone) lets go; a take-over is printed as one more
JSON line before it exits. It reads only JSON (no pickle) and runs nothing it is sent.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from typing import Any

from jaxnb._attach import attachment, record
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
