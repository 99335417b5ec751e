"""Say who died, how, and what it last printed (from ipyparallel's engine logs)."""

from __future__ import annotations

import re

from jaxnb._core import ipp_internals
from jaxnb._core.messages import GROUP_BROKEN, label, labels
from jaxnb._core.state import Group
from jaxnb._failures import stacks
from jaxnb._hosts import processes, site

STDERR_TAIL_LINES = 12
NOTHING_WRITTEN = "it wrote nothing to its stderr during this cell"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FATAL = "Fatal Python error:"
#: What a process writes as C++ aborts it (``std::terminate``'s line, gloo's check, an XLA check).
_LAST_WORDS = re.compile(r"terminate called after|  what\(\): |Received data size|Check failed: ")
#: The lines of faulthandler's dump after its first line.
_DUMP = re.compile(r"^(?:Thread 0x|Current thread 0x|  File |  <no Python frame>|Extension modules: )")


#: How long a death waits for the dead engines' stderr tees to copy their last bytes to the log.
LOG_SETTLE_SECONDS = 1.0


def settle_logs(group: Group, dead: list[int]) -> None:
    """Wait (at most :data:`LOG_SETTLE_SECONDS`) until the stderr tee of each dead engine on this
    machine has ended (:mod:`jaxnb._engine.boot.stderr_tee`): then its log holds every byte
    the engine wrote, the words it died with (gloo's check, ``terminate called``) too."""
    tees = [group.processes[p].log_writer_pid for p in dead
            if group.processes[p].log_writer_pid > 0
            and processes.launcher_of(group, group.processes[p].pid) is not None]
    if tees:
        processes.wait_pids_gone(tees, LOG_SETTLE_SECONDS)


def engine_log(group: Group, p: int) -> str:
    """What process ``p``'s engine wrote to its log (stderr and stdout) since the current cell
    began (:func:`mark_logs`), colours removed; read where it ran."""
    pid = group.processes[p].pid
    launcher = processes.launcher_of(group, pid)
    if launcher is None:
        return _ANSI.sub("", site.of(group).log(group, p))
    start, request = group.log_marks.get(pid, (0, ""))
    text = ipp_internals.launcher_output(launcher, start)
    # The engine logs the request it handles; fd output of an earlier cell can reach the log
    # late (ipykernel forwards it from a thread), so what comes before that line is not this cell's.
    at = text.rfind(request) if request else -1
    if at >= 0:
        text = text[text.find("\n", at) + 1 :] if "\n" in text[at:] else ""
    return _ANSI.sub("", text)


def mark_logs(group: Group, requests: list[str] | None = None) -> None:
    """Remember where each local engine's log ends and the request it runs now (one id per
    process, in process order): a death quotes only what the engine wrote after."""
    for p, info in enumerate(group.processes):
        launcher = processes.launcher_of(group, info.pid)
        size = ipp_internals.launcher_output_size(launcher) if launcher is not None else None
        if size is not None:
            request = requests[p] if requests and p < len(requests) else ""
            group.log_marks[info.pid] = (size, request)


def stderr_tail(group: Group, p: int, lines: int = STDERR_TAIL_LINES) -> list[str]:
    """The last lines process ``p``'s engine wrote to its log."""
    return log_tail(engine_log(group, p), lines)


def log_tail(log: str, lines: int = STDERR_TAIL_LINES) -> list[str]:
    """The last non-empty lines of an engine log, or the lines that led to a crash; the process's
    last words (:data:`_LAST_WORDS`: why C++ aborted it) always, wherever they fell."""
    kept = [ln.rstrip() for ln in log.splitlines()]
    kept = [ln for ln in kept if ln.strip() and not ln.startswith("[Gloo]")]
    # (another thread's last words may run into faulthandler's line: "...?Fatal Python error")
    fatal = next((i for i in range(len(kept) - 1, -1, -1) if _FATAL in kept[i]), None)
    if fatal is not None:  # a crash: what led to it, and what arrived after faulthandler's dump
        after = [i for i in range(fatal + 1, len(kept)) if not _DUMP.match(kept[i])]
        chosen = {*range(max(0, fatal - lines), fatal + 1), *after[-lines:]}
    else:
        chosen = set(range(max(0, len(kept) - lines), len(kept)))
    # stderr is shared by threads and by C++: the abort's reason can land far before the dump,
    # or inside one of its lines (then quoted from where it starts)
    words = [i for i, ln in enumerate(kept) if _LAST_WORDS.search(ln)][-lines:]
    for i in words:
        found = _LAST_WORDS.search(kept[i])
        if found and _DUMP.match(kept[i]):
            kept[i] = kept[i][found.start():]
    return [kept[i] for i in sorted(chosen.union(words))]


def indented_tail(log: str) -> str:
    """:func:`log_tail` of ``log``, indented for a message."""
    return "\n".join("    " + ln for ln in log_tail(log))


def crash_stack(group: Group, p: int, cell_code: str = "") -> str:
    """Where the main thread was when process ``p`` crashed (from faulthandler), or ""."""
    log = engine_log(group, p)
    start = log.rfind(_FATAL)
    if start < 0:
        return ""
    return stacks.format_stack(log[start:], cell_code)


def one_line(group: Group, dead: dict[int, str]) -> str:
    """``[p1] (pid 123 on host) was killed by SIGKILL; …`` in one line."""
    return "; ".join(
        f"{label(p)} (pid {group.processes[p].pid} on {group.processes[p].host}) {how}"
        for p, how in sorted(dead.items())
    )


def died_summary(group: Group, dead: dict[int, str]) -> str:
    """The one-line summary of a death: who, how, and that the group needs a restart."""
    return f"{one_line(group, dead)}; {GROUP_BROKEN}"


def describe_dead(group: Group, dead: dict[int, str], cell_code: str = "") -> str:
    """Each dead process with its host, pid, end, last log lines and crash stack."""
    parts = [f"process {labels(dead)} died; {GROUP_BROKEN}"]
    for p, how in sorted(dead.items()):
        info = group.processes[p]
        parts.append(f"{label(p)} (JAX process {p}, pid {info.pid} on {info.host}) {how}.")
        tail = stderr_tail(group, p)
        if tail:
            parts.append("  last lines of its stderr:\n" + "\n".join("    " + ln for ln in tail))
        else:
            parts.append(f"  {NOTHING_WRITTEN}.")
        crash = crash_stack(group, p, cell_code)
        if crash:
            parts.append("  its main thread when it crashed:\n" + crash)
    return "\n".join(parts)
