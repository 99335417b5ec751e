"""Python data as typed JSON and back: the values a checkpoint's manifest keeps besides arrays.

``bool``, ``int``, ``float`` (exactly, as hex), ``complex``, ``str``, ``bytes``, ``None`` and
tuples, lists and dicts of them, each written ``{"t": TYPE, "v": VALUE}``. Reading gives back
data only: no document can name a class, a function or anything else that would run code.
"""

from __future__ import annotations

import base64
from typing import Any


class NotData(TypeError):
    """A value that is not plain data (an object of a class, a function)."""


def to_json(x: Any) -> dict[str, Any]:
    """``x`` as a JSON-ready document; :class:`NotData` for anything else."""
    if x is None:
        return {"t": "none", "v": None}
    if isinstance(x, bool):
        return {"t": "bool", "v": x}
    if isinstance(x, int):
        return {"t": "int", "v": int(x)}
    if isinstance(x, float):
        return {"t": "float", "v": x.hex()}
    if isinstance(x, complex):
        return {"t": "complex", "v": [x.real.hex(), x.imag.hex()]}
    if isinstance(x, str):
        return {"t": "str", "v": str(x)}
    if isinstance(x, bytes):
        return {"t": "bytes", "v": base64.b64encode(bytes(x)).decode()}
    if type(x) in (tuple, list):
        return {"t": type(x).__name__, "v": [to_json(e) for e in x]}
    if type(x) is dict:
        return {"t": "dict", "v": [[to_json(k), to_json(v)] for k, v in x.items()]}
    raise NotData(f"a {type(x).__module__}.{type(x).__qualname__} object")


def from_json(doc: Any) -> Any:
    """The value :func:`to_json` wrote; ``ValueError`` for a document it cannot have written."""
    if not isinstance(doc, dict) or set(doc) != {"t", "v"}:
        raise ValueError(f"not a typed value: {str(doc)[:80]}")
    t, v = doc["t"], doc["v"]
    if t == "none" and v is None:
        return None
    if t == "bool" and isinstance(v, bool):
        return v
    if t == "int" and isinstance(v, int) and not isinstance(v, bool):
        return v
    if t == "float" and isinstance(v, str):
        return float.fromhex(v)
    if t == "complex" and isinstance(v, list) and len(v) == 2 and all(isinstance(e, str) for e in v):
        return complex(float.fromhex(v[0]), float.fromhex(v[1]))
    if t == "str" and isinstance(v, str):
        return v
    if t == "bytes" and isinstance(v, str):
        return base64.b64decode(v, validate=True)
    if t in ("tuple", "list") and isinstance(v, list):
        items = [from_json(e) for e in v]
        return tuple(items) if t == "tuple" else items
    if t == "dict" and isinstance(v, list) and all(isinstance(e, list) and len(e) == 2 for e in v):
        try:
            return {from_json(k): from_json(e) for k, e in v}
        except TypeError:  # a key that cannot be one (a list)
            raise ValueError(f"not a typed value: {str(doc)[:80]}") from None
    raise ValueError(f"not a typed value: {str(doc)[:80]}")
