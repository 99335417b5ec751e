"""A search re-attaches as a run does, in real Jupyter kernels (``jupyter_client``) on one named
cluster: kernel B attaches while kernel A's background search goes on and follows it to its end
with every trial (``%jax_tune --attach``, the folder found from the cluster's record); B's own
search loses its kernel (SIGKILL) in the middle of a trial; kernel C attaches, the view shows the
study and the trial that ran on to its end on the engines, says in one line that no kernel
drives the search and how to go on, and ``--resume`` counts that trial and finishes the study.
``list`` shows the searches."""

from __future__ import annotations

import json
import time

import pytest
from support.clusters import wait_until
from support.named_clusters import clusters_dir_fixture, family, gone, jaxnb_cli, kernel  # noqa: F401 - fixtures

#: Starts kernels and engines: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

SLOW = '''import jaxnb
def slow(config):
    import time
    import jaxnb
    for step in range(1, config["steps"] + 1):
        jaxnb.report({"loss": (config["x"] - 2.0) ** 2 + 1.0 / step, "step": step})
        time.sleep(0.05)'''


def search(name: str, storage, steps: int, trials: int, extra: str) -> str:
    return (f"%jax_tune slow --space {{'x': jaxnb.tune.uniform(1, 3)}} --trials {trials} "
            f"--config dict(steps={steps}) --storage {storage} --name {name} --pruner none {extra}")


def reported(run_dir) -> bool:
    """Whether the trial in ``run_dir`` has made a report (its ``reports.jsonl``)."""
    try:
        lines = (run_dir / "reports.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return False
    return any(json.loads(line).get("kind") == "report" for line in lines if line.endswith("}"))


def test_a_search_is_followed_from_another_kernel_and_after_its_kernel_died(clusters_dir, tmp_path):
    a, b = kernel(), kernel()
    try:
        a.ok("%jax_cluster start -n 2 --name tunes --spares 0")
        a.ok(SLOW)
        a.ok(search("live", tmp_path, 10, 3, "--background -o live"))
        b.ok("%jax_cluster attach tunes")  # takes the cluster over; A's search goes on
        followed = b.ok("%jax_tune --attach --name live -o seen", timeout=180)  # no --storage
        assert followed.displays, "the search's view was not shown"
        wait_until(lambda: not a.value("live.running"), timeout=30, what="A's search ending")
        trials = "[(t.number, t.state, t.value, t.steps) for t in {}.trials]"
        assert b.value(trials.format("seen")) == a.value(trials.format("live"))
        assert len(b.value(trials.format("seen"))) == 3 and b.value("seen.stopped_because") is None

        b.ok(SLOW)
        b.ok(search("orphan", tmp_path, 60, 3, "--background -o mine"))
        wait_until(lambda: reported(tmp_path / "orphan" / "trial_0001"), timeout=120,
                   what="trial 1 reporting")
        assert "orphan (search, running)" in jaxnb_cli("list").stdout
        processes = family(clusters_dir, "tunes")
        b.kill()  # SIGKILL in the middle of trial 1
    finally:
        for k in (a, b):  # not Kernel.shutdown: that would end the cluster too
            k.client.stop_channels()
            k.manager.shutdown_kernel(now=True)
            k.manager.cleanup_resources()
    listed = jaxnb_cli("list").stdout
    assert "live (search, ended)" in listed and "orphan (search, not driven)" in listed, listed
    with kernel() as c:
        c.ok("%jax_cluster attach tunes")
        started = time.monotonic()
        shown = c.ok("%jax_tune --attach --name orphan -o seen", timeout=180)
        said = shown.stderr.strip()
        assert said.startswith("jaxnb: search 'orphan' has no kernel driving it: the kernel that "
                               "ran it (pid "), shown.shown
        assert "is gone, and its trial 1 ran on the engines to its end (loss " in said, said
        assert "): a resume counts it; continue it with `%jax_tune FUNC" in said, said
        assert said.endswith(f"--name orphan --storage {tmp_path} --resume`"), said
        assert "\n" not in said
        assert c.value("[(t.number, t.state) for t in seen.trials]") == [[0, "COMPLETE"]]
        assert shown.displays and time.monotonic() - started < 60
        final = shown.displays[-1]["data"]["text/html"]  # the view: trial 1 ran to its end
        assert "ENDED" in final and "COMPLETE" in final, final

        c.ok(SLOW)
        c.ok(search("orphan", tmp_path, 3, 3, "--resume -o more"), timeout=180)
        assert c.value("[t.state for t in more.trials]") == ["COMPLETE"] * 3  # trial 1 counted
        assert c.value("more.trials[1].steps") == list(range(1, 61))  # as it ran on the engines
        assert c.value("[len(t.steps) for t in more.trials]") == [60, 60, 3]
        assert "orphan (search, ended)" in jaxnb_cli("list").stdout
        c.ok("%jax_cluster stop")
        wait_until(lambda: gone(processes), timeout=20, what="every process of the cluster ending")
