"""A run on a cluster attached through ``--via``: its folder is the host's, not this machine's.

Storage paths are the host's (a relative one, the engines' folder there). Before the run,
process 0 makes the folder, refuses a fresh run over checkpoints and finds the checkpoint to
resume from, in one call (``jaxnb._engine.run.host_folder``); the kernel writes nothing on its own disk.
The folder has no lock: kernels attached in turn start runs in it one after the other, never two
at once (the cluster runs one run at a time).
"""

from __future__ import annotations

import contextlib
from typing import Any

from jaxnb._core.contract import EngineCall
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.run_folder import Checkpoint
from jaxnb._core.state import Group

_OPEN = EngineCall("jaxnb._engine.run.host_folder:open_folder")
_NOTE = EngineCall("jaxnb._engine.run.host_folder:note_user_checkpoint")
#: Seconds process 0 may take to open the folder (an ssh tunnel's round trips included).
ASK_SECONDS = 30.0
OPEN_FAILED = ("process 0 on {host} did not open run {run!r}'s folder in {storage} ({said}); check "
               "that the host's jaxnb is this one's version, or start the run in a kernel on {host}")


def open_there(group: Group, storage: str, run: str, resume: bool) -> tuple[str, bool, Checkpoint | None]:
    """The run's folder on the host, whether an earlier run left files in it, and the checkpoint
    to resume from; raises what a kernel raises for a folder of its own."""
    try:
        found: dict[str, Any] = group.engine(0).apply_async(_OPEN, storage, run, resume).get(
            timeout=ASK_SECONDS)
    except Exception as exc:  # no answer in time, or the host's jaxnb lacks the call
        said = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        raise ClusterStateError(OPEN_FAILED.format(run=run, storage=storage, host=group.via_host,
                                                   said=said)) from exc
    if found.get("error") is not None:
        raise found["error"]
    return found["run_dir"], bool(found["earlier"]), found["resume"]


def after_run(group: Group, run_dir: str, checkpoint: Checkpoint | None) -> None:
    """Note the user's last directory checkpoint in the host's folder (for ``--resume``); a
    failure to is left (the run's own files are there)."""
    if checkpoint is not None and checkpoint.user_managed:
        with contextlib.suppress(Exception):
            group.engine(0).apply_async(_NOTE, run_dir, checkpoint.step, checkpoint.path).get(
                timeout=ASK_SECONDS)
