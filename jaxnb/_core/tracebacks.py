"""The user's part of a remote traceback: frames of jaxnb, ipyparallel and ``threading`` left out.

An engine formats a traceback with IPython (one frame a paragraph: a ``File
PATH:LINE, in NAME`` or ``Cell In[N], line L`` header, then indented source
lines). :func:`user_frames` keeps every frame whose file is the user's and
says how many it left out; the full text stays on the error
(``RemoteError.full_traceback``).
"""

from __future__ import annotations

import re

#: The first line of a frame in IPython's traceback text.
_FRAME = re.compile(r"^(?:File \S.*:\d+|Cell In\[\d+\], line \d+)")
#: Frames that are not the user's: jaxnb's own modules, ipyparallel, threading, ipyparallel's
#: ``exec`` of the applied call (``<string>``), IPython's magic dispatch and ``decorator``.
_NOT_USERS = re.compile(
    r"[/\\]jaxnb[/\\](?:_[^/\\]*|magics\.py)(?:[/\\]|:)"
    r"|[/\\](?:ipyparallel|decorator|IPython[/\\]core)[/\\]"
    r"|[/\\]threading\.py:"
    r"|^File <string>:"
)


def user_frames(text: str) -> tuple[str, int]:
    """``text`` without the frames that are not the user's, and how many were left out.

    A traceback made only of such frames is kept whole (there is nothing else to show).
    """
    lines = text.split("\n")
    frames: list[tuple[int, int]] = []  # (first line, end) of every frame
    i = 0
    while i < len(lines):
        if _FRAME.match(lines[i]):
            start = i
            i += 1
            while i < len(lines) and (not lines[i] or lines[i][0] in " -"):
                i += 1
            # The blank line that ends the paragraph belongs to it.
            frames.append((start, i))
        else:
            i += 1
    hidden = [(a, b) for a, b in frames if is_hidden(lines[a])]
    if not hidden or len(hidden) == len(frames):
        return text, 0
    drop = {n for a, b in hidden for n in range(a, b)}
    kept = [line for n, line in enumerate(lines) if n not in drop]
    return "\n".join(kept), len(hidden)


def is_hidden(header: str) -> bool:
    """Whether the frame with this first line (``File PATH:LINE, in NAME``) is not the user's."""
    return _NOT_USERS.search(header) is not None


def is_entry(file: str, func: str) -> bool:
    """The frame that runs the user's code on an engine: IPython's cell runner, or
    ipyparallel's ``apply`` (the frames below it are the kernel's, never shown)."""
    path = file.replace("\\", "/")
    return path.endswith("IPython/core/interactiveshell.py") or (
        path.endswith("ipyparallel/engine/kernel.py") and func == "do_apply"
    )
