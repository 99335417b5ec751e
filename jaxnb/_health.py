"""Is every process alive? If not, say who died, how, and what it last printed."""

from __future__ import annotations

import contextlib
import re
import signal
import time
from typing import TYPE_CHECKING, Any

import psutil

from jaxnb._outputs import label, labels
from jaxnb._signals import signal_processes

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster

STDERR_TAIL_LINES = 12
KILL_WAIT_SECONDS = 2.0
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def dead_processes(cluster: JaxCluster) -> dict[int, str]:
    """Process index → how it ended, for every process that is no longer running."""
    dead: dict[int, str] = {}
    launchers = _launchers_by_pid(cluster)
    for info in cluster.processes:
        launcher = launchers.get(info.pid)
        if launcher is not None:
            how = exit_of(launcher.process)
            if how is not None:
                dead[info.process_index] = how
    if not cluster.options.is_local and cluster._client is not None:
        registered = set(cluster._client.ids)
        gone = [i.process_index for i in cluster.processes
                if i.engine_id not in registered and i.process_index not in dead]
        if gone:
            from jaxnb import _remote

            explained = _remote.explain_lost(cluster, gone)
            for p in gone:
                dead[p] = explained.get(p, "unregistered from the controller")
    return dead


def exit_of(process: psutil.Process) -> str | None:
    """``None`` while ``process`` runs; else how it ended (signal name or exit status)."""
    try:
        if process.status() != psutil.STATUS_ZOMBIE and process.is_running():
            return None
    except psutil.NoSuchProcess:
        pass
    code = None
    for _ in range(10):  # ipyparallel's launcher thread may be reaping it right now
        try:
            code = process.wait(timeout=0)
        except (psutil.TimeoutExpired, psutil.Error, ChildProcessError):
            code = None
        if code is not None:
            break
        time.sleep(0.02)
    if code is None:
        return "exited"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with status {code}"


def engine_log(cluster: JaxCluster, p: int) -> str:
    """What process ``p``'s engine wrote to its log (stderr and stdout), ANSI colours removed."""
    launcher = _launchers_by_pid(cluster).get(cluster.processes[p].pid)
    if launcher is None and not cluster.options.is_local:
        from jaxnb import _remote

        return _ANSI.sub("", _remote.log_of(cluster, p))  # read on its host
    return "" if launcher is None else launcher_log(launcher)


def launcher_log(launcher: Any) -> str:
    """What the engine an ipyparallel launcher started wrote (stderr and stdout), no colours."""
    try:
        with open(launcher.output_file, errors="replace") as f:
            text = f.read()
    except (OSError, AttributeError):
        text = launcher.get_output() or ""
    return _ANSI.sub("", text)


def stderr_tail(cluster: JaxCluster, p: int, lines: int = STDERR_TAIL_LINES) -> list[str]:
    """The last lines an engine wrote to its log (its stderr and stdout)."""
    return log_tail(engine_log(cluster, p), lines)


def log_tail(log: str, lines: int = STDERR_TAIL_LINES) -> list[str]:
    """The last non-empty lines of an engine log, or the lines that led to a crash."""
    kept = [ln.rstrip() for ln in log.splitlines()]
    kept = [ln for ln in kept if ln.strip() and not ln.startswith("[Gloo]")]
    fatal = next((i for i in range(len(kept) - 1, -1, -1) if _is_fatal(kept[i])), None)
    if fatal is not None:  # a crash: its faulthandler dump ends the log; show what led to it
        return kept[max(0, fatal - lines) : fatal + 1]
    return kept[-lines:]


def _is_fatal(line: str) -> bool:
    """True for the first line faulthandler writes when the process crashes."""
    return line.startswith("Fatal Python error:")


def crash_stack(cluster: JaxCluster, p: int, cell_code: str = "") -> str:
    """Where the main thread was when process ``p`` crashed (from faulthandler), or ""."""
    from jaxnb import _stacks

    log = engine_log(cluster, p)
    start = log.rfind("Fatal Python error:")
    if start < 0:
        return ""
    return _stacks.format_stack(log[start:], cell_code)


def describe_dead(cluster: JaxCluster, dead: dict[int, str], cell_code: str = "") -> str:
    """A message naming each dead process with its host, pid, end and last stderr lines."""
    who = labels(dead)
    parts = [
        f"process {who} died; the jax.distributed group is broken: run `%jax_cluster restart`"
    ]
    for p, how in sorted(dead.items()):
        info = cluster.processes[p]
        parts.append(f"{label(p)} (JAX process {p}, pid {info.pid} on {info.host}) {how}.")
        tail = stderr_tail(cluster, p)
        if tail:
            parts.append("  last lines of its stderr:\n" + "\n".join("    " + ln for ln in tail))
        crash = crash_stack(cluster, p, cell_code)
        if crash:
            parts.append("  its main thread when it crashed:\n" + crash)
    return "\n".join(parts)


def one_line(cluster: JaxCluster, dead: dict[int, str]) -> str:
    """``[p1] (pid 123 on host) was killed by SIGKILL; …`` in one line."""
    return "; ".join(
        f"{label(p)} (pid {cluster.processes[p].pid} on {cluster.processes[p].host}) {how}"
        for p, how in sorted(dead.items())
    )


def stop_survivors(cluster: JaxCluster, dead: dict[int, str]) -> list[int]:
    """SIGKILL the processes still alive: without a peer they could only wait for JAX's heartbeat.

    Returns the processes stopped. Remote engines are signalled through ipyparallel.
    """
    survivors = [p for p in cluster.process_indices if p not in dead]
    with contextlib.suppress(Exception):
        signal_processes(cluster, survivors, signal.SIGKILL)
    if cluster.options.is_local:  # wait until they are gone (they are our children)
        launchers = _launchers_by_pid(cluster)
        killed = [launchers[cluster.processes[p].pid].process for p in survivors
                  if cluster.processes[p].pid in launchers]
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while killed and time.monotonic() < deadline:
            killed = [proc for proc in killed if exit_of(proc) is None]
            time.sleep(0.01)
    return survivors


def _launchers_by_pid(cluster: JaxCluster) -> dict:
    from jaxnb._startup import engine_launchers

    found = {}
    for launcher in engine_launchers(cluster._ipp):
        process = getattr(launcher, "process", None)
        if process is not None:
            found[process.pid] = launcher
    return found
