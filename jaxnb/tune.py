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

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from jaxnb._core.run_limits import KEEP_CHECKPOINTS
from jaxnb._tune.domains import Domain as Domain
from jaxnb._tune.domains import choice as choice
from jaxnb._tune.domains import loguniform as loguniform
from jaxnb._tune.domains import quniform as quniform
from jaxnb._tune.domains import randint as randint
from jaxnb._tune.domains import uniform as uniform
from jaxnb._tune.options import DEFAULT_METRIC, DEFAULT_TRIALS

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster
    from jaxnb._tune.result import TuneResult

__all__ = ["Domain", "choice", "loguniform", "quniform", "randint", "run", "uniform"]


def run(
    cluster: JaxCluster,
    fn: Callable[..., Any] | str,
    space: Any,
    *,
    trials: int = DEFAULT_TRIALS,
    metric: str = DEFAULT_METRIC,
    mode: str = "min",
    pruner: str = "median",
    config: Mapping[str, Any] | None = None,
    name: str | None = None,
    storage: str | os.PathLike[str] | None = None,
    steps: int | None = None,
    datasets: Mapping[str, str] | None = None,
    max_failures: int = 0,
    keep_checkpoints: int = KEEP_CHECKPOINTS,
    resume: bool = False,
    background: bool = False,
    seed: int | None = None,
    show: bool = True,
    break_lock: bool = False,
    on_result: Callable[[TuneResult], None] | None = None,
) -> TuneResult:
    """Search ``space`` for ``fn`` on ``cluster`` (a ``JaxCluster``); a ``TuneResult``.

    ``space``: a dict of the helpers above (or Optuna distributions), or a function
    ``trial -> dict`` (Optuna's define-by-run). ``trials``: how many; ``metric`` and ``mode``
    ("min"|"max"): what a trial's last report is judged by; ``pruner`` ("median"|"asha"|"none")
    stops bad trials early; ``config``: the base config the sampled values update; ``name``:
    the study (default fn's name), kept in ``storage`` (default ``./jaxnb_runs``), so
    ``resume`` continues it; ``steps``, ``datasets``, ``max_failures``, ``keep_checkpoints``: each
    trial's, as for ``JaxCluster.train``; ``background``: return the live TuneResult at once;
    ``seed``: the sampler's; ``show``: the live view; ``break_lock``: remove the study's lock left
    by a kernel that is gone (refused while its host answers); ``on_result`` gets the
    TuneResult, also before an error is raised. The same as ``cluster.tune(fn, space, …)`` and ``%jax_tune``.

    Raises:
        ValueError: a wrong argument or search space (one line naming it).
        FileExistsError: the study exists and ``resume`` was not given, or another live
            search runs it (named).
        jaxnb.ClusterStateError: the cluster is not running, or busy with a background run.

    Example::

        from jaxnb import tune
        space = {"learning_rate": tune.loguniform(1e-4, 3e-2), "hidden": tune.choice([16, 64])}
        search = tune.run(cluster, train_func, space, trials=6, metric="accuracy", mode="max")
        search.best_config, search.best_value
    """
    return cluster.tune(fn, space, trials=trials, metric=metric, mode=mode, pruner=pruner,
                        config=config, name=name, storage=storage, steps=steps, datasets=datasets,
                        max_failures=max_failures, keep_checkpoints=keep_checkpoints, resume=resume,
                        background=background, seed=seed, show=show, break_lock=break_lock,
                        on_result=on_result)
