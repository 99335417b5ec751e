"""A death's cause reads the same whoever reaped the process first: psutil (jaxnb's watcher),
ipyparallel's launcher thread, or jaxnb's own wait for stopped engines (``gone``). A status
lost on the way read "[p0] exited" on the H200 where the CPU said "killed by SIGKILL"."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from jaxnb._hosts import processes


def killed_child() -> tuple[subprocess.Popen, psutil.Process]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    watched = psutil.Process(child.pid)  # jaxnb's view of it (not the one that reaps)
    child.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while watched.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)
    return child, watched


@pytest.mark.engines  # starts a process
def test_a_child_jaxnb_reaped_itself_still_reads_killed_by_sigkill():
    _, watched = killed_child()
    assert processes.gone(watched)  # a stop's wait reaps it: its status is gone from the system
    assert processes.exit_of(watched) == "was killed by SIGKILL"


class Noted:
    """What ipyparallel's launcher keeps once its thread reaped the process (``stop_data``)."""

    def __init__(self, code: int) -> None:
        self.stop_data = {"exit_code": code, "pid": 0}


@pytest.mark.engines  # starts a process
def test_a_child_another_thread_reaped_reads_the_status_its_launcher_noted():
    child, watched = killed_child()
    code = child.wait()  # as ipyparallel's launcher thread does, through another object
    assert code == -signal.SIGKILL
    assert processes.exit_of(watched) == "exited"  # nothing left to read from the process
    assert processes.exit_of(watched, Noted(code)) == "was killed by SIGKILL"
