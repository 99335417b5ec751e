"""The notebook side of engines on other hosts: check the hosts, notice lost engines, stop.

Hook points in the cluster lifecycle (:mod:`jaxnb._lifecycle.startup`, :mod:`jaxnb._failures.detect`,
:mod:`jaxnb._lifecycle.shutdown`) call these; everything ssh-specific lives in :mod:`jaxnb._hosts.ssh`.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from typing import Any

import ipyparallel as ipp

from jaxnb._core.contract import ENV_WORKDIR_BY_HOST, STACK_SIGNAL, stack_file
from jaxnb._core.errors import StartError
from jaxnb._core.host_entries import engine_counts
from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group
from jaxnb._hosts import preflight, ssh, ssh_connections, workdir


def ssh_sets(ipp_cluster: ipp.Cluster | None) -> list[ssh.FastSSHEngineSetLauncher]:
    """The cluster's engine sets started over ssh."""
    if ipp_cluster is None:
        return []
    return [s for s in ipp_cluster.engines.values() if isinstance(s, ssh.FastSSHEngineSetLauncher)]


def control_dir(ipp_cluster: ipp.Cluster) -> str:
    """The shared ssh connections' folder chosen for this cluster ("" when none)."""
    return str(ipp_cluster.config.FastSSHEngineSetLauncher.get("control_dir", ""))


def start_launch(
    ipp_cluster: ipp.Cluster, options: ClusterOptions, env: dict[str, str], launch: bool = True
) -> Any:
    """Check the hosts (:mod:`jaxnb._hosts.preflight`), then launch their engines in the
    background (while the controller starts); the result joins it: it raises StartError for
    hosts that cannot run an engine or whose versions differ (before any launch), or engines
    that could not be launched; it returns the host entries launched (``--platform gpu``: one
    engine per GPU) and lines to show (``--workdir``: what was copied where)."""
    errors: list[BaseException] = []
    launched: list[tuple] = [options.host_entries()]
    notes: list[str] = []
    forward = {k: v for k, v in env.items() if k == "PYTHONPATH"}

    remote = tuple(e for e in options.host_entries() if e.target != options.local_host)

    def check() -> None:
        if not remote:
            return
        reports = ssh_connections.check_hosts(
            remote, options.resolved_python(), forward,
            control_dir(ipp_cluster), ssh.remote_log_dir(ipp_cluster.profile_dir),
            timeout=min(options.init_timeout, 20.0), count_gpus=options.platform == "gpu",
        )
        here = preflight.local_report()
        lines = preflight.mismatch_lines(here, reports, options.resolved_python())
        if options.platform == "gpu":
            lines += preflight.no_gpu_lines(remote, reports)
        if lines:
            raise StartError(
                f"preflight: {len(lines)} of {len(reports)} hosts differ from this notebook; "
                "nothing was launched; fix them or leave them out of --hosts\n"
                + "\n".join(f"    {line}" for line in lines)
            )
        if options.platform == "gpu":
            entries = preflight.counted_entries(options.host_entries(), reports)
            launched[0] = entries
            ipp_cluster.config.SSHEngineSetLauncher.engines = engine_counts(entries)
            if options.n is None:
                ipp_cluster.n = sum(e.count for e in entries)
        if options.workdir:  # the folder on every host (copied where it is not the same)
            placed = workdir.place(
                [e.target for e in remote], options.workdir, options.workdir_exclude,
                options.resolved_python(), ssh_connections.ssh_options(control_dir(ipp_cluster)),
            )
            ipp_cluster.config.FastSSHEngineSetLauncher.workdirs = {p.target: p.folder for p in placed}
            env[ENV_WORKDIR_BY_HOST] = json.dumps({p.hostname: p.folder for p in placed})
            notes.extend(workdir.summary(options.workdir, placed))

    def check_then_launch() -> None:
        try:
            check()  # opens the shared connections; the launch then uses them
            for entry in remote:  # they answered: no longer remembered as unreachable
                _unreachable.pop(entry.target, None)
            if launch:  # (mpi: launched once the controller runs, with its connection info)
                ipp_cluster.start_engines_sync(environment=env)
        except BaseException as exc:  # re-raised on the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=check_then_launch, name="jaxnb-launch-hosts", daemon=True)
    thread.start()

    def join() -> tuple[tuple, list[str]]:
        thread.join()
        if errors:
            raise errors[0]
        return launched[0], notes

    return join


