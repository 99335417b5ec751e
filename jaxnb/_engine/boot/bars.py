"""Engines show ``tqdm.notebook`` / ``tqdm.auto`` bars as text bars (see ``tqdm_notebook``)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import pathlib
import sys
from typing import Any

_SUBSTITUTE = pathlib.Path(__file__).with_name("tqdm_notebook.py")


class _TextBars(importlib.abc.MetaPathFinder):
    """Finds ``tqdm.notebook`` in jaxnb's substitute file; nothing else."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "tqdm.notebook":
            return None
        return importlib.util.spec_from_file_location(name, _SUBSTITUTE)


def install() -> None:
    """From now on, ``import tqdm.notebook`` in this process gives the text bars (tqdm not imported here)."""
    if not any(isinstance(f, _TextBars) for f in sys.meta_path):
        sys.meta_path.insert(0, _TextBars())
