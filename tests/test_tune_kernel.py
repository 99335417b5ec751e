"""``%jax_tune`` in a real Jupyter kernel: pruning stops bad trials early, at the same report on
every process, whether or not the loop asks (a Ray loop as written), however fast its steps;
``--resume`` after the kernel and its cluster died in the middle of a trial, and a resumed search
shows each trial as it was; a Ray ``param_space`` nested under ``train_loop_config``."""

from __future__ import annotations

import re
import time

import optuna
import pytest
from support.factories import started_kernel, stop_orphaned
from support.stop_loops import LOOPS, ends

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
KERNEL = ("-n 2 --devices-per-process 1 --spares 0", FUNCS)


@pytest.fixture(scope="module")
def kernel(make_kernel):
    """One kernel for the tests that leave it as they found it: the train functions and the loops
    of ``support.stop_loops``."""
    return make_kernel(KERNEL[0], FUNCS + LOOPS)


def search_of(kernel, fn: str, tmp_path, steps: int, sleep: float = 0.0, trials: int = 4,
              extra: str = "", var: str = "search"):
    """Run ``%jax_tune FN`` over ``good_then_bad`` (2 good trials, then bad ones); its output and
    each trial as the TuneResult has it."""
    out = kernel.ok(f"%jax_tune {fn} --space good_then_bad --trials {trials} --metric loss "
                    f"--config dict(steps={steps}, sleep={sleep}, log={str(tmp_path / 'ends')!r}) "
                    f"--storage {tmp_path} --name s {extra} -o {var}", timeout=300)
    return out, trials_of(kernel, var)


def trials_of(kernel, var: str) -> list[dict]:
    return kernel.value(f"[dict(state=t.state, value=t.value, config=t.config, steps=t.steps, "
                        f"history=t.history, "
                        f"seconds=t.seconds, stopped_at=t.stopped_at, pruned_at=t.pruned_at, "
                        f"pruned_time=t.pruned_time) "
                        f"for t in {var}.trials]")


#: How long after the verdict a pruned trial may go on in these tests: the promise is one report or
#: 50 ms (whichever is later), measured in bench/tune.py; a test on a shared machine allows for load.
VERDICT_SLACK_SECONDS = 1.0


def ended_soon_after_the_verdict(trial: dict) -> bool:
    """At most one report after the pruner's verdict, or none later than the slack after it (the
    loops report their engine's ``time.time()`` as ``t``; engines and notebook share a clock)."""
    after = [h["t"] for h in trial["history"] if h["t"] > trial["pruned_time"]]
    return len(after) <= 1 or after[-1] - trial["pruned_time"] <= VERDICT_SLACK_SECONDS


def test_a_ray_loop_that_never_asks_is_pruned_at_the_same_report_everywhere(kernel, tmp_path):
    """The issue: trials marked PRUNED still ran all their steps (60 of 60), silently."""
    _, trials = search_of(kernel, "ray_loop", tmp_path, steps=150, sleep=0.02)
    assert [t["state"] for t in trials] == ["COMPLETE", "COMPLETE", "PRUNED", "PRUNED"]
    for t, (p0, p1) in zip(trials, ends(tmp_path / "ends"), strict=True):
        assert p0["last"] == p1["last"] == t["steps"][-1]  # the same report on every process
        complete = t["state"] == "COMPLETE"
        assert p0["after_loop"] is p1["after_loop"] is complete  # never half-way on some
        if not complete:  # soon after the verdict, which no report waited for
            assert t["pruned_at"] <= t["stopped_at"] == p0["last"] < 150, t
            assert ended_soon_after_the_verdict(t), (t["pruned_time"], t["history"][-3:])
    optuna_values = kernel.value("[t.value for t in search.study.trials]")
    assert optuna_values == [t["value"] for t in trials]  # one value: the last report's


