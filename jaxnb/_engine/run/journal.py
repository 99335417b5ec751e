"""Process 0's record of a run in its run folder (:mod:`jaxnb._core.run_reports`), written on
the publisher thread (never on the training thread) and at the function's end."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from jaxnb._core.run_reports import line, path
from jaxnb._core.safe_files import open_text


class Journal:
    """Appends the events of one attempt to ``RUN/reports.jsonl`` (opened without following
    links); the file is flushed after each batch, synced at the end."""

    def __init__(self, run_dir: str, run_id: str, resume: int | None, recovers: bool = False) -> None:
        self._file = open_text(path(run_dir), "a", within=run_dir)
        self._write([{"kind": "start", "run_id": run_id, "resume": resume, "time": time.time(),
                      "recovers": recovers}])

    def reports(self, batch: list[dict[str, Any]]) -> None:
        """Book a batch of records (their metrics already on the host)."""
        self._write([{"kind": "report", "step": r["step"], "seq": r["seq"], "time": r["time"],
                      "metrics": r["metrics"], "checkpoint": r.get("checkpoint"),
                      "checkpoint_user": bool(r.get("checkpoint_user"))} for r in batch])

    def end(self, outcome: dict[str, Any]) -> None:
        """Book the attempt's end (``error``, ``stopped``, ``stopped_at``, ``resized_at``)."""
        try:
            self._write([{"kind": "end", "time": time.time(), **outcome}])
            os.fsync(self._file.fileno())
        except OSError as exc:  # the function's own outcome goes on to the notebook
            print(f"jaxnb: could not write the run's end to its folder: {exc}", file=sys.stderr)
        finally:
            self._file.close()

    def _write(self, events: list[dict[str, Any]]) -> None:
        self._file.write("".join(line(e) for e in events))
        self._file.flush()


def opened(run_dir: str, run_id: str, resume: int | None, recovers: bool = False) -> Journal | None:
    """Process 0's journal, or ``None`` (said on stderr) when the run folder refuses it: the
    run goes on, only a kernel attaching later misses its reports."""
    try:
        return Journal(run_dir, run_id, resume, recovers)
    except OSError as exc:
        print(f"jaxnb: could not write {path(run_dir)} ({exc}); a kernel that "
              "attaches later will not see this run's reports", file=sys.stderr)
        return None
