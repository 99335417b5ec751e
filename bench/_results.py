"""Where a bench writes its figures: ``bench/results/NAME.json`` (or ``$JAXNB_BENCH_RESULTS``).

One JSON document a bench run: the date, the machine, its load average at the start and at
the end, the command, and the figures the bench printed, so that the README and the docs can
be made from what a bench measured rather than copied by hand.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import sys
from typing import Any

#: Set to write results elsewhere (the test suite's small runs write to a temporary folder).
ENV = "JAXNB_BENCH_RESULTS"
DEFAULT = pathlib.Path(__file__).resolve().parent / "results"


class Results:
    """A bench run's figures, written as JSON by :meth:`write` (started at construction)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = datetime.datetime.now().astimezone()
        self.load_at_start = os.getloadavg()
        self.figures: dict[str, Any] = {}

    def add(self, **figures: Any) -> None:
        """Record figures (JSON values: numbers, strings, lists, dicts)."""
        self.figures.update(figures)

    def write(self) -> pathlib.Path:
        """Write ``NAME.json``; print and return its path."""
        folder = pathlib.Path(os.environ.get(ENV) or DEFAULT)
        folder.mkdir(parents=True, exist_ok=True)
        doc = {
            "bench": self.name,
            "date": self.started.isoformat(timespec="seconds"),
            "ended": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                        "platform": platform.platform(), "python": platform.python_version()},
            "load_average": {"start": list(self.load_at_start), "end": list(os.getloadavg())},
            "command": " ".join(["python -m", f"bench.{_module(self.name)}", *sys.argv[1:]]),
            "figures": self.figures,
        }
        path = folder / f"{self.name}.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"figures written to {path}")
        return path


def _module(name: str) -> str:
    """The bench's module (``gpu_check`` for the figures ``gpu``): the script run, else ``name``."""
    script = pathlib.Path(sys.argv[0])
    return script.stem if script.suffix == ".py" and script.parent.name == "bench" else name
