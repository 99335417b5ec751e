"""``--min-processes`` and ``scale``: the pure parts (milliseconds, no engines) — the options
of the same cluster at another size, what refuses a smaller group, the flags' checks."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from jaxnb._core import group_size, phases, spelling
from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group, ProcessInfo
from jaxnb._lifecycle import spares
from jaxnb._train.resize import check_min_processes, config_refusal, mesh_refusal


def _group(options: ClusterOptions, size: int) -> Group:
    group = Group(options)
    group.processes = [ProcessInfo(i, i, "h", 1, "cpu", [{"id": i}], size) for i in range(size)]
    return group


def test_a_size_takes_the_first_places_of_the_hosts_in_order():
    group = _group(ClusterOptions(hosts=("a", "u@b:2", "c")), 4)
    assert group_size.at_size(group, 2).hosts == ("a", "u@b:1")
    assert group_size.at_size(group, 3).hosts == ("a", "u@b:2")
    assert group_size.at_size(group, 4).hosts == ("a", "u@b:2", "c")
    with pytest.raises(ValueError, match=r"a, u@b:2, c have 4 places; scale to at most 4"):
        group_size.at_size(group, 5)
    assert group_size.at_size(_group(ClusterOptions(n=3), 3), 5).n == 5


def test_without_lost_hosts_and_back_to_the_full_size():
    options = ClusterOptions(hosts=("a", "u@b:2", "c"), n=4)
    group = _group(options, 4)
    fewer = group_size.without(group, ["u@b"])
    assert (fewer.hosts, fewer.n, group_size.size(fewer)) == (("a", "c"), 2, 2)
    group.options, group.full_options = fewer, options
    assert group_size.lost_hosts(group, fewer) == ["u@b"]
    assert group_size.full(group) == options and group_size.at_size(group, 4) == options


def test_a_model_parallel_axis_must_divide_the_new_device_count():
    assert mesh_refusal("m", [["i", 6]], 4) is None  # one axis: the data axis
    assert mesh_refusal("m", [["data", 3], ["model", 2]], 4) is None  # data=2, model=2
    assert mesh_refusal("m", [["model", 3], ["batch", 2]], 4) == (
        "mesh `m` keeps its model-parallel axis model=3, which 4 devices do not divide")
    assert mesh_refusal("m", [["x", 2], ["tp", 2], ["sp", 2]], 6) == (
        "mesh `m` keeps its model-parallel axes tp=2, sp=2, which 6 devices do not divide")
    assert config_refusal({"num_processes": 3, "lr": 0.1}, 3) == (
        "its config fixes num_processes=3 (read jaxnb.get_context().get_world_size() in the "
        "function instead)")
    assert config_refusal({"num_processes": 8}, 3) is None and config_refusal(None, 3) is None


def test_min_processes_is_checked_in_one_line_in_each_spelling():
    group = _group(ClusterOptions(n=3), 3)
    check_min_processes(None, 0, group)
    check_min_processes(2, 1, group)
    for value, max_failures, says in [
            (0, 1, "min_processes= takes a whole number >= 1, got 0; e.g. min_processes=1"),
            (2, 0, "min_processes= goes on after a loss, which needs max_failures=: add e.g. "
                   "max_failures=2"),
            (3, 1, "min_processes=3 leaves no fewer processes to go on with on 3 processes; pass "
                   "at most 2")]:
        with pytest.raises(ValueError) as info:
            check_min_processes(value, max_failures, group)
        assert str(info.value) == says
    with spelling.as_flags(), pytest.raises(ValueError) as info:
        check_min_processes(2, 0, group)
    assert str(info.value) == ("--min-processes goes on after a loss, which needs --max-failures: "
                               "add e.g. --max-failures 2")


def test_the_magics_refuse_scale_without_a_number_and_a_number_elsewhere():
    from jaxnb.magics import jax_cluster, jax_train

    front = None  # each line is refused before a cluster is asked for
    for line, says in [("scale", "`%jax_cluster scale N` takes the number of processes"),
                       ("status 3", "`%jax_cluster status` takes no number or name; only `scale N`"),
                       ("scale two", "scale takes a positive whole number, got 'two'")]:
        with pytest.raises(UsageError, match=says):
            jax_cluster.line(front, line)  # type: ignore[arg-type]
    args = jax_train.jax_train.parser.parse_argstring("f --max-failures 2 --min-processes 2")
    assert (args.max_failures, args.min_processes) == (2, 2)
    with pytest.raises(UsageError, match="--min-processes takes a positive whole number"):
        jax_train.jax_train.parser.parse_argstring("f --min-processes x")


def test_a_size_the_function_cannot_run_at_is_refused_when_asked():
    from jaxnb._train.resize import Resize, Sizes

    group = _group(ClusterOptions(n=3), 3)
    resize = Resize(group, 2, Sizes(*[None] * 7), "run", {"num_processes": 3})  # type: ignore[arg-type]
    resize.meshes = {"mesh": [["data", 1], ["model", 3]]}
    with pytest.raises(ValueError) as info:
        resize.request(1, "asked")
    assert str(info.value) == "run 'run' cannot go on with 1 process: that is fewer than min_processes=2"
    assert resize.refusal(2) == "mesh `mesh` keeps its model-parallel axis model=3, which 2 devices " \
        "do not divide"
    resize.meshes = {}
    assert resize.refusal(2) == ("its config fixes num_processes=3 (read "
                                 "jaxnb.get_context().get_world_size() in the function instead)")
    resize.request(3, "asked")  # the full size: the config's count holds there
    assert resize.wanted == (3, "asked")
    group.resize = resize  # as once its first attempt started
    resize.end()
    assert group.resize is None


def test_scale_reaches_a_run_only_once_its_first_attempt_started():
    """A run whose start fails before its first attempt leaves ``scale`` to the idle cluster."""
    from types import SimpleNamespace

    from jaxnb._train.resize import Resize, Sizes

    group = _group(ClusterOptions(n=3), 3)
    resize = Resize(group, 2, Sizes(*[None] * 7), "run", {})  # type: ignore[arg-type]
    assert group.resize is None
    ended = SimpleNamespace(ar=SimpleNamespace(ready=lambda: True))  # an attempt already over
    resize.follow(ended)
    assert group.resize is resize and resize.monitor is ended
    resize.end()
    assert group.resize is None


def test_the_places_of_a_shrink_are_counted_by_host():
    options = ClusterOptions(hosts=("a", "u@b:2", "c"), n=4)
    group = _group(options, 4)
    assert spares.places(group, group_size.without(group, ["c"])) == {"a": 1, "u@b": 2}
    assert spares.places(group, group_size.at_size(group, 2)) == {"a": 1, "u@b": 1}
    assert spares.places(group, ClusterOptions(n=3)) == {"": 3}  # this machine


def test_phases_add_up_phase_by_phase():
    seconds = {phases.DETECT: 1.5, phases.STOP: 0.25}
    phases.add(seconds, {phases.STOP: 0.5, phases.JOIN: 0.125})
    assert seconds == {phases.DETECT: 1.5, phases.STOP: 0.75, phases.JOIN: 0.125}
    assert list(phases.in_order({phases.STOP: 1, phases.GRACE: 2, phases.DETECT: 3})) == \
        [phases.DETECT, phases.GRACE, phases.STOP]
