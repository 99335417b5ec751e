"""``--datasets NAME=VAR,…`` and ``JaxCluster.train(datasets=…)``: names the engines look up.

Notebook side: only names travel (the datasets live on the engines, built by
``%%jax_cluster`` cells); no Grain, no JAX here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXAMPLE = "e.g. --datasets train=train_ds,val=val_ds"


def parse(text: str) -> dict[str, str]:
    """``"train=train_ds,val=val_ds"`` as ``{"train": "train_ds", "val": "val_ds"}``."""
    pairs = {}
    for item in text.split(","):
        name, eq, var = (part.strip() for part in item.partition("="))
        if not eq or not name or not var:
            raise ValueError(f"--datasets takes NAME=VAR pairs separated by commas, got {item!r}; "
                             f"{EXAMPLE}")
        if name in pairs:
            raise ValueError(f"--datasets names {name!r} twice; give each dataset one name")
        pairs[name] = var
    return check(pairs)


def check(datasets: Mapping[str, Any] | None) -> dict[str, str]:
    """The mapping name -> engine variable name, each checked to be a plain (dotted) name."""
    if datasets is None:
        return {}
    if not isinstance(datasets, Mapping):
        raise ValueError(f"datasets must be a dict of name -> engine variable name, got "
                         f"{type(datasets).__name__}; e.g. datasets={{'train': 'train_ds'}}")
    out = {}
    for name, var in datasets.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"dataset names are strings, got {name!r}; "
                             "e.g. datasets={'train': 'train_ds'}")
        if not isinstance(var, str):
            raise ValueError(
                f"dataset {name!r}: pass the NAME of a variable defined on the engines (a string), "
                f"not a {type(var).__name__}; build the dataset in a %%jax_cluster cell, then "
                f"datasets={{{name!r}: 'VAR'}}")
        if not all(part.isidentifier() for part in var.split(".")):
            raise ValueError(f"dataset {name!r}: {var!r} is not a Python variable name; {EXAMPLE}")
        out[name] = var
    return out
