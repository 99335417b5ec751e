"""Build the ipyparallel ``Cluster`` that carries the JAX processes.

All process management goes through ipyparallel's launchers; this module only
chooses their settings: loopback-only for local clusters, a short heartbeat so
engines register fast, no start delay, and the environment each engine needs
before it imports JAX.
"""

from __future__ import annotations

import logging
import os
import socket
import sys

import ipyparallel as ipp
from traitlets.config import Config

from jaxnb._contract import ENV_PLATFORM, ENV_STACKS_DIR
from jaxnb._options import ClusterOptions

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
    env.update(dict(options.env))
    return env


def build_cluster(options: ClusterOptions) -> ipp.Cluster:
    """An (unstarted) ipyparallel Cluster configured for ``options``."""
    config = Config()
    engine_cmd = ["python", "-m", "jaxnb._engine.main"]  # on the engine's own host
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
        config.SSHEngineSetLauncher.engines = {h: 1 for h in options.hosts}
    # Local: loopback only. Remote engines: this host's own address, never every interface.
    kwargs: dict = {"controller_ip": "127.0.0.1" if options.is_local else _host_address()}
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
        send_engines_connection_env=not options.is_local,
        **kwargs,
    )
    return cluster


def _host_address() -> str:
    """An address of this machine that other hosts can reach."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


def _quiet_logger() -> logging.Logger:
    """ipyparallel's own logger would be the kernel app's (printing engine logs into cells)."""
    log = logging.getLogger("jaxnb.ipyparallel")
    log.setLevel(logging.ERROR)
    return log


def _engine_launcher(options: ClusterOptions) -> str:
    if options.hosts and options.engines == "local":
        return "ssh"
    return options.engines
