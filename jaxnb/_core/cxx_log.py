"""C and C++ libraries' log lines (XLA, absl/glog, gloo): which are informational, which are
XLA's allocator's. Engines keep the informational ones in their log (:mod:`jaxnb._engine.boot.
cxx_lines`); the notebook's merged output leaves them out too (:mod:`jaxnb._cells.live_noise`).
"""

from __future__ import annotations

import re

#: glog/absl (``W1128 08:00:00.123456  4242 bfc_allocator.cc:291] ...``), or TensorFlow/XLA's
#: older form (``2026-11-28 08:00:00.123456: W external/xla/...``): the level letter.
_LEVEL = re.compile(r"^(?:([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+\S+:\d+\]"
                    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) \S+:\d+\])")
_GLOO = re.compile(r"^\[Gloo\] ")
_ALLOCATOR = re.compile(r"bfc_allocator|Allocator \(\w+\) ran out of memory")
#: The start of a line that may be one of the above: a partial line like it is held until whole.
MAY_BE = re.compile(r"^(?:[IWEF]\d|\d{4}-|\[G|\[$|$)")
CELL, LOG, ALLOCATOR = "cell", "log", "allocator"


def route(line: str) -> str:
    """Where one whole line goes: ``"log"`` (only), ``"allocator"`` (held), or ``"cell"``."""
    if _GLOO.match(line):
        return LOG
    level = _LEVEL.match(line)
    if level is None:
        return CELL
    if _ALLOCATOR.search(line):
        return ALLOCATOR
    return LOG if (level.group(1) or level.group(2)) == "I" else CELL
