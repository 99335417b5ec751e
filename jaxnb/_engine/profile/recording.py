"""``%%jax_profile`` on the engines: every process traces together, clocks compared to process 0.

The notebook calls :func:`start` on every process before the cell and :func:`stop` after
it (even when the cell raised). Both are agreed through the ``jax.distributed``
coordination service (its key-value store, see :func:`_agree`), not by wall-clock
guesses. :func:`start` also measures this process's clock against process 0's over the
same service (NTP-style round trips, best of :data:`ROUNDS`). ``jax.profiler`` writes into
a private temporary folder; the notebook then pulls the files with :func:`read_chunk`
(bytes over ipyparallel, so no shared filesystem is needed) and removes them with
:func:`discard`.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
import time
from typing import Any

from jaxnb._engine import jax_internals
from jaxnb._engine.profile import trace_events

#: Round trips to process 0 when measuring the clock offset; the shortest one is kept.
ROUNDS = 5
#: The annotation recorded right after the trace starts: it ties trace time to the wall clock.
ANCHOR = trace_events.ANCHOR
_PREFIX = "jaxnb/profile"

_state: dict[str, Any] = {}
#: Folders of stopped traces whose files the notebook has not taken yet.
_unfetched: set[str] = set()


def start(session: str, timeout_s: float) -> dict[str, Any]:
    """Agree with every process, measure the clock offset to process 0, start the trace.

    Returns this process's ``process``, ``host``, ``offset_ns`` (process 0's clock minus
    this one's) and ``offset_error_ns`` (half the best round trip).
    """
    import jax

    if _state or _unfetched:  # left by a profile the notebook gave up on: drop it
        abort()
    client = jax_internals.distributed_client()
    index, count = jax.process_index(), jax.process_count()
    _agree(client, f"{_PREFIX}/{session}/start", index, count, timeout_s)
    offset, error = _clock_offset(client, session, index, count, timeout_s)
    folder = tempfile.mkdtemp(prefix="jaxnb-profile-")
    jax.profiler.start_trace(folder)
    with jax.profiler.TraceAnnotation(ANCHOR):
        anchor_ns = time.time_ns()
    _state.update(folder=folder, session=session, anchor_ns=anchor_ns)
    return {"process": index, "host": socket.gethostname(), "offset_ns": offset,
            "offset_error_ns": error}


def stop(timeout_s: float) -> dict[str, Any]:
    """Agree with every process (giving up after ``timeout_s``), stop the trace, name its files.

    Returns ``process``, ``host``, ``together`` (all processes reached the stop),
    ``anchor_ns`` (wall clock inside the :data:`ANCHOR` annotation), ``folder`` and the
    ``xplane`` and ``trace`` (Chrome trace JSON) file paths with their ``sizes``.
    """
    import jax

    if not _state:
        raise RuntimeError("no %%jax_profile trace is running on this process")
    client = jax_internals.distributed_client()
    index, count = jax.process_index(), jax.process_count()
    try:
        _agree(client, f"{_PREFIX}/{_state['session']}/stop", index, count, timeout_s)
        together = True
    except Exception:  # a process that never came: stop anyway, keep what was traced
        together = False
    state = dict(_state)
    _state.clear()
    _unfetched.add(state["folder"])
    jax.profiler.stop_trace()
    xplane = _one(state["folder"], "*.xplane.pb")
    trace = _one(state["folder"], "*.trace.json.gz")
    return {
        "process": index,
        "host": socket.gethostname(),
        "session": state["session"],
        "together": together,
        "anchor_ns": state["anchor_ns"],
        "folder": state["folder"],
        "xplane": xplane,
        "trace": trace,
        "sizes": {"xplane": os.path.getsize(xplane), "trace": os.path.getsize(trace) if trace else 0},
    }


def read_chunk(path: str, offset: int, size: int) -> bytes:
    """``size`` bytes of ``path`` from ``offset`` (the notebook pulls trace files this way)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def discard(folder: str) -> None:
    """Remove a trace's temporary folder once the notebook has its files."""
    _unfetched.discard(folder)
    if os.path.basename(folder).startswith("jaxnb-profile-"):
        shutil.rmtree(folder, ignore_errors=True)


