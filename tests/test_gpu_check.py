"""``bench/gpu_check.py`` is known to work before a GPU machine runs it: its ``--cpu`` mode runs
every check on 2 CPU processes (smaller), with the same asserts where they mean something
there, and writes what it measured."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKS = {"defaults", "step", "mfu", "throughput", "small model", "oom", "memory", "profile", "recovery"}


@pytest.mark.engines
@pytest.mark.timeout(600)
def test_the_gpu_check_passes_on_cpu_and_writes_every_check(tmp_path):
    env = {**os.environ, "JAXNB_BENCH_RESULTS": str(tmp_path), "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--cpu"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=580)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures = json.loads((tmp_path / "gpu_cpu.json").read_text())["figures"]
    assert figures["passed"] is True and set(figures) >= CHECKS
    assert figures["mfu"]["flops_per_step"] == figures["mfu"]["analytic"]  # counted, not estimated
    assert "killed by SIGKILL" in figures["recovery"]["cause"]
    assert figures["profile"]["compute_ms"] > 0 and figures["oom"] == {"skipped": "no device limit on CPU",
                                                                       "seconds": figures["oom"]["seconds"]}
