"""%%jax_profile in a real Jupyter kernel: 2 processes with 2 devices each, an injected straggler."""

from __future__ import annotations

import gzip
import json

import pytest
from kernel_harness import Kernel
from profile_cells import RAISES_CELL, STEPS_CELL


@pytest.fixture(scope="module")
def kernel():
    with Kernel() as k:
        k.ok("%load_ext jaxnb")
        k.ok("%jax_cluster start -n 2 --devices-per-process 2")
        yield k
        k.ok("%jax_cluster stop")


def test_the_table_names_the_injected_straggler_and_its_host_time(kernel, tmp_path):
    out = kernel.ok(f"%%jax_profile --name slow --storage {tmp_path} -o prof\n"
                    + STEPS_CELL.format(steps=4, slow=1))
    assert "steps done" in out.stdout
    tables = [d for d in out.displays if "text/html" in d["data"]]
    assert len(tables) == 1, out.shown
    text = tables[0]["data"]["text/plain"]
    (row,) = [line for line in text.splitlines() if "← straggler" in line]
    assert row.startswith("p1 ")
    assert "straggler: p1" in text and "more host/Python time per step" in text
    assert f"xprof --logdir {tmp_path / 'slow'}" in text and "ui.perfetto.dev" in text
    assert "(straggler)" in tables[0]["data"]["text/html"]
    assert any("image/png" in d["data"] for d in out.displays)  # the timeline, saved with the notebook
    got = kernel.value("dict(straggler=prof.straggler, cause=prof.cause, perfetto=prof.perfetto, "
                       "devices=sorted({r['process'] for r in prof.steps}))")
    assert got["straggler"] == 1 and got["cause"] == "host_ms" and got["devices"] == [0, 1]
    with gzip.open(got["perfetto"], "rt") as f:
        merged = json.load(f)
    groups = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert sorted(groups) == [1, 2] and groups[2].startswith("p1")
    # 2 devices per process: 4 distinct device ids, each only in its own process's group
    ordinals = {}
    for e in merged["traceEvents"]:
        if "hlo_op" in e.get("args", {}):
            ordinals.setdefault(e["args"]["device_ordinal"], set()).add(e["pid"])
    assert len(ordinals) == 4 and all(len(pids) == 1 for pids in ordinals.values())


def test_a_raising_cell_shows_its_trace_then_the_error(kernel, tmp_path):
    out = kernel.run(f"%%jax_profile --storage {tmp_path} -o failed\n" + RAISES_CELL)
    assert out.error is not None and "boom after 2 steps" in out.traceback
    assert any("text/html" in d["data"] for d in out.displays)  # the table came before the error
    got = kernel.value("dict(err=type(failed.error).__name__, n=len(failed.steps), "
                       "files=len(failed.files))")
    assert got == {"err": "RemoteError", "n": 4, "files": 2}


def test_bad_input_is_one_line(kernel, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    # IPython shows a UsageError as one line on stderr (no traceback)
    out = kernel.run(f"%%jax_profile --storage {blocker}\nx = 1")
    (line,) = [t for t in out.stderr.splitlines() if t.strip()]
    assert line.startswith("UsageError: cannot write the profile") and "pass --storage DIR" in line
    out = kernel.run("%%jax_profile --bogus\nx = 1")
    assert "UsageError: unrecognized arguments: --bogus" in out.stderr