def send_connection_file(ipp_cluster: ipp.Cluster, timeout: float) -> None:
    """Put the controller's engine connection file (0600) on every host, all at once, as soon
    as the controller has written it (ipyparallel's start returns before it does)."""
    import json
    import os

    local = os.path.join(ipp_cluster.profile_dir, "security",
                         f"ipcontroller-{ipp_cluster.cluster_id}-engine.json")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(local) as f:
                text = f.read()
            json.loads(text)
            break
        except (OSError, ValueError):  # not written yet, or half written
            if time.monotonic() > deadline:
                raise StartError(
                    f"the controller wrote no connection file within {timeout:g} s; "
                    "raise --init-timeout or check the controller's log"
                ) from None
            time.sleep(0.02)
    first: dict[Any, Any] = {}
    for engine_set in ssh_sets(ipp_cluster):
        for launcher in engine_set.launchers.values():
            if isinstance(launcher, ssh.FastSSHEngineLauncher):
                first.setdefault(launcher.location, launcher)
    if first:
        with concurrent.futures.ThreadPoolExecutor(len(first)) as pool:
            list(pool.map(lambda lch: ssh.send_text(lch, text), first.values()))


def exited_engines(ipp_cluster: ipp.Cluster | None) -> list[tuple[str, int, str]]:
    """(host, pid, last log lines) of every remote engine that has exited."""
    found = []
    for engine_set in ssh_sets(ipp_cluster):
        for launcher in engine_set.launchers.values():
            if ssh.exited(launcher):
                found.append((launcher.location, launcher.pid, launcher.remote_tail()))
    return found


def exit_status(log: str) -> str | None:
    """How a remote engine ended, from its log (see :func:`jaxnb._hosts.ssh.reporting_exit`)."""
    return ssh.exit_status(log)


def exited_how(launcher: Any) -> str:
    """``was killed by SIGKILL on host``: read from its log on its host (the shell around it
    writes the status there)."""
    how = ssh.exit_status(launcher.remote_tail(5)) if not _unreachable_now(launcher) else None
    return f"{how or 'exited'} on {launcher.location}"


def _unreachable_now(launcher: Any) -> bool:
    return _host_unreachable_now(launcher.location)


def _host_unreachable_now(host: str) -> bool:
    seen = _unreachable.get(host)
    return seen is not None and time.monotonic() - seen < UNREACHABLE_MEMORY_SECONDS


#: ssh targets found unreachable recently (target → when): their logs are not fetched.
_unreachable: dict[str, float] = {}
UNREACHABLE_MEMORY_SECONDS = 30.0


def wait_answering(group: Group, timeout: float) -> list[str]:
    """Wait (at most ``timeout`` s) until the hosts found unreachable answer ssh again; those
    that did not (nothing to wait for when none was found unreachable)."""
    mine = {getattr(launcher, "location", "") for launcher in group.remote_launchers.values()}
    lost = [host for host in list(_unreachable) if host in mine and _host_unreachable_now(host)]
    directory = control_dir(group.ipp) if group.ipp is not None else ""
    still = ssh_connections.wait_answering(lost, directory, timeout)
    for host in set(lost) - set(still):
        _unreachable.pop(host, None)
    return still


