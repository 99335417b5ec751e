"""Plain-text tables and sizes, for everything jaxnb shows as text (terminals, ``text/plain``,
error messages)."""

from __future__ import annotations


def columns(rows: list[list[str]]) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def human_bytes(n: int | None) -> str:
    """``1.5 MB``; ``—`` when not known."""
    if n is None:
        return "—"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
