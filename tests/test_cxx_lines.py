"""C++ libraries' lines on the engines: informational ones (gloo's, XLA's ``I``) stay in the
engine's log; XLA's allocator lines fold under an out-of-memory explanation; warnings and
errors reach the cell at once."""

from __future__ import annotations

import pytest

from jaxnb._core.cxx_log import ALLOCATOR, CELL, LOG, route
from jaxnb._engine.boot import cxx_lines
from jaxnb._failures.out_of_memory import allocator_block

GLOO = "[Gloo] Rank 2 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3"
INFO = "I1128 08:01:02.345678  4242 service.cc:152] XLA service 0x55d initialized for platform CUDA"
WARN = "W1128 08:01:02.345678  4242 gpu_helpers.cc:10] the driver is older than the toolkit"
BFC_W = ("W1128 08:01:03.000001  4242 bfc_allocator.cc:501] Allocator (GPU_0_bfc) ran out of "
         "memory trying to allocate 168.9GiB (rounded to 181349015552)requested by op")
BFC_E = "2026-11-28 08:01:03.000002: E external/xla/xla/tsl/framework/bfc_allocator.cc:512] Stats:"


def test_lines_are_routed_by_library_and_level():
    assert route(GLOO) == LOG and route(INFO) == LOG
    assert route(WARN) == CELL and route(BFC_W) == ALLOCATOR and route(BFC_E) == ALLOCATOR
    assert route("step 3 loss 0.5") == CELL and route("I said hello") == CELL


@pytest.fixture
def router():
    cxx_lines.take_allocator_lines()
    return cxx_lines.Router()


def test_the_cell_gets_warnings_and_user_text_not_information(router):
    assert router.feed(f"{GLOO}\n{INFO}\nuser line\n{WARN}\n", now=0.0) == f"user line\n{WARN}\n"
    assert router.feed("a progress bar 10%", now=0.0) == "a progress bar 10%"  # not a log line: at once
    assert router.feed("I1128 08:01:02.3", now=0.0) == ""  # may be a log line: held until whole
    assert router.feed("45678  4242 a.cc:1] more info\n", now=0.0) == ""


def test_allocator_lines_wait_for_an_explanation_then_go_on(router):
    assert router.feed(f"{BFC_W}\n{BFC_E}\n", now=10.0) == ""
    assert cxx_lines.take_allocator_lines() == [BFC_W, BFC_E]  # the out-of-memory note takes them
    assert router.feed(f"{BFC_W}\n", now=20.0) == ""
    assert router.expired(now=20.0 + cxx_lines.HOLD_SECONDS / 2) == []
    assert router.expired(now=20.0 + cxx_lines.HOLD_SECONDS) == [BFC_W + "\n"]  # no error took them


def test_the_explanation_shows_the_first_allocator_lines_and_folds_the_rest():
    block = allocator_block(0, [BFC_W, BFC_E, "E1128 08:01:03.1  42 bfc_allocator.cc:9] Chunk"]).splitlines()
    assert block[0] == "XLA's allocator on [p0] said (3 lines):"
    assert block[1] == "  " + BFC_W[:160] and block[2] == "  " + BFC_E
    assert block[3].startswith("  … 1 more lines of XLA's text: `import sys; print(sys.last_value.xla_text)`")


@pytest.mark.timeout(120)
def test_an_engines_information_stays_in_its_log_and_its_warnings_reach_the_cell(cluster, capsys):
    from jaxnb._hosts import processes

    cluster.run(f"import os, time\nos.write(2, {(INFO + chr(10) + WARN + chr(10)).encode()!r})\n"
                "time.sleep(0.5)")
    shown = capsys.readouterr()
    assert WARN in shown.err and "XLA service 0x55d" not in shown.out + shown.err
    group = cluster.group
    log = processes.launcher_log(processes.launcher_of(group, group.processes[0].pid))
    assert INFO in log and WARN in log