def _one(folder: str, pattern: str) -> str:
    found = sorted(glob.glob(os.path.join(folder, "plugins", "profile", "*", pattern)))
    return found[-1] if found else ""


def _agree(client: Any, key: str, index: int, count: int, timeout_s: float) -> None:
    """Return once every process has reached ``key`` (a barrier made of key-value entries,
    so a process that never comes makes this one raise after ``timeout_s``, and nothing else)."""
    if client is None or count == 1:
        return
    client.key_value_set(f"{key}/{index}", "1")
    deadline = time.monotonic() + timeout_s
    for other in range(count):
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        client.blocking_key_value_get(f"{key}/{other}", left_ms)


def _clock_offset(client: Any, session: str, index: int, count: int, timeout_s: float) -> tuple[int, int]:
    """(process 0's clock − this clock, half the shortest round trip), both in ns.

    Process 0 answers each other process's pings in turn with its own time; the
    offset is taken from the round trip with the shortest duration.
    """
    if client is None or count == 1:
        return 0, 0
    key = f"{_PREFIX}/{session}/clock"
    timeout_ms = int(timeout_s * 1000)
    if index == 0:
        for other in range(1, count):
            for k in range(ROUNDS):
                client.blocking_key_value_get(f"{key}/ping/{other}/{k}", timeout_ms)
                client.key_value_set(f"{key}/pong/{other}/{k}", str(time.time_ns()))
        return 0, 0
    best: tuple[int, int] | None = None
    for k in range(ROUNDS):
        t0 = time.time_ns()
        client.key_value_set(f"{key}/ping/{index}/{k}", "1")
        theirs = int(client.blocking_key_value_get(f"{key}/pong/{index}/{k}", timeout_ms))
        t1 = time.time_ns()
        if best is None or t1 - t0 < best[1]:
            best = (theirs - (t0 + t1) // 2, t1 - t0)
    assert best is not None
    return best[0], best[1] // 2


def abort() -> None:
    """Stop a trace this process may have started, without waiting for the others; drop it,
    and the files of a stopped trace the notebook did not wait for."""
    import jax

    for folder in list(_unfetched):
        discard(folder)
    if _state:
        folder = _state["folder"]
        _state.clear()
        try:
            jax.profiler.stop_trace()
        finally:
            discard(folder)


# ---- %jax_train --profile-steps A:B: the trace starts and stops inside report() ---------------

_window: dict[str, Any] = {}


def arm_steps(session: str, first: int, last: int, timeout_s: float) -> None:
    """Trace steps ``first``..``last`` of the coming training run on this process.

    A step is the interval between two ``jaxnb.report()`` calls, named by the step the
    later one reports. Every process starts at the first report of step ``first - 1``
    or later (at once when ``first <= 1``) and stops at the first report of step
    ``last`` or later, agreed through the coordination service as in :func:`start`.
    """
    _window.clear()
    _window.update(session=session, first=first, last=last, timeout=timeout_s, steps=[],
                   started=None, stopped=None, last_ns=None)
    if first <= 1:
        _begin()


def step_reported(step: int) -> None:
    """Called by ``jaxnb.report()`` on every step: opens or closes the armed window."""
    if not _window or _window["stopped"] is not None:
        return
    now = time.time_ns()
    if _window["started"] is not None:
        _window["steps"].append((step, _window["last_ns"], now))
        _window["last_ns"] = now
        if step >= _window["last"]:
            _window["stopped"] = stop(_window["timeout"])
    elif step >= _window["first"] - 1:
        _begin()


def finish_steps() -> dict[str, Any]:
    """After the run: what the window recorded (``start``, ``stop`` replies and step times);
    a window the run never closed (it ended early) is closed here, on every process together."""
    if not _window:
        return {"start": None, "stop": None, "steps_ns": []}
    if _window["started"] is not None and _window["stopped"] is None:
        _window["stopped"] = stop(_window["timeout"])
    found = {"start": _window["started"], "stop": _window["stopped"], "steps_ns": _window["steps"]}
    _window.clear()
    return found


def _begin() -> None:
    _window["started"] = start(_window["session"], _window["timeout"])
    _window["last_ns"] = time.time_ns()
