"""Run one cell on every process while all of them trace it; collect, merge, analyse, show.

Order: prepare the run folder (a folder that cannot be written fails here, before
anything starts) → every process starts its trace together (``_engine.profiling.start``,
agreed through the coordination service) → the cell runs exactly as ``%%jax_cluster``
runs it (``_spmd.run_cell``: same output, errors, failure reports) → every process
stops together, even when the cell raised, so the trace up to the error is kept → the
files come back over the engines → merge, step table, timeline.
"""

from __future__ import annotations

import gzip
import json
import os
import secrets
from collections.abc import Callable
from typing import Any

from jaxnb import _spmd
from jaxnb._contract import EngineCall
from jaxnb._profile import folder as run_folder
from jaxnb._profile import merge as merging
from jaxnb._profile import show as showing
from jaxnb._profile import steps as step_logic
from jaxnb._profile import timeline
from jaxnb._profile.result import ProfileResult
from jaxnb._state import Group

_START = EngineCall("jaxnb._engine.profiling:start")
_STOP = EngineCall("jaxnb._engine.profiling:stop")
_ABORT = EngineCall("jaxnb._engine.profiling:abort")
#: Seconds every process has to reach the start (they are idle, so this is generous).
START_AGREE_S = 60.0
#: Seconds a process waits at the stop for the others before it stops alone.
STOP_AGREE_S = 10.0
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
    _spmd.check_syntax(code)
    where = run_folder.prepare(storage, name)
    key = f"{where.session}-{secrets.token_hex(4)}"
    started = _start_all(group, key)
    error: BaseException | None = None
    try:
        _spmd.run_cell(group, code, timeout=timeout)
    except BaseException as exc:  # kept: the trace up to the error is still collected
        error = exc
    stopped, missing = _stop_all(group)
    result, merged = collect(group, where, started, stopped, missing)
    result.error = error
    if on_result is not None:
        on_result(result)
    if display:
        showing.show(result, timeline_png(result, merged))
    if error is not None:
        raise error
    return result


def _start_all(group: Group, key: str) -> dict[int, dict[str, Any]]:
    ar = group.view.apply_async(_START, key, START_AGREE_S)
    try:
        replies = ar.get(timeout=START_AGREE_S + 30)
    except BaseException as exc:
        group.view.apply_async(_ABORT).wait(timeout=30)
        raise RuntimeError(
            f"the processes could not start tracing together ({type(exc).__name__}: {exc}); "
            "run `%jax_cluster reset` and try again"
        ) from None
    return dict(zip(group.indices, replies, strict=True))  # the view is in process order


def _stop_all(group: Group) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """Each process's stop reply; the processes that gave none, with the reason."""
    pending = {p: group.engine(p).apply_async(_STOP, STOP_AGREE_S) for p in group.indices}
    stopped: dict[int, dict[str, Any]] = {}
    missing: dict[int, str] = {}
    for p, ar in pending.items():
        try:
            stopped[p] = ar.get(timeout=CALL_S)
        except BaseException as exc:
            missing[p] = f"its trace could not be stopped: {type(exc).__name__}: {exc}"
    return stopped, missing


def collect(
    group: Group,
    where: run_folder.RunFolder,
    started: dict[int, dict[str, Any]],
    stopped: dict[int, dict[str, Any]],
    missing: dict[int, str],
) -> tuple[ProfileResult, dict[str, Any] | None]:
    """Bring every process's files into the run folder; merge; per-step times; straggler."""
    traces: list[merging.ProcessTrace] = []
    files: dict[int, str] = {}
    for p, s in sorted(stopped.items()):
        engine = group.engine(p)
        try:
            files[p] = where.xplane(s["host"], p)
            run_folder.fetch(engine, s["xplane"], s["sizes"]["xplane"], files[p], CALL_S)
            trace_file = where.trace(s["host"], p)
            if s["trace"]:
                run_folder.fetch(engine, s["trace"], s["sizes"]["trace"], trace_file, CALL_S)
                with gzip.open(trace_file, "rt") as f:
                    trace = json.load(f)
                if s.get("steps_ns"):  # %jax_train --profile-steps: steps are report intervals
                    merging.add_steps(trace, int(s["anchor_ns"]), s["steps_ns"])
                info = started.get(p, {})
                traces.append(merging.ProcessTrace(
                    p, s["host"], trace, int(s["anchor_ns"]),
                    int(info.get("offset_ns", 0)), int(info.get("offset_error_ns", 0))))
        except BaseException as exc:
            missing[p] = f"its files could not be fetched: {type(exc).__name__}: {exc}"
        finally:
            run_folder.discard(engine, s["folder"])
    return analyse(where, traces, files, missing)


def analyse(
    where: run_folder.RunFolder,
    traces: list[merging.ProcessTrace],
    files: dict[int, str],
    missing: dict[int, str],
) -> tuple[ProfileResult, dict[str, Any] | None]:
    """Merge the traces into ``where``; per-step rows; the straggler; also the merged trace."""
    perfetto = merged = None
    rows: list[dict[str, Any]] = []
    if traces:
        merged = merging.merge(traces)
        with gzip.open(where.perfetto, "wt", compresslevel=1) as f:  # fast: traces run to 100s of MB
            json.dump(merged, f, separators=(",", ":"))
        perfetto = where.perfetto
        for t in traces:
            rows.extend(step_logic.step_times(t.process, t.trace.get("traceEvents", [])))
        with open(os.path.join(where.merged_dir, "steps.json"), "w") as f:
            json.dump(rows, f, indent=1)
    slowest, cause = step_logic.straggler(rows)
    result = ProfileResult(
        path=where.root,
        perfetto=perfetto,
        steps=rows,
        straggler=slowest,
        cause=cause,
        session=where.session,
        hosts={t.process: t.host for t in traces},
        files=files,
        clock_offsets_ms={t.process: -t.offset_ns / 1e6 for t in traces},
        clock_error_ms=merging.alignment_error_ms(traces) if traces else {},
        missing=missing,
    )
    return result, merged


def timeline_png(result: ProfileResult, merged: dict[str, Any] | None) -> bytes | None:
    """Draw the timeline from the merged trace and save it beside it."""
    if merged is None or result.perfetto is None:
        return None
    png = timeline.picture(merged, result.hosts, result.straggler)
    if png:
        with open(os.path.join(os.path.dirname(result.perfetto), "timeline.png"), "wb") as f:
            f.write(png)
    return png
