"""``%jax_tune`` in a real Jupyter kernel: pruning stops bad trials early; ``--resume`` after
the kernel died in the middle of a trial."""

from __future__ import annotations

import time

import optuna
import pytest
from support.factories import started_kernel

#: Starts kernels and engines: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

FUNCS = '''
import jaxnb
from jaxnb import tune

def slow_quadratic(config):
    import time
    import jaxnb
    for step in range(1, config["steps"] + 1):
        if jaxnb.should_stop():
            return
        jaxnb.report({"loss": (config["x"] - 2.0) ** 2 + 1.0 / step, "step": step})
        time.sleep(config["sleep"])

def good_then_bad(trial):
    if trial.number < 2:
        return {"x": trial.suggest_float("x", 1.9, 2.1)}
    return {"x": trial.suggest_float("x_far", 8.0, 9.0)}
'''


#: The kernel every test here starts: a 2-process cluster and the train functions.
KERNEL = ("-n 2 --devices-per-process 1", FUNCS)


def test_pruning_stops_bad_trials_early_in_a_notebook(tmp_path):
    with started_kernel(*KERNEL) as k:
        out = k.ok(f"%jax_tune slow_quadratic --space good_then_bad --trials 4 --metric loss "
                   f"--config dict(steps=25, sleep=0.02) --storage {tmp_path} -o search")
        states = k.value("[t.state for t in search.trials]")
        steps = k.value("[len(t.history) for t in search.trials]")
        assert states == ["COMPLETE", "COMPLETE", "PRUNED", "PRUNED"]
        assert steps[:2] == [25, 25] and max(steps[2:]) < 25
        assert k.value("1.9 <= search.best_config['x'] <= 2.1")
        widget = [d for d in out.displays if "application/vnd.jupyter.widget-view+json" in d["data"]]
        assert widget, "the live view was not shown"
        final = out.displays[-1]["data"]["text/html"]  # the static fallback, updated at the end
        assert "PRUNED" in final and "★" in final and "<img" in final


def test_resume_after_the_kernel_died_during_a_trial(tmp_path):
    journal = tmp_path / "s" / "study.journal"
    line = (f"%jax_tune slow_quadratic --space {{'x': tune.uniform(1, 3)}} --trials 3 "
            f"--config dict(steps=40, sleep=0.05) --storage {tmp_path} --name s --pruner none")
    with started_kernel(*KERNEL) as k:
        k.send(line)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # wait for trial 1 to be under way, then kill the kernel
            time.sleep(0.5)
            if not journal.exists():
                continue
            storage = optuna.storages.JournalStorage(
                optuna.storages.journal.JournalFileBackend(str(journal)))
            try:
                trials = optuna.load_study(study_name="s", storage=storage).trials
            except KeyError:
                continue
            if len(trials) == 2 and trials[1].intermediate_values:
                break
        else:
            raise AssertionError("trial 1 never started")
        k.kill()
    with started_kernel(*KERNEL) as k:
        k.ok(line.replace("steps=40", "steps=4") + " --resume -o search")
        states = k.value("[t.state for t in search.trials]")
        numbers = k.value("[t.number for t in search.trials]")
        assert numbers == [0, 1, 2, 3]
        assert states == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
        assert k.value("search.trials[2].config['x'] == search.study.trials[1].params['x']")
        assert k.value("len(search.trials[0].history)") == 40  # kept from before the restart


def test_datasets_built_on_the_engines_feed_every_trial(tmp_path):
    """``%jax_tune --datasets NAME=VAR`` takes a dataset built in a ``%%jax_cluster`` cell, as
    ``%jax_train`` does (it was refused: VAR had to be a notebook variable)."""
    with started_kernel(*KERNEL) as k:
        k.ok("%%jax_cluster\nimport numpy as np\nrows = {'x': np.arange(10.0)}")
        k.ok("def reads_rows(config):\n"
             "    import jaxnb\n"
             "    shard = jaxnb.get_dataset_shard('train')\n"
             "    seen = sum(len(b['x']) for b in shard.iter_batches(batch_size=2))\n"
             "    jaxnb.report({'loss': config['x'], 'rows': seen, 'step': 1})\n")
        k.ok(f"%jax_tune reads_rows --space {{'x': tune.uniform(0, 1)}} --trials 2 "
             f"--datasets train=rows --storage {tmp_path} -o search")
        assert k.value("[t.state for t in search.trials]") == ["COMPLETE", "COMPLETE"]
        assert k.value("[t.history[-1]['rows'] for t in search.trials]") == [5, 5]



def running_trials(journal) -> list[int]:
    """The numbers of study 's''s RUNNING trials, read from its journal here."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    return [t.number for t in optuna.load_study(study_name="s", storage=storage).trials
            if t.state == optuna.trial.TrialState.RUNNING]


def test_resume_in_another_kernel_leaves_a_live_searchs_trial_and_takes_it_once_that_kernel_died(
        tmp_path):
    line = (f"%jax_tune slow_quadratic --space {{'x': tune.uniform(1, 3)}} --trials 2 "
            f"--config dict(steps=STEPS, sleep=0.1) --storage {tmp_path} --name s --pruner none")
    journal = tmp_path / "s" / "study.journal"
    with started_kernel("-n 1", FUNCS) as second:
        with started_kernel("-n 1", FUNCS) as first:
            first.ok(line.replace("STEPS", "10**5") + " --background -o live")
            deadline = time.monotonic() + 120
            while not (journal.exists() and running_trials(journal) == [0]):
                assert time.monotonic() < deadline, "trial 0 never started"
                time.sleep(0.5)
            out = second.run(line.replace("STEPS", "3") + " --resume")
            said = out.stderr.strip()
            assert said.startswith(f"UsageError: study 's' in {tmp_path / 's'} is being run by a live "
                                   f"search in another kernel (pid {first.pid} on "), out.shown
            assert said.endswith("); wait for it to end or stop it there, then pass --resume"), said
            assert running_trials(journal) == [0]  # still the live search's
            assert first.value("live.running")
            first.kill()
        second.ok(line.replace("STEPS", "3") + " --resume -o search")
        assert second.value("[t.state for t in search.trials]") == ["FAIL", "COMPLETE", "COMPLETE"]
        assert second.value("search.trials[1].config['x'] == search.study.trials[0].params['x']")
