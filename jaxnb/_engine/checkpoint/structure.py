"""The structure of a checkpoint pytree, kept as data: plain dataclasses that JAX does not know
as pytrees are walked field by field; :func:`describe` writes the structure as JSON and
:func:`rebuild` makes it again without running code that the checkpoint names.

Rebuilt: dicts, lists, tuples, ``None``, ``OrderedDict``, ``defaultdict`` of a builtin type;
NamedTuples and dataclasses (plain or registered with JAX) by the name of a class already
defined here (never imported), filled in without calling its code; and the nodes of Flax and
Optax (NNX ``State`` and variables) by their library's own pytree functions. Any other class
(one that registered pytree functions of its own) cannot be rebuilt without running its code:
:func:`rebuild` raises :class:`StructureError` and ``restore(target)`` is the way.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from typing import Any

import jax

from jaxnb._engine.checkpoint import typed_json


class DataclassNode:
    """Stands for an instance of a dataclass that is not a registered pytree."""

    def __init__(self, cls: type, names: tuple[str, ...], values: tuple[Any, ...]) -> None:
        self.cls, self.names, self.values = cls, names, values

    def build(self) -> Any:
        obj: Any = object.__new__(self.cls)
        for name, value in zip(self.names, self.values, strict=True):
            object.__setattr__(obj, name, collapse(value))
        return obj


jax.tree_util.register_pytree_with_keys(
    DataclassNode,
    lambda n: ([(jax.tree_util.GetAttrKey(k), v) for k, v in zip(n.names, n.values, strict=True)],
               (n.cls, n.names)),
    lambda aux, values: DataclassNode(aux[0], aux[1], tuple(values)),
)


def _plain_dataclass(x: Any) -> bool:
    return dataclasses.is_dataclass(x) and not isinstance(x, type)


def expand(tree: Any) -> Any:
    """``tree`` with every unregistered dataclass instance replaced by a :class:`DataclassNode`."""

    def fix(x: Any) -> Any:
        if _plain_dataclass(x):
            names = tuple(f.name for f in dataclasses.fields(x))
            return DataclassNode(type(x), names, tuple(expand(getattr(x, n)) for n in names))
        return x

    return jax.tree.map(fix, tree)


def collapse(tree: Any) -> Any:
    """Undo :func:`expand`."""
    node = lambda x: isinstance(x, DataclassNode)  # noqa: E731
    return jax.tree.map(lambda x: x.build() if node(x) else x, tree, is_leaf=node)


def flatten(tree: Any) -> tuple[list[str], list[Any], Any]:
    """Paths (``jax.tree_util.keystr``), leaves and treedef of ``tree`` (dataclasses expanded)."""
    pairs, treedef = jax.tree_util.tree_flatten_with_path(expand(tree))
    return [jax.tree_util.keystr(p) for p, _ in pairs], [x for _, x in pairs], treedef


def unflatten(treedef: Any, leaves: list[Any]) -> Any:
    return collapse(jax.tree_util.tree_unflatten(treedef, leaves))


def shown(path: str) -> str:
    return path or "(the pytree itself)"


# ---- the structure as data --------------------------------------------------------------

#: A leaf in a description.
LEAF = "*"
#: Libraries whose pytree nodes are rebuilt by their own registered functions.
LIBRARIES = ("flax", "optax")
#: The ``defaultdict`` factories that are rebuilt (builtin types, by name).
FACTORIES = {f.__name__: f for f in (list, dict, set, int, float, str, tuple)}


#: What to do when a structure cannot be rebuilt.
WITH_TARGET = "pass restore(target) with a pytree of the saved structure"


class StructureError(ValueError):
    """A saved structure that cannot be rebuilt here; the message says to pass a target."""


def class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def describe(tree: Any) -> Any:
    """The structure of ``tree`` as JSON-ready data, its leaves in :func:`flatten`'s order."""
    return _describe(expand(tree))


def _one_level(x: Any) -> tuple[list[Any], list[Any], Any]:
    """``x``'s children, their keys, and ``x``'s node data (``None`` for a leaf)."""
    pairs, treedef = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    node = treedef.node_data()  # type: ignore[attr-defined]
    return [v for _, v in pairs], [p[0] for p, _ in pairs] if node else [], node


def _describe(x: Any) -> Any:
    values, keys, node = _one_level(x)
    if node is None:
        return LEAF
    kind, aux = node
    doc: dict[str, Any] = {"type": _kind(kind, aux), "children": [_describe(v) for v in values]}
    try:
        _details(doc, kind, aux, x, keys)
    except (typed_json.NotData, AttributeError):  # static data that is not data; keys not names
        doc["type"] = "opaque"
    if doc["type"] == "opaque":
        doc["class"] = class_name(kind)
    return doc


def _kind(kind: type, aux: Any) -> str:
    if kind in (type(None), tuple, list, dict, collections.OrderedDict):
        return "None" if kind is type(None) else kind.__name__
    if kind is collections.defaultdict:
        return "defaultdict" if aux[0] is None or aux[0] in FACTORIES.values() else "opaque"
    if kind is DataclassNode or (_namedtuple(kind) and aux is None) or dataclasses.is_dataclass(kind):
        return "namedtuple" if _namedtuple(kind) else "dataclass"
    if _library(kind):
        return "node"
    return "opaque"


