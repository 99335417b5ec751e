"""Run one cell on every JAX process and show its output as one notebook output."""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jaxnb._errors import RemoteError
from jaxnb._outputs import StreamMerger, label, labels, write_raw

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster

POLL_SECONDS = 0.02
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL_NUMBER = re.compile(r"Cell In\[\d+\]")


@dataclasses.dataclass
class ShowMode:
    """Which outputs a cell shows: merged (default), ``all`` raw, or one process."""

    all: bool = False
    process: int | None = None


@dataclasses.dataclass
class CellOutcome:
    """What each process produced: errors and the last expression's value."""

    errors: dict[int, Any]
    results: dict[int, dict | None]


def check_syntax(code: str) -> bool:
    """Raise ``SyntaxError`` here, once, instead of N times on the engines.

    Returns whether the cell ends in an expression, whose value IPython shows.
    """
    from jaxnb._stacks import as_compiled

    tree = compile(as_compiled(code), "<jaxnb cell>", "exec", ast.PyCF_ONLY_AST)
    compile(tree, "<jaxnb cell>", "exec")  # the errors only the compiler finds
    return bool(tree.body) and isinstance(tree.body[-1], ast.Expr)


def run_cell(
    cluster: JaxCluster,
    code: str,
    *,
    timeout: float | None = None,
    show: ShowMode | None = None,
    display: Callable[[dict, dict], None] | None = None,
) -> CellOutcome:
    """Execute ``code`` on every process; stream merged output; raise on any error."""
    from jaxnb import _watch

    show = show or ShowMode()
    shows_value = check_syntax(code)
    processes = cluster.process_indices
    # A cell without a last expression runs silent: same output, less work on each engine.
    ar = cluster.view.execute(code, block=False, silent=not shows_value)
    futures = dict(zip(processes, ar._children, strict=True))
    # Per-process metadata dicts (stdout, stderr, outputs, error) filled as messages arrive.
    by_process = {p: f.output.metadata for p, f in futures.items()}
    merged = show.process is None and not show.all
    out = StreamMerger(processes, sys.stdout.write) if merged else None
    err = StreamMerger(processes, sys.stderr.write) if merged else None
    shown_displays = 0
    watch = _watch.CellWatch(cluster, code, timeout)
    try:
        while True:
            ar.wait(POLL_SECONDS)
            if merged:
                for p, md in by_process.items():
                    out.feed(p, md["stdout"] or "")
                    err.feed(p, md["stderr"] or "")
                shown_displays = _show_displays(by_process[processes[0]], shown_displays, display)
            if ar.ready():
                break
            done = {p for p, f in futures.items() if f.done()}
            watch.check(done, by_process)
    except KeyboardInterrupt:
        watch.interrupted(by_process)
        raise
    watch.check_dead(by_process)  # a death is the error, whatever the others returned
    ar.wait_for_output(timeout=2)
    outcome = _collect(by_process, futures)
    if merged:
        for p, md in by_process.items():
            out.feed(p, md["stdout"] or "")
            err.feed(p, md["stderr"] or "")
        out.finish()
        err.finish()
        _show_displays(by_process[processes[0]], shown_displays, display)
        _show_result(outcome.results.get(processes[0]), display)
    else:
        chosen = processes if show.process is None else [show.process]
        _show_raw(chosen, by_process, display)
    if outcome.errors:
        cluster._mark_suspect_after_error(outcome.errors, processes)
        raise remote_error(outcome.errors)
    return outcome


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
    return CellOutcome(errors=errors, results=results)


def _failed(future: Any) -> BaseException | None:
    """The exception a finished request ended in, or one saying no reply came."""
    if not future.done():
        return RuntimeError("no reply arrived from this process; run `%jax_cluster status`")
    try:
        value = future.result(timeout=0)  # ipyparallel returns a remote error as the value
    except BaseException as exc:
        return exc
    return value if isinstance(value, BaseException) else None


def _show_displays(md: dict, start: int, display: Callable | None) -> int:
    outputs = md.get("outputs") or []
    for content in outputs[start:]:
        _publish(content.get("data", {}), content.get("metadata", {}), display)
    return len(outputs)


def _show_result(result: dict | None, display: Callable | None) -> None:
    if result and result.get("data"):
        _publish(result["data"], result.get("metadata", {}), display)


def _publish(data: dict, metadata: dict, display: Callable | None) -> None:
    if display is not None:
        display(data, metadata)
        return
    try:
        from IPython import get_ipython
        from IPython.display import publish_display_data
    except ImportError:
        get_ipython = None  # type: ignore[assignment]
    if get_ipython is not None and get_ipython() is not None:
        publish_display_data(data=data, metadata=metadata)
    else:
        print(data.get("text/plain", ""))


def _show_raw(chosen: list[int], by_process: dict[int, dict], display: Callable | None) -> None:
    write_raw(chosen, {p: by_process[p]["stdout"] or "" for p in chosen}, sys.stdout.write)
    write_raw(chosen, {p: by_process[p]["stderr"] or "" for p in chosen}, sys.stderr.write)
    for p in chosen:
        md = by_process[p]
        _show_displays(md, 0, display)
        _show_result(md.get("execute_result"), display)


def remote_error(errors: dict[int, Any]) -> RemoteError:
    """One exception for all failed processes, each distinct traceback shown once."""
    groups: dict[str, list[int]] = {}
    texts: dict[str, str] = {}
    for p, e in sorted(errors.items()):
        text = _traceback_text(e)
        key = _CELL_NUMBER.sub("Cell", text)
        groups.setdefault(key, []).append(p)
        texts.setdefault(key, text)
    tracebacks = []
    for key, procs in groups.items():
        header = f"---- {', '.join(label(p) for p in procs)} ----"
        tracebacks.append(header + "\n" + texts[key])
    first = errors[min(errors)]
    who = labels(errors)
    name = getattr(first, "ename", type(first).__name__)
    value = getattr(first, "evalue", str(first))
    count = "process" if len(errors) == 1 else "processes"
    summary = f"{name}: {value} (on {count} {who})"
    return RemoteError(summary, sorted(errors), tracebacks)


def _traceback_text(error: Any) -> str:
    tb = getattr(error, "traceback", None)
    if isinstance(tb, list):
        tb = "\n".join(tb)
    if not tb:
        tb = f"{getattr(error, 'ename', type(error).__name__)}: {getattr(error, 'evalue', error)}"
    return _ANSI.sub("", tb)


def elapsed_since(start: float) -> float:
    """Seconds since ``start`` (monotonic)."""
    return time.monotonic() - start
