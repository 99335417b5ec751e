"""A search space (define-by-run function or dict of distributions) -> ``sample(trial) -> dict``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from jaxnb._core.spelling import Code, bare, example
from jaxnb._tune.domains import Domain

EXAMPLE = Code("dict(lr=jaxnb.tune.loguniform(1e-4, 1e-1), width=jaxnb.tune.choice([32, 64]))")
#: A Ray Trainer's ``param_space`` nests the searched config under this key.
RAY_CONFIG = "train_loop_config"


class SpaceError(ValueError):
    """The search space cannot be used (one line: what to pass)."""


Sampler = Callable[[Any], dict[str, Any]]


def sampler(space: Any) -> Sampler:
    """A function ``trial -> dict`` of sampled values for ``space``; checked before any trial runs.

    A Ray Trainer's ``param_space`` (``{"train_loop_config": {...}}``) searches its config."""
    if isinstance(space, Mapping):
        return _dict_sampler(_ray_config(space))
    if callable(space):
        return _function_sampler(space)
    raise SpaceError(f"{bare('space')} must be a dict of distributions or a function trial -> "
                     f"dict, got a {type(space).__name__}; {_example()}")


def distribution(key: str, value: Any) -> Any:
    """The Optuna distribution for one space entry (a jaxnb.tune helper or an Optuna distribution)."""
    import optuna.distributions as d

    if isinstance(value, d.BaseDistribution):
        return value
    if isinstance(value, Domain):
        if value.kind == "uniform":
            return d.FloatDistribution(value.low, value.high, step=value.step)
        if value.kind == "loguniform":
            return d.FloatDistribution(value.low, value.high, log=True)
        if value.kind == "int":
            return d.IntDistribution(int(value.low), int(value.high))
        return d.CategoricalDistribution(value.choices)
    if isinstance(value, list | tuple) and value:
        return d.CategoricalDistribution(tuple(value))  # a plain list: one of its values
    raise SpaceError(f"{bare('space')}[{key!r}] is a {type(value).__name__}, not a distribution; "
                     "use jaxnb.tune.uniform/loguniform/randint/choice or an optuna distribution "
                     f"(fixed values go in {bare('config')})")


def _ray_config(space: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """``space``, or the config a Ray Trainer's ``param_space`` nests under ``train_loop_config``."""
    nested = space.get(RAY_CONFIG)
    if not isinstance(nested, Mapping):
        return space
    others = [k for k in space if k != RAY_CONFIG]
    if others:
        raise SpaceError(f"{bare('space')} nests the config under {RAY_CONFIG!r} (a Ray Trainer's "
                         f"param_space) but also has {others[0]!r}; jaxnb searches only the config: "
                         f"pass {{{RAY_CONFIG!r}: {{...}}}} alone (processes come from the cluster, "
                         f"fixed values go in {bare('config')})")
    return nested


def _dict_sampler(space: Mapping[Any, Any]) -> Sampler:
    if not space:
        raise SpaceError(f"{bare('space')} is empty; give at least one parameter to search, "
                         f"{_example()}")
    bad = [k for k in space if not isinstance(k, str) or not k]
    if bad:
        raise SpaceError(f"{bare('space')} keys must be config key strings, got {bad[0]!r}; "
                         f"{_example()}")
    dists = {k: distribution(k, v) for k, v in space.items()}

    def sample(trial: Any) -> dict[str, Any]:
        return {k: suggest(trial, k, dist) for k, dist in dists.items()}

    sample.distributions = dists  # type: ignore[attr-defined]
    return sample


def suggest(trial: Any, name: str, dist: Any) -> Any:
    """``trial.suggest_*`` for one Optuna distribution."""
    import optuna.distributions as d

    if isinstance(dist, d.FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, log=dist.log, step=dist.step)
    if isinstance(dist, d.IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log, step=dist.step)
    if isinstance(dist, d.CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    raise SpaceError(f"{bare('space')}[{name!r}]: {type(dist).__name__} is not supported; use a float, "
                     "int or categorical distribution")


def _function_sampler(space: Callable[[Any], Any]) -> Sampler:
    def sample(trial: Any) -> dict[str, Any]:
        values = space(trial)
        if not isinstance(values, Mapping) or not values:
            raise SpaceError(f"the {bare('space')} function must return a non-empty dict of config "
                             f"values (trial.suggest_...), got {values!r}")
        return dict(values)

    return sample


def check(sample: Sampler) -> dict[str, Any]:
    """Sample once from a throw-away study so a bad space fails before any trial runs."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    trial = study.ask()
    try:
        return sample(trial)
    except SpaceError:
        raise
    except Exception as exc:
        raise SpaceError(f"{bare('space')} could not be sampled: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}; {_example()}") from None


def _example() -> str:
    return "e.g. " + example("space", EXAMPLE)
