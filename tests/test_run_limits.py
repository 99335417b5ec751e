"""``max_failures`` (-1: no limit) and ``keep_checkpoints``: the checks and the words (pure logic)."""

from __future__ import annotations

import pytest

from jaxnb._core import spelling
from jaxnb._core.run_limits import (
    check_keep_checkpoints,
    check_limits,
    check_max_failures,
    count_text,
    exhausted,
)
from jaxnb._tune.options import TuneOptions
from jaxnb.magics import accept


def test_minus_one_is_no_limit_and_never_exhausted():
    check_max_failures(-1)
    assert not exhausted(10**6, -1)
    assert exhausted(3, 2) and not exhausted(2, 2) and exhausted(1, 0)
    assert count_text(4, -1) == "4, no limit" and count_text(1, 2) == "1 of 2"


@pytest.mark.parametrize("bad", [-2, 1.5, True, "3", None])
def test_other_max_failures_are_refused_in_one_line(bad):
    with pytest.raises(ValueError) as info:
        check_max_failures(bad)
    assert str(info.value) == (f"max_failures= takes a whole number >= 0, or -1 for no limit, got "
                               f"{bad!r}; e.g. max_failures=2")


@pytest.mark.parametrize("bad", [0, -1, 2.0, False])
def test_keep_checkpoints_is_a_positive_whole_number(bad):
    with pytest.raises(ValueError, match=r"^keep_checkpoints= takes a whole number >= 1 \(the newest "
                       r"checkpoints kept\), got .*; e\.g\. keep_checkpoints=3$"):
        check_keep_checkpoints(bad)
    check_limits(-1, 1)


def test_the_magic_spells_the_flag():
    with spelling.as_flags(), pytest.raises(ValueError, match=r"^--keep-checkpoints takes"):
        check_keep_checkpoints(0)
    parse = accept.failures("--max-failures")
    assert (parse("-1"), parse("0"), parse("7")) == (-1, 0, 7)


def test_a_search_checks_both_up_front():
    assert TuneOptions(max_failures=-1, keep_checkpoints=1).keep_checkpoints == 1
    with pytest.raises(ValueError, match=r"^keep_checkpoints= takes"):
        TuneOptions(keep_checkpoints=0)
