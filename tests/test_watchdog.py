"""The kernel-death watchdog: an engine exits once the kernel that launched it is gone.

Real processes stand in for the kernel and an engine (no JAX, no ipyparallel): the
"kernel" starts the "engine" and is SIGKILLed before the engine's watchdog starts,
the window in which a spare engine launched just before the kernel died used to stay
(the dead kernel is a zombie until its own parent reaps it, and still answers
``kill(pid, 0)``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from jaxnb._core.contract import ENV_PARENT_PID

#: Started by the "kernel": waits until the kernel is gone, then arms the watchdog as an engine
#: does, and would sleep for a minute.
ENGINE = (
    "import os, sys, time\n"
    "while os.getppid() == int(os.environ['JAXNB_TEST_KERNEL']):\n"
    "    time.sleep(0.01)\n"
    "from jaxnb._engine.boot import watchdog\n"
    "watchdog.start_from_env()\n"
    "time.sleep(60)\n"
)
#: The "kernel": starts the engine, prints its pid, then dies by SIGKILL.
KERNEL = (
    "import os, signal, subprocess, sys\n"
    f"env = dict(os.environ, {ENV_PARENT_PID}=str(os.getpid()), JAXNB_TEST_KERNEL=str(os.getpid()))\n"
    "engine = subprocess.Popen([sys.executable, '-c', sys.argv[1]], env=env)\n"
    "print(engine.pid, flush=True)\n"
    "os.kill(os.getpid(), signal.SIGKILL)\n"
)


@pytest.mark.timeout(60)
def test_an_engine_whose_kernel_died_before_its_watchdog_started_exits():
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, ENGINE], stdout=subprocess.PIPE, text=True)
    engine = psutil.Process(int(kernel.stdout.readline()))
    try:
        deadline = time.monotonic() + 5
        while psutil.Process(kernel.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)  # dead, and not reaped: this test is its parent and does not wait yet
        assert psutil.Process(kernel.pid).status() == psutil.STATUS_ZOMBIE
        engine.wait(20)  # psutil.TimeoutExpired if the watchdog takes the zombie for a live kernel
    finally:
        if engine.is_running():
            os.kill(engine.pid, signal.SIGKILL)
        kernel.wait()
        kernel.stdout.close()
