"""When a recovery's failure counts as the previous one come back (milliseconds)."""

from __future__ import annotations

import pytest

from jaxnb._core.run_folder import Checkpoint
from jaxnb._train.recovery import STEP_SLACK, repeats
from jaxnb._train.result import Failure


def _failure(step: int | None, resumed_from: int | None = None) -> Failure:
    return Failure(time=0.0, step=step, processes=(1,), cause="[p1] killed by SIGKILL",
                   resumed_from=resumed_from)


@pytest.mark.parametrize("before, again, latest, repeated", [
    (12, 12, 10, True),              # the same step, nothing saved since the restore from 10
    (12, 11, 10, True),              # the newest reports died with it: heard one step earlier
    (11, 12, 10, True),              # ... or the first time
    (12, 12 + STEP_SLACK + 1, 10, False),  # further on: a death of its own
    (12, 12, 15, False),             # a checkpoint past the restore: the run got on
    (12, 12, None, True),            # nothing was ever saved
    (None, 12, 10, False),           # the first death's step is unknown
])
def test_a_failure_repeats_near_the_same_step_with_no_newer_checkpoint(before, again, latest, repeated):
    previous = _failure(before, resumed_from=10)
    saved = None if latest is None else Checkpoint(step=latest, path=f"/run/checkpoints/{latest}")
    assert repeats(previous, _failure(again), saved) is repeated


def test_a_run_restarted_from_step_0_that_saved_since_made_progress():
    previous = _failure(3, resumed_from=None)
    assert repeats(previous, _failure(3), Checkpoint(step=5, path="/run/checkpoints/5")) is False
    assert repeats(previous, _failure(3), None) is True
