"""``%jax_tune`` / ``JaxCluster.tune`` on the shared 2-process cluster (real engines, real Optuna)."""

from __future__ import annotations

import os

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from jaxnb import tune

# ---- functions that run on the engines --------------------------------------------------


def quadratic(config):
    """``loss`` falls over the steps towards (x - 2)^2: x near 2 is good, far is bad.

    With ``config["marks"]`` (a folder), each process writes there the last step it reported,
    however the trial ended (a file per trial and process)."""
    import os
    import time

    import jaxnb

    last = 0
    try:
        for step in range(1, config["steps"] + 1):
            if jaxnb.should_stop():
                return
            last = step  # reported even when the report ends the run (a prune): it is sent first
            jaxnb.report({"loss": (config["x"] - 2.0) ** 2 + 1.0 / step, "step": step})
            time.sleep(config.get("sleep", 0.02))
    finally:
        if config.get("marks"):
            rank = jaxnb.get_context().get_world_rank()
            with open(os.path.join(config["marks"], f"{config['x']!r}-p{rank}"), "w") as f:
                f.write(str(last))


def breaks_when_far(config):
    import jaxnb

    if config["x"] > 5:
        raise RuntimeError("x too large")
    for step in range(1, 4):
        jaxnb.report({"loss": (config["x"] - 2.0) ** 2, "step": step})


def reports_accuracy(config):
    import jaxnb

    jaxnb.report({"acc": config["x"], "step": 1})


def good_then_bad(trial):
    """Trials 0 and 1 near the optimum, later ones far away: the pruner must stop those."""
    if trial.number < 2:
        return {"x": trial.suggest_float("x", 1.9, 2.1)}
    return {"x": trial.suggest_float("x_far", 8.0, 9.0)}


# ---- searches on the shared cluster -------------------------------------------------------


