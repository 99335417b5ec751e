"""`Result`: what a training run left behind (filled live, final once it ends)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from jaxnb._core.goodput import ProcessSamples, split
from jaxnb._core.ongoing import Ongoing
from jaxnb._core.run_folder import Checkpoint


@dataclasses.dataclass
class Failure:
    """One recovery of a run (``--max-failures``): when, at which step, who, and why.

    ``time`` is the wall-clock time (``time.time()``) the death was seen, ``step``
    the last step reported before it, ``processes`` the processes that died and
    ``cause`` one line saying how. ``resumed_from`` is the checkpoint step the run
    went on from (``None``: from the beginning). ``phases`` has the seconds each phase
    of the recovery took, in order (``jaxnb._core.phases``): ``detect``, ``wait for lost
    hosts`` (``--min-processes`` on ``--hosts``), ``stop the old group`` (the survivors
    too), ``start or swap``, ``join jax.distributed``, ``replay``, ``restore``, ``first
    step`` (compile included); ``seconds`` is their sum, once the first step is done. A change
    of the group's size (``--min-processes``: a shrink after a loss, or a grow back at a
    checkpoint, recorded too, with ``processes`` empty) also has ``old_size`` and ``new_size``.
    A failure is listed as soon as the death is seen: while its recovery goes on (a background
    run, read meanwhile), ``resumed_from`` and ``seconds`` are still ``None``, and ``phases``
    holds the phases done so far.
    """

    time: float
    step: int | None
    processes: tuple[int, ...]
    cause: str
    resumed_from: int | None = None
    seconds: float | None = dataclasses.field(default=None, compare=False)
    phases: dict[str, float] = dataclasses.field(default_factory=dict, compare=False)
    old_size: int | None = None
    new_size: int | None = None


@dataclasses.dataclass(eq=False)
class Result(Ongoing):
    """The outcome of ``%jax_train`` / ``JaxCluster.train``, like Ray Train's ``Result``.

    ``metrics`` is process 0's last report, ``history`` every report of process 0
    in order, ``checkpoint`` the latest checkpoint (or None), ``path`` the run
    folder and ``error`` None when the run succeeded. ``stopped`` says the run
    ended early because it was asked to (Stop, ``stop()``, an interrupt, a pruned
    trial), and ``stopped_at`` the step of the report where every process ended it
    (the last report before, when ``should_stop()`` ended it); ``steps`` the step of
    each report in ``history``; ``reports`` counts the reports received
    from each process. ``failures`` has one :class:`Failure` per recovery
    (``--max-failures``); after one, the reports redone from the checkpoint
    replace the lost ones in ``history``. ``profile``: the trace of ``profile_steps``, or None.
    ``goodput`` (where the wall time went), ``flops_per_step`` and ``memory`` (each process's
    peak) are filled when the run ends.
    A ``--background`` run's Result fills in while it runs:
    ``wait()`` for the end, ``stop()`` to ask every process to stop.
    """

    name: str
    path: str
    metrics: dict[str, Any] | None = None
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    checkpoint: Checkpoint | None = None
    error: BaseException | None = None
    stopped: bool = False
    stopped_at: int | None = None
    reports: dict[int, int] = dataclasses.field(default_factory=dict)
    failures: list[Failure] = dataclasses.field(default_factory=list)
    #: The ``ProfileResult`` of ``profile_steps`` (``--profile-steps``), else ``None``.
    profile: Any = None
    #: The wall time split into ``parts`` (compile, steps, data, checkpoint, recovery, idle:
    #: the mean over processes, in seconds, adding up to ``wall``), the ``slowest`` process of
    #: each, each process's own split (``processes``) and ``goodput`` (the steps' share).
    goodput: dict[str, Any] | None = None
    #: FLOPs of one step on one device (the matrix products of the traced step), or ``None``.
    flops_per_step: float | None = None
    #: Each process's memory peak over the run (``peak`` is the device's, or on CPU the
    #: live arrays' sampled peak; ``peak_rss``), with the latest reading (``in_use``, ``limit``).
    memory: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    _samples: dict[int, ProcessSamples] = dataclasses.field(default_factory=dict, repr=False)
    _steps: list[int] = dataclasses.field(default_factory=list, repr=False)
    _done: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False)
    _stop: Callable[[], None] | None = dataclasses.field(default=None, repr=False)

    def add_report(self, metrics: dict[str, Any], step: int) -> None:
        """(jaxnb) Book process 0's report of ``step``."""
        self.history.append(metrics)
        self._steps.append(step)
        self.metrics = metrics

    @property
    def steps(self) -> list[int]:
        """The step of each report in ``history``, in order."""
        return list(self._steps)

    def add_sample(self, process: int, sample: dict[str, Any]) -> None:
        """(jaxnb) Book a process's sample (memory, time parts, FLOPs per step)."""
        found = self._samples.get(process) or self._samples.setdefault(process, ProcessSamples())
        found.add(sample)

    def conclude_samples(self, wall: float, recovery: float) -> None:
        """(jaxnb) Fill ``goodput``, ``flops_per_step`` and ``memory`` from the samples."""
        self.goodput = split(wall, self._samples, recovery)
        self.memory = {p: s.memory() for p, s in sorted(self._samples.items())}
        flops = [s.latest.get("flops_per_step") for _, s in sorted(self._samples.items()) if s.latest]
        self.flops_per_step = next((f for f in flops if f), None)

    def rewind(self, step: int | None) -> None:
        """(jaxnb) Forget the reports after ``step`` (``None``: all): they will be redone."""
        keep = 0 if step is None else sum(1 for s in self._steps if s <= step)
        del self.history[keep:], self._steps[keep:]
        self.metrics = self.history[-1] if self.history else None

    def _waited_for(self) -> str:
        return f"run {self.name!r}"

    def __repr__(self) -> str:
        state = ("running" if self.running else "failed" if self.error else
                 "stopped" if self.stopped else "finished")
        parts = [
            f"name={self.name!r}",
            state,
            f"metrics={self.metrics!r}",
            f"history=[{len(self.history)} reports]",
            f"checkpoint={self.checkpoint!r}",
            f"path={self.path!r}",
        ]
        if self.stopped:
            parts.append("stopped=True" + ("" if self.stopped_at is None
                                           else f", stopped_at={self.stopped_at}"))
        if self.failures:
            parts.append(f"failures=[{len(self.failures)} recovered]")
        if self.error is not None:
            parts.append(f"error={type(self.error).__name__}({_first_line(self.error)!r})")
        return f"Result({', '.join(parts)})"


def _first_line(error: BaseException) -> str:
    text = getattr(error, "summary", None) or str(error)
    return text.splitlines()[0] if text else ""
