"""Per-process noise in a merged stream: lines that differ between processes only by a rank or pid.

gloo's C++ lines (``[Gloo] Rank 1 is connected to 1 peer ranks. …``) and Python
warnings whose path holds the engine's pid (``/tmp/ipykernel_4242/…py:3:
UserWarning: …`` and the source line under it) are not the user's output. The
merger (:class:`jaxnb._cells.live.LiveMerger`) keeps them out of the line-by-line
merge, so identical user lines around them stay one line, and writes each once
(by its :func:`noise_key`, digits ignored).

Informational lines of the C++ libraries (gloo's "Rank 2 is connected to 3 peer ranks", after
every join and recovery; XLA's and absl's ``I`` lines) are not written at all
(:func:`is_log_only`): they are in the engine's log, which ``%jax_cluster status`` names.
Their warnings and errors are merged as any line, named by process where they differ.
"""

from __future__ import annotations

import re

from jaxnb._core.cxx_log import LOG, route

_GLOO = re.compile(r"^\[Gloo\] ")
_WARNING = re.compile(r"^\S.*:\d+: [A-Za-z_][A-Za-z0-9_]*(?:Warning|Error): ")
_DIGITS = re.compile(r"\d+")


def is_noise(line: str) -> bool:
    """A gloo line or a Python warning's first line."""
    return bool(_GLOO.match(line) or _WARNING.match(line))


def is_log_only(line: str) -> bool:
    """A C++ library's informational line: in the engine's log, not in the notebook."""
    return route(line) == LOG


def is_warning(line: str) -> bool:
    """A Python warning's first line (the next line, indented, is its source)."""
    return bool(_WARNING.match(line))


def is_warning_source(line: str) -> bool:
    """The source line ``warnings`` prints under a warning (two spaces, then code)."""
    return line.startswith("  ") and bool(line.strip())


def noise_key(line: str) -> str:
    """What makes two processes' noise lines the same: the text with every number ignored."""
    return _DIGITS.sub("#", line)


def split_noise(lines: list[str]) -> tuple[list[str], list[str]]:
    """``lines`` without noise, and the noise lines (warnings with their source line)."""
    kept: list[str] = []
    noise: list[str] = []
    after_warning = False
    for line in lines:
        if is_log_only(line):
            after_warning = False
        elif is_noise(line):
            noise.append(line)
            after_warning = is_warning(line)
        elif after_warning and is_warning_source(line):
            noise.append(line)
            after_warning = False
        else:
            kept.append(line)
            after_warning = False
    return kept, noise
