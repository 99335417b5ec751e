"""Build the ipyparallel ``Cluster`` that carries the JAX processes.

All process management goes through ipyparallel's launchers; this module only
chooses their settings: a short heartbeat so engines register fast, no start
delay, and the environment each engine needs before it imports JAX. The site
(where the engines run, :mod:`jaxnb._hosts.site`) adds its own: the launcher,
the controller's address (loopback only for a local cluster), and the
launcher's settings.
"""

from __future__ import annotations

import logging
import os
import sys

import ipyparallel as ipp
from traitlets.config import Config

from jaxnb._core.contract import ENV_COMPILE_CACHE, ENV_PLATFORM, ENV_STACKS_DIR, ENV_WORKDIR
from jaxnb._core.errors import StartError
from jaxnb._core.heartbeat import HEARTBEAT_MISSES, HEARTBEAT_MS
from jaxnb._core.options import ClusterOptions
from jaxnb._hosts import encryption
from jaxnb._hosts.site import Site


def python_cmd(module: str, python: str = sys.executable) -> list[str]:
    """Run ``module``'s ``main()`` in ``python`` with the garbage collector off until it turns
    it back on: start-up is mostly imports, and they take about 10% less CPU so."""
    return [python, "-c", f"import gc; gc.disable(); from {module} import main; main()"]


def engine_environment(options: ClusterOptions, stacks_dir: str, where: Site) -> dict[str, str]:
    """Variables every engine gets before it starts (and so before JAX is imported)."""
    env = {
        ENV_STACKS_DIR: stacks_dir,
        "JAX_ENABLE_PREEMPTION_SERVICE": "false",
        "PYTHONUNBUFFERED": "1",
        ENV_PLATFORM: options.platform,
        ENV_COMPILE_CACHE: options.compile_cache or "",  # empty: each host's default folder
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
    env.update(where.engine_env(options))  # engines elsewhere: where the controller is
    env.update(dict(options.env))
    return env


def build_cluster(options: ClusterOptions, where: Site, folder: str) -> ipp.Cluster:
    """An (unstarted) ipyparallel Cluster configured for ``options``, its engines at ``where``
    (``folder``: the cluster's own files); a :class:`StartError` when the site's launcher
    cannot run here."""
    why = where.missing()
    if why:
        raise StartError(why)
    config = Config()
    # The same interpreter path on the engine's own host.
    engine_cmd = [*python_cmd("jaxnb._engine.boot.main", options.resolved_python()),
                  *where.engine_flags(options)]
    config.EngineLauncher.engine_cmd = engine_cmd
    config.LocalEngineSetLauncher.delay = 0.0
    config.LocalEngineLauncher.engine_cmd = engine_cmd
    config.LocalEngineSetLauncher.engine_cmd = engine_cmd
    where.configure(config, options, engine_cmd, folder)
    return ipp.Cluster(
        n=options.resolved_n(),
        engines=where.launcher(options),
        delay=0.0,
        controller_args=[
            f"--HeartMonitor.period={HEARTBEAT_MS}",
            f"--HeartMonitor.max_heartmonitor_misses={HEARTBEAT_MISSES}",
            *encryption.controller_args(where, options),  # CurveZMQ for engines on other hosts
        ],
        log=quiet_logger(),
        config=config,
        load_profile=False,
        controller_ip=where.controller_ip(options),
        send_engines_connection_env=where.sends_connection_env,
    )


def quiet_logger() -> logging.Logger:
    """ipyparallel's own logger would be the kernel app's (printing engine logs into cells)."""
    log = logging.getLogger("jaxnb.ipyparallel")
    log.setLevel(logging.ERROR)
    return log
