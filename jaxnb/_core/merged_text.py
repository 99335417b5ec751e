"""One text from several processes' texts, as a cell shows them: what every process wrote
identically once, what differs under each process's label (``[p1] …``).

:mod:`jaxnb._cells.live` merges a cell's streams with :func:`tidy` as they arrive; the
debugger merges the answers of several processes to one command with :func:`merge`.
"""

from __future__ import annotations

from jaxnb._core.messages import label


def tidy(
    processes: list[int], rest: dict[int, list[str]]
) -> tuple[list[str], dict[int, list[str]], list[str]]:
    """The lines every process has at the start, each process's own middle, the common end."""
    lists = [rest[p] for p in processes]
    shortest = min(len(lines) for lines in lists)
    start = 0
    while start < shortest and all(lines[start] == lists[0][start] for lines in lists):
        start += 1
    end = 0
    while end < shortest - start and all(lines[-1 - end] == lists[0][-1 - end] for lines in lists):
        end += 1
    head = lists[0][:start]
    tail = lists[0][len(lists[0]) - end :]
    middles = {p: rest[p][start : len(rest[p]) - end] for p in processes}
    return head, middles, tail


def merge(texts: dict[int, str]) -> str:
    """The processes' texts as one: common first and last lines once, the rest labelled."""
    processes = sorted(texts)
    if not processes:
        return ""
    head, middles, tail = tidy(processes, {p: texts[p].splitlines() for p in processes})
    lines = list(head)
    for p in processes:
        lines.extend(f"{label(p)} {line}" for line in middles[p])
    lines.extend(tail)
    return "".join(line + "\n" for line in lines)