def test_fast_steps_end_soon_after_the_verdict_on_every_process(kernel, tmp_path):
    """Tutorial 06's shape (should_stop() at every step) with ~1 ms steps: every PRUNED trial ran
    all its steps, the stop agreement (every 0.1 s) being slower than the steps. No report waits
    for the verdict (that made a search 5x slower than a plain loop); the trial ends at the same
    step on every process, soon after the verdict."""
    _, trials = search_of(kernel, "fast_steps", tmp_path, steps=2000)
    assert [t["state"] for t in trials] == ["COMPLETE", "COMPLETE", "PRUNED", "PRUNED"]
    for t, (p0, p1) in zip(trials, ends(tmp_path / "ends"), strict=True):
        assert p0["last"] == p1["last"] == t["steps"][-1], (p0, p1)  # the same step everywhere
        if t["state"] == "PRUNED":
            assert t["pruned_at"] <= t["steps"][-1] < 2000, [*t["steps"][-3:], t["pruned_at"]]
            assert ended_soon_after_the_verdict(t), (t["pruned_time"], t["history"][-3:])


def test_a_resumed_search_shows_each_trial_as_it_was(kernel, tmp_path):
    """The issue: after --resume a PRUNED trial's 0.81544 at step 69 became 0.48658 at step 23
    (Optuna's record); each trial keeps its value, steps, time and whole curve."""
    first, before = search_of(kernel, "ray_loop", tmp_path, steps=30, sleep=0.01, trials=3)
    assert [t["state"] for t in before] == ["COMPLETE", "COMPLETE", "PRUNED"]
    again, after = search_of(kernel, "ray_loop", tmp_path, steps=30, sleep=0.01, trials=4,
                             extra="--resume", var="more")
    assert after[:3] == before
    rows = [table_rows(out.displays[-1]["data"]["text/html"]) for out in (first, again)]
    assert rows[1][:3] == rows[0], rows  # the same rows in the view: value, state, steps, time


def table_rows(html: str) -> list[str]:
    """The trials table's body rows (the head left out)."""
    return re.findall(r"<tr><th[^>]*>\d.*?</tr>", html)


def test_a_ray_param_space_nested_under_train_loop_config(kernel, tmp_path):
    """Ray's ``param_space={"train_loop_config": {...}}`` searches the config (it was refused)."""
    kernel.ok("param_space = {'train_loop_config': {'x': tune.uniform(1.9, 2.1)}}")
    kernel.ok(f"%jax_tune ray_loop --space param_space --trials 2 --metric loss --config "
              f"dict(steps=3, sleep=0, log={str(tmp_path / 'ends')!r}) --storage {tmp_path} -o ray")
    assert kernel.value("[t.state for t in ray.trials]") == ["COMPLETE", "COMPLETE"]
    assert kernel.value("all(1.9 <= t.config['x'] <= 2.1 for t in ray.trials)")


def test_a_search_with_a_seed_samples_the_same_configs_again(kernel, tmp_path):
    """``--seed N``: the same seed, the same sampled configs; another seed, others."""
    def configs(name: str, seed: int) -> list[float]:
        kernel.ok(f"%jax_tune slow_quadratic --space dict(x=tune.uniform(0.0, 4.0)) --trials 2 "
                  f"--config dict(steps=1, sleep=0) --storage {tmp_path} --name {name} --seed {seed} "
                  f"--pruner none -o seeded")
        return kernel.value("[t.config['x'] for t in seeded.trials]")

    first = configs("a", 7)
    assert configs("b", 7) == first and configs("c", 8) != first, first


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


def test_resume_after_the_kernel_and_its_cluster_died_during_a_trial(tmp_path):
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
        k.crash()  # the kernel and its cluster (which would outlive it alone and end the trial)
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
    with started_kernel("-n 1 --spares 0", FUNCS) as second:
        with started_kernel("-n 1 --spares 0", FUNCS) as first:
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
            orphaned = first.value("__import__('jaxnb').current_cluster().options.name")
            first.kill()
            stop_orphaned(orphaned)  # it outlives the kernel, trial 0 still on its engines
        second.ok(line.replace("STEPS", "3") + " --resume -o search")
        assert second.value("[t.state for t in search.trials]") == ["FAIL", "COMPLETE", "COMPLETE"]
        assert second.value("search.trials[1].config['x'] == search.study.trials[0].params['x']")
