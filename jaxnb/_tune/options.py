"""What a search was asked to do, checked up front (each problem one line saying what to pass)."""

from __future__ import annotations

import dataclasses
from typing import Any

MODES = ("min", "max")
PRUNERS = ("median", "asha", "none")
DEFAULT_TRIALS = 20
DEFAULT_METRIC = "loss"
#: Median pruning starts once this many trials have finished, and never before this step.
MEDIAN_STARTUP_TRIALS = 2
MEDIAN_WARMUP_STEPS = 1


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    """The search's settings (``%jax_tune`` flags / ``jaxnb.tune.run`` keywords)."""

    trials: int = DEFAULT_TRIALS
    metric: str = DEFAULT_METRIC
    mode: str = "min"
    pruner: str = "median"
    config: Any = None
    name: str | None = None
    storage: str | None = None
    steps: int | None = None
    max_failures: int | None = None
    datasets: dict[str, Any] | None = None
    resume: bool = False
    background: bool = False
    seed: int | None = None
    show: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise ValueError(f"--trials takes a positive whole number, got {self.trials!r}; "
                             "e.g. --trials 20")
        if self.mode not in MODES:
            raise ValueError(f"--mode takes min or max, got {self.mode!r}; e.g. --mode max "
                             "for accuracy, --mode min for a loss")
        if self.pruner not in PRUNERS:
            raise ValueError(f"--pruner takes one of {', '.join(PRUNERS)}, got {self.pruner!r}; "
                             "e.g. --pruner median")
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"--metric takes the name of a reported metric, got {self.metric!r}; "
                             "e.g. --metric val_loss")
        if self.config is not None and not isinstance(self.config, dict):
            raise ValueError(f"--config for %jax_tune must be a dict (the sampled values update "
                             f"it), got a {type(self.config).__name__}; e.g. --config dict(steps=100)")

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
