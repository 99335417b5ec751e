"""The user's part of a remote traceback: frames of JAX, jaxnb, ipyparallel and ``threading``
left out.

An engine formats a traceback with IPython (one frame a paragraph: a ``File
PATH:LINE, in NAME`` or ``Cell In[N], line L`` header, then indented source
lines; frames JAX marks hidden are one ``[... skipping hidden N frame]`` line).
:func:`fold` keeps every frame whose file is the user's and says whose frames it left
out and how many; the full text stays on the error (``RemoteError.full_traceback``).
"""

from __future__ import annotations

import dataclasses
import re

#: The first line of a frame in IPython's traceback text.
_FRAME = re.compile(r"^(?:File \S.*:\d+|Cell In\[\d+\], line \d+)")
#: Frames that are not the user's, by whose they are: jaxnb's own modules; ipyparallel with
#: what runs its calls (its ``exec`` of the applied call, ``<string>``, IPython's magic
#: dispatch, ``decorator``, ``threading``); JAX's installed packages (as JAX's own
#: traceback filtering leaves them out).
_OWNERS = (
    ("JAX", re.compile(r"[/\\](?:site|dist)-packages[/\\](?:jax|jaxlib)[/\\]")),
    ("jaxnb", re.compile(r"[/\\]jaxnb[/\\](?:_[^/\\]*|magics)(?:[/\\]|:)")),
    ("ipyparallel", re.compile(
        r"[/\\](?:ipyparallel|decorator|IPython[/\\]core)[/\\]|[/\\]threading\.py:|^File <string>:")),
)
#: IPython's line for frames JAX marked ``__tracebackhide__`` (JAX's own, always).
_SKIPPED = re.compile(r"^\s*\[\.\.\. skipping hidden (\d+) frames?\]\s*$")
#: The note under a traceback whose frames were left out.
NOTE = "({frames} of {owners} not shown; every frame: `import sys; print(sys.last_value.full_traceback)`)"


@dataclasses.dataclass(frozen=True)
class Folded:
    """A traceback with only the user's frames: ``text``, and how many frames of whose
    (``hidden``: owner -> count, in the order of :data:`_OWNERS`) were left out."""

    text: str
    hidden: dict[str, int]

    @property
    def count(self) -> int:
        """How many frames were left out."""
        return sum(self.hidden.values())

    def note(self) -> str:
        """``(12 frames of JAX and jaxnb not shown; every frame: …)``, or ``""``."""
        if not self.count:
            return ""
        owners = [name for name, _ in _OWNERS if self.hidden.get(name)]
        said = owners[0] if len(owners) == 1 else f"{', '.join(owners[:-1])} and {owners[-1]}"
        count = self.count
        return NOTE.format(frames=f"{count} frame{'' if count == 1 else 's'}", owners=said)


def _owner(header: str) -> str | None:
    return next((name for name, pattern in _OWNERS if pattern.search(header)), None)


def fold(text: str) -> Folded:
    """``text`` without the frames that are not the user's, and how many of whose were left out.

    A traceback made only of such frames is kept whole (there is nothing else to show).
    """
    lines = text.split("\n")
    frames: list[tuple[int, int, str | None]] = []  # (first line, end, owner) of every frame
    i = 0
    while i < len(lines):
        skipped = _SKIPPED.match(lines[i])
        if skipped:  # a paragraph of its own: with the blank lines after it
            start = i
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            frames.append((start, i, "JAX"))
        elif _FRAME.match(lines[i]):
            start = i
            i += 1
            while i < len(lines) and (not lines[i] or lines[i][0] in " -") and not _SKIPPED.match(lines[i]):
                i += 1
            # The blank line that ends the paragraph belongs to it.
            frames.append((start, i, _owner(lines[start])))
        else:
            i += 1
    hidden = [(a, b, owner) for a, b, owner in frames if owner is not None]
    if not hidden or len(hidden) == len(frames):
        return Folded(text, {})
    counts: dict[str, int] = {}
    for a, _, owner in hidden:
        skipped = _SKIPPED.match(lines[a])
        counts[owner] = counts.get(owner, 0) + (int(skipped[1]) if skipped else 1)
    drop = {n for a, b, _ in hidden for n in range(a, b)}
    kept = [line for n, line in enumerate(lines) if n not in drop]
    return Folded("\n".join(kept), counts)


def is_hidden(header: str) -> bool:
    """Whether the frame with this first line (``File PATH:LINE, in NAME``) is jaxnb's or
    ipyparallel's (never the user's). JAX's frames are folded only in tracebacks: the debugger
    may step into them."""
    return _owner(header) not in (None, "JAX")


def is_entry(file: str, func: str) -> bool:
    """The frame that runs the user's code on an engine: IPython's cell runner, or
    ipyparallel's ``apply`` (the frames below it are the kernel's, never shown)."""
    path = file.replace("\\", "/")
    return path.endswith("IPython/core/interactiveshell.py") or (
        path.endswith("ipyparallel/engine/kernel.py") and func == "do_apply"
    )
