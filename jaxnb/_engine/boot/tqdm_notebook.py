"""What ``tqdm.notebook`` is on an engine: tqdm's text bar, written to stderr.

A notebook bar is an ipywidget, and an engine's widgets never reach the
notebook (ipyparallel does not forward engine comms): only process 0's first
frame would show. A text bar is merged by the notebook side instead, one line
per process, updated in place. :mod:`jaxnb._engine.boot.bars` loads this file under
the name ``tqdm.notebook``, so ``tqdm.auto`` and ``tqdm.notebook`` both get it.
"""

from __future__ import annotations

from typing import Any

from tqdm.std import tqdm as _text_tqdm

__all__ = ["tnrange", "tqdm", "tqdm_notebook", "trange"]

#: Not None, so ``tqdm.auto`` takes this module (as it would take the widget one).
IProgress = object
WARN_NOIPYW = "jaxnb engines show notebook progress bars as text"


class tqdm_notebook(_text_tqdm):
    """``tqdm.notebook.tqdm`` as a text bar; the widget-only arguments are accepted and ignored."""

    def __init__(self, *args: Any, display: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)


def tnrange(*args: Any, **kwargs: Any) -> tqdm_notebook:
    """``tqdm.notebook.trange``: a text bar over ``range(*args)``."""
    return tqdm_notebook(range(*args), **kwargs)


tqdm, trange = tqdm_notebook, tnrange
