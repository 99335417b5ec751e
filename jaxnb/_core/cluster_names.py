"""Where named clusters are recorded on this machine, and which names are allowed (a name
becomes a file name)."""

from __future__ import annotations

import os
import re

#: The name a cluster gets when ``attach`` is given none.
DEFAULT_NAME = "default"
#: Letters, digits, ``_``, ``-`` and ``.`` (not first), at most 64: a plain file name.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")
#: Overrides the folder of the records (tests; a user who wants them elsewhere).
ENV_FOLDER = "JAXNB_CLUSTERS_DIR"


def check(name: object) -> str:
    """``name`` when it can name a cluster, else a one-line ``ValueError``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"a cluster name is 1-64 letters, digits, '_', '-' or '.' (not first), "
                         f"got {name!r}; e.g. --name exp1")
    return name


def folder() -> str:
    """The folder of the records (made 0700 when missing): ``$JAXNB_CLUSTERS_DIR``, else
    ``$XDG_RUNTIME_DIR/jaxnb-clusters``, else ``~/.cache/jaxnb/clusters``."""
    path = os.environ.get(ENV_FOLDER)
    if not path:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        path = (os.path.join(runtime, "jaxnb-clusters") if runtime and os.path.isdir(runtime)
                else os.path.join(os.path.expanduser("~"), ".cache", "jaxnb", "clusters"))
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def record_path(name: str) -> str:
    """The JSON record of cluster ``name`` (written by the kernels that attach)."""
    return os.path.join(folder(), f"{check(name)}.json")


def supervisor_path(name: str) -> str:
    """The JSON file the supervisor of ``name`` writes (its pid, since when it is idle)."""
    return os.path.join(folder(), f"{check(name)}.supervisor.json")


def log_path(name: str) -> str:
    """The supervisor's log (its errors, if any)."""
    return os.path.join(folder(), f"{check(name)}.log")


def recorded_names() -> list[str]:
    """The names of the clusters recorded on this machine, sorted."""
    found = []
    for entry in os.listdir(folder()):
        stem = entry[: -len(".supervisor.json")] if entry.endswith(".supervisor.json") else None
        if stem is not None and _NAME.match(stem):
            found.append(stem)
    return sorted(found)
