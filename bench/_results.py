"""Where the benches leave their figures: ``bench/results/NAME.json`` (date, machine, load
average, command, figures), written at the end of each run; the README's figures come from
these files and the lines the benches print."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import sys
from typing import Any

#: ``JAXNB_BENCH_RESULTS`` puts them elsewhere (the suite's small runs of the benches do).
FOLDER = pathlib.Path(os.environ.get("JAXNB_BENCH_RESULTS")
                      or pathlib.Path(__file__).resolve().parent / "results")


def load() -> list[float]:
    """The load average (1, 5, 15 minutes) now."""
    return [round(x, 2) for x in os.getloadavg()]


def write(name: str, figures: dict[str, Any], loads: list[list[float]] | None = None) -> pathlib.Path:
    """Write ``bench/results/NAME.json``; ``loads``: the load averages seen during the run
    (the load now is added)."""
    FOLDER.mkdir(exist_ok=True)
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "system": platform.platform()},
        "load_average": [*(loads or []), load()],
        "command": " ".join(["python -m", f"bench.{name}", *sys.argv[1:]]),
        "figures": figures,
    }
    path = FOLDER / f"{name}.json"
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"figures written to {path}")
    return path
