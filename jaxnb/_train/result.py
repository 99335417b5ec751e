"""`Result`: what a training run left behind (filled live, final once it ends)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from jaxnb._core.run_folder import Checkpoint


@dataclasses.dataclass(eq=False)
class Result:
    """The outcome of ``%jax_train`` / ``JaxCluster.train``, like Ray Train's ``Result``.

    ``metrics`` is process 0's last report, ``history`` every report of process 0
    in order, ``checkpoint`` the latest checkpoint (or None), ``path`` the run
    folder and ``error`` None when the run succeeded. ``stopped`` says the run
    ended early because you asked it to; ``reports`` counts the reports received
    from each process. A ``--background`` run's Result fills in while it runs:
    ``wait()`` for the end, ``stop()`` to ask every process to stop.
    """

    name: str
    path: str
    metrics: dict[str, Any] | None = None
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    checkpoint: Checkpoint | None = None
    error: BaseException | None = None
    stopped: bool = False
    reports: dict[int, int] = dataclasses.field(default_factory=dict)
    _done: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False)
    _stop: Callable[[], None] | None = dataclasses.field(default=None, repr=False)

    @property
    def running(self) -> bool:
        """True until the run has ended (always False for a blocking run's Result)."""
        return not self._done.is_set()

    def wait(self, timeout: float | None = None) -> Result:
        """Wait until the run ends (at most ``timeout`` seconds); returns ``self``."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"run {self.name!r} is still running after {timeout:g} s")
        return self

    def stop(self) -> None:
        """Ask every process to stop at the same step (``jaxnb.should_stop()`` turns True)."""
        if self.running and self._stop is not None:
            self._stop()

    def set_stopper(self, stop: Callable[[], None]) -> None:
        """(jaxnb) What :meth:`stop` calls while the run goes on."""
        self._stop = stop

    def set_done(self) -> None:
        """(jaxnb) The run has ended: :meth:`wait` returns and ``running`` turns False."""
        self._done.set()

    def __repr__(self) -> str:
        state = "running" if self.running else ("failed" if self.error else "finished")
        parts = [
            f"name={self.name!r}",
            state,
            f"metrics={self.metrics!r}",
            f"history=[{len(self.history)} reports]",
            f"checkpoint={self.checkpoint!r}",
            f"path={self.path!r}",
        ]
        if self.stopped:
            parts.append("stopped=True")
        if self.error is not None:
            parts.append(f"error={type(self.error).__name__}({_first_line(self.error)!r})")
        return f"Result({', '.join(parts)})"


def _first_line(error: BaseException) -> str:
    text = getattr(error, "summary", None) or str(error)
    return text.splitlines()[0] if text else ""
