"""What a search was asked to do, declared once and checked up front (each problem one line
saying what to pass)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from jaxnb._core.run_limits import KEEP_CHECKPOINTS, check_limits
from jaxnb._core.spelling import Code, example, option

MODES = ("min", "max")
PRUNERS = ("median", "asha", "none")
DEFAULT_TRIALS = 20
DEFAULT_METRIC = "loss"
#: Median pruning starts once this many trials have finished, and never before this step.
MEDIAN_STARTUP_TRIALS = 2
MEDIAN_WARMUP_STEPS = 1


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    """The search's settings: the one declaration of ``JaxCluster.tune``'s and ``jaxnb.tune.run``'s
    keywords (``%jax_tune``'s flags of the same names; ``tests/test_api.py`` checks they agree)."""

    trials: int = DEFAULT_TRIALS
    metric: str = DEFAULT_METRIC
    mode: str = "min"
    pruner: str = "median"
    config: Mapping[str, Any] | None = None
    name: str | None = None
    storage: str | os.PathLike[str] | None = None
    steps: int | None = None
    datasets: Mapping[str, str] | None = None
    max_failures: int = 0
    keep_checkpoints: int = KEEP_CHECKPOINTS
    resume: bool = False
    background: bool = False
    seed: int | None = None
    show: bool = True
    break_lock: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise ValueError(f"{option('trials')} takes a positive whole number, got "
                             f"{self.trials!r}; e.g. {example('trials', 20)}")
        if self.mode not in MODES:
            raise ValueError(f"{option('mode')} takes min or max, got {self.mode!r}; e.g. "
                             f"{example('mode', 'max')} for accuracy, {example('mode', 'min')} "
                             "for a loss")
        if self.pruner not in PRUNERS:
            raise ValueError(f"{option('pruner')} takes one of {', '.join(PRUNERS)}, got "
                             f"{self.pruner!r}; e.g. {example('pruner', 'median')}")
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"{option('metric')} takes the name of a reported metric, got "
                             f"{self.metric!r}; e.g. {example('metric', 'val_loss')}")
        from jaxnb._train import dataset_names, step_count  # each trial's run checks them too

        check_limits(self.max_failures, self.keep_checkpoints)
        step_count.expected_steps(None, self.steps)
        dataset_names.check(self.datasets)
        if self.config is not None and not isinstance(self.config, Mapping):
            raise ValueError(f"{option('config')} of a search must be a dict (the sampled values "
                             f"update it), got a {type(self.config).__name__}; e.g. "
                             f"{example('config', Code('dict(steps=100)'))}")

    @property
    def direction(self) -> str:
        """Optuna's name for the mode."""
        return "minimize" if self.mode == "min" else "maximize"


def make_pruner(name: str) -> Any:
    """The Optuna pruner for ``--pruner``."""
    import optuna

    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=MEDIAN_STARTUP_TRIALS,
                                           n_warmup_steps=MEDIAN_WARMUP_STEPS)
    if name == "asha":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()
