"""Failure handling asks the group's site; with a site of our own it runs without engines.
(What each kind of site plans for start and stop: tests/test_site_plan.py.)"""

from __future__ import annotations

from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group, ProcessInfo
from jaxnb._failures import explain, free, stacks
from jaxnb._hosts import site, sockets


class RecordingSite(site.Site):
    """A site whose engines wrote known logs and whose collectives can be cut."""

    name = "recording"

    def __init__(self, logs: dict[int, str]):
        self.logs = logs
        self.cuts = 0

    def log(self, group: Group, p: int) -> str:
        return self.logs.get(p, "")

    def can_cut(self, group: Group) -> bool:
        return True

    def cut_collectives(self, group: Group) -> int:
        self.cuts += 1
        return 3


def _group(where: site.Site) -> Group:
    group = Group(ClusterOptions(n=2))
    group.processes = [ProcessInfo(p, p, f"host{p}", 100 + p, "cpu", [], 2) for p in range(2)]
    group.site = where
    return group


def test_a_dead_process_is_described_from_its_sites_log():
    where = RecordingSite({1: "\x1b[31mstarted\x1b[0m\n[Gloo] Rank 1 is connected\nout of memory\n"})
    text = explain.describe_dead(_group(where), {1: "was killed by SIGKILL"})
    assert "[p1] (JAX process 1, pid 101 on host1) was killed by SIGKILL." in text
    assert "    started\n    out of memory" in text  # colours and gloo noise removed
    assert "[Gloo]" not in text


def test_cutting_collectives_goes_through_the_site_and_marks_the_group():
    where = RecordingSite({})
    group = _group(where)
    assert free.cut_collectives(group) and where.cuts == 1 and group.group_cut


def test_a_site_without_stacks_or_cuts_says_so():
    group = _group(site.Site())
    assert stacks.request(group, [0, 1]) == {}
    assert not free.cut_collectives(group) and not group.group_cut
    assert stacks.section(group, 0, None).endswith(stacks.NO_DUMP)


def test_the_gloo_plan_keeps_engine_to_engine_connections_but_not_the_coordinators():
    listed = {
        "h0": {"10": [[5, ["10.0.0.1", 4000], ["10.0.0.2", 5000]],   # to engine 11: cut
                      [6, ["10.0.0.1", 4001], ["10.0.0.2", 7000]],   # to the coordinator: keep
                      [7, ["10.0.0.1", 4002], ["10.0.0.9", 6000]]]},  # to the controller: keep
        "h1": {"11": [[8, ["10.0.0.2", 5000], ["10.0.0.1", 4000]],
                      [9, ["10.0.0.2", 7000], ["10.0.0.1", 4001]]]},
    }
    plan = sockets.gloo_plan(listed, "10.0.0.2:7000")
    assert plan == {"h0": {"10": [[5, ["10.0.0.1", 4000]]]}, "h1": {"11": [[8, ["10.0.0.2", 5000]]]}}
