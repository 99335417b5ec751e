"""Folders jaxnb makes under the temporary directory, removed when their cluster stops.

A cell whose output was cut keeps each process's full output in a
``jaxnb-output-*`` folder (the page's note names it); those folders live until
``%jax_cluster stop`` (or ``JaxCluster.stop()``) of the cluster that ran the cell.
Each cluster keeps its own (``Group.temp_folders``): stopping one leaves the others'.
"""

from __future__ import annotations

import shutil
import tempfile


class TempFolders:
    """The temporary folders one cluster made; :meth:`remove_all` when it stops."""

    def __init__(self) -> None:
        self._made: list[str] = []

    def make(self, prefix: str) -> str:
        """A new folder under the temporary directory, remembered for :meth:`remove_all`."""
        path = tempfile.mkdtemp(prefix=prefix)
        self._made.append(path)
        return path

    def remove_all(self) -> None:
        """Remove every folder made so far."""
        while self._made:
            shutil.rmtree(self._made.pop(), ignore_errors=True)
