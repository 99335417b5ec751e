"""Merge the text streams of N processes: identical lines once, the rest labelled.

Lines are released while the cell runs: a line that every process has printed
identically at the same position is written once, at once. From the first
line where processes differ, the rest of each process's output is written at
the end, labelled ``[pI]`` (or once, unlabelled, if the remainders agree).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jaxnb._messages import label


class StreamMerger:
    """Line-aligned merge of one stream (stdout or stderr) across processes."""

    def __init__(self, processes: Sequence[int], write: Callable[[str], None]):
        self.processes = list(processes)
        self.write = write
        self._seen = {p: 0 for p in self.processes}  # characters consumed per process
        self._lines: dict[int, list[str]] = {p: [] for p in self.processes}
        self._partial = {p: "" for p in self.processes}
        self._released = 0  # lines written in common
        self._diverged = False

    def feed(self, process: int, text: str) -> None:
        """Give the whole text printed so far by ``process`` (only the new part is used)."""
        new = text[self._seen[process] :]
        self._seen[process] = len(text)
        if not new:
            return
        pending = self._partial[process] + new
        *complete, self._partial[process] = pending.split("\n")
        self._lines[process].extend(line + "\n" for line in complete)
        self._release_common()

    def _release_common(self) -> None:
        if self._diverged:
            return
        while True:
            heads = [self._lines[p][self._released : self._released + 1] for p in self.processes]
            if not all(heads):
                return
            first = heads[0][0]
            if any(h[0] != first for h in heads):
                self._diverged = True
                return
            self.write(first)
            self._released += 1

    def finish(self) -> None:
        """Write everything not yet released (call once, when the cell is over)."""
        rest = {}
        for p in self.processes:
            tail = self._lines[p][self._released :]
            if self._partial[p]:
                tail = [*tail, self._partial[p]]
            rest[p] = "".join(tail)
        texts = set(rest.values())
        if texts == {""}:
            return
        if len(texts) == 1 and len(self.processes) > 0 and all(rest.values()):
            self.write(rest[self.processes[0]])
            return
        for p in self.processes:
            for line in rest[p].splitlines():
                self.write(f"{label(p)} {line}\n")


def write_raw(processes: Sequence[int], texts: dict[int, str], write: Callable[[str], None]) -> None:
    """``--all``: every process's output in full, each under its label."""
    for p in processes:
        if texts.get(p):
            write(f"{label(p)}\n{texts[p]}")
            if not texts[p].endswith("\n"):
                write("\n")
