"""``%jax_train --max-failures`` in a real Jupyter kernel: kill -9 of a process, survived.

The test kills an engine from outside (SIGKILL, as the OOM killer or a preempted
host would) while the run goes on in the kernel, in the foreground and in the
background, and checks that the run ended well with a continuous curve.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from support.fault_cells import COUNTING_LOOP
from support.kernel_harness import Kernel

#: Starts engines (or a kernel): not in `bash dev test fast`.
pytestmark = pytest.mark.engines

CONFIG = "dict(steps=40, say_at=12, pause=0.1, flag={flag!r})"


@pytest.fixture(scope="module")
def kernel(make_kernel):
    """A real kernel with jaxnb loaded, a 2-process cluster and the loop defined on it."""
    return make_kernel("-n 2 --devices-per-process 1", "import jaxnb", "%%jax_cluster\n" + COUNTING_LOOP)


def pids(k: Kernel) -> list[int]:
    return k.value("[p.pid for p in jaxnb.current_cluster().processes]")


def wait_for(path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(path), f"the run never reached {path}"


def survived(k: Kernel, victim: int, pid: int) -> None:
    """The run ended well: one recovery, every step once, squares continuous."""
    assert k.value("run.error is None"), k.value("repr(run.error)")
    failures = k.value("[(f.processes, f.resumed_from, f.cause) for f in run.failures]")
    assert len(failures) == 1, failures
    processes, resumed_from, cause = failures[0]
    assert victim in processes and resumed_from >= 10 and resumed_from % 5 == 0
    assert cause.startswith(f"[p{victim}] (pid {pid} on ") and "SIGKILL" in cause
    assert k.value("[h['step'] for h in run.history]") == list(range(1, 41))
    assert k.value("[h['square'] for h in run.history]") == [s * s for s in range(1, 41)]
    assert pid not in pids(k)  # new engines
    assert k.value("jaxnb.current_cluster().busy_with") is None


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", [0, 1])
def test_kill_9_during_a_foreground_run_is_survived(kernel, tmp_path, victim):
    pid = pids(kernel)[victim]
    flag = str(tmp_path / "reached")
    msg_id = kernel.send(f"%jax_train counting --config {CONFIG.format(flag=flag)} "
                         f"--storage {tmp_path} --max-failures 2 -o run")
    wait_for(flag)
    os.kill(pid, signal.SIGKILL)
    out = kernel.collect(msg_id, timeout=240)
    assert out.status == "ok", out.shown
    # Killing p0 (the coordinator) often takes p1 with it (named after it, e.g. SIGABRT).
    assert f"recovering run 'counting': [p{victim}] killed by SIGKILL" in out.shown
    assert "resuming from step" in out.shown
    views = {d["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
             for d in out.displays if "application/vnd.jupyter.widget-view+json" in d["data"]}
    assert len(views) == 1  # one dashboard through the recovery (shown, then its final form)
    survived(kernel, victim, pid)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", [1, 0])
def test_kill_9_during_a_background_run_is_survived(kernel, tmp_path, victim):
    pid = pids(kernel)[victim]
    flag = str(tmp_path / "reached")
    out = kernel.ok(f"%jax_train counting --config {CONFIG.format(flag=flag)} "
                    f"--storage {tmp_path} --max-failures 1 --background -o run")
    assert out.seconds < 60
    wait_for(flag)
    os.kill(pid, signal.SIGKILL)
    assert kernel.value("run.wait(240).running") is False
    survived(kernel, victim, pid)
