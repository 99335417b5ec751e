"""An error from objects of the group before a repair, named with the repair.

After ``%jax_cluster reset`` (or a repair before a cell), Python state is kept, but an array,
mesh or sharding made before belongs to the old group: its collective goes to connections
the repair closed, and fails as gloo's "Connection closed by peer" under JAX's frames. When
a cell (or a training run) fails so after a repair, the engines name the variables of the
old group that it uses (:func:`cause`), and the error leads with them and what to do.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from jaxnb._core.contract import EngineCall
from jaxnb._core.errors import traceback_text
from jaxnb._core.notebook_cells import as_compiled
from jaxnb._core.state import Group

_MADE_BEFORE = EngineCall("jaxnb._engine.group.reset:made_before")
#: How a collective over closed connections fails.
_BROKEN = re.compile(r"Gloo \S+ failed|Connection (?:closed|reset) by peer")
#: Seconds the engine may take to look through its variables.
ASK_SECONDS = 10.0
SHOWN = 5


def cause(group: Group, errors: dict[int, Any], code: str = "") -> str:
    """``"`x` was made before the repair at cell 7: …"`` when the errors are collectives of the
    old group (``code``: the cell, whose names are looked at first); else ``""``."""
    if group.repaired_at is None or not errors:
        return ""
    if not any(_BROKEN.search(traceback_text(error)) for error in errors.values()):
        return ""
    engine = group.engine(min(errors))
    try:
        found = engine.apply_async(_MADE_BEFORE, names_read(code) or None).get(timeout=ASK_SECONDS)
        if not found and code:  # used through a function: any of them
            found = engine.apply_async(_MADE_BEFORE, None).get(timeout=ASK_SECONDS)
    except Exception:  # the engine cannot say: the error stays as it is
        return ""
    if not found:
        return ""
    named = ", ".join(f"`{name}`" for name in found[:SHOWN]) + (" …" if len(found) > SHOWN else "")
    one = len(found) == 1
    return (f"{named} {'was' if one else 'were'} made before the repair at {group.repaired_at}: "
            f"make {'it' if one else 'them'} again, or run `%jax_cluster restart --replay`")


def names_read(code: str) -> list[str]:
    """The names ``code`` reads, in order (none when it does not parse)."""
    try:
        tree = ast.parse(as_compiled(code))
    except SyntaxError:
        return []
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return list(dict.fromkeys(n.id for n in sorted(found, key=lambda n: (n.lineno, n.col_offset))))
