"""What a bench measured, written where the docs read it: ``bench/results/NAME.json``.

Every bench records its figures with :class:`Results` and saves them at the end; the docs'
Benchmarks page is made from these files (``docs/_ext/jaxnb_docs.py``), so no figure is typed by
hand. Each file says when, where (the machine, the load average when the run started) and how
(the command) its figures were measured::

    results = Results("cluster", "Start, stop and a cell's round trip against bare ipyparallel")
    results.add("start to ready, N=2", 1.41, "s", baseline="bare ipyparallel 1.05 s", ratio=1.34,
                target="<= 1.3x")
    results.save()
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
from typing import Any

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def machine() -> dict[str, Any]:
    """This machine, as the figures need it said: cores, memory, CPU, Python, JAX."""
    import psutil

    found: dict[str, Any] = {
        "cores": os.cpu_count(),
        "memory": f"{psutil.virtual_memory().total / 2**30:.0f} GiB",
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }
    try:
        from importlib.metadata import version

        found["jax"] = version("jax")
    except Exception:
        pass
    return found


class Results:
    """The figures of one bench run; the load average is read when it is made (the run's start)."""

    def __init__(self, bench: str, title: str) -> None:
        self.bench, self.title = bench, title
        self.load_average = list(os.getloadavg())
        self.date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        self.command = "python -m bench." + " ".join([bench, *map(shlex.quote, sys.argv[1:])])
        self.figures: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def add(self, what: str, value: float, unit: str = "", *, baseline: str = "",
            ratio: float | None = None, target: str = "") -> None:
        """One figure: ``what`` was measured as ``value`` ``unit``; against ``baseline`` (its
        ``ratio``), with the ``target`` it must meet."""
        self.figures.append({"what": what, "value": value, "unit": unit, "baseline": baseline,
                             "ratio": ratio, "target": target})

    def note(self, text: str) -> None:
        """A sentence the figures need (what was not measured, why a target was missed)."""
        self.notes.append(text)

    def save(self, folder: str = RESULTS) -> str:
        """Write ``folder/BENCH.json`` (replacing the last run's); its path."""
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{self.bench}.json")
        document = {"bench": self.bench, "title": self.title, "command": self.command,
                    "date": self.date, "machine": machine(), "load_average": self.load_average,
                    "figures": self.figures, "notes": self.notes}
        with open(path + ".tmp", "w") as f:
            json.dump(document, f, indent=2)
            f.write("\n")
        os.replace(path + ".tmp", path)
        print(f"bench: figures written to {os.path.relpath(path)}")
        return path
