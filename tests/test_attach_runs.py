"""The runs and searches of a named cluster in its record, and their state as ``list`` shows
it, read from their folders (files only: no engines, no Optuna)."""

from __future__ import annotations

import json
import os
import socket

from jaxnb._attach import listing, runs
from jaxnb._core.file_lock import FileLock
from jaxnb._engine.run.journal import Journal
from jaxnb._tune import lease


def test_a_record_keeps_each_folder_once_and_the_newest_runs():
    kept = runs.added(None, "mlp", "/r/mlp", runs.RUN)
    kept = runs.added(kept, "s", "/r/s", runs.SEARCH)
    kept = runs.added(kept, "mlp", "/r/mlp", runs.RUN)  # run again: moved to the end
    assert [(r["name"], r["kind"]) for r in kept] == [("s", "search"), ("mlp", "run")]
    for i in range(runs.KEEP + 5):
        kept = runs.added(kept, f"r{i}", f"/r/r{i}", runs.RUN)
    assert len(kept) == runs.KEEP and kept[-1]["name"] == f"r{runs.KEEP + 4}"
    assert runs.folder_of(kept, f"r{runs.KEEP + 4}") == f"/r/r{runs.KEEP + 4}"
    assert runs.folder_of(kept, "mlp") is None  # pushed out
    assert runs.folder_of([{"name": "x", "folder": "relative/x"}, "junk"], "x") is None


def test_a_runs_state_is_read_from_the_end_of_its_reports(tmp_path):
    run = str(tmp_path / "mlp")
    entry = {"name": "mlp", "kind": runs.RUN, "folder": run}
    assert runs.state(entry) == "starting"
    os.makedirs(run)
    journal = Journal(run, "id", None)
    journal.reports([{"process": 0, "seq": 0, "step": 1, "time": 1.0, "metrics": {}}])
    assert runs.state(entry) == "running"
    journal.end({"error": None, "stopped": False, "resized_at": 4})  # a size change: goes on
    assert runs.state(entry) == "running"
    Journal(run, "id", 4).end({"error": None, "stopped": True})
    assert runs.state(entry) == "stopped"
    Journal(run, "id", None).end({"error": "ValueError: x", "stopped": False})
    assert runs.state(entry) == "failed"
    with open(os.path.join(run, "reports.jsonl"), "a") as f:
        f.write(json.dumps({"kind": "start"}) + "\n" + json.dumps({"kind": "end"}) + '\n{"cut')
    assert runs.state(entry) == "done"


def test_a_searchs_state_is_its_kernels_hold_on_the_study(tmp_path):
    folder = tmp_path / "s"
    entry = {"name": "s", "kind": runs.SEARCH, "folder": str(folder)}
    assert runs.SEARCH_LOCK == lease.LOCK_FILE
    assert runs.state(entry) == "starting"
    held = FileLock(str(folder / runs.SEARCH_LOCK))
    assert held.acquire() is None
    assert runs.state(entry) == "running"
    held.release()  # a search that ended cleanly empties its lock file
    assert runs.state(entry) == "ended"
    (folder / runs.SEARCH_LOCK).write_text(json.dumps(
        {"pid": 2**22 + 3, "host": socket.gethostname(), "since": 1.0}))  # its kernel died
    assert runs.state(entry) == "not driven"


def test_list_shows_each_clusters_runs_with_their_state():
    rows = [{"name": "exp1", "processes": 2, "hosts": ["h"], "attached": 123, "idle_since": None,
             "runs": [{"name": "mlp", "kind": "run", "state": "running"},
                      {"name": "s", "kind": "search", "state": "not driven"}]},
            {"name": "idle", "processes": 1, "hosts": ["h"], "attached": None, "idle_since": 1.0,
             "runs": []}]
    lines = listing.table(rows).splitlines()
    assert lines[0].split() == ["NAME", "PROCESSES", "HOSTS", "STATE", "RUNS"]
    assert lines[1].endswith("attached (kernel pid 123)                mlp (running), "
                             "s (search, not driven)"), lines[1]
    assert "idle since" in lines[2] and lines[2].endswith(" -")


def test_an_unnamed_start_hears_of_default_only_while_no_kernel_holds_it(tmp_path, monkeypatch):
    from jaxnb._attach import record
    from jaxnb._core import cluster_names as names

    monkeypatch.setenv(names.ENV_FOLDER, str(tmp_path / "clusters"))
    assert not listing.left_running("default")  # none runs
    record.write(names.supervisor_path("default"), {"supervisor": record.me()})
    gone = {"pid": 2**22 + 5, "created": 1.0}
    record.write(names.record_path("default"), {"kernel": gone})
    assert listing.left_running("default")  # its kernel died: the hint is due
    record.write(names.record_path("default"), {"kernel": record.me()})
    assert not listing.left_running("default")  # a live kernel holds it
    record.write(names.supervisor_path("default"), {"supervisor": gone})
    assert not listing.left_running("default")  # its supervisor is gone: nothing runs
