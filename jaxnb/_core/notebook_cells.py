"""The notebook's cells as the engines' frames name them: the hash in a cell's file name,
the text IPython compiles it to, and the cells jaxnb ran (notebook side).

ipykernel names the file of a cell ``…/ipykernel_<pid>/<hash>.py``, the hash being
``murmur2`` of the cell's source; an engine's stack dump only has that file name and a
line number, so the cells jaxnb sent are remembered here to show the line's source.
"""

from __future__ import annotations

import collections
import functools
import re

from jaxnb._core import ipykernel_internals

#: How many cells' sources are remembered to map frames of earlier cells.
REMEMBERED_CELLS = 256
#: The file of a cell in a frame: ipykernel's (``name`` is its hash) or IPython's own.
CELL_FILE = re.compile(r"(?:ipykernel_\d+[/\\](?P<name>\d+)\.py|<ipython-input-[^>]*>)$")

_cells: collections.OrderedDict[str, str] = collections.OrderedDict()


def remember_cell(code: str) -> None:
    """Record a cell's source, so frames in it can be shown with their source line."""
    name = cell_name(code)
    if name is None:
        return
    _cells[name] = as_compiled(code)
    _cells.move_to_end(name)
    while len(_cells) > REMEMBERED_CELLS:
        _cells.popitem(last=False)


def remembered(name: str) -> str | None:
    """The compiled text of the remembered cell whose file name has hash ``name``."""
    return _cells.get(name)


@functools.lru_cache(maxsize=32)
def as_compiled(code: str) -> str:
    """The cell as IPython compiles it (line numbers in frames refer to this text)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(code)
    except Exception:  # not valid Python: keep the raw text
        return code


def cell_name(code: str) -> str | None:
    """The number ipykernel puts in the file name of a cell (a hash of its source); ``None``
    when this ipykernel's hash is not known."""
    return ipykernel_internals.cell_hash(code)
