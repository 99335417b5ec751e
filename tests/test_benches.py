"""Every bench stays runnable (a bench that crashed went unseen for weeks).

Fast: each ``bench/NAME.py`` imports and its flags parse (``--help``). With engines:
the benches that take seconds at their smallest sizes run once, end to end; their
figures are not checked (speed is measured in ``bench/``, never asserted here), only that
those that write ``bench/results/NAME.json`` wrote it (here to a temporary folder).
"""

from __future__ import annotations

import json
import os
import pathlib
import runpy
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCHES = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_"))


@pytest.mark.parametrize("name", BENCHES)
def test_each_bench_imports_and_lists_its_flags(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [f"bench.{name}", "--help"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module(f"bench.{name}", run_name="__main__")
    assert exited.value.code == 0
    assert "--help" in capsys.readouterr().out


#: The smallest runs of the benches that need no lab: (name, flags).
SMALL_RUNS = [
    ("cluster", ["--repeats", "1", "--cell-repeats", "2", "--scaling", "1", "--no-stock"]),
    ("live_output", ["--lines", "3", "--flood", "200", "--repeats", "1"]),
    ("profile", ["--steps", "3", "--rounds", "1"]),
    ("checkpoint_save", ["--mb", "1", "--rounds", "1"]),
    ("recovery", ["--repeats", "1", "--only", "local", "--kills", "2", "--gap", "3"]),
    ("compile_cache", ["--repeats", "1"]),
    ("monitoring", ["--steps", "20", "--warmup", "3", "--rounds", "1"]),
    ("resize", ["--only", "local", "--steps", "40"]),
    ("browser_latency", ["--only", "draw"]),
    ("tune", ["--trials", "2", "--steps", "20", "--fresh", "2", "--prune-trials", "0"]),
    ("train_throughput", ["--steps", "3", "--warmup", "2", "--repeats", "1", "--din", "16",
                          "--hidden", "16", "--batch", "16", "--rate", "20", "--seconds", "0.5",
                          "--cost-steps", "500", "--cost-rounds", "2"]),
    ("datasets", ["--steps", "3", "--rounds", "1"]),
    ("gloo_stress", ["-K", "1", "--steps", "3", "--launches", "1", "--din", "8", "--hidden", "8"]),
]
#: The benches that write their figures as JSON, and the figures each must hold.
WRITES = {
    "profile": ("clock_error_ms",), "recovery": ("2 local processes",),
    "browser_latency": ("refresh_cpu_ms",), "cluster": ("stop_s",), "compile_cache": ("ratio",),
    "live_output": ("latency", "flood"),
    "checkpoint_save": ("saves", "fingerprints_s", "target"),
    "train_throughput": ("jaxnb_steps_per_s", "plain_steps_per_s", "plain_bounded_steps_per_s",
                         "ratio", "target", "latency", "startup_s"),
    "monitoring": ("median_ratio", "ratio_of_medians", "notebook_cpu_share"),
    "datasets": ("rows", "feeds"),
    "resize": ("local",),
    "tune": ("gap_tune_ms",),
    "gloo_stress": ("config", "launches", "hangs", "exit_hangs", "errors", "median_steps_per_s"),
}


@pytest.mark.engines
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name, flags", SMALL_RUNS, ids=[name for name, _ in SMALL_RUNS])
def test_a_small_run_of_the_bench_ends_well(name, flags, tmp_path):
    env = {**os.environ, "JAXNB_BENCH_RESULTS": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", f"bench.{name}", *flags], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    if name in WRITES:
        doc = json.loads((tmp_path / f"{name}.json").read_text())
        assert doc["bench"] == name and doc["command"].startswith(f"python -m bench.{name} ")
        assert {"date", "machine", "load_average"} <= set(doc)
        assert set(WRITES[name]) <= set(doc["figures"]), sorted(doc["figures"])
