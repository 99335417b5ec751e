"""Hyperparameter search on the whole cluster (``%jax_tune``): search-space helpers and ``run``.

The helpers read like Ray Tune's, so a Ray ``param_space`` ports by changing
its import::

    from jaxnb import tune
    space = {"lr": tune.loguniform(1e-4, 1e-1), "width": tune.choice([32, 64, 128])}
    result = tune.run(cluster, train, space, trials=20, metric="val_loss", mode="min")

Importing this module is cheap: Optuna is imported only when a search starts,
in the notebook kernel (never on the engines).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jaxnb._tune.domains import Domain as Domain
from jaxnb._tune.domains import choice as choice
from jaxnb._tune.domains import loguniform as loguniform
from jaxnb._tune.domains import quniform as quniform
from jaxnb._tune.domains import randint as randint
from jaxnb._tune.domains import uniform as uniform

if TYPE_CHECKING:
    from jaxnb._tune.result import TuneResult

__all__ = ["Domain", "choice", "loguniform", "quniform", "randint", "run", "uniform"]


def run(cluster: Any, fn: Any, space: Any, **options: Any) -> TuneResult:
    """Search ``space`` for ``fn`` on ``cluster`` (a ``JaxCluster``); a ``TuneResult``.

    ``options``: ``trials`` (20), ``metric`` ("loss"), ``mode`` ("min"|"max"),
    ``pruner`` ("median"|"asha"|"none"), ``config`` (base config the sampled
    values update), ``name`` (study, default fn's name), ``storage`` (folder,
    default ``./jaxnb_runs``), ``steps``, ``max_failures``, ``datasets``, ``resume``,
    ``background`` (return the live TuneResult at once), ``seed``, ``show``.
    See ``%jax_tune?``.
    """
    return cluster.tune(fn, space, **options)
