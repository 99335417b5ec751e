"""A search's trials go in step with the notebook's verdicts, so a pruned trial ends within one
report of the prune however fast its steps are (as a Ray Tune trial's ``report`` waits).

With a pruner, report N waits until the notebook has judged report N-1 (the notebook
answers each batch of process 0's reports on the engines' control channel, after it sent the
stop of a pruned trial). So when the pruner stops a trial at report N-1, every process is at
report N at the latest, and ends there. The wait is on the notebook's reply only, overlapping
the step that follows: steps slower than the round trip (tens of milliseconds) lose nothing.
A notebook that stops answering (its kernel busy elsewhere) is waited for at most
``MAX_WAIT_SECONDS``; the run then goes on unpaced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: How long a report waits for the notebook's verdict before the run goes on unpaced.
MAX_WAIT_SECONDS = 10.0
#: A waiting report looks up this often, so that a stop signal or an interrupt gets through.
WAIT_SLICE_SECONDS = 0.05

_lock = threading.Condition()
_run: str | None = None  # the paced run, or None
_judged = -1  # the last report (its ``seq``) of process 0 the notebook judged


def start(run_id: str | None) -> None:
    """A run starts on this process: paced when ``run_id`` is given, else not."""
    global _run, _judged
    with _lock:
        _run, _judged = run_id, -1


def judged(run_id: str, seq: int) -> None:
    """(control channel) The notebook judged process 0's reports up to ``seq`` of ``run_id``."""
    global _judged
    with _lock:
        if run_id == _run and seq > _judged:
            _judged = seq
            _lock.notify_all()


def wait_for_verdict(seq: int, stop_asked: Callable[[], bool]) -> None:
    """Wait until the notebook judged report ``seq`` (or a stop is asked, or it stays silent)."""
    global _run
    if _run is None or seq < 0:
        return
    waited = 0.0
    with _lock:
        while _judged < seq and not stop_asked():
            if waited >= MAX_WAIT_SECONDS:
                _run = None  # the notebook does not answer: go on unpaced
                return
            _lock.wait(WAIT_SLICE_SECONDS)
            waited += WAIT_SLICE_SECONDS
