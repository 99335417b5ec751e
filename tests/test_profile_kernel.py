"""%%jax_profile in a real Jupyter kernel: 2 processes with 2 devices each, an injected straggler."""

from __future__ import annotations

import gzip
import json

import pytest
from profile_cells import RAISES_CELL, STEPS_CELL


@pytest.fixture(scope="module")
def kernel(make_kernel):
    return make_kernel("-n 2 --devices-per-process 2 --spares 0")


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


TRAIN_LOOP = """\
def slow_loop():
    import time, jax, jax.numpy as jnp
    from jax.experimental import multihost_utils
    import jaxnb
    for step in range(1, 9):
        if jax.process_index() == 1:
            time.sleep(0.05)
        total = multihost_utils.process_allgather(jnp.ones(1)).sum()
        jaxnb.report({"step": step, "total": float(total)})
"""


def test_train_profile_steps_records_the_window(kernel, tmp_path):
    kernel.ok(TRAIN_LOOP)
    out = kernel.ok(f"%jax_train slow_loop --storage {tmp_path} -o res --profile-steps 3:6")
    assert any("straggler: p1" in d["data"].get("text/plain", "") for d in out.displays), out.shown
    got = kernel.value("dict(steps=sorted({(r['process'], r['step']) for r in res.profile.steps}), "
                       "straggler=res.profile.straggler, cause=res.profile.cause, "
                       "path=res.profile.path, last=res.metrics['step'])")
    assert got["steps"] == [[p, s] for p in (0, 1) for s in (3, 4, 5, 6)]
    assert got["straggler"] == 1 and got["cause"] == "host_ms" and got["last"] == 8
    assert got["path"] == str(tmp_path / "slow_loop")
    out = kernel.run(f"%jax_train slow_loop --storage {tmp_path} --name again --profile-steps 5:2")
    (line,) = [t for t in out.stderr.splitlines() if t.strip()]
    assert line.startswith("UsageError: --profile-steps 5:2") and "e.g. --profile-steps 2:5" in line


def test_interrupt_keeps_the_trace_so_far(kernel, tmp_path):
    loop = STEPS_CELL.format(steps=100_000, slow=-1).replace(
        "_f(_x).block_until_ready()",
        "_f(_x).block_until_ready(); time.sleep(0.01)\n"
        "        if _i == 5: print('traced 5 steps', flush=True)")
    msg_id = kernel.send(f"%%jax_profile --storage {tmp_path} -o stopped\n" + loop)
    kernel.collect(msg_id, timeout=120, until="traced 5 steps")
    kernel.interrupt()
    out = kernel.collect(msg_id, timeout=120)
    assert out.error is not None and out.error["ename"] == "KeyboardInterrupt", out.shown
    got = kernel.value("dict(err=type(stopped.error).__name__, "
                       "processes=sorted({r['process'] for r in stopped.steps}), n=len(stopped.steps))")
    assert got["err"] == "KeyboardInterrupt" and got["processes"] == [0, 1], out.shown
    kernel.ok("%%jax_cluster\nprint('cluster still works')")
