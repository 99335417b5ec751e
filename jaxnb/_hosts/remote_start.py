"""Starting engines on ``--hosts``: jaxnb's ssh settings, the hosts checked and their engines
launched in the background while the controller starts, then the controller's connection file
put on every host (the engines wait for it there)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shlex
import threading
import time
from collections.abc import Callable

import ipyparallel as ipp
from traitlets.config import Config

from jaxnb._core.contract import ENV_WORKDIR_BY_HOST
from jaxnb._core.errors import StartError
from jaxnb._core.host_entries import engine_counts
from jaxnb._core.options import ClusterOptions
from jaxnb._hosts import preflight, reachability, remote_launchers, ssh, ssh_connections, workdir

#: Joins a host check (:func:`start_launch`): the options with the hosts launched, and lines
#: to show; or raises the :class:`StartError` of a host that cannot run an engine.
HostCheck = Callable[[], tuple[ClusterOptions, list[str]]]


def configure(config: Config, options: ClusterOptions, engine_cmd: list[str]) -> None:
    """jaxnb's ssh settings for ``--hosts``: the engines on each host, the interpreter there,
    one shared connection per host (in a new folder), each engine under a shell that reports
    its exit, and the entry that is this machine (a TPU VM worker: its engine runs here)."""
    config.SSHEngineSetLauncher.engines = engine_counts(options.host_entries())
    # ipyparallel puts it in the remote shell's command line as it is: quoted, it stays one word
    config.SSHLauncher.remote_python = shlex.quote(options.resolved_python())
    control_dir = ssh_connections.new_control_dir()
    config.FastSSHEngineSetLauncher.control_dir = control_dir
    config.FastSSHEngineSetLauncher.engine_cmd = ssh.reporting_exit(engine_cmd)
    if options.local_host:
        config.FastSSHEngineSetLauncher.local_targets = [options.local_host]
    config.SSHLauncher.ssh_args = ssh_connections.ssh_options(control_dir)
    config.SSHLauncher.scp_args = [*ssh_connections.ssh_options(control_dir), "--"]  # then files


def start_launch(
    ipp_cluster: ipp.Cluster, options: ClusterOptions, env: dict[str, str], launch: bool = True
) -> HostCheck:
    """Check the hosts (:mod:`jaxnb._hosts.preflight`), then launch their engines in the
    background (while the controller starts); the result joins it: it raises StartError for
    hosts that cannot run an engine or whose versions differ (before any launch), or engines
    that could not be launched; it returns the options with the hosts launched (``--platform
    gpu``: one engine per GPU counted) and lines to show (``--workdir``: what was copied where)."""
    errors: list[BaseException] = []
    launched: list[tuple] = [options.host_entries()]
    notes: list[str] = []
    forward = {k: v for k, v in env.items() if k == "PYTHONPATH"}

    remote = tuple(e for e in options.host_entries() if e.target != options.local_host)
    directory = remote_launchers.control_dir(ipp_cluster)

    def check() -> None:
        if not remote:
            return
        reports = ssh_connections.check_hosts(
            remote, options.resolved_python(), forward,
            directory, ssh.remote_log_dir(ipp_cluster.profile_dir),
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
                options.resolved_python(), ssh_connections.ssh_options(directory),
            )
            ipp_cluster.config.FastSSHEngineSetLauncher.workdirs = {p.target: p.folder for p in placed}
            env[ENV_WORKDIR_BY_HOST] = json.dumps({p.hostname: p.folder for p in placed})
            notes.extend(workdir.summary(options.workdir, placed))

    def check_then_launch() -> None:
        try:
            check()  # opens the shared connections; the launch then uses them
            for entry in remote:  # they answered: no longer remembered as unreachable
                reachability.answered(entry.target)
            if launch:  # (mpi: launched once the controller runs, with its connection info)
                ipp_cluster.start_engines_sync(environment=env)
        except BaseException as exc:  # re-raised on the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=check_then_launch, name="jaxnb-launch-hosts", daemon=True)
    thread.start()

    def join() -> tuple[ClusterOptions, list[str]]:
        thread.join()
        if errors:
            raise errors[0]
        hosts = tuple(str(e) for e in launched[0])
        return (options if hosts == options.hosts else dataclasses.replace(options, hosts=hosts)), notes

    return join


def send_connection_file(ipp_cluster: ipp.Cluster, timeout: float) -> None:
    """Put the controller's engine connection file (0600) on every host, all at once, as soon
    as the controller has written it (ipyparallel's start returns before it does)."""
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
    first: dict[str, ssh.FastSSHEngineLauncher] = {}  # one engine a host: they share the file
    for engine_set in remote_launchers.ssh_sets(ipp_cluster):
        for launcher in engine_set.launchers.values():
            if isinstance(launcher, ssh.FastSSHEngineLauncher):
                first.setdefault(launcher.location, launcher)
    if first:
        with concurrent.futures.ThreadPoolExecutor(len(first)) as pool:
            list(pool.map(lambda lch: ssh.send_text(lch, text), first.values()))
