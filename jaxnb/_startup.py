"""Starting a cluster: launch the engines through ipyparallel, then join them into one group.

Start-up overlaps as much as it can: local engines are launched with the
controller and import JAX while it starts; every process joins
``jax.distributed`` at once. Any failure names the process and shows its last
log lines; :meth:`JaxCluster.start` then stops whatever was started.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

import ipyparallel as ipp

from jaxnb import _health, _launch, _remote
from jaxnb._engine import process as engine_process
from jaxnb._errors import StartError

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster

#: The controller, started through jaxnb's wrapper (it adds the kernel-death watchdog).
CONTROLLER_CMD = _launch.python_cmd("jaxnb._engine.controller")


def start_engines(cluster: JaxCluster) -> None:
    """Start the controller and the engines; connect a client; wait until all registered."""
    options = cluster.options
    n = options.resolved_n()
    cluster._stacks_dir = tempfile.mkdtemp(prefix="jaxnb-")
    ipp_cluster = cluster._ipp = _launch.build_cluster(options)
    cleanup = os.pathsep.join([*key_files(ipp_cluster), cluster._stacks_dir])
    watchdog = {"JAXNB_PARENT_PID": str(os.getpid()), "JAXNB_CLEANUP_FILES": cleanup}
    env = _launch.engine_environment(options, cluster._stacks_dir)
    # --hosts: check the hosts, then launch, in the background while the controller starts.
    launched = _remote.start_launch(ipp_cluster, options, env) if options.hosts else None
    ipp_cluster.start_controller_sync(controller_cmd=CONTROLLER_CMD, environment=watchdog)
    if launched is not None:
        launched()  # a StartError naming each host that cannot run an engine
        _remote.send_connection_file(ipp_cluster)  # the engines wait for it
    if options.is_local:
        env.update(watchdog)
        controller = getattr(ipp_cluster.controller, "process", None)
        if controller is not None:
            env["JAXNB_CONTROLLER_PID"] = str(controller.pid)
    if launched is None:
        ipp_cluster.start_engines_sync(environment=env)
    cluster._client = client = ipp_cluster.connect_client_sync()
    deadline = time.monotonic() + options.init_timeout
    while len(client.ids) < n:
        raise_if_engines_exited(ipp_cluster)
        if time.monotonic() > deadline:
            raise StartError(
                f"only {len(client.ids)} of {n} engines registered within "
                f"{options.init_timeout:g} s; raise --init-timeout or check the engine logs"
            )
        time.sleep(0.02)
    engine_ids = sorted(client.ids)[:n]
    cluster._view = client[engine_ids]
    cluster._view.block = False


def join_group(cluster: JaxCluster) -> None:
    """Initialise ``jax.distributed`` on every engine at once; fill in ``cluster.processes``."""
    from jaxnb._cluster import ProcessInfo

    options = cluster.options
    client, view = cluster._client, cluster._view
    assert client is not None and view is not None
    engine_ids = list(view.targets)
    n = len(engine_ids)
    try:
        identities = view.apply_async(engine_process.identity).get(timeout=30)
    except (ipp.error.CompositeError, ipp.error.EngineError, ipp.error.TimeoutError):
        raise_if_engines_exited(cluster._ipp)
        raise
    if options.hosts:  # process 0 on the first host, and so on (a TPU slice's worker order)
        family = view.apply_async(engine_process.pids).get(timeout=30)
        ordered = _remote.host_order(cluster, engine_ids, family)
        identities = [identities[engine_ids.index(eid)] for eid in ordered]
        engine_ids = ordered
        cluster._view = client[engine_ids]
        cluster._view.block = False
    coordinator = cluster._coordinator = cluster._coordinator_address(engine_ids[0])
    bind = coordinator  # process 0's own address, never every interface
    hosts = [host for host, _ in identities]
    placements = engine_process.placements(hosts)
    pending = {}
    for index, eid in enumerate(engine_ids):
        # One engine per GPU: the engine's local rank picks its GPU on its own host.
        local_ids = [placements[index][0]] if options.platform == "gpu" else None
        pending[index] = client[eid].apply_async(
            engine_process.initialize,
            index,
            n,
            coordinator,
            bind,
            options.init,
            local_ids,
            options.heartbeat_timeout,
            int(options.init_timeout),
            placements[index],
        )
    pids = {index: pid for index, (_, pid) in enumerate(identities)}
    infos = cluster._wait_joined(pending, pids, coordinator)
    cluster.processes = [
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
        )
        for index, eid in enumerate(engine_ids)
    ]
    cluster.suspect = None


def coordinator_address(cluster: JaxCluster, first_engine: int) -> str:
    """``host:port`` for the coordination service, on process 0's host."""
    client = cluster._client
    assert client is not None
    if cluster.options.is_local:  # the notebook's host is process 0's host
        return f"127.0.0.1:{engine_process.free_port('127.0.0.1')}"
    host0 = client[first_engine].apply_sync(engine_process.host_address)
    port = client[first_engine].apply_sync(engine_process.free_port, host0)
    return f"{host0}:{port}"