def _details(doc: dict[str, Any], kind: type, aux: Any, x: Any, keys: list[Any]) -> None:
    """What besides the children rebuilds the node: keys, class, fields, static values."""
    t = doc["type"]
    if t in ("dict", "OrderedDict"):
        doc["keys"] = [typed_json.to_json(k) for k in aux]
    elif t == "defaultdict":
        doc["factory"] = None if aux[0] is None else aux[0].__name__
        doc["keys"] = [typed_json.to_json(k) for k in aux[1]]
    elif t == "namedtuple":
        doc.update({"class": class_name(kind), "fields": list(getattr(kind, "_fields", ()))})
    elif t == "dataclass" and kind is DataclassNode:
        doc.update({"class": class_name(aux[0]), "fields": list(aux[1]), "static": {}})
    elif t == "dataclass":  # registered with JAX: its other fields are static data
        names = [k.name for k in keys]
        static = {f.name: typed_json.to_json(getattr(x, f.name))
                  for f in dataclasses.fields(x) if f.name not in names}
        doc.update({"class": class_name(kind), "fields": names, "static": static})
    elif t == "node":
        doc.update({"class": class_name(kind), "aux": typed_json.to_json(aux)})


def rebuild(doc: Any, leaves: list[Any]) -> Any:
    """The pytree :func:`describe` described, with ``leaves`` in order; :class:`StructureError`
    (one line) when a class it names is not defined here or cannot be rebuilt without its code."""
    found = iter(leaves)
    try:
        tree = _build(doc, found)
    except StopIteration:
        raise StructureError(f"the saved structure has more than {len(leaves)} leaves") from None
    except StructureError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise StructureError(f"the saved structure is not one jaxnb wrote ({type(exc).__name__}: "
                             f"{str(exc)[:100]})") from None
    if next(found, None) is not None:
        raise StructureError(f"the saved structure has fewer than {len(leaves)} leaves")
    return tree


def _build(doc: Any, leaves: Any) -> Any:
    if doc == LEAF:
        return next(leaves)
    t = doc["type"]
    children = [_build(c, leaves) for c in doc["children"]]
    if t in ("None", "tuple", "list"):
        return None if t == "None" else tuple(children) if t == "tuple" else children
    if t in ("dict", "OrderedDict", "defaultdict"):
        pairs = zip([typed_json.from_json(k) for k in doc["keys"]], children, strict=True)
        if t == "defaultdict":
            factory = doc["factory"]
            return collections.defaultdict(None if factory is None else FACTORIES[factory], pairs)
        return dict(pairs) if t == "dict" else collections.OrderedDict(pairs)
    if t == "opaque":
        raise StructureError(f"the saved structure has a {_shown(doc['class'])}, whose pytree "
                             "functions are its own code")
    cls = find_class(doc["class"])
    if t == "namedtuple":
        if not _namedtuple(cls) or list(getattr(cls, "_fields", ())) != doc["fields"]:
            raise StructureError(f"{_shown(doc['class'])} here is not the NamedTuple saved "
                                 f"(fields {', '.join(doc['fields'])})")
        return tuple.__new__(cls, children)
    if t == "dataclass":
        return _dataclass(cls, doc, children)
    if t == "node" and _library(cls):
        node = jax.tree_util.PyTreeDef.from_node_data_and_children(
            jax.tree_util.default_registry, (cls, typed_json.from_json(doc["aux"])),
            [jax.tree.structure(0)] * len(children))
        return jax.tree_util.tree_unflatten(node, children)
    raise StructureError(f"the saved structure has a node of unknown type {str(t)[:40]!r}")


def _dataclass(cls: type, doc: dict[str, Any], children: list[Any]) -> Any:
    """An instance of dataclass ``cls`` made field by field (its ``__init__`` is not called)."""
    static = {name: typed_json.from_json(v) for name, v in doc["static"].items()}
    names = [*doc["fields"], *static]
    if not dataclasses.is_dataclass(cls) or not set(names) <= {f.name for f in dataclasses.fields(cls)}:
        raise StructureError(f"{_shown(doc['class'])} here is not the dataclass saved "
                             f"(fields {', '.join(names)})")
    try:
        obj = object.__new__(cls)
    except TypeError:
        raise StructureError(f"{_shown(doc['class'])} cannot be made without its code") from None
    for name, value in [*zip(doc["fields"], children, strict=True), *static.items()]:
        object.__setattr__(obj, name, value)
    return obj


def find_class(name: str) -> type:
    """The class ``module:qualname`` as already defined here: the module is never imported and
    no attribute lookup runs code (``vars``, not ``getattr``)."""
    module, _, qualname = str(name).partition(":")
    where: Any = sys.modules.get(module)
    for part in qualname.split("."):
        where = vars(where).get(part) if hasattr(where, "__dict__") else None
    if isinstance(where, type):
        return where
    if "<locals>" in qualname:
        how = "is defined inside a function"
    elif module not in sys.modules:
        how = f"is not defined here (import {module} first)"
    else:
        how = "is not defined here (run the code that defines it first)"
    raise StructureError(f"the saved structure has a {_shown(name)}, which {how}")


def _namedtuple(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and isinstance(
        getattr(cls, "_fields", None), tuple)


def _library(cls: type) -> bool:
    return cls.__module__.split(".")[0] in LIBRARIES


def _shown(name: str) -> str:
    return f"class {str(name).replace(':', '.')[:120]}"
