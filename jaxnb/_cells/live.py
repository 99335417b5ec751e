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
        write: Callable[[str], None],
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
        self._count = {p: 0 for p in self.processes}  # complete lines
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
        never newlines), so lines are counted, not characters.
        """
        old = self._text[process]
        if text is old:
            return
        done = self._done[process]  # characters up to the last newline taken
        # Only lines with a carriage return can be rewritten: check the old ones only if they have one.
        if self._rewritable[process] and not text.startswith(old[:done]):
            done = len(text) - len(text.split("\n", self._count[process])[-1])
        self._text[process] = text
        rest = text[done:]
        lines = rest.split("\n")
        self._partial[process] = lines.pop()
        self._done[process] = len(text) - len(self._partial[process])
        if text.find("\r", done, self._done[process]) >= 0:
            self._rewritable[process] = True
        if not self.streaming and len(lines) > self.view_lines:
            skipped = len(lines) - self.view_lines  # they would only scroll through the view
            self._count[process] += skipped
            self.dropped += skipped
            lines = lines[skipped:]
        released = self.released
        for line in lines:
            self._add(process, collapse(line))
        if self.flush is not None and self.released != released:
            self.flush()  # lines on the page now, not at the kernel's next flush

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
        """Write everything not on the page yet, in tidy form (call once, when the cell is over)."""
        rest: dict[int, list[str]] = {}
        ends_open = False
        for p in self.processes:
            lines = self._text[p].split("\n")
            last = lines.pop()
            lines = lines[self.released :]
            if "\r" in self._text[p]:
                lines = [collapse(line) for line in lines]
            if collapse(last):
                lines.append(collapse(last))
                ends_open = True
            rest[p] = lines
        if not any(rest.values()):
            return
        first = rest[self.processes[0]]
        labelled = not (first and all(rest[p] == first for p in self.processes))
        total = sum(len(lines) for lines in rest.values()) if labelled else len(first)
        room = max(self.page_lines - self.released, 0)
        left_out = max(total - room, 0)
        if left_out:
            where = self.save_log(dict(self._text)) if self.save_log else "not saved"
            self.write(
                f"[jaxnb] {left_out:,} lines of output not shown; each process's full output: {where}\n"
            )
        if not labelled:
            out = first[left_out:]
        else:  # only the lines that are shown get their label
            out, skip = [], left_out
            for p in self.processes:
                out.extend(f"{label(p)} {line}" for line in rest[p][skip:])
                skip = max(skip - len(rest[p]), 0)
        if not out:
            return
        text = "\n".join(out)
        if labelled or not ends_open:
            text += "\n"
        self.write(text)
