"""One live search per study (pure parts: real Optuna journals, real processes, no engines)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from jaxnb._tune import lease
from jaxnb._tune import study as studies

REPO = Path(__file__).resolve().parents[1]
#: Opens study "s" in sys.argv[1] (resume when sys.argv[2] == "resume") once the file
#: sys.argv[3] exists; prints what happened; with "ask", leaves a trial RUNNING and waits.
OPENS = """
import os, sys, time
import optuna
from jaxnb._tune.study import open_study
folder, resume, go = sys.argv[1], sys.argv[2] == "resume", sys.argv[3]
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
try:
    opened = open_study(folder, "s", "minimize", None, None, resume)
except FileExistsError as exc:
    print("refused:", exc, flush=True)
    sys.exit(0)
print("opened", flush=True)
if sys.argv[4:] == ["ask"]:
    opened.study.ask()
    print("asked", flush=True)
    time.sleep(60)
opened.hold.release()
"""


def opener(folder: Path, resume: bool, go: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", OPENS, str(folder), "resume" if resume else "new",
                             str(go), *extra], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def open_here(folder: Path, resume: bool) -> studies.Opened:
    return studies.open_study(str(folder), "s", "minimize", None, None, resume)


@pytest.mark.engines  # starts Python processes (seconds on a loaded 2-core machine)
def test_a_study_is_created_once_when_kernels_race_to_create_it(tmp_path):
    go = tmp_path / "go"
    racers = [opener(tmp_path / "s", False, go) for _ in range(4)]
    assert [p.stdout.readline() for p in racers] == ["ready\n"] * 4  # type: ignore[union-attr]
    go.touch()  # all at once
    said = [p.communicate(timeout=60)[0].strip() for p in racers]
    assert said.count("opened") == 1, said
    assert all(s.startswith("refused: study 's' ") for s in said if s != "opened"), said
    assert all("\n" not in s for s in said), said
    assert len(optuna.get_all_study_summaries(optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "s" / studies.JOURNAL))))) == 1


@pytest.mark.engines  # starts a Python process
def test_a_live_search_keeps_its_running_trial_and_a_dead_ones_is_taken_over(tmp_path):
    go = tmp_path / "go"
    go.touch()
    live = opener(tmp_path / "s", False, go, "ask")
    try:
        assert live.stdout is not None
        assert [live.stdout.readline() for _ in range(3)] == ["ready\n", "opened\n", "asked\n"]
        with pytest.raises(FileExistsError) as refused:
            open_here(tmp_path / "s", resume=True)
        text = str(refused.value)
        assert text.startswith(f"study 's' in {tmp_path / 's'} is being run by a live search in "
                               f"another kernel (pid {live.pid} on "), text
        assert text.endswith("); wait for it to end or stop it there, then pass resume=True"), text
        os.kill(live.pid, signal.SIGKILL)  # its kernel dies: the OS drops its lock at once
        live.wait()
        opened = open_here(tmp_path / "s", resume=True)
    finally:
        if live.poll() is None:
            live.kill()
            live.wait()
    assert opened.requeued == [0]
    assert [t.state.name for t in opened.study.trials] == ["FAIL", "WAITING"]
    opened.hold.release()


def test_a_search_on_another_machine_is_taken_over_only_once_its_lease_ran_out(tmp_path):
    opened = open_here(tmp_path / "s", resume=False)
    opened.study.ask()  # left RUNNING by a search on "far"
    opened.hold.release()
    until = time.time() + 30
    opened.study.set_user_attr(lease.KEY, {"owner": "x", "host": "far", "pid": 7, "until": until})
    with pytest.raises(FileExistsError) as refused:
        open_here(tmp_path / "s", resume=True)
    assert str(refused.value) == (
        f"study 's' in {tmp_path / 's'} is being run by a search on far (pid 7) whose lease runs "
        f"until {time.strftime('%H:%M:%S', time.localtime(until))}; wait for it to end or stop it "
        "there (a search whose kernel died is taken over once its lease runs out, 60 s after its "
        "last renewal)")
    assert [t.state.name for t in opened.study.trials] == ["RUNNING"]  # not taken
    opened.study.set_user_attr(lease.KEY, {"owner": "x", "host": "far", "pid": 7,
                                           "until": time.time() - 1})
    again = open_here(tmp_path / "s", resume=True)
    assert again.requeued == [0]
    again.hold.release()


def test_this_kernels_search_is_named_and_a_lease_is_renewed_until_released(tmp_path, monkeypatch):
    monkeypatch.setattr(lease, "LEASE_SECONDS", 0.3)
    opened = open_here(tmp_path / "s", resume=False)
    with pytest.raises(FileExistsError, match=r"^study 's' in .* is being run by a search in this "
                       r"kernel \(--background\); wait for it to end or stop it \(its result's "
                       r"stop\(\)\), then pass resume=True$"):
        open_here(tmp_path / "s", resume=True)
    first = lease.Lease.of(opened.study)
    time.sleep(0.5)
    renewed = lease.Lease.of(opened.study)
    assert first is not None and renewed is not None and renewed.until > first.until
    assert opened.hold.taken_over() is None
    opened.study.set_user_attr(lease.KEY, {**vars(renewed), "owner": "another"})
    time.sleep(0.3)
    assert opened.hold.taken_over() == (
        "another kernel took study 's' over: this search had not renewed its lease in time (was "
        "the machine asleep?); its results are in the study")
    opened.hold.release()
    assert lease.Lease.of(opened.study).owner == "another"  # not ours to end
    open_here(tmp_path / "s", resume=True).hold.release()  # the lock is free
