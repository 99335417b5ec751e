"""Starting a cluster: launch the engines through ipyparallel, then join them into one group.

Where the engines run decides how they start (:mod:`jaxnb._hosts.site`). Start-up
overlaps as much as it can: engines on this machine or on ssh hosts are launched
with the controller and import JAX while it starts; every process joins
``jax.distributed`` at once. Any failure names the process and shows its last
log lines; :meth:`JaxCluster.start` then stops whatever was started.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import ipyparallel as ipp

from jaxnb._core import group_size, ipp_internals
from jaxnb._core.contract import ENV_CLEANUP_FILES, ENV_PARENT_ONLY, ENV_PARENT_PID, EngineCall
from jaxnb._core.errors import StartError
from jaxnb._core.join_plan import join_params
from jaxnb._core.state import Group, ProcessInfo
from jaxnb._failures import explain
from jaxnb._hosts import processes, remote_exits, site, ssh
from jaxnb._lifecycle import launch

#: The controller, started through jaxnb's wrapper (it adds the kernel-death watchdog).
CONTROLLER_CMD = launch.python_cmd("jaxnb._engine.boot.controller")
_IDENTITY = EngineCall("jaxnb._engine.group.process:identity")
_INITIALIZE = EngineCall("jaxnb._engine.group.process:initialize")


def start_engines(group: Group, at_least: int | None = None) -> None:
    """Start the controller and the engines; connect a client; wait until all registered.

    ``at_least`` (a ``--min-processes`` restart): an engine that exits before it registers
    is left out, as long as ``at_least`` others register; the group is then smaller (its
    options say so, ``group.lost`` names what was left out)."""
    options, where = group.options, site.of(group)
    n = options.resolved_n()
    group.stacks_dir = tempfile.mkdtemp(prefix="jaxnb-")
    ipp_cluster = group.ipp = launch.build_cluster(options, where, group.stacks_dir)
    cleanup = os.pathsep.join([*ipp_internals.key_files(ipp_cluster), group.stacks_dir])
    watchdog = {ENV_PARENT_PID: str(os.getpid()), ENV_CLEANUP_FILES: cleanup}
    if group.attachment is not None:  # a named cluster: its supervisor, not this kernel
        watchdog.update({ENV_PARENT_PID: str(group.attachment.supervisor["pid"]), ENV_PARENT_ONLY: "1"})
    env = launch.engine_environment(options, group.stacks_dir, where)
    # --hosts: check the hosts (over ssh: and launch), in the background while the controller starts.
    checked = where.check_hosts(ipp_cluster, options, env)
    ipp_cluster.start_controller_sync(controller_cmd=CONTROLLER_CMD, environment=watchdog)
    if checked is not None:  # a StartError naming each host that cannot run an engine
        options, notes = checked()
        group.options, n = options, ipp_cluster.n  # --platform gpu: the hosts' GPUs counted
        for note in notes:
            print(note)
    env.update(where.kernel_watchdog(ipp_cluster, watchdog))
    group.engine_env = dict(env)
    where.start(ipp_cluster, options, env)
    group.launchers = ipp_internals.launched_engines(ipp_cluster)
    group.client = client = ipp_cluster.connect_client_sync()
    deadline = time.monotonic() + options.init_timeout
    left_out: list[str] = []
    while len(client.ids) < n - len(left_out):
        if at_least is None:
            raise_if_engines_exited(group)
        else:
            left_out = [line for line, _ in exited_engines(group)]
            if n - len(left_out) < at_least:
                raise_if_engines_exited(group)
        for note in where.while_registering(ipp_cluster, options):  # Slurm: its nodes checked
            print(note)
        if time.monotonic() > deadline:
            raise StartError(
                f"only {len(client.ids)} of {n} engines registered within "
                f"{options.init_timeout:g} s; raise --init-timeout or check the engine logs"
                + where.pending_note(ipp_cluster)
            )
        time.sleep(0.02)
    group.view = client[sorted(client.ids)[:n]]
    group.view.block = False
    if left_out:
        group.full_options = group_size.full(group)
        group.options = group_size.with_size(group, len(group.view.targets))
        group.lost = [f"{line} during start-up" for line in left_out]


def join_group(group: Group) -> None:
    """Initialise ``jax.distributed`` on every engine at once; fill in ``group.processes``."""
    client, view = group.client, group.view
    engine_ids = list(view.targets)
    try:
        identities = view.apply_async(_IDENTITY).get(timeout=30)
    except (ipp.error.CompositeError, ipp.error.EngineError, ipp.error.TimeoutError):
        raise_if_engines_exited(group)
        raise
    where = site.of(group)
    ordered = None
    if where.order_by is not None:  # process 0 on the first host, or the launcher's rank 0, ...
        ordered = where.order(group, engine_ids, view.apply_async(where.order_by).get(timeout=30))
    if ordered is not None:
        identities = [identities[engine_ids.index(eid)] for eid in ordered]
        engine_ids = ordered
        group.view = view = client[engine_ids]
        view.block = False
    coordinator = group.coordinator = where.coordinator_address(group, engine_ids[0])
    hosts = [host for host, _ in identities]
    params = join_params(group.options, coordinator, hosts)
    pending = {
        index: client[eid].apply_async(_INITIALIZE, params[index])
        for index, eid in enumerate(engine_ids)
    }
    pids = {index: pid for index, (_, pid) in enumerate(identities)}
    group.launchers.update(ipp_internals.launched_engines(group.ipp))
    infos = wait_joined(group, pending, pids, coordinator)
    group.processes = [
        ProcessInfo(
            process_index=index,
            engine_id=eid,
            host=infos[index]["host"],
            pid=infos[index]["pid"],
            platform=infos[index]["platform"],
            local_devices=infos[index]["local_devices"],
            global_device_count=infos[index]["global_device_count"],
            address=infos[index].get("address", ""),
            parent_pid=infos[index].get("parent_pid", 0),
            log_writer_pid=infos[index].get("log_writer_pid", 0),
        )
        for index, eid in enumerate(engine_ids)
    ]
    where.remember_launchers(group)
    group.clear_suspect()


def wait_joined(
    group: Group, pending: dict[int, Any], pids: dict[int, int], coordinator: str
) -> dict[int, dict]:
    """Each process's description once all joined; a :class:`StartError` naming the first
    process that failed, died or did not join within ``init_timeout``."""
    timeout = group.options.init_timeout
    deadline = time.monotonic() + timeout + 5
    infos: dict[int, dict] = {}

    def raise_if_dead(index: int) -> None:
        launcher = processes.launcher_of(group, pids[index])
        process = ipp_internals.launcher_process(launcher) if launcher is not None else None
        how = processes.exit_of(process, launcher) if process is not None else None
        if how is not None:
            raise StartError(
                f"process {index} (pid {pids[index]}) {how} while joining jax.distributed; "
                f"see its last lines below, fix the cause and start again\n{_tail(launcher)}"
            )

    while len(infos) < len(pending):
        for index, ar in pending.items():
            if index in infos or not ar.ready():
                continue
            try:
                infos[index] = ar.get(0)
            except ipp.error.RemoteError as exc:
                raise_if_dead(index)
                evalue = (str(exc.evalue).strip().splitlines() or [""])[0][:300]
                raise StartError(
                    f"process {index} (pid {pids[index]}) could not join jax.distributed at "
                    f"{coordinator}: {exc.ename}: {evalue}" + _not_joined(pending, infos, index)
                ) from None
        for index in pids:
            if index not in infos:
                raise_if_dead(index)
        if time.monotonic() > deadline:
            late = ", ".join(str(i) for i in pending if i not in infos)
            raise StartError(
                f"process {late} did not join jax.distributed within {timeout:g} s; check "
                f"that every host can reach {coordinator}, or raise --init-timeout"
            )
        time.sleep(0.02)
    return infos


def raise_if_engines_exited(group: Group) -> None:
    """A :class:`StartError` with its last log lines if an engine has exited."""
    for said, tail in exited_engines(group):
        raise StartError(f"{said} during start-up; see its last lines below, fix the cause and "
                         f"start again\n{tail}")


def exited_engines(group: Group) -> list[tuple[str, str]]:
    """(``the engine on HOST (pid P) was killed by SIGKILL``, its last log lines) of each
    engine of this start that has exited."""
    found = []
    for host, pid, log in remote_exits.exited_engines(group.ipp):
        found.append((f"the engine on {host} (pid {pid}) {ssh.exit_status(log) or 'exited'}",
                      explain.indented_tail(log)))
    group.launchers.update(ipp_internals.launched_engines(group.ipp))
    seen = set()
    for launcher in group.launchers.values():
        process = ipp_internals.launcher_process(launcher)
        how = processes.exit_of(process, launcher) if process is not None else None
        if process is not None and how is not None:
            seen.add(process.pid)
            found.append((f"an engine (pid {process.pid}) {how}", _tail(launcher)))
    local = site.of(group).inspects_processes  # engines here: their set notes each end
    for ended in ipp_internals.stopped_engines(group.ipp) if local else []:
        if ended.get("pid") not in seen:  # it ended before jaxnb saw its launcher
            how = processes.exit_text(ended.get("exit_code"))
            found.append((f"an engine (pid {ended.get('pid')}) {how}", ""))
    return found


def _tail(launcher: Any) -> str:
    return explain.indented_tail(processes.launcher_log(launcher))


def _not_joined(pending: dict[int, Any], infos: dict[int, dict], failed: int) -> str:
    late = [str(i) for i in pending if i not in infos and i != failed]
    return f" (process {', '.join(late)} had not joined either)" if late else ""
