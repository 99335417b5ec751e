"""Start, stop and cell round-trip of jaxnb against its baselines, measured in one run.

    python -m bench.cluster [--repeats 3] [--scaling 1,2,4,8]
    python -m bench.cluster --encryption [--lab] [--repeats 5]   (CurveZMQ off vs on)

Prints medians and the ratios the project targets:
start-to-ready ÷ bare limit (≤ 1.3×), stop (≤ 0.5 s), trivial ``%%jax_cluster``
cell ÷ raw ``DirectView.execute`` (≤ 1.2×), and how start and the cell grow with N; writes
them to ``bench/results/cluster.json``. jaxnb's engines have the compilation cache on (the
default): after the first run their join's all-gather and the psum cell read it; the bare
processes compile both every time.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

from bench._results import Results

HERE = os.path.dirname(os.path.abspath(__file__))
CPU_ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "1"}
PSUM_CELL = (
    "import jax, jax.numpy as jnp\nfrom jax.experimental import multihost_utils\n"
    "_ = multihost_utils.process_allgather(jnp.ones(1)).sum()"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bare_limit(n: int, wait_port: bool = False, tries: int = 3) -> float:
    """N plain processes: import JAX, initialise jax.distributed, one psum.

    ``wait_port``: processes > 0 first wait for the coordinator to listen (no back-off).
    A run whose coordinator port was taken meanwhile (a busy machine) is run again on another.
    """
    script = [sys.executable, os.path.join(HERE, "_bare.py")]
    extra = ["--wait-port"] if wait_port else []
    for _ in range(tries):
        port = str(free_port())
        start = time.perf_counter()
        procs = [
            subprocess.Popen([*script, str(i), str(n), port, *extra], env=CPU_ENV) for i in range(n)
        ]
        deadline = start + 120
        while time.perf_counter() < deadline and any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.005)
        elapsed = time.perf_counter() - start
        codes = [p.poll() for p in procs]
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if codes == [0] * n:
            return elapsed
        print(f"bare run failed ({codes}); again on another port", file=sys.stderr)
    raise RuntimeError(f"the bare baseline failed {tries} times")


def _stock_join(process_id: int, num_processes: int, coordinator: str) -> int:
    """What a user of stock ipyparallel runs on each engine: a plain ``jax.distributed`` join."""
    import jax

    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=num_processes, process_id=process_id
    )
    return jax.process_index()


def stock_ipyparallel(n: int) -> tuple[float, float]:
    """ipyparallel's stock Cluster + jax.distributed init + one psum; and its stop time."""
    import ipyparallel as ipp

    start = time.perf_counter()
    cluster = ipp.Cluster(n=n, controller_ip="127.0.0.1", log_level=40, env=CPU_ENV)
    cluster.engine_launcher_class  # noqa: B018 - resolve the default launcher
    client = cluster.start_and_connect_sync()
    view = client[:]
    port = free_port()
    ars = [
        client[e].apply_async(_stock_join, i, n, f"127.0.0.1:{port}")
        for i, e in enumerate(sorted(client.ids))
    ]
    [ar.get(timeout=120) for ar in ars]
    view.execute(PSUM_CELL, block=True)
    ready = time.perf_counter() - start
    start = time.perf_counter()
    cluster.stop_cluster_sync()
    return ready, time.perf_counter() - start


def jaxnb_cluster(n: int, cell_repeats: int) -> tuple[float, float, float, float, float]:
    """jaxnb start-to-ready, stop, trivial cell, raw execute and ``%%px`` (medians in seconds)."""
    from IPython.testing.globalipapp import get_ipython
    from IPython.utils.capture import capture_output

    from jaxnb.magics import current_cluster

    ip = get_ipython()
    ip.run_line_magic("load_ext", "jaxnb")
    start = time.perf_counter()
    with capture_output():
        ip.run_line_magic("jax_cluster", f"start -n {n}")
        ip.run_cell_magic("jax_cluster", "", PSUM_CELL)
    ready = time.perf_counter() - start
    cluster = current_cluster(ip)
    px_view = cluster.client[cluster.view.targets]
    px_view.block = True
    px_view.activate("bench")  # ipyparallel's own cell magic on the same engines: %%pxbench
    raw, cell, px = [], [], []
    for _ in range(cell_repeats):  # all three under capture_output, as a notebook cell would be
        with capture_output():
            t = time.perf_counter()
            cluster.view.execute("pass", block=True)
            raw.append(time.perf_counter() - t)
        with capture_output():
            t = time.perf_counter()
            ip.run_cell_magic("jax_cluster", "", "pass")
            cell.append(time.perf_counter() - t)
        with capture_output():
            t = time.perf_counter()
            ip.run_cell_magic("pxbench", "", "pass")
            px.append(time.perf_counter() - t)
    start = time.perf_counter()
    with capture_output():
        ip.run_line_magic("jax_cluster", "stop")
    stop = time.perf_counter() - start
    return ready, stop, statistics.median(cell), statistics.median(raw), statistics.median(px)


