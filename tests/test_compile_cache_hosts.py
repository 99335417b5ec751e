"""The compilation cache on ssh hosts (the lab: network namespaces with real sshd): each host
has its own folder (here one each host sees empty and its own, a tmpfs in its mount namespace),
every process writes it, and a second cluster's first step hits it on every process.
Skipped (with the reason) where the lab cannot be built."""

from __future__ import annotations

import os
import tempfile

import pytest
from test_compile_cache import SETUP

from jaxnb import JaxCluster

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def lab(make_lab):
    """Two lab hosts with a private folder. Torn down even on failure."""
    return make_lab(2, private=(tempfile.mkdtemp(prefix="jaxnb-private-"),))


@pytest.mark.timeout(600)
def test_each_host_caches_in_its_own_folder_and_a_second_cluster_hits_it(lab):
    folder = os.path.join(lab.private_dir, "xla")
    with JaxCluster(hosts=lab.addresses, spares=0, compile_cache=folder) as cluster:
        cluster.run(SETUP)
        first = [p.compile_cache for p in cluster.status()]
        hosts = [p.host for p in cluster.processes]
    assert hosts == ["labhost1", "labhost2"]
    assert [c["folder"] for c in first] == [folder, folder]
    # Each host wrote its own: the program over both processes and its process's own.
    assert all(c["hits"] == 0 and c["writes"] >= 1 and c["entries"] >= 2 for c in first), first
    assert not os.path.exists(folder)  # this machine's folder of that name: none (hosts' own)
    with JaxCluster(hosts=lab.addresses, spares=0, compile_cache=folder) as cluster:
        cluster.run(SETUP)
        second = [p.compile_cache for p in cluster.status()]
    assert all(c["hits"] >= 2 for c in second), second
