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
   seen by the client, under ``%%jax_cluster`` and ``%%px``; medians of
   REPEATS alternating runs. Target: ratio <= 1.2.

    python bench/live_output.py [--lines 30] [--interval 0.1] [--flood 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from kernel_client import Kernel, Run, kernel

SETUP = """%load_ext jaxnb
%jax_cluster start -n 2
from jaxnb.magics import JaxnbMagics
JaxnbMagics.cluster.view.activate()
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


def flood(k: Kernel, magic: str, n: int) -> float:
    loop = f"import jax\nfor i in range({n}):\n    print('process', jax.process_index(), 'line', i)\n"
    code = f"{magic}\n{loop}"
    started = time.time()
    run = k.check(code, timeout=600)
    return run.end - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=30)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with kernel() as k:
        k.check(SETUP, timeout=120)
        try:
            print(f"latency, print on an engine -> IOPub message at the client, {args.lines} lines each")
            print(f"{'lines':<10} {'cell':<22} {'p50 [ms]':>9} {'p95 [ms]':>9} {'max [ms]':>9}")
            for same in (True, False):
                for magic in ("%%jax_cluster", "%%px --block --stream"):
                    d = latencies(k, magic, same, args.lines, args.interval)
                    kind = "identical" if same else "differing"
                    print(
                        f"{kind:<10} {magic:<22} {pct(d, 0.5) * 1e3:9.0f} {pct(d, 0.95) * 1e3:9.0f}"
                        f" {max(d) * 1e3:9.0f}",
                        flush=True,
                    )
            times: dict[str, list[float]] = {"%%jax_cluster": [], "%%px --block": []}
            for _ in range(args.repeats):
                for magic in times:
                    times[magic].append(flood(k, magic, args.flood))
            jx, px = (statistics.median(times[m]) for m in times)
            print(f"flood, {args.flood:,} lines per process, request -> idle (median of {args.repeats})")
            print(f"  %%jax_cluster {jx:.2f} s  {[round(t, 2) for t in times['%%jax_cluster']]}")
            print(f"  %%px          {px:.2f} s  {[round(t, 2) for t in times['%%px --block']]}")
            print(f"  ratio {jx / px:.2f} (target <= 1.2)")
        finally:
            k.run("%jax_cluster stop", timeout=60)


if __name__ == "__main__":
    main()
