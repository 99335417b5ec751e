"""The profile run folder, laid out as XProf and TensorBoard read it, and filling it over the engines.

``DIR/RUN/plugins/profile/SESSION/<host>_p<I>.xplane.pb``: one file per JAX process,
named by host and process so two processes on one host never collide, all in one
session folder so ``xprof --logdir DIR/RUN`` shows every process as a host of one
session. Beside it (outside ``plugins/``, which XProf scans), ``DIR/RUN/merged/SESSION/``
holds the merged Perfetto trace ``trace.json.gz``, the step table ``steps.json`` and
``timeline.png``. The files are pulled from each engine in chunks over ipyparallel, so
remote hosts need no shared filesystem.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
from typing import Any

from jaxnb._core.contract import EngineCall
from jaxnb._core.spelling import example, option

DEFAULT_STORAGE = "jaxnb_runs"
DEFAULT_NAME = "profile"
CHUNK = 16 * 1024 * 1024
_READ = EngineCall("jaxnb._engine.profile.recording:read_chunk")
_DISCARD = EngineCall("jaxnb._engine.profile.recording:discard")


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """Where one ``%%jax_profile`` session goes."""

    root: str  # DIR/RUN: the folder for ``xprof --logdir``
    session: str

    @property
    def session_dir(self) -> str:
        return os.path.join(self.root, "plugins", "profile", self.session)

    @property
    def merged_dir(self) -> str:
        return os.path.join(self.root, "merged", self.session)

    def xplane(self, host: str, process: int) -> str:
        return os.path.join(self.session_dir, f"{_safe(host)}_p{process}.xplane.pb")

    def part(self, process: int) -> str:
        """A process's part of the merged trace, until the parts are joined."""
        return os.path.join(self.merged_dir, f".p{process}.part.json.gz")

    @property
    def perfetto(self) -> str:
        return os.path.join(self.merged_dir, "trace.json.gz")


def prepare(storage: str | os.PathLike[str] | None, name: str | None) -> RunFolder:
    """Make ``DIR/RUN`` and a new session in it; a folder that cannot be written is a
    ``ValueError`` saying so, before any process starts tracing."""
    storage = os.path.abspath(os.path.expanduser(storage or DEFAULT_STORAGE))
    name = name or DEFAULT_NAME
    if not name or os.sep in name or name in (".", ".."):
        raise ValueError(f"{option('name')} takes a folder name, got {name!r}; e.g. "
                         f"{example('name', 'step_times')}")
    root = os.path.join(storage, name)
    session = datetime.datetime.now().strftime("%Y_%m_%d_%H_%M_%S")
    folder = RunFolder(root, session)
    n = 1
    while os.path.exists(folder.session_dir):
        n += 1
        folder = RunFolder(root, f"{session}_{n}")
    try:
        os.makedirs(folder.session_dir)
        os.makedirs(folder.merged_dir)
        probe = os.path.join(folder.merged_dir, ".write-test")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as exc:
        raise ValueError(
            f"cannot write the profile to {root} ({exc.strerror or exc}); "
            f"pass {example('storage', 'DIR')} with a folder you can write"
        ) from None
    return folder


def fetch(engine: Any, remote: str, size: int, local: str, timeout: float) -> None:
    """Copy ``remote`` (a file on ``engine``'s host) to ``local``, in chunks over ipyparallel."""
    with open(local + ".part", "wb") as f:
        offset = 0
        while offset < size:
            data = engine.apply_async(_READ, remote, offset, CHUNK).get(timeout=timeout)
            if not data:
                break
            f.write(data)
            offset += len(data)
    os.replace(local + ".part", local)


def discard(engine: Any, folder: str) -> None:
    """Remove an engine's temporary trace folder."""
    engine.apply_async(_DISCARD, folder)


def _safe(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", host) or "host"
