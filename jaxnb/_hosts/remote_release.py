"""Cut the gloo connections of engines on other hosts (:mod:`.sockets` does it on this machine).

A process blocked inside a gloo collective only returns once its connections
fail. On each host (all at once, over the shared ssh connections) jaxnb lists
the engines' TCP connections, keeps those to another engine that are not the
coordination service's, and shuts them down with ``pidfd_getfd`` there.
"""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
from typing import Any

from jaxnb._core.state import Group
from jaxnb._hosts import cut_outcome, remote_launchers, sockets, ssh

#: Run on the hosts, sent as text (the same module cuts local engines' connections).
_SOCKETS_SCRIPT = pathlib.Path(__file__).with_name("sockets.py")


def _run(launcher: Any, request: dict) -> Any:
    code = _SOCKETS_SCRIPT.read_text() + "\nimport sys\nmain(sys.argv[1])\n"
    out = ssh.run_python(launcher, code, json.dumps(request))
    return json.loads(out.strip().splitlines()[-1])


def cut(group: Group) -> int:
    """Shut down every engine-to-engine gloo connection on every host; how many were shut."""
    hosts: dict[str, tuple[Any, list[int]]] = {}
    for p in group.indices:
        launcher = remote_launchers.launcher_of(group, p)
        if launcher is not None and not ssh.exited(launcher):
            host = ssh.place(launcher)[0]
            hosts.setdefault(host, (launcher, []))[1].append(group.processes[p].pid)
    if not hosts:
        return 0

    def listing(location: str) -> dict:
        launcher, pids = hosts[location]
        try:
            return _run(launcher, {"list": pids})
        except Exception:  # a host that does not answer: nothing to cut there
            return {}

    with concurrent.futures.ThreadPoolExecutor(len(hosts)) as pool:
        listed = dict(zip(hosts, pool.map(listing, list(hosts)), strict=True))
    plan = sockets.gloo_plan(listed, group.coordinator)
    if not plan:
        return 0

    def shut(location: str) -> int:
        try:
            answer = _run(hosts[location][0], {"cut": plan[location]})
        except Exception:
            return 0
        return cut_outcome.record(location, answer)

    with concurrent.futures.ThreadPoolExecutor(len(plan)) as pool:
        return sum(pool.map(shut, list(plan)))