def explain_lost(group: Group, processes: list[int]) -> dict[int, str]:
    """How each unregistered remote process ended: its engine exited (it says so), or its host
    cannot be reached over a fresh ssh connection (all hosts checked at once)."""
    directory = control_dir(group.ipp) if group.ipp is not None else ""
    found: dict[int, str] = {}
    for engine_set in (group.ipp.engines.values() if group.ipp is not None else ()):
        if hasattr(engine_set, "explain_lost"):  # a batch job (Slurm): what its scheduler says
            for p in processes:
                found[p] = engine_set.explain_lost(p, group.processes[p].host)
            return found
    probe: dict[int, ssh.FastSSHEngineLauncher] = {}
    for p in processes:
        launcher = launcher_of(group, p)
        if launcher is None:
            continue
        if not isinstance(launcher, ssh.FastSSHEngineLauncher):
            continue  # this machine's engine: jaxnb._failures.processes sees how it ended
        if launcher.exited:
            found[p] = exited_how(launcher)
        else:
            probe[p] = launcher
    if probe:
        with concurrent.futures.ThreadPoolExecutor(len(probe)) as pool:
            answers = dict(zip(probe, pool.map(
                lambda lch: ssh_connections.probe(lch.location, lch.pid, directory), probe.values()
            ), strict=True))
        for p, (why, alive) in answers.items():
            host = probe[p].location
            if why:
                _unreachable[host] = time.monotonic()
                found[p] = f"is lost: its host {host} is unreachable ({why})"
            elif not alive:
                found[p] = exited_how(probe[p])
            else:
                found[p] = f"unregistered from the controller (its process still runs on {host})"
    return found


def log_of(group: Group, p: int) -> str:
    """Process ``p``'s engine log, read on its host ("" when its host is unreachable)."""
    launcher = launcher_of(group, p)
    if launcher is None:
        return ""
    if not isinstance(launcher, ssh.FastSSHEngineLauncher):
        return str(launcher.get_output() or "")
    if _host_unreachable_now(launcher.location):
        return ""
    return str(launcher.remote_tail())


def launcher_of(group: Group, p: int) -> Any:
    """The launcher that started process ``p``'s engine: matched by the engine's pid on its
    host, or its parent's (the shell around a remote engine)."""
    if p in group.remote_launchers:  # kept: ipyparallel forgets a launcher once its engine exits
        return group.remote_launchers[p]
    info = group.processes[p]
    pids = {pid for pid in (info.pid, getattr(info, "parent_pid", 0)) if pid > 1}
    for engine_set in ssh_sets(group.ipp):
        for launcher in engine_set.launchers.values():
            if ssh.started_pid(launcher) in pids:
                group.remote_launchers[p] = launcher
                return launcher
    return None


def stop(ipp_cluster: ipp.Cluster) -> None:
    """SIGKILL every remote engine on its host (all at once), then close the ssh connections."""
    for key, engine_set in list(ipp_cluster.engines.items()):
        if isinstance(engine_set, ssh.FastSSHEngineSetLauncher):
            engine_set.kill_all()
            ipp_cluster.engines.pop(key)  # done: ipyparallel's own stop would ssh again
        elif hasattr(engine_set, "kill_all"):  # mpiexec: ends its ranks on every host
            engine_set.kill_all()
    directory = control_dir(ipp_cluster)
    if directory:
        targets = list(ipp_cluster.config.SSHEngineSetLauncher.get("engines", {}))
        ssh_connections.close_connections(directory, targets)


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
    import json
    import os

    hosts: dict[str, tuple[Any, list[int]]] = {}
    for p in processes:
        launcher = launcher_of(group, p)
        if launcher is not None and not ssh.exited(launcher):
            hosts.setdefault(ssh.place(launcher)[0], (launcher, []))[1].append(p)
    folder = group.stacks_dir or ""

    def dump(location: str) -> dict[int, str]:
        launcher, ps = hosts[location]
        pids = {p: group.processes[p].pid for p in ps}
        jobs = {str(pid): stack_file(folder, pid) for pid in pids.values()}
        if _host_unreachable_now(location):
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


def host_order(group: Group, engine_ids: list[int], family: list) -> list[int]:
    """``engine_ids`` (whose engines have the (pid, parent pid) in ``family``) in the order of
    ``--hosts``: process 0 runs on the first host, as JAX numbers a TPU slice's workers."""
    targets = list(group.ipp.config.SSHEngineSetLauncher.get("engines", {}))
    rank = {}
    for engine_set in ssh_sets(group.ipp):
        for launcher in engine_set.launchers.values():
            target, i = ssh.place(launcher)
            if target in targets:
                rank[launcher.pid] = (targets.index(target), i)
    def key(k: int) -> tuple[int, int]:
        pid, parent = family[k]
        return rank.get(pid) or rank.get(parent) or (len(targets), k)

    order = sorted(range(len(engine_ids)), key=key)
    return [engine_ids[k] for k in order]
