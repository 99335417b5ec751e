"""Build the ipyparallel ``Cluster`` that carries the JAX processes.

All process management goes through ipyparallel's launchers; this module only
chooses their settings: loopback-only for local clusters, a short heartbeat so
engines register fast, no start delay, and the environment each engine needs
before it imports JAX.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import ipyparallel as ipp
from traitlets.config import Config

from jaxnb._core.contract import ENV_CONTROLLER_ADDRESS, ENV_PLATFORM, ENV_STACKS_DIR, ENV_WORKDIR
from jaxnb._core.options import ClusterOptions

#: Controller heartbeat period (ms): engines register after their first beat.
HEARTBEAT_MS = 50
#: Missed beats before the controller drops an engine (3 s: a busy 2-core machine is not a death).
HEARTBEAT_MISSES = 60


def python_cmd(module: str) -> list[str]:
    """Run ``module``'s ``main()`` in this Python with the garbage collector off until it
    turns it back on: start-up is mostly imports, and they take about 10% less CPU so."""
    return [sys.executable, "-c", f"import gc; gc.disable(); from {module} import main; main()"]


def engine_environment(options: ClusterOptions, stacks_dir: str) -> dict[str, str]:
    """Variables every engine gets before it starts (and so before JAX is imported)."""
    env = {
        ENV_STACKS_DIR: stacks_dir,
        "JAX_ENABLE_PREEMPTION_SERVICE": "false",
        "PYTHONUNBUFFERED": "1",
        ENV_PLATFORM: options.platform,
    }
    xla_flags = [os.environ.get("XLA_FLAGS", "")]
    if options.platform == "cpu":
        k = options.resolved_devices()
        env["JAX_PLATFORMS"] = "cpu"
        env["JAX_NUM_CPU_DEVICES"] = str(k)
        xla_flags.append(f"--xla_force_host_platform_device_count={k}")
        xla_flags.append(f"--xla_cpu_collective_timeout_seconds={options.collective_timeout}")
    elif options.platform == "gpu":
        env.setdefault("JAX_PLATFORMS", "cuda,cpu")
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    elif options.platform == "tpu":
        env["JAX_PLATFORMS"] = "tpu,cpu"
    env["XLA_FLAGS"] = " ".join(f for f in xla_flags if f).strip()
    if options.workdir:  # hosts that need a copy get its place instead (see jaxnb._hosts.workdir)
        env[ENV_WORKDIR] = options.workdir
    if not options.is_local:
        env[ENV_CONTROLLER_ADDRESS] = controller_ip(options)
        if options.python is None and os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # the same interpreter, the same path
    env.update(dict(options.env))
    return env


def controller_ip(options: ClusterOptions) -> str:
    """Where the controller listens: loopback for a local cluster; for hosts, ``--address``
    or this machine's address on the interface that routes to them."""
    if options.is_local:
        return "127.0.0.1"
    if options.address:
        return options.address
    from jaxnb._core.errors import StartError
    from jaxnb._core.host_entries import HostError, controller_address, default_address

    if not options.hosts:  # mpi, slurm, ...: the nodes are not known in advance
        return default_address()
    try:
        from jaxnb._hosts.ssh_config import real_hostname

        return controller_address(options.host_entries(), real_hostname)
    except HostError as exc:
        raise StartError(str(exc)) from None


