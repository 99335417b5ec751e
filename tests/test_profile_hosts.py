"""%%jax_profile on several hosts for real: the lab of ssh hosts (network namespaces, real sshd).

Each engine runs on its own host (its own hostname); the trace files come back over the
engines, named by host and process, into one session folder.
"""

from __future__ import annotations

import gzip
import json
import os

import pytest
from profile_cells import STEPS_CELL

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def hosts_cluster(make_lab, make_cluster):
    """One engine on each of two lab hosts; lab and cluster torn down even on failure."""
    return make_cluster(hosts=make_lab(2).addresses)


def test_profile_on_two_hosts_names_the_straggler(hosts_cluster, tmp_path):
    result = hosts_cluster.profile(STEPS_CELL.format(steps=4, slow=1), name="hosts",
                                   storage=str(tmp_path))
    assert result.hosts == {0: "labhost1", 1: "labhost2"}
    session = tmp_path / "hosts" / "plugins" / "profile" / result.session
    assert sorted(os.listdir(session)) == ["labhost1_p0.xplane.pb", "labhost2_p1.xplane.pb"]
    assert result.straggler == 1 and result.cause == "host_ms"
    assert set(result.clock_error_ms) == {0, 1}
    with gzip.open(result.perfetto, "rt") as f:
        merged = json.load(f)
    names = sorted(e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name")
    assert names == ["p0 · labhost1", "p1 · labhost2"]
