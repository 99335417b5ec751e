#!/usr/bin/env python
"""jaxnb on a real GPU, asserted: what the H200 run of 2026-11-28 checked by hand, in one script.

Run from the repository root on a machine with NVIDIA GPUs and a CUDA JAX (``jax[cuda12]`` or
``jax[cuda13]``), with jaxnb's missing dependencies installed or carried (``bench/gpu_wheels.sh``)::

    python -m bench.gpu_check          # the GPU: writes bench/results/gpu.json
    python -m bench.gpu_check --cpu    # the same checks on 2 CPU processes, smaller (the script
                                       # itself is known to work): bench/results/gpu_cpu.json

Each check asserts; the first that fails ends the script (exit status 1) after writing what was
measured so far. Checks (the H200 run's A-F):

1. ``defaults``: a cluster with default options (the compilation cache on) on this JAX, and a
   jitted call in a cell;
2. ``step``: a 4-layer bf16 MLP (width 4096, batch 2048) trained with SGD, its jitted step;
3. ``mfu``: ``cluster.train`` with ``jaxnb.report`` every step: FLOPs per step within 1% of
   the 11 GEMMs written out by hand, the dashboard's step rate within 10% of the engine's own
   clock, so its MFU within 10% of the analytic one;
4. ``throughput``: that run ≥ 0.95× a plain loop (never waiting on the device) on the engine;
5. ``small model``: width 512, 2 layers, batch 256 (the third run): what one report costs on
   the training thread (recorded; asserted under 150 µs, the cost seen on the H200);
6. ``oom``: an allocation 1.5× the device's limit explained in one line, the next cell works;
7. ``memory``: ``cluster.memory()`` gives in use, peak and limit per device;
8. ``profile``: 10 steps profiled, with device (compute) time;
9. ``recovery``: after a ``restart()``, an engine SIGKILLs itself mid-run; the run recovers
   from its checkpoint, the cause reads "killed by SIGKILL", the phases are recorded.

Under 4 minutes on one H200. On CPU (``--cpu``, 2 processes on a shared machine) the figures
that only mean something on a quiet accelerator (the dashboard's rate against the engine's
clock, the throughput ratio, a report's cost) are recorded, not asserted, and the OOM check is
skipped (no device limit); every other assert runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench._gpu_cells import MODEL, PLAIN, TRAIN
from bench._results import Results

#: (width, layers, batch) of the MFU model and the small one, on a GPU and on CPU.
SIZES = {"gpu": ((4096, 4, 2048), (512, 2, 256)), "cpu": ((256, 4, 64), (64, 2, 32))}
STEPS = {"gpu": (400, 3000), "cpu": (60, 300)}
#: Steps of each round of the plain loop: the MFU model's, the small model's.
PLAIN_STEPS = {"gpu": (200, 3000), "cpu": (30, 200)}
#: jaxnb's training ÷ a plain loop, at least (on an accelerator).
RATIO = 0.95
#: How far the dashboard's step rate may be from the engine's own clock, on the GPU (so MFU is
#: within 10% of the analytic one). On shared CPU cores under load, steps are too irregular for
#: either clock to mean much: recorded, not asserted.
RATE_TOLERANCE = {"gpu": 0.10, "cpu": None}
#: The cost of one report on the training thread, at most (µs; the H200 saw about 100).
REPORT_US = 150.0


class Check:
    """The checks run so far: each one's figures, or why it failed or was skipped."""

    def __init__(self, results: Results) -> None:
        self.results, self.failed = results, ""

    def __call__(self, name: str, run: Callable[[], dict[str, Any]]) -> None:
        if self.failed:
            return
        began = time.monotonic()
        try:
            figures = run()
        except AssertionError as exc:
            self.failed = f"{name}: {exc}"
            figures = {"failed": str(exc)}
        except Exception as exc:
            said = str(exc)
            self.failed = f"{name}: {type(exc).__name__}: {said.splitlines()[0] if said else ''}"
            figures = {"failed": self.failed, "said": said[-3000:]}
        figures["seconds"] = round(time.monotonic() - began, 2)
        self.results.add(**{name: figures})
        print(f"{'FAIL' if 'failed' in figures else 'ok  '} {name}: {figures}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="2 CPU processes, small sizes (a dry run)")
    args = parser.parse_args()
    kind = "cpu" if args.cpu else "gpu"
    import jax

    import jaxnb

    results = Results("gpu_cpu" if args.cpu else "gpu")
    results.add(jax=jax.__version__, jaxnb_commit=_commit(), mode=kind)
    check = Check(results)
    (width, layers, batch), small = SIZES[kind]
    steps, small_steps = STEPS[kind]
    options: dict[str, Any] = {"platform": kind} if kind == "gpu" else {"n": 2}
    with tempfile.TemporaryDirectory() as storage:
        cluster = None

        def defaults() -> dict[str, Any]:
            nonlocal cluster
            began = time.monotonic()
            cluster = jaxnb.JaxCluster(**options).start()  # default options: the cache on
            start_s = time.monotonic() - began
            cluster.run("import jax, jax.numpy as jnp\n_y = jax.jit(lambda x: x * 2 + 1)(jnp.ones(8))\n"
                        "assert float(_y.sum()) == 24.0")
            cluster.run("_kind = str(jax.devices()[0].device_kind)")
            kinds = cluster.pull("_kind")
            return {"start_s": round(start_s, 2), "processes": cluster.num_processes,
                    "device_kind": kinds, "compile_cache": cluster.options.compile_cache or "default"}

        check("defaults", defaults)
        if cluster is None:
            _end(results, check)
        try:
            plain_steps, small_plain_steps = PLAIN_STEPS[kind]
            model = MODEL.format(width=width, layers=layers, batch=batch, plain_steps=plain_steps)
            small_model = MODEL.format(width=small[0], layers=small[1], batch=small[2],
                                       plain_steps=small_plain_steps)
            check("step", lambda: _step(cluster, model))
            check("mfu", lambda: _mfu(cluster, storage, steps, width, layers, batch, kind))
            check("throughput", lambda: _throughput(cluster, results, kind))
            check("small model", lambda: _small(cluster, storage, small_model, small_steps, kind))
            no_limit = {"skipped": "no device limit on CPU"}
            check("oom", lambda: _oom(cluster, jaxnb) if kind == "gpu" else no_limit)
            check("memory", lambda: _memory(cluster, kind))
            check("profile", lambda: _profile(cluster, storage))
            check("recovery", lambda: _recovery(cluster, storage, small_model))
        finally:
            cluster.stop()
    _end(results, check)


def _step(cluster: Any, model: str) -> dict[str, Any]:
    cluster.run(model)
    cluster.run("_p = params\nfor _ in range(3):\n    _p, _loss = step(_p, x)\n_loss = float(_loss)")
    loss = cluster.pull("_loss")
    assert loss == loss and loss > 0, f"the step's loss is {loss}"
    return {"loss": loss}


def _mfu(cluster: Any, storage: str, steps: int, width: int, layers: int, batch: int,
         kind: str) -> dict[str, Any]:
    from jaxnb._core.peak_flops import peak_of
    from jaxnb._widgets.run_stats import ProcessReports

    cluster.run(TRAIN)
    result = cluster.train("train", {"steps": steps, "give": False}, storage=storage, name="mfu")
    analytic = (3 * layers - 1) * 2 * batch * width * width  # x is not differentiated
    flops = result.flops_per_step
    assert flops is not None and abs(flops / analytic - 1) < 0.01, \
        f"FLOPs per step {flops} against {analytic:.4g} written out by hand"
    engine_rate = result.metrics["engine_steps_per_s"]  # the engine's clock, after 20 warm steps
    reports = ProcessReports()
    for record, step in zip(result.history, result.steps, strict=True):
        reports.add({"time": record["t"], "step": step}, arrival=record["t"])
    shown = reports.step_rate()  # what the dashboard computes from the reports' times
    tolerance = RATE_TOLERANCE[kind]
    assert tolerance is None or abs(shown / engine_rate - 1) < tolerance, \
        f"dashboard {shown:.1f} steps/s, engine {engine_rate:.1f}"
    figures = {"flops_per_step": flops, "analytic": analytic, "engine_steps_per_s": round(engine_rate, 1),
               "dashboard_steps_per_s": round(shown, 1), "wall_steps_per_s": round(reports.mean_rate(), 1)}
    peak = peak_of(cluster.pull("_kind"))
    if peak is not None:
        figures.update(mfu=round(flops * shown / peak[0], 4), peak=peak[1],
                       analytic_mfu=round(analytic * engine_rate / peak[0], 4))
    elif kind == "gpu":
        raise AssertionError("the GPU's peak FLOP/s is not known to jaxnb._core.peak_flops")
    return figures


def _throughput(cluster: Any, results: Results, kind: str) -> dict[str, Any]:
    cluster.run(PLAIN)
    plain = max(cluster.pull("_plain_rates"))
    jaxnb_rate = results.figures["mfu"]["engine_steps_per_s"]
    ratio = jaxnb_rate / plain
    if kind == "gpu":
        assert ratio >= RATIO, f"training at {ratio:.3f}x a plain loop (at least {RATIO})"
    return {"plain_steps_per_s": round(plain, 1), "jaxnb_steps_per_s": jaxnb_rate, "ratio": round(ratio, 3)}


def _small(cluster: Any, storage: str, model: str, steps: int, kind: str) -> dict[str, Any]:
    cluster.run(model)
    cluster.run(PLAIN)
    plain = max(cluster.pull("_plain_rates"))
    result = cluster.train("train", {"steps": steps, "give": True}, storage=storage, name="small")
    rate = result.metrics["engine_steps_per_s"]
    report_us = max(0.0, 1e6 * (1 / rate - 1 / plain))
    if kind == "gpu":  # on shared CPU cores the difference of two noisy rates means little
        assert report_us <= REPORT_US, f"a report costs {report_us:.0f} µs on the training thread"
    return {"plain_steps_per_s": round(plain, 1), "jaxnb_steps_per_s": round(rate, 1),
            "ratio": round(rate / plain, 3), "report_us": round(report_us, 1)}


def _oom(cluster: Any, jaxnb: Any) -> dict[str, Any]:
    last = cluster.num_processes - 1
    try:
        cluster.run(f"if jax.process_index() == {last}:\n"
                    "    _limit = jax.local_devices()[0].memory_stats()['bytes_limit']\n"
                    "    _too_much = jnp.ones((int(_limit * 1.5),), jnp.uint8)\n"
                    "    _too_much.block_until_ready()\n")  # JAX 0.11 dispatches it, fails later
    except jaxnb.RemoteError as exc:
        said = str(exc)
    else:
        raise AssertionError("an allocation 1.5x the device's limit did not fail")
    head = said.splitlines()[0]
    assert "ran out of memory" in head and "XLA asked for" in head, head
    assert "bfc_allocator" not in said.split("XLA's")[0], "XLA's own log lines come before the explanation"
    cluster.run("_after = float(jnp.ones(4).sum())")
    return {"explanation": head}


def _memory(cluster: Any, kind: str) -> dict[str, Any]:
    report = cluster.memory()
    devices = [d for p in report.processes for d in p["devices"]]
    assert devices and all((d["in_use"] or 0) > 0 for d in devices), f"devices {devices}"
    if kind == "gpu":
        assert all(d["limit"] and d["peak"] for d in devices), f"devices {devices}"
    return {"devices": [{k: d.get(k) for k in ("in_use", "peak", "limit", "source")} for d in devices]}


def _profile(cluster: Any, storage: str) -> dict[str, Any]:
    traced = cluster.profile("profiled(10)", name="profile", storage=storage)
    compute = sum(s["compute_ms"] for s in traced.steps if s["process"] == 0)
    assert traced.error is None and compute > 0, f"device time {compute} ms, error {traced.error}"
    return {"steps": len([s for s in traced.steps if s["process"] == 0]), "compute_ms": round(compute, 2)}


def _recovery(cluster: Any, storage: str, model: str) -> dict[str, Any]:
    cluster.restart()  # as on the H200: the spare is taken by a restart just before
    cluster.run(model)  # the setup a recovery replays: the model and the training function
    cluster.run(TRAIN)
    result = cluster.train("train", {"steps": 60, "give": False, "kill_at": 35, "every": 10},
                           storage=storage, name="recovery", max_failures=1)
    assert len(result.failures) == 1, f"failures: {result.failures}"
    failure = result.failures[0]
    assert "killed by SIGKILL" in failure.cause, f"the cause reads {failure.cause!r}"
    assert failure.resumed_from == 30 and result.steps[-1] == 60, (failure.resumed_from, result.steps[-1:])
    assert {"detect", "join jax.distributed"} <= set(failure.phases), failure.phases
    total = round(sum(failure.phases.values()), 2)
    return {"cause": failure.cause, "phases": failure.phases, "total_s": total}


def _commit() -> str:
    import subprocess

    given = os.environ.get("JAXNB_COMMIT")  # a copy of the tree without its history (a lent machine)
    if given:
        return given
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           check=False)
    return found.stdout.strip()


def _end(results: Results, check: Check) -> None:
    results.add(passed=not check.failed, failed=check.failed, load_average=list(os.getloadavg()))
    results.write()
    print("all checks passed" if not check.failed else f"FAILED: {check.failed}")
    sys.exit(1 if check.failed else 0)


if __name__ == "__main__":
    main()
