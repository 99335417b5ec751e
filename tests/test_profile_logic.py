"""%%jax_profile's pure logic on small recorded traces: merge, step times, straggler, folder."""

from __future__ import annotations

import gzip
import json
import os
import pathlib

import pytest

from jaxnb._engine.profile import trace_events as trace
from jaxnb._profile import folder, merge, show, steps
from jaxnb._profile.result import ProfileResult

DATA = pathlib.Path(__file__).parent / "data" / "profile"


def recorded() -> list[trace.ProcessTrace]:
    """Two processes (2 CPU devices each), 4 steps; p1 slept 50 ms per step in host code."""
    meta = json.loads((DATA / "meta.json").read_text())
    traces = []
    for p in (0, 1):
        with gzip.open(DATA / f"p{p}.trace.json.gz", "rt") as f:
            chrome = json.load(f)
        m = meta[str(p)]
        traces.append(trace.ProcessTrace(p, m["host"], chrome, m["anchor_ns"], m["offset_ns"],
                                         m["offset_error_ns"]))
    return traces


def rows_of(traces: list[trace.ProcessTrace]) -> list[dict]:
    return [r for t in traces for r in trace.step_times(t.process, t.trace["traceEvents"])]


def test_recorded_straggler_is_p1_with_host_time_as_cause():
    rows = rows_of(recorded())
    assert {(r["process"], r["step"]) for r in rows} == {(p, s) for p in (0, 1) for s in range(4)}
    assert steps.straggler(rows) == (1, "host_ms")
    later = [r for r in rows if r["step"] > 0]
    for r in later:
        assert r["total_ms"] == pytest.approx(r["compute_ms"] + r["collective_ms"] + r["host_ms"])
        if r["process"] == 1:
            assert r["host_ms"] > 45  # the 50 ms sleep
        else:
            assert r["collective_ms"] > 45  # p0 waits for p1 in the all-reduce
    assert "p1" in steps.explain(rows) and "host/Python" in steps.explain(rows)


def test_no_straggler_when_processes_match():
    rows = [{"process": p, "step": s, "total_ms": 10.0, "compute_ms": 6.0, "collective_ms": 1.0,
             "host_ms": 3.0 + 0.1 * p} for p in range(3) for s in range(3)]
    assert steps.straggler(rows) == (None, None)
    assert steps.straggler(rows[:3]) == (None, None)  # a single process: nobody to compare with
    slow = [dict(r, compute_ms=r["compute_ms"] + 20, total_ms=r["total_ms"] + 20)
            if r["process"] == 2 else r for r in rows]
    assert steps.straggler(slow) == (2, "compute_ms")


def test_a_failed_cell_names_no_straggler():
    result = ProfileResult(path="/p", perfetto=None, steps=rows_of(recorded()), straggler=None,
                           error=ValueError("boom"))
    assert result.verdict().startswith("no straggler named: the cell failed")
    assert "straggler: p1" not in show.table_text(result)


