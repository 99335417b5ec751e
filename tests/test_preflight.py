"""The preflight's comparison and GPU counting (pure logic; the lab runs it for real in
tests/test_hosts_prep.py)."""

from __future__ import annotations

from jaxnb._core import spelling
from jaxnb._core.host_entries import parse_hosts
from jaxnb._hosts import preflight

HERE = {"python": "3.11.7", "packages": {"jax": "0.4.31", "jaxlib": "0.4.31", "jaxnb": "0.1.0"}}


def report(python="3.11.2", jax="0.4.31", jaxlib="0.4.31", jaxnb="0.1.0", gpus=None):
    return {"python": python, "packages": {"jax": jax, "jaxlib": jaxlib, "jaxnb": jaxnb}, "gpus": gpus}


def test_same_versions_no_line_python_compared_by_minor():
    assert preflight.mismatch_lines(HERE, {"h1": report(), "h2": report()}, "/py") == []


def test_one_line_per_odd_host_naming_what_differs_and_the_fix():
    """The fix names ``--python`` to a magic's user and ``python=`` to a ``JaxCluster`` caller."""
    reports = {"h1": report(), "h2": report(jaxlib="0.4.30"), "h3": report(python="3.10.1", jaxnb=None)}
    with spelling.as_flags():
        lines = preflight.mismatch_lines(HERE, reports, "/opt/venv/bin/python")
    assert lines == [
        "h2: jaxlib 0.4.30 (here 0.4.31); run `/opt/venv/bin/python -m pip install "
        "'jaxlib==0.4.31'` there",
        "h3: Python 3.10.1 (here 3.11.7), jaxnb not installed (here 0.1.0); use Python 3.11 there "
        "(--python PATH); install jaxnb 0.1.0 there (the notebook's)",
    ]
    python_api = preflight.mismatch_lines(HERE, reports, "/opt/venv/bin/python")
    assert python_api[1] == lines[1].replace("(--python PATH)", "(python=PATH)")


def test_gpu_hosts_counted_unless_the_entry_gives_a_count():
    entries = parse_hosts("g1,g2:1,g3:2,g4")
    counted = preflight.counted_entries(
        entries, {"g1": report(gpus=8), "g2": report(gpus=8), "g3": report(gpus=8), "g4": report(gpus=0)}
    )
    assert [(e.host, e.count) for e in counted] == [("g1", 8), ("g2", 1), ("g3", 2), ("g4", 1)]
    assert [str(e) for e in counted] == ["g1:8", "g2:1", "g3:2", "g4"]
    assert preflight.no_gpu_lines(entries, {"g4": report(gpus=0)}) == [
        "g4: no GPU found (nvidia-smi -L lists none, or nvidia-smi is not on its PATH)"]


def test_report_parsed_from_a_host_output_and_local_report_has_the_packages():
    assert preflight.parse("motd\n__jaxnb_preflight__ {\"gpus\": 2}\n") == {"gpus": 2}
    assert preflight.parse("nothing") == {}
    here = preflight.local_report()
    assert set(here["packages"]) == {"jax", "jaxlib", "jaxnb"} and here["packages"]["jax"]
