#!/usr/bin/env python
"""Live output of ``%%jax_cluster`` vs ipyparallel's ``%%px --stream``, in a real Jupyter kernel.

One command, every number measured in the same run: a kernel (jupyter_client,
this Python) starts a 2-process cluster with ``%jax_cluster start -n 2`` and
activates ipyparallel's ``%%px`` on the same engines. Then:

1. latency: the engines print LINES lines, one every INTERVAL s, and keep the
   time of each print; this client keeps the time each line first reaches it
   in an IOPub message (a stream, or jaxnb's live view). p50/p95 of arrival
   minus print, for lines that are identical on every process (measured from
   the later process's print: a line can be shown once only when both have
   printed it) and lines that differ (each from its own process's print),
   under ``%%jax_cluster`` and under ``%%px --stream``.
2. flood: a cell printing FLOOD lines per process, request -> kernel idle, as
   seen by the client, under ``%%jax_cluster`` and ``%%px``: REPEATS pairs in
   alternating order, the median of the paired ratios (target <= 1.2), and
   the notebook kernel's CPU seconds per cell (what each adds, load aside).

Also written to ``bench/results/live_output.json``.

    python -m bench.live_output [--lines 30] [--interval 0.1] [--flood 100000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import shutil
import statistics
import time

import psutil

from bench._results import Results
from tests.support.kernel_client import Kernel, Run

SETUP = """%load_ext jaxnb
%jax_cluster start -n 2
from jaxnb.magics import current_cluster
current_cluster(get_ipython()).view.activate()
"""

PRINTS = """import time, jax
stamps = []
for i in range({lines}):
    stamps.append(time.time())
    print({text}, i, flush=True)
    time.sleep({interval})
"""
SAME = '"same line"'
DIFFERENT = '"process", jax.process_index(), "line"'


def stamps(k: Kernel) -> dict[int, list[float]]:
    """Each process's print times of the last latency cell."""
    out = k.check("%%jax_cluster\nprint(repr(stamps))").stream()
    return {int(m[1]): ast.literal_eval(m[2]) for m in re.finditer(r"^\[p(\d+)\] (.*)$", out, re.M)}


def arrivals(run: Run, pattern: str, lines: int) -> list[float | None]:
    """When line i (``pattern`` formatted with i) first reached the client."""
    found: list[float | None] = [None] * lines
    for m in run.messages:
        for i in range(lines):
            if found[i] is None and re.search(pattern.format(i=i), m.text):
                found[i] = m.at
    return found


def latencies(k: Kernel, magic: str, same: bool, lines: int, interval: float) -> list[float]:
    code = f"{magic}\n" + PRINTS.format(lines=lines, interval=interval, text=SAME if same else DIFFERENT)
    run = k.check(code)
    printed = stamps(k)
    delays = []
    if same:
        seen = arrivals(run, r"same line {i}\n", lines)
        for i, at in enumerate(seen):
            assert at is not None, f"line {i} never arrived"
            delays.append(at - max(printed[p][i] for p in printed))
    else:
        for p in printed:
            seen = arrivals(run, rf"process {p} line {{i}}\n", lines)
            for i, at in enumerate(seen):
                assert at is not None, f"process {p} line {i} never arrived"
                delays.append(at - printed[p][i])
    return delays


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def flood(k: Kernel, kernel_process: psutil.Process, magic: str, n: int) -> tuple[float, float]:
    """Seconds from request to idle, and the kernel process's CPU seconds, for one flood cell."""
    loop = f"import jax\nfor i in range({n}):\n    print('process', jax.process_index(), 'line', i)\n"
    cpu = kernel_process.cpu_times()
    started = time.time()
    run = k.check(f"{magic}\n{loop}", timeout=600)
    after = kernel_process.cpu_times()
    saved = re.search(r"full output: (\S+)", run.stream())
    if saved:  # the folder jaxnb saved the full output to
        shutil.rmtree(pathlib.Path(saved[1]).parent)
    return run.end - started, (after.user + after.system) - (cpu.user + cpu.system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=30)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = Results("live_output")
    latency: dict[str, dict[str, dict[str, float]]] = {}
    with Kernel() as k:
        k.check(SETUP, timeout=120)
        try:
            print(f"latency, print on an engine -> IOPub message at the client, {args.lines} lines each")
            print(f"{'lines':<10} {'cell':<22} {'p50 [ms]':>9} {'p95 [ms]':>9} {'max [ms]':>9}")
            for same in (True, False):
                for magic in ("%%jax_cluster", "%%px --block --stream"):
                    d = latencies(k, magic, same, args.lines, args.interval)
                    kind = "identical" if same else "differing"
                    latency.setdefault(f"{kind}_lines", {})[magic] = {
                        "p50_ms": pct(d, 0.5) * 1e3, "p95_ms": pct(d, 0.95) * 1e3,
                        "max_ms": max(d) * 1e3}
                    print(
                        f"{kind:<10} {magic:<22} {pct(d, 0.5) * 1e3:9.0f} {pct(d, 0.95) * 1e3:9.0f}"
                        f" {max(d) * 1e3:9.0f}",
                        flush=True,
                    )
            kernel_process = psutil.Process(int(k.check("import os; print(os.getpid())").stream()))
            magics = ("%%jax_cluster", "%%px --block")
            wall: dict[str, list[float]] = {m: [] for m in magics}
            cpu: dict[str, list[float]] = {m: [] for m in magics}
            ratios = []
            for r in range(args.repeats):
                for magic in magics if r % 2 == 0 else magics[::-1]:
                    seconds, cpu_seconds = flood(k, kernel_process, magic, args.flood)
                    wall[magic].append(seconds)
                    cpu[magic].append(cpu_seconds)
                ratios.append(wall[magics[0]][-1] / wall[magics[1]][-1])
            print(f"flood, {args.flood:,} lines per process, request -> idle, {args.repeats} paired runs")
            for magic in magics:
                print(
                    f"  {magic:<14} median {statistics.median(wall[magic]):.2f} s"
                    f" {[round(t, 2) for t in wall[magic]]};"
                    f" kernel CPU median {statistics.median(cpu[magic]):.2f} s"
                )
            print(f"  ratio (median of paired ratios) {statistics.median(ratios):.2f} (target <= 1.2)")
            print(f"  paired ratios {[round(x, 2) for x in ratios]}")
        finally:
            k.timed("%jax_cluster stop", timeout=60)
    results.add(
        lines=args.lines, interval_s=args.interval, latency=latency,
        flood={"lines_per_process": args.flood, "repeats": args.repeats,
               **{magic: {"median_s": statistics.median(wall[magic]), "runs_s": wall[magic],
                          "kernel_cpu_median_s": statistics.median(cpu[magic])}
                  for magic in magics},
               "ratio": statistics.median(ratios), "paired_ratios": ratios, "target": "<= 1.2"},
    )
    results.write()


if __name__ == "__main__":
    main()
