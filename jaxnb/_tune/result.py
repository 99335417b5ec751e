"""`TuneResult`: what a search left behind (like Ray Tune's ``ResultGrid``)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, cast

from jaxnb._core.ongoing import Ongoing
from jaxnb._train.result import Result


@dataclasses.dataclass(eq=False)
class TuneResult(Ongoing):
    """The outcome of ``%jax_tune`` / ``jaxnb.tune.run``.

    ``study`` is the ``optuna.Study`` (Optuna's own plots work on it),
    ``trials`` each trial's training :class:`~jaxnb.Result` (with ``config``,
    ``state`` "COMPLETE"/"PRUNED"/"FAIL" and ``number``), ``best_config`` /
    ``best_value`` / ``best_result`` the best finished trial's (``None`` when
    none finished), ``path`` the study folder and ``stopped_because`` why the
    search ended before ``--trials`` (``None`` when it ran them all). A
    ``--background`` search's TuneResult fills in while it runs: ``wait()`` for
    the end, ``stop()`` to end it after the current trial.
    """

    study: Any
    path: str
    metric: str
    mode: str
    trials: list[TrialResult] = dataclasses.field(default_factory=list)
    stopped_because: str | None = None
    _done: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False)
    _stop: Callable[[], None] | None = dataclasses.field(default=None, repr=False)

    @property
    def best_result(self) -> TrialResult | None:
        """The best COMPLETE trial's Result (the last report of the metric decides)."""
        done = [t for t in self.trials if t.state == "COMPLETE" and t.value is not None]
        if not done:
            return None
        pick = min if self.mode == "min" else max
        return pick(done, key=lambda t: cast(float, t.value))

    @property
    def best_config(self) -> dict[str, Any] | None:
        """The full config (base config updated by the sampled values) of the best trial."""
        best = self.best_result
        return dict(best.config) if best is not None else None

    @property
    def best_value(self) -> float | None:
        """The best trial's last reported metric."""
        best = self.best_result
        return best.value if best is not None else None

    def _waited_for(self) -> str:
        return "the search"

    def __repr__(self) -> str:
        states = [t.state for t in self.trials]
        counts = ", ".join(f"{s.lower()}={states.count(s)}" for s in ("COMPLETE", "PRUNED", "FAIL")
                           if s in states)
        parts = [f"study={getattr(self.study, 'study_name', None)!r}",
                 f"trials={len(self.trials)} ({counts})", f"best_value={self.best_value!r}",
                 f"best_config={self.best_config!r}", f"path={self.path!r}"]
        if self.stopped_because:
            parts.append(f"stopped_because={self.stopped_because!r}")
        return f"TuneResult({', '.join(parts)})"


@dataclasses.dataclass(eq=False, repr=False)
class TrialResult(Result):
    """One trial's training :class:`~jaxnb.Result`, plus ``number``, ``config``, ``state``, ``value``.

    A PRUNED trial also has ``pruned_at``, the step of the report the pruner judged, and
    ``pruned_time``, when it judged it (``time.time()`` in the notebook); its run ended at
    ``stopped_at``, the report where every process agreed to end once the verdict reached them
    (the reports never wait for it: the trial runs on while the verdict travels).
    """

    number: int = -1
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    state: str = "RUNNING"  # then "COMPLETE", "PRUNED" or "FAIL"
    value: float | None = None  # the last report of the metric
    seconds: float | None = None  # how long the trial took
    pruned_at: int | None = None  # the step the pruner judged (PRUNED trials)
    pruned_time: float | None = None  # when it judged it (time.time(), PRUNED trials)

    @classmethod
    def of(cls, result: Result, number: int, config: dict[str, Any], state: str,
           value: float | None) -> TrialResult:
        """``result`` (a finished run) as trial ``number``."""
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(Result)}
        return cls(**fields, number=number, config=config, state=state, value=value)

    def __repr__(self) -> str:
        return (f"TrialResult(number={self.number}, state={self.state!r}, value={self.value!r}, "
                f"config={self.config!r}, steps={len(self.history)}, path={self.path!r}"
                + (f", pruned_at={self.pruned_at}, stopped_at={self.stopped_at}"
                   if self.state == "PRUNED" else "")
                + (f", error={_first_line(self.error)!r}" if self.error is not None else "") + ")")


def _first_line(error: BaseException) -> str:
    text = getattr(error, "summary", None) or str(error)
    return text.splitlines()[0] if text else ""
