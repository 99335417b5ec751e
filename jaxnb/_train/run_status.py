"""How a training run ended, as its dashboard's header says it: a status and one line."""

from __future__ import annotations

from jaxnb._train.result import Result


def final_status(result: Result, interrupted: bool, ended_in_recovery: str | None,
                 recoveries: str) -> tuple[str, str]:
    """``(status, message)`` of a concluded run: interrupted, failed, stopped or finished.

    ``interrupted``: the kernel was interrupted during it; ``ended_in_recovery``: why it ended
    during a recovery (Stop, an interrupt), if it did; ``recoveries``: ``recovered 1 of 2``.
    """
    step = len(result.history)
    recovered = f" ({recoveries})" if result.failures else ""
    if isinstance(result.error, KeyboardInterrupt) or (result.error and interrupted):
        return "interrupted", f"interrupted after {step} reports"
    if result.error is not None:
        summary = getattr(result.error, "summary", None) or str(result.error)
        return "failed", summary.splitlines()[0]
    if ended_in_recovery:
        return "stopped", f"on request: {ended_in_recovery}{recovered}"
    if result.stopped:
        at = f", at step {result.stopped_at}" if result.stopped_at is not None else ""
        return "stopped", f"on request after {step} reports{at}{recovered}"
    return "finished", recovered.strip(" ()")
