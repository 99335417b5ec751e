"""The controller's heartbeat: how often it pings the engines, and when a silent one is lost.

An engine's heart answers from a thread of its own that needs no GIL, so a busy engine or a
loaded machine still beats; an engine (or host) stalled for :data:`SILENCE_SECONDS`, or a cut
link, is dropped by the controller (tests/test_resize_hosts.py keeps a shorter stall alive).
"""

from __future__ import annotations

#: Controller heartbeat period (ms): engines register after their first beat.
HEARTBEAT_MS = 50
#: Missed beats before the controller drops an engine (1.5 s; ipyparallel drops it at one more).
HEARTBEAT_MISSES = 30
#: How long an engine has been silent when the controller drops it.
SILENCE_SECONDS = HEARTBEAT_MS * (HEARTBEAT_MISSES + 1) / 1000
