"""What the last cut of the collectives' connections did, in words (for :mod:`jaxnb._failures`).

Cutting takes an engine's sockets with ``pidfd_getfd``, which needs ptrace rights over the
engine. Yama's ``ptrace_scope=1`` (Ubuntu's and Debian's default) grants them only to the
engine's ancestors: the helper that ssh starts on a host is not one, and a non-root user's cut
there takes nothing. The messages then say so, instead of saying the connections were closed.
"""

from __future__ import annotations

DENIED = ("{where} would not hand the engines' sockets to jaxnb ({n} refused): {why}")
YAMA = ("Yama's ptrace_scope is {scope} there, which lets only a process's ancestors take its "
        "descriptors (sudo sysctl kernel.yama.ptrace_scope=0 allows it)")
NO_RIGHTS = "jaxnb's helper has no ptrace rights over the engines there"

_why_not: list[str] = []


def reset() -> None:
    """Forget the last cut's refusals (a new cut begins)."""
    _why_not.clear()


def record(where: str, result: dict) -> int:
    """Note a host's answer to a cut (``{"cut", "denied", "ptrace_scope"}``); how many were cut."""
    denied, scope = int(result.get("denied") or 0), result.get("ptrace_scope")
    if denied:
        why = YAMA.format(scope=scope) if scope else NO_RIGHTS
        _why_not.append(DENIED.format(where=where, n=denied, why=why))
    return int(result.get("cut") or 0)


def why_not() -> str | None:
    """Why the last cut left connections open, when the kernel refused some (one line)."""
    return "; ".join(_why_not) or None
