"""Folders jaxnb makes under the temporary directory, removed when the cluster stops.

A cell whose output was cut keeps each process's full output in a
``jaxnb-output-*`` folder (the page's note names it); those folders live until
``%jax_cluster stop`` (or ``JaxCluster.stop()``) of the cluster that ran the cell.
"""

from __future__ import annotations

import shutil

_made: list[str] = []


def made(path: str) -> str:
    """Remember ``path`` (a folder jaxnb made) for :func:`remove_all`; returns it."""
    _made.append(path)
    return path


def remove_all() -> None:
    """Remove every folder remembered so far."""
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)
