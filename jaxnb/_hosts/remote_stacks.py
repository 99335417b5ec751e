"""Stack dumps of engines on other hosts: each host's engines are asked at once (as jaxnb asks
local engines: their main thread's stack signal), over the shared ssh connections."""

from __future__ import annotations

import concurrent.futures
import json
import os
from typing import Any

from jaxnb._core.contract import STACK_SIGNAL, stack_file
from jaxnb._core.state import Group
from jaxnb._hosts import reachability, remote_launchers, ssh

#: Run on a host with its engines' pids and stack files: ask each main thread for a dump
#: (as jaxnb does locally), wait until each reaches its outermost frame (or 1 s), print them.
_DUMP_STACKS = """
import ctypes, json, os, signal, sys, time
jobs = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
for pid, path in jobs.items():
    try:
        open(path, "r+").truncate()
        libc.tgkill(int(pid), int(pid), {signal})
    except OSError:
        pass
def read(path):
    try:
        return open(path).read().strip()
    except OSError:
        return ""
deadline = time.monotonic() + 1.0
while time.monotonic() < deadline:
    texts = {pid: read(path) for pid, path in jobs.items()}
    last = [t.splitlines()[-1] if t else "" for t in texts.values()]
    if all(ln.endswith(("in <module>", "in _run_module_as_main")) for ln in last):
        break
    time.sleep(0.02)
print(json.dumps({pid: read(path) for pid, path in jobs.items()}))
""".replace("{signal}", str(int(STACK_SIGNAL)))


def request_stacks(group: Group, processes: list[int]) -> dict[int, str]:
    """Dump remote processes' stacks on their hosts (all hosts at once); local copies by process.

    The dumps are copied into the notebook's stacks folder, where :mod:`jaxnb._failures.stacks` reads them.
    """
    hosts: dict[str, tuple[Any, list[int]]] = {}
    for p in processes:
        launcher = remote_launchers.launcher_of(group, p)
        if launcher is not None and not ssh.exited(launcher):
            hosts.setdefault(ssh.place(launcher)[0], (launcher, []))[1].append(p)
    folder = group.stacks_dir or ""

    def dump(location: str) -> dict[int, str]:
        launcher, ps = hosts[location]
        pids = {p: group.processes[p].pid for p in ps}
        jobs = {str(pid): stack_file(folder, pid) for pid in pids.values()}
        if reachability.unreachable_now(location):
            return {}
        try:
            out = ssh.run_python(launcher, _DUMP_STACKS, json.dumps(jobs))
            texts = json.loads(out.strip().splitlines()[-1])
        except Exception:  # a host that does not answer: its processes show no dump
            return {}
        return {p: texts.get(str(pid), "") for p, pid in pids.items()}

    paths: dict[int, str] = {}
    if not hosts:
        return paths
    with concurrent.futures.ThreadPoolExecutor(len(hosts)) as pool:
        for texts in pool.map(dump, list(hosts)):
            for p, text in texts.items():
                local = os.path.join(folder, f"jaxnb-remote-stacks-{p}.txt")
                with open(local, "w") as f:
                    f.write(text)
                paths[p] = local
    return paths