def encryption_cost(repeats: int, lab: bool) -> None:
    """Start to first psum with CurveZMQ off and on (``JAXNB_CURVE``), alternated, on two lab
    ssh hosts (``lab``) or two local processes with encryption forced; ratio of medians, written
    to ``bench/results/cluster_encryption.json``. Target: on ÷ off ≤ 1.1×."""
    import contextlib

    from bench.hosts import start_stop

    results = Results("cluster_encryption")
    print(f"load average at the start: {results.load_at_start}")
    runs: dict[str, list[float]] = {"off": [], "on": []}
    with contextlib.ExitStack() as stack:
        kwargs: dict = {"n": 2}
        if lab:
            from tests.lab.lab import Lab, missing

            if missing():
                sys.exit(f"--lab needs the lab: {missing()}")
            kwargs = {"hosts": stack.enter_context(Lab(2).running()).addresses}
        for i in range(repeats):
            for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                os.environ["JAXNB_CURVE"] = "1" if mode == "on" else "0"
                runs[mode].append(start_stop(**kwargs)[0])
                print(f"encryption {mode}: start to first psum {runs[mode][-1]:.2f} s", flush=True)
        os.environ.pop("JAXNB_CURVE", None)
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    where = "2 lab ssh hosts" if lab else "2 local processes (encryption forced)"
    print(f"{where}: start to first psum, CurveZMQ off {off:.2f} s, on {on:.2f} s, "
          f"ratio {on / off:.2f}  (target <= 1.1x)")
    results.add(where=where, repeats=repeats, off_s=off, on_s=on, ratio=on / off,
                target="<= 1.1", runs_s=runs)
    results.write()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--encryption", action="store_true",
                        help="only: start with CurveZMQ off and on (bench/results/cluster_encryption.json)")
    parser.add_argument("--lab", action="store_true",
                        help="with --encryption: on two lab ssh hosts (root; tests/lab)")
    parser.add_argument("--cell-repeats", type=int, default=40)
    parser.add_argument("--scaling", default="1,2,4,8")
    parser.add_argument("--no-stock", action="store_true", help="skip stock ipyparallel (slow)")
    args = parser.parse_args()
    if args.encryption:
        encryption_cost(args.repeats, args.lab)
        return

    med = statistics.median
    results = Results("cluster")
    print(f"load average at the start: {results.load_at_start}")
    figures: dict = {}
    # N=1 and N=2, interleaved, so jaxnb and both baselines see the same machine load.
    starts = {}
    for n in (1, 2):
        bares, waiting, runs = [], [], []
        for _ in range(args.repeats):
            bares.append(bare_limit(n))
            waiting.append(bare_limit(n, wait_port=True))
            runs.append(jaxnb_cluster(n, args.cell_repeats))
        starts[n] = (med(r[0] for r in runs), med(bares), med(waiting))
        figures[f"N={n}"] = {"jaxnb_s": [r[0] for r in runs], "bare_s": bares,
                             "bare_waiting_s": waiting, "ratio": starts[n][0] / starts[n][1],
                             "ratio_waiting": starts[n][0] / starts[n][2]}
    ready = starts[2][0]
    stop = med(r[1] for r in runs)
    cell, raw = med(r[2] for r in runs), med(r[3] for r in runs)
    print("medians of", args.repeats, "runs (cells, stop: N=2)")
    print(f"{'measure':42s} {'jaxnb':>9s} {'baseline':>9s} {'ratio':>7s}  target")
    for n, (n_ready, n_bare, n_waiting) in starts.items():
        label = f"N={n} start-to-ready (devices + psum) [s]"
        print(f"{label:42s} {n_ready:9.2f} {n_bare:9.2f} {n_ready / n_bare:7.2f}  ≤ 1.3× bare")
        label = f"N={n} start-to-ready vs bare waiting for port"
        print(f"{label:42s} {n_ready:9.2f} {n_waiting:9.2f} {n_ready / n_waiting:7.2f}  ≤ 1.3× "
              "(plain processes sometimes wait out JAX's ~0.8 s connect back-off; these never do)")
    if not args.no_stock:
        stock = [stock_ipyparallel(2) for _ in range(max(1, args.repeats - 1))]
        s_ready, s_stop = med(s[0] for s in stock), med(s[1] for s in stock)
        label = "start-to-ready vs stock ipyparallel [s]"
        print(f"{label:42s} {ready:9.2f} {s_ready:9.2f} {ready / s_ready:7.2f}")
        print(f"{'stop [s]':42s} {stop:9.2f} {s_stop:9.2f} {stop / s_stop:7.2f}  ≤ 0.5 s")
    else:
        print(f"{'stop [s]':42s} {stop:9.2f} {'-':>9s} {'-':>7s}  ≤ 0.5 s")
    label = "trivial cell vs DirectView.execute [ms]"
    print(f"{label:42s} {cell * 1e3:9.1f} {raw * 1e3:9.1f} {cell / raw:7.2f}  ≤ 1.2×")
    px = med(r[4] for r in runs)
    label = "trivial cell vs ipyparallel's %%px [ms]"
    print(f"{label:42s} {cell * 1e3:9.1f} {px * 1e3:9.1f} {cell / px:7.2f}")
    figures.update(stop_s=stop, cell_ms=cell * 1e3, raw_ms=raw * 1e3, px_ms=px * 1e3)
    print()
    print(f"{'N':>3s} {'bare [s]':>9s} {'start [s]':>10s} {'ratio':>6s} {'cell [ms]':>10s} {'raw [ms]':>9s}")
    for n in [int(x) for x in args.scaling.split(",")]:
        b = bare_limit(n)
        r = jaxnb_cluster(n, max(10, args.cell_repeats // 4))
        print(f"{n:3d} {b:9.2f} {r[0]:10.2f} {r[0] / b:6.2f} {r[2] * 1e3:10.1f} {r[3] * 1e3:9.1f}")
        figures.setdefault("scaling", {})[n] = {"bare_s": b, "jaxnb_s": r[0], "cell_ms": r[2] * 1e3}
    results.add(**{str(k): v for k, v in figures.items()})
    results.write()


if __name__ == "__main__":
    main()
