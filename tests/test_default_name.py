"""An unnamed start in a Jupyter kernel is named ``default`` (``jaxnb._attach.default_name``):
the name, the idle timeout and the line said when ``default`` is taken (milliseconds)."""

from __future__ import annotations

import pytest

from jaxnb import ClusterStateError
from jaxnb._attach import default_name
from jaxnb._core.options import ClusterOptions


def test_the_first_free_name_is_default_then_default_2_and_so_on():
    assert default_name.free_name(lambda name: False) == "default"
    assert default_name.free_name(lambda name: name == "default") == "default-2"
    assert default_name.free_name(lambda name: name in ("default", "default-2")) == "default-3"
    assert default_name.free_name(lambda name: name in ("default", "default-3")) == "default-2"
    with pytest.raises(ClusterStateError, match=r"^100 clusters named default… run on this "
                                                r"machine; stop some"):
        default_name.free_name(lambda name: True)


def test_only_an_unnamed_start_on_this_machine_in_a_kernel_is_named_by_default():
    yes, no = (lambda: True), (lambda: False)
    assert default_name.applies(ClusterOptions(), yes)
    assert not default_name.applies(ClusterOptions(name="exp"), yes)
    assert not default_name.applies(ClusterOptions(hosts=("h1", "h2")), yes)
    assert not default_name.applies(ClusterOptions(), no)  # a script: it ends with its process
    assert default_name.applies(ClusterOptions(idle_timeout=5), yes)
    with pytest.raises(ClusterStateError, match=r"^idle_timeout= is for a cluster that outlives"):
        default_name.applies(ClusterOptions(idle_timeout=5), no)


def test_the_default_name_comes_with_an_idle_timeout_and_says_when_default_was_taken():
    free = lambda name: False  # noqa: E731
    options, note = default_name.named(ClusterOptions(n=3), free, free)
    assert (options.name, options.idle_timeout, options.n, note) == ("default", 300.0, 3, None)
    options, _ = default_name.named(ClusterOptions(idle_timeout=20), free, free)
    assert options.idle_timeout == 20

    taken = lambda name: name == "default"  # noqa: E731
    options, note = default_name.named(ClusterOptions(), taken, taken)
    assert options.name == "default-2"
    assert note == ("jaxnb: cluster 'default' runs on this machine with no kernel attached (its "
                    "engines' state and runs kept; `%jax_cluster attach` takes it over); this one "
                    "is named 'default-2'")
    options, note = default_name.named(ClusterOptions(), taken, free)  # held by a live kernel
    assert note == ("jaxnb: cluster 'default' runs in another kernel; this one is named "
                    "'default-2' (another kernel attaches it with `%jax_cluster attach default-2`)")


def test_outside_a_kernel_nothing_is_taken_for_a_shutdown_on_purpose():
    from jaxnb._core import ipykernel_internals, optional

    assert not ipykernel_internals.in_kernel()  # pytest is no Jupyter kernel
    assert ipykernel_internals.ending_for_good() is False
    assert not ipykernel_internals.in_kernel(), "asking made a kernel application"
    assert not optional.is_off(ipykernel_internals.SHUTDOWN_KIND)
