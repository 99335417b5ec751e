"""Run one cell on every JAX process and show its output as one notebook output."""

from __future__ import annotations

import ast
import dataclasses
import sys
from typing import Any

from jaxnb._cells.live import LiveMerger
from jaxnb._cells.live_panel import LivePanel, NotebookScreen, in_kernel, live_options
from jaxnb._cells.outcome import CellOutcome as CellOutcome
from jaxnb._cells.outputs import write_raw
from jaxnb._core import ipp_internals
from jaxnb._core.contract import IMPORTED_KEY, EngineCall
from jaxnb._core.errors import RemoteError, remote_error
from jaxnb._core.notebook_cells import as_compiled
from jaxnb._core.state import Group
from jaxnb._debug.stops import Stops
from jaxnb._failures import out_of_memory, stale
from jaxnb._failures.cause import NOT_VALID
from jaxnb._failures.watch import Watch

POLL_SECONDS = 0.02
_LAST_VALUE = EngineCall("jaxnb._engine.run.values:last_value")


@dataclasses.dataclass
class ShowMode:
    """Which outputs a cell shows: merged (default), ``all`` raw, one process, or none (``quiet``)."""

    all: bool = False
    process: int | None = None
    quiet: bool = False


class ShownValue:
    """A cell value that stayed on the engines (a JAX array, too big): shown as process 0 showed it."""

    def __init__(self, data: dict, metadata: dict) -> None:
        self.data, self.metadata = data, metadata

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict, dict]:
        return self.data, self.metadata

    def __repr__(self) -> str:
        return str(self.data.get("text/plain", "<value on the engines>"))


def check_syntax(code: str) -> bool:
    """Raise ``SyntaxError`` here, once, instead of N times on the engines.

    Returns whether the cell ends in an expression, whose value IPython shows.
    """
    tree = compile(as_compiled(code), "<jaxnb cell>", "exec", ast.PyCF_ONLY_AST)
    assert isinstance(tree, ast.Module)
    compile(tree, "<jaxnb cell>", "exec")  # the errors only the compiler finds
    return bool(tree.body) and isinstance(tree.body[-1], ast.Expr)


def run_cell(
    group: Group,
    code: str,
    *,
    timeout: float | None = None,
    show: ShowMode | None = None,
    value: bool = False,
) -> CellOutcome:
    """Execute ``code`` on every process; stream merged output; raise on any error.

    ``value``: give the cell's value (process 0's) back in ``CellOutcome.value`` instead of
    showing it, so that a magic returns it as IPython's ``Out[n]``.
    """
    show = show or ShowMode()
    shows_value = check_syntax(code)
    processes = group.indices
    # A cell without a last expression runs silent: same output, less work on each engine.
    ar = group.view.execute(code, block=False, silent=not shows_value)
    futures = dict(zip(processes, ipp_internals.futures(ar, group.client), strict=True))
    # Per-process metadata dicts (stdout, stderr, outputs, error) filled as messages arrive.
    by_process = {p: f.metadata for p, f in futures.items()}
    merged = show.process is None and not show.all and not show.quiet
    folders = group.temp_folders
    out = LiveMerger(processes, sys.stdout.write, **live_options("stdout", folders)) if merged else None
    err = LiveMerger(processes, sys.stderr.write, **live_options("stderr", folders)) if merged else None
    live = LivePanel([out.view, err.view], NotebookScreen()) if out and err and in_kernel() else None
    shown_displays = 0
    watch = Watch(group, code, timeout, list(ar.msg_ids))
    stops = Stops(group, watch, {p: md["data"] for p, md in by_process.items()})
    try:
        while True:
            ar.wait(POLL_SECONDS)
            if merged:
                _feed(out, err, live, by_process)
                shown_displays = _show_displays(by_process[processes[0]], shown_displays)
            if ar.ready():
                break
            done = {p for p, f in futures.items() if f.done()}
            if not stops.check(done, {p: by_process[p].get("error") for p in done}):
                watch.check(done, by_process)
        watch.check_dead(by_process)  # a death is the error, whatever the others returned
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            watch.interrupted(by_process)
        if getattr(e, "mismatch", False) and any(md["stdout"] for md in by_process.values()):
            print(NOT_VALID)  # not shown as if it were valid
        if merged:  # what arrived so far, in tidy form, instead of a stale live view
            _feed(out, err, live, by_process, final=True)
        if isinstance(e, RemoteError):  # a divergence: one process may have run out of memory
            out_of_memory.explain(group, e, _errors(by_process))
        raise
    ar.wait_for_output(timeout=2)
    outcome = _collect(by_process, futures)
    if merged:
        _feed(out, err, live, by_process, final=True)
        _show_displays(by_process[processes[0]], shown_displays)
        result = outcome.results.get(processes[0])
        if value and not outcome.errors and result and result.get("data"):
            outcome.value = _cell_value(group, result)
        else:
            _show_result(result)
    elif show.quiet:
        pass
    else:
        chosen = processes if show.process is None else [show.process]
        _show_raw(chosen, by_process)
    if outcome.errors:
        group.mark_suspect_after_errors(len(outcome.errors), len(processes))
        error = remote_error(outcome.errors, stale.cause(group, outcome.errors, code))
        raise out_of_memory.explain(group, error, outcome.errors)
    return outcome


