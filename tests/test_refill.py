"""The spare pool's refill record: when new spares may start, and why none was ready."""

from __future__ import annotations

import threading
import time

from jaxnb._lifecycle.refill import Refill


def test_a_refill_waits_for_the_new_group_to_settle_and_no_longer():
    refill = Refill()
    refill.taken()
    started = time.monotonic()
    refill.wait_settled(0.05)  # nothing reported: the delay alone
    assert time.monotonic() - started >= 0.05
    threading.Timer(0.02, refill.settle).start()
    started = time.monotonic()
    refill.wait_settled(30)  # the first step reported: at once
    assert time.monotonic() - started < 5
    refill.taken()  # a new swap: the old first step no longer counts
    started = time.monotonic()
    refill.wait_settled(0.05)
    assert time.monotonic() - started >= 0.05


def test_why_no_spare_was_ready_names_the_cause():
    refill = Refill()
    assert refill.why_none(0, 0, 0, 2, 0).startswith("this cluster keeps no spares")
    assert refill.why_none(0, 0, 0, 2, 2) == "0 of 2 spares registered on the processes' hosts"
    refill.taken()
    said = refill.why_none(0, 0, 0, 2, 2)
    assert said.startswith("the restart ") and "replacements had not started yet" in said, said
    refill.launched()
    said = refill.why_none(1, 1, 0, 2, 2)
    assert said.startswith("1 spare(s), launched ") and said.endswith(
        "still starting, 1 of 2 registered"), said
    assert refill.why_none(1, 0, 1, 2, 2) == "1 spare(s) exited before use, 1 of 2 registered"


def test_the_dashboards_longest_phase_is_named_without_its_reason():
    from jaxnb._core import phases

    took = {phases.DETECT: 0.1, "no spare ready: 2 spare(s) still starting; waited 1.2 s": 1.2,
            phases.START: 0.3}
    assert phases.largest(took) == ("no spare ready", 1.2)
    assert phases.largest({phases.FIRST_STEP: 0.5}) == (phases.FIRST_STEP, 0.5)
    assert phases.largest({}) is None