def build_cluster(options: ClusterOptions) -> ipp.Cluster:
    """An (unstarted) ipyparallel Cluster configured for ``options``."""
    config = Config()
    python = options.resolved_python()  # the same path on the engine's own host
    engine_cmd = [python, "-c", "import gc; gc.disable(); from jaxnb._engine.main import main; main()"]
    if options.hosts:  # they start (and import JAX) while the controller starts
        engine_cmd.append(f"--IPEngine.wait_for_url_file={options.init_timeout:g}")
    if options.is_local:
        engine_cmd = python_cmd("jaxnb._engine.main")
        # No nanny process per engine: jaxnb signals local engines by pid (see _failures.free).
        engine_cmd.append("--IPEngine.enable_nanny=False")
        # They may start before the controller has written its connection file: wait for it.
        engine_cmd.append(f"--IPEngine.wait_for_url_file={options.init_timeout:g}")
    config.EngineLauncher.engine_cmd = engine_cmd
    config.LocalEngineSetLauncher.delay = 0.0
    config.LocalEngineLauncher.engine_cmd = engine_cmd
    config.LocalEngineSetLauncher.engine_cmd = engine_cmd
    if options.hosts:
        from jaxnb._core.host_entries import engine_counts
        from jaxnb._hosts import ssh, ssh_connections

        config.SSHEngineSetLauncher.engines = engine_counts(options.host_entries())
        config.SSHLauncher.remote_python = python
        control_dir = ssh_connections.new_control_dir()
        config.FastSSHEngineSetLauncher.control_dir = control_dir
        # Over ssh, under a shell that writes the engine's exit status to its log.
        config.FastSSHEngineSetLauncher.engine_cmd = ssh.reporting_exit(engine_cmd)
        if options.local_host:  # this machine is one of the hosts (a TPU VM worker)
            config.FastSSHEngineSetLauncher.local_targets = [options.local_host]
        config.SSHLauncher.ssh_args = ssh_connections.ssh_options(control_dir)
        config.SSHLauncher.scp_args = ssh_connections.ssh_options(control_dir)
    if options.engines == "mpi":  # mpiexec through ipyparallel's MPI launcher (see jaxnb._hosts.mpi)
        from jaxnb._core.errors import StartError
        from jaxnb._hosts import mpi, ssh

        why = mpi.missing()
        if why:
            raise StartError(why)

        entries = options.host_entries()
        ssh_args = ssh_connections.ssh_options(config.FastSSHEngineSetLauncher.get("control_dir") or "/tmp")
        config.JaxnbMPIEngineSetLauncher.mpi_args = mpi.mpi_args(entries, ssh_args, controller_ip(options))
    if options.engines == "slurm":  # sbatch/srun through ipyparallel's Slurm launcher
        from jaxnb._core.errors import StartError
        from jaxnb._hosts import slurm

        why = slurm.missing()
        if why:
            raise StartError(why)
        given = dict(options.slurm)
        config.JaxnbSlurmEngineSetLauncher.batch_template = slurm.batch_template(
            tuple(given["sbatch"].split("\n")) if given.get("sbatch") else (),
            given.get("partition", ""), given.get("time_limit", ""), given.get("account", ""))
    # Local: loopback only. Remote engines: the one address that routes to them.
    kwargs: dict = {"controller_ip": controller_ip(options)}
    cluster = ipp.Cluster(
        n=options.resolved_n(),
        engines=_engine_launcher(options),
        delay=0.0,
        controller_args=[
            f"--HeartMonitor.period={HEARTBEAT_MS}",
            f"--HeartMonitor.max_heartmonitor_misses={HEARTBEAT_MISSES}",
        ],
        log=_quiet_logger(),
        config=config,
        load_profile=False,
        # Local engines find the controller's connection file themselves, so they can
        # start (and import JAX) while the controller is still starting.
        # (Engines on --hosts start before the controller and get the file sent: see remote_start.)
        send_engines_connection_env=not options.is_local and not over_ssh(options),
        **kwargs,
    )
    return cluster


def _quiet_logger() -> logging.Logger:
    """ipyparallel's own logger would be the kernel app's (printing engine logs into cells)."""
    log = logging.getLogger("jaxnb.ipyparallel")
    log.setLevel(logging.ERROR)
    return log


def over_ssh(options: ClusterOptions) -> bool:
    """Whether jaxnb's own ssh launcher starts the engines (``--hosts`` without another launcher)."""
    return bool(options.hosts) and options.engines in ("local", "ssh")


def _engine_launcher(options: ClusterOptions) -> Any:
    if over_ssh(options):
        from jaxnb._hosts.ssh import FastSSHEngineSetLauncher

        return FastSSHEngineSetLauncher
    if options.engines == "mpi":
        from jaxnb._hosts.mpi import JaxnbMPIEngineSetLauncher

        return JaxnbMPIEngineSetLauncher
    if options.engines == "slurm":
        from jaxnb._hosts.slurm import JaxnbSlurmEngineSetLauncher

        return JaxnbSlurmEngineSetLauncher
    return options.engines
