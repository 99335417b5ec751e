"""Start and stop on two lab ssh hosts, against a local 2-process start in the same run.

    sudo python -m bench.hosts [--repeats 3]       (root: it builds the lab of tests/lab)

Start = ``JaxCluster(...).start()`` and one cross-process all-gather (the first psum),
for ``--hosts`` on two lab hosts (network namespaces with real sshd) and for the
local default ``n=2``. Targets: hosts ÷ local ≤ 2×; stop on the hosts ≤ 1 s.
Also shows ipyparallel's stock ssh launcher alone (engines registered, no JAX) for scale.
Also written to ``bench/results/hosts.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from bench._results import Results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

PSUM = (
    "import jax, jax.numpy as jnp\nfrom jax.experimental import multihost_utils\n"
    "_ = multihost_utils.process_allgather(jnp.ones(1)).sum()"
)


def start_stop(**kwargs) -> tuple[float, float]:
    """Seconds to start and run the first psum; seconds to stop."""
    from IPython.utils.capture import capture_output

    from jaxnb import JaxCluster

    t0 = time.perf_counter()
    cluster = JaxCluster(**kwargs).start()
    with capture_output():
        cluster.run(PSUM)
    started = time.perf_counter() - t0
    t1 = time.perf_counter()
    cluster.stop()
    return started, time.perf_counter() - t1


def stock_ssh(hosts: list[str]) -> float:
    """ipyparallel's own ssh launcher (serial, per-engine set-up), engines registered; no JAX."""
    import ipyparallel as ipp
    from traitlets.config import Config

    from tests.lab.lab import SUBNET

    t0 = time.perf_counter()
    cluster = ipp.Cluster(
        engines="ssh", controller_ip=f"{SUBNET}.1", log_level=40, n=len(hosts),
        config=Config({"SSHEngineSetLauncher": {"engines": {h: 1 for h in hosts}},
                "SSHLauncher": {"remote_python": sys.executable,
                                "ssh_args": ["-F", os.environ["JAXNB_SSH_CONFIG"]],
                                "scp_args": ["-F", os.environ["JAXNB_SSH_CONFIG"]]}}),
        send_engines_connection_env=True,
    )
    client = cluster.start_and_connect_sync(n=len(hosts))
    client.wait_for_engines(len(hosts), timeout=120)
    took = time.perf_counter() - t0
    client.close()
    cluster.stop_cluster_sync()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-stock", action="store_true", help="skip ipyparallel's stock ssh launcher")
    args = parser.parse_args()
    from tests.lab.lab import Lab, missing

    results = Results("hosts")

    why = missing()
    if why:
        sys.exit(f"bench/hosts.py needs the lab: {why}")
    with Lab(2).running() as lab:
        local, hosts, stops, local_stops = [], [], [], []
        for _ in range(args.repeats):
            started, stopped = start_stop(n=2)
            local.append(started)
            local_stops.append(stopped)
            started, stopped = start_stop(hosts=lab.addresses)
            hosts.append(started)
            stops.append(stopped)
        results.add(**report(local, hosts, stops, local_stops))
        if not args.no_stock:
            stock = stock_ssh(lab.addresses)
            print(f"ipyparallel's stock ssh launcher, 2 engines registered (no JAX): {stock:.2f} s")
            results.add(stock_ssh_launcher_2_engines_no_jax_s=stock)
    results.write()


def report(local: list[float], hosts: list[float], stops: list[float],
           local_stops: list[float]) -> dict[str, object]:
    """Print the figures; return them for ``bench/results/hosts.json``."""
    med = statistics.median
    print(f"local 2 processes, start to first psum: {med(local):.2f} s  (runs {_fmt(local)})")
    print(f"2 lab ssh hosts,   start to first psum: {med(hosts):.2f} s  (runs {_fmt(hosts)})")
    print(f"ratio hosts / local: {med(hosts) / med(local):.2f}x  (target <= 2x)")
    print(f"stop on 2 lab hosts: {med(stops):.2f} s  (runs {_fmt(stops)}; target <= 1 s); "
          f"local stop {med(local_stops):.2f} s", flush=True)
    return {"repeats": len(local),
            "start_to_first_psum_s": {"local_2_processes": med(local), "lab_2_ssh_hosts": med(hosts)},
            "start_runs_s": {"local_2_processes": local, "lab_2_ssh_hosts": hosts},
            "ratio": med(hosts) / med(local), "target": "<= 2",
            "stop_s": {"lab_2_ssh_hosts": med(stops), "local_2_processes": med(local_stops)},
            "stop_runs_s": {"lab_2_ssh_hosts": stops, "local_2_processes": local_stops},
            "stop_target": "lab_2_ssh_hosts <= 1 s"}


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()
