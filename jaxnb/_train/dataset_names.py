"""``JaxCluster.train(datasets=…)`` (``--datasets NAME=VAR,…``): the names the engines look up.

Notebook side: only names travel (the datasets live on the engines, built by
``%%jax_cluster`` cells); no Grain, no JAX here. The magics read ``--datasets`` text in
``jaxnb.magics.kit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxnb._core.spelling import example as spelled
from jaxnb._core.spelling import option

EXAMPLE = {"train": "train_ds", "val": "val_ds"}
#: :data:`EXAMPLE` as ``--datasets`` takes it.
EXAMPLE_TEXT = "train=train_ds,val=val_ds"


def example() -> str:
    """``e.g. datasets={'train': 'train_ds', …}``, or in a magic ``e.g. --datasets train=train_ds,…``."""
    return "e.g. " + spelled("datasets", EXAMPLE, EXAMPLE_TEXT)


def check(datasets: Mapping[str, Any] | None) -> dict[str, str]:
    """The mapping name -> engine variable name, each checked to be a plain (dotted) name."""
    if datasets is None:
        return {}
    if not isinstance(datasets, Mapping):
        raise ValueError(f"{option('datasets')} takes a dict of name -> engine variable name, got "
                         f"{type(datasets).__name__}; {example()}")
    out = {}
    for name, var in datasets.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"dataset names are strings, got {name!r}; {example()}")
        if not isinstance(var, str):
            raise ValueError(
                f"dataset {name!r}: pass the NAME of a variable defined on the engines (a string), "
                f"not a {type(var).__name__}; build the dataset in a %%jax_cluster cell, then "
                f"name it: {example()}")
        if not all(part.isidentifier() for part in var.split(".")):
            raise ValueError(f"dataset {name!r}: {var!r} is not a Python variable name; {example()}")
        out[name] = var
    return out
