"""One live run per run folder: the OS lock the notebook kernel holds (pure parts, no engines)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jaxnb._core import run_folder
from jaxnb._core.file_lock import FileLock, holder

REPO = Path(__file__).resolve().parents[1]
HOLDS = ("import sys, time\nfrom jaxnb._core.file_lock import FileLock\n"
         "assert FileLock(sys.argv[1]).acquire() is None\nprint('held', flush=True)\ntime.sleep(60)\n")


def test_a_second_hold_in_this_kernel_is_refused_in_one_line_until_released(tmp_path):
    run_dir = str(tmp_path / "runs" / "fit")
    lock = run_folder.hold(run_dir)
    with pytest.raises(FileExistsError) as refused:
        run_folder.hold(run_dir)
    assert str(refused.value) == (
        f"run 'fit' in {tmp_path / 'runs'} is live in this kernel (another cluster's run); wait "
        "for it to end or stop it, or pass name='NEW' for a new run")
    lock.release()
    run_folder.hold(run_dir).release()


@pytest.mark.engines  # starts a Python process
def test_a_lock_held_by_another_process_names_it_and_goes_with_it(tmp_path):
    run_dir = tmp_path / "fit"
    other = subprocess.Popen([sys.executable, "-c", HOLDS, str(run_dir / run_folder.LOCK_FILE)],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        with pytest.raises(FileExistsError) as refused:
            run_folder.hold(str(run_dir))
        text = str(refused.value)
        assert text.startswith(f"run 'fit' in {tmp_path} is live in another kernel (pid {other.pid} on "
                               f"{socket.gethostname()}, since "), text
        assert text.endswith("); wait for it to end or stop it there, or pass name='NEW' for a "
                             "new run") and "\n" not in text, text
        os.kill(other.pid, signal.SIGKILL)  # the OS drops a dead process's lock
        other.wait()
        lock = run_folder.hold(str(run_dir))
        assert holder(lock.path).pid == os.getpid()
        lock.release()
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


def test_a_waited_lock_and_what_an_earlier_run_left(tmp_path):
    lock = FileLock(str(tmp_path / "a" / "study.lock"))
    with lock.waited():
        assert lock.held and FileLock(lock.path).acquire() is not None
    assert not lock.held and holder(lock.path).pid == 0  # released: the file names no one
    assert not run_folder.left_by_earlier_run(str(tmp_path / "none"))
    fresh = run_folder.hold(str(tmp_path / "fresh"))
    assert not run_folder.left_by_earlier_run(str(tmp_path / "fresh"))  # only its lock file
    (tmp_path / "fresh" / "datasets").mkdir()
    assert run_folder.left_by_earlier_run(str(tmp_path / "fresh"))
    fresh.release()