def wait_joined(
    cluster: JaxCluster, pending: dict[int, Any], pids: dict[int, int], coordinator: str
) -> dict[int, dict]:
    """Each process's description once all joined; a :class:`StartError` naming the first
    process that failed, died or did not join within ``init_timeout``."""
    timeout = cluster.options.init_timeout
    deadline = time.monotonic() + timeout + 5
    launchers = {getattr(lch, "process", None) and lch.process.pid: lch
                 for lch in engine_launchers(cluster._ipp)}
    infos: dict[int, dict] = {}

    def raise_if_dead(index: int) -> None:
        launcher = launchers.get(pids[index])
        how = _health.exit_of(launcher.process) if launcher is not None else None
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


def raise_if_engines_exited(ipp_cluster: ipp.Cluster | None) -> None:
    """A :class:`StartError` with its last log lines if an engine has exited."""
    for host, pid, log in _remote.exited_engines(ipp_cluster):
        tail = "\n".join("    " + ln for ln in _health.log_tail(log))
        how = _remote.exit_status(log) or "exited"
        raise StartError(
            f"the engine on {host} (pid {pid}) {how} during start-up; see its last lines "
            f"below, fix the cause and start again\n{tail}"
        )
    for launcher in engine_launchers(ipp_cluster):
        process = getattr(launcher, "process", None)
        how = _health.exit_of(process) if process is not None else None
        if how is not None:
            raise StartError(
                f"an engine (pid {process.pid}) {how} during start-up; see its last lines "
                f"below, fix the cause and start again\n{_tail(launcher)}"
            )


def engine_launchers(ipp_cluster: ipp.Cluster | None) -> list[Any]:
    """ipyparallel's launcher of every engine (one per engine for local engine sets)."""
    if ipp_cluster is None:
        return []
    found = []
    for engine_set in ipp_cluster.engines.values():
        found.extend(getattr(engine_set, "launchers", {}).values())
    return found


def key_files(ipp_cluster: ipp.Cluster) -> list[str]:
    """The controller's connection files (0600, holding the message key) and the cluster file."""
    security = os.path.join(ipp_cluster.profile_dir, "security")
    cid = ipp_cluster.cluster_id
    return [
        os.path.join(security, f"ipcontroller-{cid}-engine.json"),
        os.path.join(security, f"ipcontroller-{cid}-client.json"),
        ipp_cluster.cluster_file,
    ]


def _tail(launcher: Any) -> str:
    return "\n".join("    " + ln for ln in _health.log_tail(_health.launcher_log(launcher)))


def _not_joined(pending: dict[int, Any], infos: dict[int, dict], failed: int) -> str:
    late = [str(i) for i in pending if i not in infos and i != failed]
    return f" (process {', '.join(late)} had not joined either)" if late else ""
