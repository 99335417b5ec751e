"""A search on a cluster that loses a process ends with the reason (its own cluster: it breaks it)."""

from __future__ import annotations

import pytest
from support.clusters import two_processes


@pytest.fixture(scope="module")
def cluster():
    yield from two_processes()


def dies_on_far_x(config):
    import os

    import jaxnb

    if config["x"] > 5 and jaxnb.get_context().get_world_rank() == 1:
        os._exit(3)
    jaxnb.report({"loss": config["x"], "step": 1})


def test_a_search_ends_with_the_reason_when_processes_die(cluster, tmp_path):
    space = lambda t: {"x": 1.0 if t.number == 0 else 9.0}  # noqa: E731
    result = cluster.tune(dies_on_far_x, space, trials=4, storage=str(tmp_path), show=False)
    assert [t.state for t in result.trials] == ["COMPLETE", "FAIL"]
    assert "cannot run more trials" in result.stopped_because
    assert "restart the cluster" in result.stopped_because
    assert all(t.state.name in ("COMPLETE", "FAIL") for t in result.study.trials)
