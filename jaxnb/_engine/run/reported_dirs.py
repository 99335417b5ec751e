"""A checkpoint folder the user reported (``report(checkpoint="/path/dir")``), kept in the run.

Ray persists a reported checkpoint folder to the run's storage before ``report()`` returns, so
its examples save into ``tempfile.TemporaryDirectory()`` and let it go. jaxnb does the same: a
folder outside the run folder is copied into ``RUN/reported/<step>`` (every process copies its
own folder into the same one, files of several processes side by side, as Ray merges its
workers' files), and that copy is what the run records, ``--resume`` and a recovery restore. A
folder inside the run folder is kept in place. Each file lands whole (a temporary file renamed
over it), and the folders made in the run folder follow no links (:mod:`jaxnb._core.safe_files`).
"""

from __future__ import annotations

import os
import secrets
import shutil

from jaxnb._core.safe_files import folder_fd

#: Where copies of reported folders go, under the run folder.
FOLDER = "reported"

def kept(run_dir: str, step: int, path: str | os.PathLike[str]) -> str:
    """The folder the run records for ``path`` reported at ``step``: ``path`` itself when it is
    inside ``run_dir``, else its copy in ``run_dir/reported/<step>``, made before this returns.
    A folder this process does not see (another process wrote it, and reports it too) is left
    to the processes that see it: their copies are the checkpoint."""
    source = os.path.abspath(os.fspath(path))
    run = os.path.realpath(run_dir)
    if os.path.realpath(source) == run or os.path.realpath(source).startswith(run + os.sep):
        return source
    target = os.path.join(os.path.abspath(run_dir), FOLDER, str(step))
    if os.path.isdir(source):
        _copy(source, target, os.path.abspath(run_dir))
    return target


def _copy(source: str, target: str, run_dir: str) -> None:
    """Copy the tree ``source`` into ``target`` (merged with what is there), file by file."""
    for here, folders, files in os.walk(source):
        rel = os.path.relpath(here, source)
        into = target if rel == os.curdir else os.path.join(target, rel)
        with folder_fd(into, within=run_dir):
            pass  # made, with no link on the way
        for name in files + [f for f in folders if os.path.islink(os.path.join(here, f))]:
            _copy_file(os.path.join(here, name), os.path.join(into, name))


def _copy_file(source: str, target: str) -> None:
    temp = os.path.join(os.path.dirname(target),
                        f".{os.path.basename(target)}.{secrets.token_hex(4)}.tmp")
    try:
        if os.path.islink(source):
            os.symlink(os.readlink(source), temp)  # a link stays a link, as it was saved
        else:
            shutil.copy2(source, temp)
        os.replace(temp, target)
    except BaseException:
        if os.path.lexists(temp):
            os.unlink(temp)
        raise