def test_pruning_stops_bad_trials_early_and_the_best_is_kept(cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    result = cluster.tune(quadratic, good_then_bad, trials=4, metric="loss", mode="min",
                          config={"steps": 30, "marks": str(marks)}, storage=str(tmp_path),
                          name="prune", seed=0)
    states = [t.state for t in result.trials]
    assert states == ["COMPLETE", "COMPLETE", "PRUNED", "PRUNED"]
    full, pruned = len(result.trials[0].history), len(result.trials[2].history)
    assert full == 30 and pruned < full
    for trial in result.trials:  # each trial ended on every process at the same step
        last = [int((marks / f"{trial.config['x']!r}-p{p}").read_text()) for p in (0, 1)]
        assert last == [len(trial.history)] * 2, (trial.number, last)
    assert result.trials[2].stopped and result.trials[2].error is None
    assert 1.9 <= result.best_config["x"] <= 2.1 and result.best_config["steps"] == 30
    assert result.best_value == result.best_result.history[-1]["loss"]
    assert result.best_value == pytest.approx(result.study.best_value)
    assert [t.state.name for t in result.study.trials] == states
    assert os.path.isdir(tmp_path / "prune" / "trial_0002")
    assert os.path.isfile(tmp_path / "prune" / "study.journal")


def test_a_failing_trial_is_told_fail_and_the_search_goes_on(cluster, tmp_path):
    space = lambda t: {"x": t.suggest_float("x", 1.0, 3.0) if t.number != 1 else 9.0}  # noqa: E731
    with capture_output() as out:
        result = cluster.tune(breaks_when_far, space, trials=3, storage=str(tmp_path),
                              pruner="none", show=False)
    assert [t.state for t in result.trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert "x too large" in str(result.trials[1].error)
    assert "trial 1 failed" in out.stderr
    assert all(t.state.name != "RUNNING" for t in result.study.trials)
    assert cluster.busy_with is None and cluster.suspect is None  # ready for the next cell


def test_mode_max_picks_the_largest(cluster, tmp_path):
    result = cluster.tune(reports_accuracy, {"x": tune.choice([0.1, 0.9, 0.5])}, trials=3,
                          metric="acc", mode="max", storage=str(tmp_path), show=False, seed=1)
    assert result.best_value == max(t.value for t in result.trials)


def test_a_metric_no_report_carries_is_named_after_the_first_trial(cluster, tmp_path):
    with pytest.raises(ValueError, match=r"carries metric 'val_loss' \(its reports have: acc, step\); "
                                         "pass metric="):
        cluster.tune(reports_accuracy, {"x": tune.uniform(0, 1)}, trials=5, metric="val_loss",
                     storage=str(tmp_path), show=False)


def test_resume_keeps_finished_trials_and_reruns_the_lost_one(cluster, tmp_path):
    space = {"x": tune.uniform(1.0, 3.0)}
    first = cluster.tune(quadratic, space, trials=2, config={"steps": 3}, storage=str(tmp_path),
                         name="study", show=False, seed=0)
    lost = first.study.ask()  # as if the kernel died during this trial: left RUNNING
    lost.suggest_float("x", 1.0, 3.0)
    with pytest.raises(FileExistsError, match="pass resume=True"):
        cluster.tune(quadratic, space, trials=3, config={"steps": 3}, storage=str(tmp_path),
                     name="study", show=False)
    again = cluster.tune(quadratic, space, trials=3, config={"steps": 3}, storage=str(tmp_path),
                         name="study", show=False, resume=True)
    numbers = [t.number for t in again.trials]
    assert numbers[:2] == [0, 1] and [t.state for t in again.trials[:2]] == ["COMPLETE"] * 2
    assert again.trials[2].number == 2 and again.trials[2].state == "FAIL"  # the lost one
    rerun = again.trials[3]
    assert rerun.state == "COMPLETE" and rerun.config["x"] == lost.params["x"]
    assert len(again.study.trials) == 4


# ---- the magic -------------------------------------------------------------------------


def test_the_magic_runs_a_search_and_stores_the_result(shared_magics, tmp_path):
    ip = shared_magics
    ip.user_ns.update(quadratic=quadratic, tune=tune)
    with capture_output(display=True) as out:
        ip.run_line_magic("jax_tune", f"quadratic --space {{'x': tune.uniform(1, 3)}} --trials 2 "
                                      f"--config dict(steps=3) --storage {tmp_path} -o search")
    search = ip.user_ns["search"]
    assert type(search).__name__ == "TuneResult" and search.study.study_name == "quadratic"
    assert [t.state for t in search.trials] == ["COMPLETE", "COMPLETE"]
    html = "".join(o.data.get("text/html", "") for o in out.outputs)
    assert "trial" in html and "COMPLETE" in html and "<img" in html  # static table + PNG


def rows_seen(config):
    """Reports how many rows of dataset ``rows`` this trial read on process 0."""
    import jaxnb

    shard = jaxnb.get_dataset_shard("rows")
    seen = sum(len(batch["x"]) for batch in shard.iter_batches(batch_size=2))
    jaxnb.report({"loss": (config["x"] - 2.0) ** 2, "rows": seen, "step": 1})


def test_the_magic_takes_datasets_defined_on_the_engines(shared_magics, cluster, tmp_path):
    """``--datasets NAME=VAR`` names an engine variable, as for ``%jax_train`` (it was refused:
    the tune magic had its own parser that wanted VAR in the notebook)."""
    cluster.run("import numpy as np\ntune_rows = {'x': np.arange(12.0)}")
    shared_magics.user_ns.update(rows_seen=rows_seen, tune=tune)
    assert "tune_rows" not in shared_magics.user_ns
    shared_magics.run_line_magic(
        "jax_tune", f"rows_seen --space {{'x': tune.uniform(1, 3)}} --trials 2 --datasets "
                    f"rows=tune_rows --storage {tmp_path} -o search")
    search = shared_magics.user_ns["search"]
    assert [t.state for t in search.trials] == ["COMPLETE", "COMPLETE"]
    assert [t.history[-1]["rows"] for t in search.trials] == [6, 6]  # half of 12 rows each


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("quadratic", "%jax_tune needs --space"),
        ("quadratic --space {}", "--space is empty"),
        ("quadratic --space 3", "--space must be a dict of distributions"),
        ("quadratic --space {'x': 1}", "--space['x'] is a int, not a distribution"),
        ("quadratic --space {'x': tune.uniform(0, 1)} --mode best", "--mode takes min or max"),
        ("quadratic --space {'x': tune.uniform(0, 1)} --trials 0", "--trials takes a positive"),
        ("quadratic --space {'x': tune.uniform(0, 1)} --pruner hyper", "--pruner takes one of"),
        ("quadratic --space {'x': tune.uniform(0, 1)} -o 1x", "-o takes a Python name"),
        ("quadratic --space {'x': tune.uniform(0, 1)} --datasets rows", "--datasets takes NAME=VAR"),
        ("quadratic --space {'x': tune.uniform(0, 1)} --steps 0", "--steps takes a positive whole"),
        ("--space {'x': tune.uniform(0, 1)}", "%jax_tune needs FUNC, the train function (or "
                                              "--attach --name STUDY"),
        ("quadratic --attach --name s", "%jax_tune --attach takes no FUNC, only --name STUDY"),
        ("--attach", "%jax_tune --attach takes no FUNC, only --name STUDY"),
        ("--attach --name s --trials 3", "--trials starts one; %jax_tune --attach only follows"),
        ("--attach --name s --space {}", "--space starts one; %jax_tune --attach only follows"),
        ("--attach --name s", "this cluster has no name, so 's' cannot outlive its kernel: use the "
                               "result its train() or tune() returned; start clusters with --name"),
    ],
)
def test_bad_input_is_one_line_saying_what_to_pass(shared_magics, line, message):
    shared_magics.user_ns.update(quadratic=quadratic, tune=tune)
    with pytest.raises(UsageError) as info:
        shared_magics.run_line_magic("jax_tune", line)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_help_lists_every_flag(shared_magics):
    with capture_output() as captured:
        shared_magics.run_cell("%jax_tune?")
    for flag in ("--space", "--trials", "--metric", "--mode", "--pruner", "--config", "--name",
                 "--storage", "--steps", "--datasets", "--max-failures", "--resume", "--background",
                 "-o"):
        assert flag in captured.stdout, flag


