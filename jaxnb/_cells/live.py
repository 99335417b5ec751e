"""Live merge of one text stream (stdout or stderr) across N processes.

While the cell runs, a :class:`LiveMerger` keeps two things:

* the *page*: lines that every process printed identically at the same
  position are written there (as ordinary stream output) as soon as the last
  process prints them — until the processes first differ, or half of
  ``page_lines`` lines were written (the other half is for the tail);
* the *view*: everything printed after that, as it arrives, one entry per line
  position and text. A line shown for one process (``[p0] step 3``) loses its
  label once every other process printed the same line at the same position,
  so a lagging process never holds the others back. The view ends with each
  process's unfinished line (a ``\\r`` progress bar), shown as the terminal
  would: only the text after the last carriage return.

When the cell ends, :meth:`LiveMerger.finish` writes the rest to the page in
the tidy form (identical remainders once, otherwise each process's lines
under its label), with carriage returns
collapsed and at most ``page_lines`` lines per stream in all: a longer output
keeps its tail, after a note with the number of lines left out and where the
full output of each process was saved.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence

from jaxnb._cells import live_noise
from jaxnb._core.merged_text import tidy
from jaxnb._core.messages import label

#: Lines of one stream written to the page per cell, at most (live and at the end).
PAGE_LINES = 2000
#: Lines of one stream the live view keeps (its tail).
VIEW_LINES = 40


def collapse(line: str) -> str:
    """What a terminal or notebook shows of ``line``: the text after its last ``\\r``."""
    if "\r" not in line:
        return line
    stripped = line.rstrip("\r")
    return stripped[stripped.rfind("\r") + 1 :]


def group_label(processes: Sequence[int] | set[int]) -> str:
    """``[p0,p2]``: the label of the processes that printed one line."""
    return "[" + ",".join(f"p{p}" for p in sorted(processes)) + "]"


@dataclasses.dataclass
class _Entry:
    position: int
    text: str
    processes: set[int]


class LiveMerger:
    """Merge one stream of N processes: live page and view, then the tidy rest."""

    def __init__(
        self,
        processes: Sequence[int],
        write: Callable[[str], object],
        *,
        save_log: Callable[[dict[int, str]], str] | None = None,
        flush: Callable[[], None] | None = None,
        page_lines: int = PAGE_LINES,
        view_lines: int = VIEW_LINES,
    ):
        self.processes = list(processes)
        self.write = write
        self.save_log = save_log
        self.flush = flush
        self.page_lines = page_lines
        self.view_lines = view_lines
        self._text = {p: "" for p in self.processes}  # everything printed so far
        self._done = {p: 0 for p in self.processes}  # characters of complete lines taken
        self._rewritable = {p: False for p in self.processes}  # a taken line has a "\r"
        self._partial = {p: "" for p in self.processes}  # the unfinished line
        self._count = {p: 0 for p in self.processes}  # complete lines (noise left out)
        self._taken = {p: 0 for p in self.processes}  # complete lines (noise included)
        self._warning: dict[int, str | None] = {p: None for p in self.processes}  # last line's
        self._noise_seen: set[str] = set()
        self._noise_written = 0
        self._pending: dict[int, deque[str]] = {p: deque() for p in self.processes}
        self._entries: dict[int, _Entry] = {}  # the view, oldest first (key: serial number)
        self._by_position: dict[int, list[int]] = {}  # line position -> entry keys
        self._serial = 0
        self.released = 0  # lines every process printed identically, written to the page
        self.streaming = True  # the page still takes common lines as they come
        self.dropped = 0  # lines that left the view, or never entered it

    def feed(self, process: int, text: str) -> None:
        """Give the whole text printed so far by ``process``.

        Only the lines after those already taken are used. ipyparallel's client
        collapses carriage returns in the text it keeps (it removes characters,
        never newlines), so lines are counted, not characters. Noise (gloo's
        lines, Python warnings: :mod:`jaxnb._cells.live_noise`) stays out of the merge
        and is written once, as it comes.
        """
        old = self._text[process]
        if text is old:
            return
        done = self._done[process]  # characters up to the last newline taken
        # Only lines with a carriage return can be rewritten: check the old ones only if they have one.
        if self._rewritable[process] and not text.startswith(old[:done]):
            done = len(text) - len(text.split("\n", self._taken[process])[-1])
        self._text[process] = text
        rest = text[done:]
        lines = rest.split("\n")
        self._partial[process] = lines.pop()
        self._done[process] = len(text) - len(self._partial[process])
        if text.find("\r", done, self._done[process]) >= 0:
            self._rewritable[process] = True
        self._taken[process] += len(lines)
        wrote = self._noise_written
        lines = [line for line in map(collapse, lines) if not self._noise(process, line)]
        if not self.streaming and len(lines) > self.view_lines:
            skipped = len(lines) - self.view_lines  # they would only scroll through the view
            self._count[process] += skipped
            self.dropped += skipped
            lines = lines[skipped:]
        released = self.released
        for line in lines:
            self._add(process, line)
        if self.flush is not None and (self.released != released or self._noise_written != wrote):
            self.flush()  # lines on the page now, not at the kernel's next flush

    def _noise(self, process: int, line: str) -> bool:
        """Whether ``line`` is noise; noise not written yet (by any process) is written now (a
        C++ library's informational line never: it is in the engine's log)."""
        if live_noise.is_log_only(line):
            self._warning[process] = None
            return True
        if live_noise.is_noise(line):
            key = live_noise.noise_key(line)
            self._warning[process] = key if live_noise.is_warning(line) else None
        elif (warned := self._warning[process]) is not None and live_noise.is_warning_source(line):
            key = warned + "\n" + live_noise.noise_key(line)
            self._warning[process] = None
        else:
            self._warning[process] = None
            return False
        if key not in self._noise_seen:
            self._noise_seen.add(key)
            self.write(line + "\n")
            self._noise_written += 1
        return True

    def _add(self, process: int, text: str) -> None:
        position = self._count[process]
        self._count[process] += 1
        keys = self._by_position.setdefault(position, [])
        for key in keys:
            if self._entries[key].text == text:
                self._entries[key].processes.add(process)
                break
        else:
            self._serial += 1
            self._entries[self._serial] = _Entry(position, text, {process})
            keys.append(self._serial)
            if len(self._entries) > self.view_lines:
                self._drop_oldest()
        if self.streaming:
            self._pending[process].append(text)
            self._release()

    def _drop_oldest(self) -> None:
        key = next(iter(self._entries))
        entry = self._entries.pop(key)
        keys = self._by_position[entry.position]
        keys.remove(key)
        if not keys:
            del self._by_position[entry.position]
        self.dropped += 1

    def _release(self) -> None:
        while all(self._pending[p] for p in self.processes):
            heads = {self._pending[p][0] for p in self.processes}
            if len(heads) > 1 or self.released >= self.page_lines // 2:  # half kept for the tail
                self.streaming = False
                self._pending = {p: deque() for p in self.processes}
                return
            text = heads.pop()
            self.write(text + "\n")
            for p in self.processes:
                self._pending[p].popleft()
            for key in self._by_position.pop(self.released, []):
                self._entries.pop(key, None)
            self.released += 1

    def view(self) -> str:
        """The live view: lines not on the page yet, then each process's unfinished line."""
        everyone = len(self.processes)
        lines = []
        if self.dropped:
            lines.append(f"... {self.dropped:,} lines not shown while the cell runs")
        for entry in self._entries.values():
            if len(entry.processes) == everyone:
                lines.append(entry.text)
            else:
                lines.append(f"{group_label(entry.processes)} {entry.text}")
        bars = {p: collapse(self._partial[p]) for p in self.processes}
        shown = [p for p in self.processes if bars[p].strip()]
        if len(shown) == everyone and len({bars[p] for p in shown}) == 1:
            lines.append(bars[shown[0]])
        else:
            lines.extend(f"{label(p)} {bars[p]}" for p in shown)
        return "".join(line + "\n" for line in lines)

    def finish(self) -> None:
        """Write everything not on the page yet, in tidy form (call once, when the cell is over).

        Tidy form: what every process printed identically (the start and the end of the
        rest) once, what differs under each process's label. At most ``page_lines`` lines
        in all; a longer output keeps the end of every process's own lines.
        """
        rest: dict[int, list[str]] = {}
        ends_open = False
        for p in self.processes:
            lines = self._text[p].split("\n")
            last = lines.pop()
            if "\r" in self._text[p]:
                lines = [collapse(line) for line in lines]
            lines = live_noise.split_noise(lines)[0][self.released :]
            if collapse(last):
                lines.append(collapse(last))
                ends_open = True
            rest[p] = lines
        if not any(rest.values()):
            return
        head, middles, tail = tidy(self.processes, rest)
        room = max(self.page_lines - self.released, 0)
        head, middles, tail, left_out = _cap(head, middles, tail, room)
        if left_out:
            where = self.save_log(dict(self._text)) if self.save_log else "not saved"
            self.write(
                f"[jaxnb] {left_out:,} lines of output not shown; each process's full output: {where}\n"
            )
        out = list(head)
        for p in self.processes:
            out.extend(f"{label(p)} {line}" for line in middles[p])
        out.extend(tail)
        if not out:
            return
        text = "\n".join(out)
        if not ends_open or (any(middles.values()) and not tail):
            text += "\n"
        self.write(text)


def _cap(
    head: list[str], middles: dict[int, list[str]], tail: list[str], room: int
) -> tuple[list[str], dict[int, list[str]], list[str], int]:
    """At most ``room`` lines: the common end first, then every process's last own lines
    (an equal share each), then the end of the common start; and how many were left out."""
    total = len(head) + sum(map(len, middles.values())) + len(tail)
    if total <= room:
        return head, middles, tail, 0
    tail = tail[len(tail) - min(len(tail), room) :]
    room -= len(tail)
    shares = {p: 0 for p in middles}
    left = room
    want = {p: len(lines) for p, lines in middles.items()}
    while left > 0 and any(want[p] > shares[p] for p in middles):
        needy = [p for p in middles if want[p] > shares[p]]
        each = max(left // len(needy), 1)
        for p in needy:
            give = min(each, want[p] - shares[p], left)
            shares[p] += give
            left -= give
    middles = {p: lines[len(lines) - shares[p] :] if shares[p] else [] for p, lines in middles.items()}
    head = head[len(head) - left :] if left else []
    kept = len(head) + sum(map(len, middles.values())) + len(tail)
    return head, middles, tail, total - kept
