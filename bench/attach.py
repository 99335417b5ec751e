"""Attach to a named cluster beside a fresh start, in one run, from the magic in a fresh kernel.

    python -m bench.attach [--sizes 2,8]

For each N: a fresh kernel runs one cell ``%load_ext jaxnb`` + ``%jax_cluster start -n N
--name bench-attach`` (every import included: the figure a user sees); that kernel is
SIGKILLed; a second fresh kernel runs one cell ``%load_ext jaxnb`` + ``%jax_cluster attach
bench-attach``, and its engines' state is checked. Also the notebook-side import alone
(``import jaxnb; jaxnb.JaxCluster`` after IPython and ipyparallel) in a fresh interpreter, and
the modules ``%load_ext jaxnb`` imports. Python's bytecode is cached, as an installed package
has it (pip compiles it; a machine with ``PYTHONDONTWRITEBYTECODE`` set compiles every module
in every kernel: that import is measured too). Goal: attach <= 1 s at N=2. Figures go to
``bench/results/attach.json`` with the load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from bench._results import Results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
NAME = "bench-attach"
IMPORT = ("import time, IPython, ipyparallel; t = time.perf_counter(); import jaxnb; "
          "jaxnb.JaxCluster; print(time.perf_counter() - t)")


LOADED = ("import sys, IPython, ipykernel.ipkernel, ipyparallel; before = set(sys.modules); "
          "import jaxnb.magics; print(len([m for m in set(sys.modules) - before if m.startswith('jaxnb')]))")


def import_seconds(repeats: int = 3) -> float:
    """The median of the notebook side's import in a fresh interpreter."""
    times = sorted(float(subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True,
                                        check=True).stdout) for _ in range(repeats))
    return times[len(times) // 2]


def cache_bytecode(folder: str) -> None:
    """Let this process and its kernels cache bytecode in ``folder`` (as an installed package has
    it), even where ``PYTHONDONTWRITEBYTECODE`` is set."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(folder, "pycache")


def timed_cell(kernel, code: str) -> float:
    out = kernel.ok(code, timeout=600)
    return out.seconds


def one_size(n: int) -> dict[str, float]:
    from support.kernel_harness import Kernel

    a = Kernel()
    try:
        start = timed_cell(a, f"%load_ext jaxnb\n%jax_cluster start -n {n} --name {NAME} --spares 0")
        a.ok("%%jax_cluster\nimport jax\nmarker = 7 * jax.process_index()")
        a.kill()
    finally:
        a.client.stop_channels()
        a.manager.shutdown_kernel(now=True)
        a.manager.cleanup_resources()
    b = Kernel()
    try:
        attach = timed_cell(b, f"%load_ext jaxnb\n%jax_cluster attach {NAME}")
        seen = b.ok("%%jax_cluster\nprint(marker)").stdout.split()
        assert seen[1::2] == [str(7 * i) for i in range(n)], seen
        b.ok("%jax_cluster stop")
    finally:
        b.shutdown()
    return {"start_s": round(start, 3), "attach_s": round(attach, 3),
            "attach_over_start": round(attach / start, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,8", help="numbers of processes, comma-separated")
    args = parser.parse_args()
    results = Results("attach")
    with tempfile.TemporaryDirectory(prefix="jaxnb-bench-attach-") as folder:
        os.environ["JAXNB_CLUSTERS_DIR"] = folder  # the kernels inherit it
        try:
            uncached = import_seconds() if os.environ.get("PYTHONDONTWRITEBYTECODE") else None
            cache_bytecode(folder)
            imported = import_seconds()
            modules = int(subprocess.run([sys.executable, "-c", LOADED], capture_output=True,
                                         text=True, check=True).stdout)
            print(f"notebook-side import (import jaxnb; jaxnb.JaxCluster): {imported:.3f} s; "
                  f"%load_ext jaxnb imports {modules} jaxnb modules")
            results.add(import_s=round(imported, 3), load_ext_jaxnb_modules=modules,
                        bytecode="cached, as an installed package has it")
            if uncached is not None:
                print(f"the same compiling every module (PYTHONDONTWRITEBYTECODE): {uncached:.3f} s")
                results.add(import_s_compiling=round(uncached, 3))
            for n in (int(s) for s in args.sizes.split(",")):
                t0 = time.perf_counter()
                figures = one_size(n)
                print(f"N={n}: start {figures['start_s']:.2f} s, attach {figures['attach_s']:.2f} s "
                      f"({figures['attach_over_start']:.2f}x) [{time.perf_counter() - t0:.0f} s]")
                results.add(**{f"n{n}": figures})
        finally:
            subprocess.run([sys.executable, "-m", "jaxnb", "stop", NAME], capture_output=True,
                           check=False)
    results.add(goal="attach <= 1 s at N=2 (from the magic in a fresh kernel, every import)")
    results.write()


if __name__ == "__main__":
    main()
