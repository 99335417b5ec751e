"""Run one cell on every process while all of them trace it; collect, merge, analyse, show.

Order: prepare the run folder (a folder that cannot be written fails here, before
anything starts) → every process starts its trace together (``_engine.profile.recording.start``,
agreed through the coordination service) → the cell runs exactly as ``%%jax_cluster``
runs it (``spmd.run_cell``: same output, errors, failure reports) → every process
stops together, even when the cell raised, so the trace up to the error is kept → the
files come back over the engines → merge, step table, timeline.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

from jaxnb._cells import spmd
from jaxnb._core.contract import EngineCall
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.state import Group
from jaxnb._failures import detect, free
from jaxnb._profile import folder as run_folder
from jaxnb._profile import merge as merging
from jaxnb._profile import show as showing
from jaxnb._profile import steps as step_logic
from jaxnb._profile import timeline
from jaxnb._profile.result import ProfileResult

_START = EngineCall("jaxnb._engine.profile.recording:start")
_STOP = EngineCall("jaxnb._engine.profile.recording:stop")
_ABORT = EngineCall("jaxnb._engine.profile.recording:abort")
_PREPARE = EngineCall("jaxnb._engine.profile.parts:prepare")
#: Seconds every process has to reach the start (they are idle, so this is generous).
START_AGREE_S = 60.0
#: Seconds a process waits at the stop for the others before it stops alone.
STOP_AGREE_S = 10.0
#: After a cell failed: seconds a process waits at the stop for the others (one may still be
#: running the cell; it is not waited for).
FAILED_AGREE_S = 1.0
#: Seconds for one engine call (a stop, a chunk of a file).
CALL_S = 120.0


def profile(
    group: Group,
    code: str,
    *,
    name: str | None = None,
    storage: str | None = None,
    timeout: float | None = None,
    on_result: Callable[[ProfileResult], None] | None = None,
    display: bool = True,
) -> ProfileResult:
    """Run ``code`` on every process under ``jax.profiler``; a :class:`ProfileResult`.

    A ``ValueError`` before anything runs when the folder cannot be written. When the
    cell raises, the result is still built, shown and handed to ``on_result``, then the
    cell's error is raised.
    """
    spmd.check_syntax(code)
    where = run_folder.prepare(storage, name)
    key = f"{where.session}-{secrets.token_hex(4)}"
    started = _start_all(group, key)
    error: BaseException | None = None
    try:
        spmd.run_cell(group, code, timeout=timeout)
    except BaseException as exc:  # kept: the trace up to the error is still collected
        error = exc
    # A cell that failed: its profile comes back as fast as it failed, from the processes
    # done with it (one still running it drops its trace when it gets there).
    if error is None:
        stopped, missing = _stop_all(group, STOP_AGREE_S)
    else:
        dead = detect.dead_processes(group)
        # the controller hears of a finished request a little after this kernel does: give it
        # a moment before a process counts as still running the cell
        still = free.wait_idle(group, [p for p in group.indices if p not in dead], FAILED_AGREE_S)
        stopped, missing = _stop_all(group, FAILED_AGREE_S, still)
    try:
        result, parts = collect(group, where, started, stopped, missing)
    except Exception as exc:
        if error is None:
            raise
        print(f"jaxnb: the profile could not be collected ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        raise error from None
    result.error = error
    if error is not None:  # its steps end at the error: no process is slower for a reason
        result.straggler = result.cause = None
    if on_result is not None:
        on_result(result)
    if display:
        showing.show(result, timeline_png(result, parts))
    if error is not None:
        raise error
    return result


def _start_all(group: Group, key: str) -> dict[int, dict[str, Any]]:
    ar = group.view.apply_async(_START, key, START_AGREE_S)
    try:
        replies = ar.get(timeout=START_AGREE_S + 30)
    except BaseException as exc:
        group.view.apply_async(_ABORT).wait(timeout=30)
        raise ClusterStateError(
            f"the processes could not start tracing together ({_short(exc)}); stop a trace you "
            "started yourself (jax.profiler.stop_trace()) or run `%jax_cluster reset`, then try again"
        ) from None
    return dict(zip(group.indices, replies, strict=True))  # the view is in process order


def _stop_all(
    group: Group, agree_s: float, still: Collection[int] = ()
) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """Each process's stop reply (each waits ``agree_s`` for the others); the processes that
    gave none, with the reason. The processes ``still`` running the cell are not waited for:
    each stops its trace when it gets to the request, then drops it."""
    pending = {p: group.engine(p).apply_async(_STOP, agree_s) for p in group.indices}
    stopped: dict[int, dict[str, Any]] = {}
    missing: dict[int, str] = {}
    deadline = time.monotonic() + CALL_S
    for p, ar in pending.items():
        try:
            if p in still:
                raise TimeoutError
            stopped[p] = ar.get(timeout=max(0.1, deadline - time.monotonic()))
        except BaseException as exc:
            missing[p] = f"its trace could not be stopped ({_short(exc)})"
            with contextlib.suppress(Exception):  # (a dead engine: nothing to remove)
                group.engine(p).apply_async(_ABORT)  # after the stop: its files are removed
    return stopped, missing


def collect(
    group: Group,
    where: run_folder.RunFolder,
    started: dict[int, dict[str, Any]],
    stopped: dict[int, dict[str, Any]],
    missing: dict[int, str],
) -> tuple[ProfileResult, dict[int, dict[str, Any]]]:
    """Each process prepares its part (in parallel); the notebook pulls the files and joins
    the parts into the merged trace; per-step rows; the straggler. Also the timeline data."""
    pending = {p: group.engine(p).apply_async(_PREPARE, p, group.size, started.get(p, {}), s,
                                              s.get("steps_ns"))
               for p, s in stopped.items()}
    parts: dict[int, dict[str, Any]] = {}
    files: dict[int, str] = {}
    for p, s in sorted(stopped.items()):
        engine = group.engine(p)
        try:
            parts[p] = pending[p].get(timeout=CALL_S)
            files[p] = where.xplane(s["host"], p)
            run_folder.fetch(engine, s["xplane"], s["sizes"]["xplane"], files[p], CALL_S)
            run_folder.fetch(engine, parts[p]["part"], parts[p]["part_size"], where.part(p), CALL_S)
        except BaseException as exc:
            parts.pop(p, None)
            missing[p] = f"its files could not be fetched ({_short(exc)})"
        finally:
            run_folder.discard(engine, s["folder"])
    hosts = {p: stopped[p]["host"] for p in parts}
    return analyse(where, parts, hosts, started, files, missing), parts


def analyse(
    where: run_folder.RunFolder,
    parts: dict[int, dict[str, Any]],
    hosts: dict[int, str],
    started: dict[int, dict[str, Any]],
    files: dict[int, str],
    missing: dict[int, str],
) -> ProfileResult:
    """Join the parts into the merged trace in ``where``; rows, straggler, clock figures."""
    perfetto = None
    rows = [row for p in sorted(parts) for row in parts[p]["rows"]]
    if parts:
        perfetto = where.perfetto
        merging.join_parts([where.part(p) for p in sorted(parts)], perfetto)
        with open(os.path.join(where.merged_dir, "steps.json"), "w") as f:
            json.dump(rows, f, indent=1)
    slowest, cause = step_logic.straggler(rows)
    ref = parts[0]["error_ns"] if 0 in parts else 0.0
    return ProfileResult(
        path=where.root,
        perfetto=perfetto,
        steps=rows,
        straggler=slowest,
        cause=cause,
        session=where.session,
        hosts=hosts,
        files=files,
        clock_offsets_ms={p: -started.get(p, {}).get("offset_ns", 0) / 1e6 for p in parts},
        clock_error_ms={p: (parts[p]["error_ns"] + (ref if p != 0 else 0.0)) / 1e6 for p in parts},
        missing=missing,
    )


def timeline_png(result: ProfileResult, parts: dict[int, dict[str, Any]]) -> bytes | None:
    """Draw the timeline from the processes' timeline data and save it beside the trace."""
    if not parts or result.perfetto is None:
        return None
    png = timeline.picture({p: part["timeline"] for p, part in parts.items()}, result.hosts,
                           result.straggler)
    if png:
        with open(os.path.join(os.path.dirname(result.perfetto), "timeline.png"), "wb") as f:
            f.write(png)
    return png


def _short(exc: BaseException) -> str:
    """One short line for why a process gave no trace."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[-1] if lines else type(exc).__name__  # a remote error ends with its message
    if "EngineError" in text and "died" in text:
        return "its process died"
    if isinstance(exc, TimeoutError) or "TimeoutError" in type(exc).__name__:
        return "it was still running the cell"
    return text[:120]
