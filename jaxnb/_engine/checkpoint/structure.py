"""The structure of a checkpoint pytree: plain dataclasses that JAX does not know as pytrees
are walked field by field; the tree definition is stored as text."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import jax


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


def dump_treedef(treedef: Any) -> str:
    import cloudpickle

    return base64.b64encode(cloudpickle.dumps(treedef)).decode()


def load_treedef(text: str) -> Any:
    import pickle

    return pickle.loads(base64.b64decode(text))


def shown(path: str) -> str:
    return path or "(the pytree itself)"
