"""A run's folder on the host of a cluster attached through ``--via``, opened by process 0 there.

The kernel that attached through ssh is on another machine: the run's folder, its checkpoints and
its reports are the host's. What a kernel does in the folder before a run (make it, find the
checkpoint to resume from) runs here, in one call before the run; the user's last directory
checkpoint is noted in one call after it (``jaxnb._train.far_folder`` makes both).
"""

from __future__ import annotations

import os
from typing import Any

from jaxnb._core.run_folder import check_fresh_run, left_by_earlier_run, make, remember_user_checkpoint


def open_folder(storage: str, run: str, resume: bool) -> dict[str, Any]:
    """Make ``storage/run`` on this host (relative to this engine's folder) and say what is in
    it: ``run_dir``, ``earlier`` (an earlier run left files), ``resume`` (the checkpoint to
    resume from), or ``error``, the exception to raise in the kernel."""
    run_dir = os.path.abspath(os.path.join(storage, run))
    try:
        make(run_dir)
        earlier = left_by_earlier_run(run_dir)
        resume_from = check_fresh_run(run_dir, resume)
    except Exception as exc:  # raised in the kernel, as there for a folder of its own
        return {"run_dir": run_dir, "error": exc}
    return {"run_dir": run_dir, "earlier": earlier, "resume": resume_from}


def note_user_checkpoint(run_dir: str, step: int, path: str) -> None:
    """The user's last directory checkpoint of the run, for ``--resume`` (as a kernel notes it)."""
    remember_user_checkpoint(run_dir, step, path)