def _errors(by_process: dict[int, dict]) -> dict[int, Any]:
    return {p: md["error"] for p, md in by_process.items() if md.get("error") is not None}


def _feed(
    out: LiveMerger | None, err: LiveMerger | None, live: LivePanel | None, by_process: dict,
    final: bool = False,
) -> None:
    """Give the merged streams what arrived; at the end, empty the live view and write the rest."""
    if out is None or err is None:  # not merged: each process's output is shown as it is
        return
    for p, md in by_process.items():
        out.feed(p, md["stdout"] or "")
        err.feed(p, md["stderr"] or "")
    if live is not None and not final:
        live.tick()
    if final:
        if live is not None:
            live.close()
        out.finish()
        err.finish()


def _collect(by_process: dict[int, dict], futures: dict[int, Any]) -> CellOutcome:
    """Each process's error and value; a reply that never came, or came as
    ipyparallel's ``EngineError`` (the engine unregistered), is an error too."""
    errors: dict[int, Any] = {}
    results: dict[int, dict | None] = {}
    for p, md in by_process.items():
        if md.get("error") is not None:
            errors[p] = md["error"]
        else:
            failed = _failed(futures[p])
            if failed is not None:
                errors[p] = failed
        results[p] = md.get("execute_result")
    first = by_process[min(by_process)]
    imported = list((first.get("data") or {}).get(IMPORTED_KEY) or [])
    return CellOutcome(errors=errors, results=results, imported=imported)


def _failed(future: Any) -> BaseException | None:
    """The exception a finished request ended in, or one saying no reply came."""
    if not future.done():
        return RuntimeError("no reply arrived from this process; run `%jax_cluster status`")
    try:
        value = future.result(timeout=0)  # ipyparallel returns a remote error as the value
    except BaseException as exc:
        return exc
    return value if isinstance(value, BaseException) else None


def _cell_value(group: Group, result: dict) -> Any:
    """Process 0's value of the cell, or what shows it when the value stays on the engines."""
    import cloudpickle

    try:
        engine = group.client[group.processes[0].engine_id]
        data = engine.apply_sync(_LAST_VALUE)
        if data is not None:
            return cloudpickle.loads(data)
    except Exception:  # whatever went wrong, the display is still there to show
        pass
    return ShownValue(result["data"], result.get("metadata", {}))


def _show_displays(md: dict, start: int) -> int:
    outputs = md.get("outputs") or []
    for content in outputs[start:]:
        _publish(content.get("data", {}), content.get("metadata", {}))
    return len(outputs)


def _show_result(result: dict | None) -> None:
    if result and result.get("data"):
        _publish(result["data"], result.get("metadata", {}))


def _publish(data: dict, metadata: dict) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import publish_display_data
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        publish_display_data(data=data, metadata=metadata)
    else:
        print(data.get("text/plain", ""))


def _show_raw(chosen: list[int], by_process: dict[int, dict]) -> None:
    write_raw(chosen, {p: by_process[p]["stdout"] or "" for p in chosen}, sys.stdout.write)
    write_raw(chosen, {p: by_process[p]["stderr"] or "" for p in chosen}, sys.stderr.write)
    for p in chosen:
        md = by_process[p]
        _show_displays(md, 0)
        _show_result(md.get("execute_result"))