def reads_x_only(config):
    import jaxnb

    jaxnb.report({"loss": config["x"], "step": 1})


def test_a_sampled_key_the_function_never_reads_is_warned_once(cluster, tmp_path):
    space = {"x": tune.uniform(0, 1), "widht": tune.choice([1, 2])}
    with capture_output() as out:
        result = cluster.tune(reads_x_only, space, trials=2, storage=str(tmp_path), show=False)
    assert out.stderr.count("samples 'widht' but reads_x_only never reads it") == 1
    assert [t.state for t in result.trials] == ["COMPLETE", "COMPLETE"]


def test_a_background_search_returns_at_once_and_stops_after_the_current_trial(cluster, tmp_path):
    import time

    result = cluster.tune(quadratic, {"x": tune.uniform(1, 3)}, trials=20, pruner="none",
                          config={"steps": 20}, storage=str(tmp_path), show=False, background=True)
    assert result.running
    deadline = time.monotonic() + 60
    while not result.trials and time.monotonic() < deadline:
        time.sleep(0.05)
    result.stop()
    result.wait(120)
    assert not result.running and 1 <= len(result.trials) < 20
    assert result.stopped_because.startswith("stopped on request after trial")
    assert all(t.state == "COMPLETE" for t in result.trials)  # the current trial was finished
    assert all(t.state.name == "COMPLETE" for t in result.study.trials)
