"""The pure parts of ``%jax_tune``: space helpers, options, the unread-key check, line parsing."""

from __future__ import annotations

import optuna
import pytest
from IPython.core.error import UsageError

from jaxnb import tune
from jaxnb._tune import keys, space
from jaxnb._tune.options import TuneOptions
from jaxnb._tune.view import TuneView


def _sample(s):
    return space.check(space.sampler(s))


def test_ray_style_helpers_become_optuna_distributions():
    d = {"lr": tune.loguniform(1e-4, 1e-1), "drop": tune.uniform(0, 0.5),
         "q": tune.quniform(0, 1, 0.25), "layers": tune.randint(1, 4),
         "width": tune.choice([32, 64])}
    dist = {k: space.distribution(k, v) for k, v in d.items()}
    assert dist["lr"] == optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)
    assert dist["layers"] == optuna.distributions.IntDistribution(1, 3)  # Ray's upper is excluded
    assert dist["q"].step == 0.25
    values = _sample(d)
    assert 1e-4 <= values["lr"] <= 1e-1 and values["width"] in (32, 64)
    assert values["layers"] in (1, 2, 3)


def test_optuna_distributions_and_define_by_run_functions_are_spaces():
    values = _sample({"x": optuna.distributions.FloatDistribution(0, 1), "act": ["relu", "gelu"]})
    assert 0 <= values["x"] <= 1 and values["act"] in ("relu", "gelu")
    values = _sample(lambda t: {"n": t.suggest_int("n", 2, 3)})
    assert values["n"] in (2, 3)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({}, "^space is empty"),
        ([1, 2], "^space must be a dict"),
        ({"x": 1.0}, "not a distribution"),
        ({1: tune.uniform(0, 1)}, "keys must be config key strings"),
        (lambda t: None, "must return a non-empty dict"),
        (lambda t: t.suggest_float("x", 1, 0), "could not be sampled"),
    ],
)
def test_a_bad_space_is_one_line(bad, message):
    with pytest.raises(space.SpaceError, match=message) as info:
        _sample(bad)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: tune.uniform(1, 0), "lower < upper"),
        (lambda: tune.loguniform(0, 1), "lower > 0"),
        (lambda: tune.randint(1.5, 3), "two ints"),
        (lambda: tune.choice([]), "non-empty list"),
        (lambda: tune.uniform("a", 1), "two numbers"),
    ],
)
def test_helpers_refuse_bad_bounds(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "best"}, "mode= takes min or max"),
        ({"trials": 0}, "trials= takes a positive whole number"),
        ({"pruner": "x"}, "pruner= takes one of median, asha, none"),
        ({"metric": ""}, "metric= takes the name"),
        ({"config": [1]}, "config= of a search must be a dict"),
    ],
)
def test_options_refuse_bad_values(options, message):
    with pytest.raises(ValueError, match=message):
        TuneOptions(**options)
    assert TuneOptions(mode="max").direction == "maximize"


def _reads_lr_and_width(config):
    return config["lr"] * _helper(config)


def _helper(config):
    return config.get("width", 1)


def test_keys_a_function_never_reads_are_found_in_its_code():
    assert keys.unread(_reads_lr_and_width, ["lr", "width", "lr_typo"]) == ["lr_typo"]
    assert keys.unread("train_on_engines", ["anything"]) == []  # code not here: no warning


def test_space_and_config_expressions_may_hold_spaces():
    from jaxnb.magics import kit
    from jaxnb.magics.jax_tune import EXPRESSIONS, jax_tune

    def split(line):
        return kit.split_expressions(line, jax_tune, EXPRESSIONS)

    rest, exprs = split(
        "train --space {'lr': tune.loguniform(1e-4, 1e-1)} --trials 3 --config dict(a = 1) -o r")
    assert exprs == {"--space": "{'lr': tune.loguniform(1e-4, 1e-1)}", "--config": "dict(a = 1)"}
    assert rest.split() == ["train", "--trials", "3", "-o", "r"]
    with pytest.raises(UsageError, match="--space needs a Python expression"):
        split("train --space --trials 3")


def test_view_table_plot_and_best_so_far():
    view = TuneView("s", "loss", "min", 3)
    for n, (values, state) in enumerate([([3, 2, 1], "COMPLETE"), ([5, 4], "PRUNED"),
                                         ([2, 0.5], "COMPLETE")]):
        view.trial_started(n, {"lr": 0.1 * (n + 1)})
        for step, v in enumerate(values, 1):
            view.add(n, step, v)
        view.trial_ended(n, state, values[-1] if state == "COMPLETE" else None)
    assert view.best().number == 2
    table = view.table_html()
    assert "2 ★" in table and "PRUNED" in table and "lr=0.1" in table
    panels = view.panels()
    assert [s.label for s in panels[0].series] == [None, None, "best: trial 2"]
    assert panels[1].series[0].y.tolist() == [1, 1, 0.5]  # best so far, by trial
    assert view.png()[:4] == b"\x89PNG"


def test_stop_search_button_asks_once_and_says_so():
    asked = []
    view = TuneView("s", "loss", "min", 5, on_stop=lambda: asked.append(1))
    view.stop_button.click()  # what a click in the page does
    view.stop_button.click()
    assert asked == [1] and view.status == "stopping"
    assert "after the current trial" in view.message


def test_a_recovered_trial_redraws_from_the_resumed_step_and_tells_optuna_each_step_once():
    import optuna

    from jaxnb._tune.feed import TrialFeed
    from jaxnb._tune.view import TuneView

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    trial = study.ask()
    view = TuneView("s", "loss", "min", 1)
    view.trial_started(trial.number, {})
    feed = TrialFeed(trial, "loss", view, stop=lambda: None)
    feed.add([{"process": 0, "step": s, "metrics": {"loss": 1.0 / s}} for s in (1, 2, 3, 4)])
    feed.rewind(2)  # resumed from the checkpoint at step 2: steps 3 and 4 are redone
    assert list(view.rows[trial.number].steps) == [1.0, 2.0]
    feed.add([{"process": 0, "step": s, "metrics": {"loss": 9.0}} for s in (3, 4, 5)])
    assert list(view.rows[trial.number].steps) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert study.trials[0].intermediate_values == {1: 1.0, 2: 0.5, 3: 1 / 3, 4: 0.25, 5: 9.0}
    assert "recovered 1×" in view.table_html()


def test_a_ray_param_space_nested_under_train_loop_config_is_the_configs_space():
    values = _sample({"train_loop_config": {"lr": tune.loguniform(1e-4, 1e-1),
                                            "width": tune.choice([32, 64])}})
    assert set(values) == {"lr", "width"}
    with pytest.raises(space.SpaceError, match=r"also has 'scaling_config'; jaxnb searches only "
                                               r"the config: pass \{'train_loop_config': "):
        _sample({"train_loop_config": {"lr": tune.uniform(0, 1)}, "scaling_config": {}})