def test_union_counts_overlap_once():
    assert trace._union([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20


def test_step_without_annotations_is_the_whole_trace():
    events = [{"ph": "X", "ts": 0, "dur": 100, "name": "a"},
              {"ph": "X", "ts": 10, "dur": 20, "name": "dot", "args": {"hlo_op": "dot"}},
              {"ph": "X", "ts": 40, "dur": 40, "name": "all-reduce", "args": {"hlo_op": "all-reduce.3"}}]
    (row,) = trace.step_times(0, events)
    assert row["step"] == 0 and row["total_ms"] == pytest.approx(0.1)
    assert row["compute_ms"] == pytest.approx(0.02) and row["collective_ms"] == pytest.approx(0.04)
    assert row["host_ms"] == pytest.approx(0.04)


def test_merge_gives_one_group_per_process_and_keeps_devices_apart():
    traces = recorded()
    merged = trace.merge(traces)
    json.loads(json.dumps(merged))  # valid JSON
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert names == {1: "p0 · vm", 2: "p1 · vm"}
    assert {e["pid"] for e in merged["traceEvents"]} == {1, 2}
    # every op keeps its device ordinal, and sits in its own process's group
    ops = [e for e in merged["traceEvents"] if "hlo_op" in e.get("args", {})]
    by_pid = {pid: {e["args"]["device_ordinal"] for e in ops if e["pid"] == pid} for pid in (1, 2)}
    assert by_pid[1] and by_pid[2] and not by_pid[1] & by_pid[2]
    # tracks within a group are distinct: each (plane, thread) of a process is its own tid
    threads = [(e["pid"], e["tid"]) for e in merged["traceEvents"] if e.get("name") == "thread_name"]
    assert len(threads) == len(set(threads))


def test_merge_aligns_clocks_with_the_measured_offset():
    a, b = recorded()
    same = trace.shifts_us([a, b])
    later = trace.ProcessTrace(b.process, b.host, b.trace, b.anchor_ns, b.offset_ns + 5_000_000,
                               b.offset_error_ns)
    moved = trace.shifts_us([a, later])
    # p1's clock read 5 ms behind: its events move 5 ms later relative to p0's
    assert (moved[1] - moved[0]) - (same[1] - same[0]) == pytest.approx(5000)
    # the recorded steps of both processes end within a millisecond on the merged axis
    # (they all-reduce at the end of each step)
    ends = {}
    merged = trace.merge([a, b])
    for e in merged["traceEvents"]:
        if e.get("args", {}).get("step_num") == "3":
            ends[e["pid"]] = e["ts"] + e["dur"]
    assert abs(ends[1] - ends[2]) < 3000
    errors = trace.alignment_error_ms([a, b])
    assert errors[0] < errors[1] < 1.0


def test_prepare_refuses_a_folder_that_cannot_be_written(tmp_path):
    # a regular file where the folder should be: not writable as a folder, even for root
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ValueError, match="cannot write the profile") as err:
        folder.prepare(str(afile), "run")
    assert "\n" not in str(err.value)


def test_prepare_lays_out_one_session_per_run(tmp_path):
    one = folder.prepare(str(tmp_path), "r")
    two = folder.prepare(str(tmp_path), "r")
    assert one.root == two.root == str(tmp_path / "r")
    assert one.session != two.session
    assert one.xplane("node-1", 3).endswith(os.path.join("plugins", "profile", one.session,
                                                          "node-1_p3.xplane.pb"))
    assert "plugins" not in one.perfetto


def test_table_names_the_straggler_and_the_commands():
    rows = rows_of(recorded())
    who, cause = steps.straggler(rows)
    result = ProfileResult(path="/runs/r", perfetto="/runs/r/merged/s/trace.json.gz", steps=rows,
                           straggler=who, cause=cause, hosts={0: "vm", 1: "vm"},
                           clock_offsets_ms={0: 0.0, 1: 0.1}, clock_error_ms={0: 0.0, 1: 0.5})
    text = show.table_text(result)
    assert "← straggler" in text.splitlines()[2] and text.splitlines()[2].startswith("p1")
    assert "xprof --logdir /runs/r" in text and "ui.perfetto.dev" in text
    assert "(straggler)" in show.table_html(result)


def test_parts_joined_without_parsing_equal_the_merge(tmp_path):
    traces = recorded()
    shift = trace.shifts_us(traces)
    paths = []
    for t in traces:  # what each engine writes (jaxnb._engine.profile.parts)
        path = tmp_path / f"p{t.process}.part.json.gz"
        with gzip.open(path, "wt") as f:
            f.write(",".join(json.dumps(e) for e in trace.regroup(t, shift[t.process])))
        paths.append(str(path))
    merge.join_parts(paths, str(tmp_path / "trace.json.gz"))
    with gzip.open(tmp_path / "trace.json.gz", "rt") as f:
        joined = json.load(f)
    assert joined == json.loads(json.dumps(trace.merge(traces)))
    assert not any(os.path.exists(p) for p in paths)


def test_timeline_picture_is_a_png():
    from jaxnb._profile import timeline

    parts = {p: {"steps": [(s, s * 1000.0 + p, s * 1000.0 + 900) for s in range(4)],
                 "ops": [(s * 1000.0 + 100, s * 1000.0 + 800, p == 0) for s in range(4)]}
             for p in (0, 1)}
    png = timeline.picture(parts, {0: "a", 1: "b"}, straggler=1)
    assert png is not None and png.startswith(b"\x89PNG")
    assert timeline.picture({0: {"steps": [], "ops": []}}, {}) is None


def test_gpu_planes_numbered_from_zero_in_every_process_stay_apart():
    """Every process calls its first GPU /device:GPU:0 with the same pid and tids (tpu-inference#2738)."""
    def gpu_trace(busy_us: float) -> dict:
        return {"traceEvents": [
            {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "pid": 1, "tid": 7, "name": "thread_name", "args": {"name": "Stream #7"}},
            {"ph": "M", "pid": 701, "name": "process_name", "args": {"name": "/host:CPU"}},
            {"ph": "M", "pid": 701, "tid": 3, "name": "thread_name", "args": {"name": "python"}},
            {"ph": "X", "pid": 701, "tid": 3, "ts": 0.0, "dur": 1.0, "name": trace.ANCHOR},
            {"ph": "X", "pid": 701, "tid": 3, "ts": 10.0, "dur": 1000.0, "name": "train",
             "args": {"step_num": "0"}},
            {"ph": "X", "pid": 1, "tid": 7, "ts": 20.0, "dur": busy_us, "name": "fusion",
             "args": {"hlo_op": "fusion.1", "device_ordinal": "0"}},
            {"ph": "s", "pid": 1, "tid": 7, "ts": 20.0, "id": 5, "name": "flow"},
        ]}

    traces = [trace.ProcessTrace(p, f"node{p}", gpu_trace(100.0 * (p + 1)), 10**18) for p in (0, 1)]
    merged = trace.merge(traces)["traceEvents"]
    gpu = [e for e in merged if e.get("name") == "fusion"]
    assert {e["pid"] for e in gpu} == {1, 2}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in merged if e.get("name") == "thread_name"}
    assert names[(gpu[0]["pid"], gpu[0]["tid"])] == "/device:GPU:0 Stream #7"
    assert {e["id"] for e in merged if e.get("ph") == "s"} == {"p0:5", "p1:5"}
    rows = [r for t in traces for r in trace.step_times(t.process, t.trace["traceEvents"])]
    assert [round(r["compute_ms"], 3) for r in rows] == [0.1, 0.2]
