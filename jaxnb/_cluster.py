"""`JaxCluster`: the public front of one SPMD group of JAX processes on ipyparallel engines.

It holds the group's record (:class:`jaxnb._core.state.Group`) and hands it to the
module that does each job: start-up, shutdown, cells, values, failure handling and repair;
its jobs with many keywords (``train``, ``tune``, ``profile``) are in ``_cluster_jobs``. It
keeps no state of its own. Its options are declared once, in
:class:`jaxnb._core.options.ClusterOptions`.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxnb._attach import attachment
from jaxnb._cells.outcome import CellOutcome
from jaxnb._cluster_attach import Attaching
from jaxnb._cluster_inspect import Inspecting
from jaxnb._cluster_jobs import ClusterJobs
from jaxnb._cluster_options import resolve
from jaxnb._cluster_restarts import Restarting
from jaxnb._core import group_size
from jaxnb._core.errors import ClusterStateError, StartError
from jaxnb._core.memory_text import MemoryReport
from jaxnb._core.messages import ALREADY_RUNNING, plural
from jaxnb._core.options import (
    DEFAULT_COLLECTIVE_TIMEOUT,
    DEFAULT_INIT_TIMEOUT,
    ClusterOptions,
    Platform,
)
from jaxnb._core.phases import JOIN, START, Stopwatch
from jaxnb._core.spelling import example, option
from jaxnb._core.state import Group, ProcessInfo

CPU_MULTI_DEVICE_NOTE = (
    "jaxnb: several CPU devices per process: gloo collectives can deadlock with many steps in "
    "flight, so jaxnb.report() keeps one step in flight; in loops without report(), fetch a value "
    "(e.g. float(loss)) every few steps. See README, 'CPU collectives'."
)
#: Seconds a pull or push may take unless the cluster has a cell timeout.
DEFAULT_OPERATION_TIMEOUT = 300.0

__all__ = ["JaxCluster", "MemoryReport", "ProcessInfo"]


class JaxCluster(Inspecting, Attaching, Restarting, ClusterJobs):
    """A set of ipyparallel engines, one per JAX process, with ``jax.distributed`` initialised.

    What the magics use, for scripts and papermill runs. Each keyword is the flag of
    ``%jax_cluster start`` of the same name (``init_timeout=`` is ``--init-timeout``), with the
    same default; see the magics' reference for what each does. One keyword has no flag:
    ``collective_timeout=`` (seconds, default 60), how long a CPU collective waits for the
    other processes before it fails (XLA's gloo timeout). Nothing starts until :meth:`start`
    (or ``with``).

    Raises:
        ValueError: a wrong option value or combination (one line naming the keyword), before
            anything starts.

    Example:
        >>> with JaxCluster(n=2) as cluster:          # doctest: +SKIP
        ...     cluster.run("import jax; print(jax.device_count())")
    """

    def __init__(
        self,
        n: int | None = None,
        *,
        devices_per_process: int | None = None,
        platform: Platform = "cpu",
        engines: str = "local",
        hosts: Sequence[str] | None = (),
        hostfile: str | None = None,
        python: str | None = None,
        address: str | None = None,
        workdir: str | None = None,
        workdir_exclude: Sequence[str] = (),
        partition: str | None = None,
        time_limit: str | None = None,
        account: str | None = None,
        sbatch: Sequence[str] = (),
        init: bool = True,
        timeout: float | None = None,
        init_timeout: float = DEFAULT_INIT_TIMEOUT,
        spares: int | None = None,
        compile_cache: str | None = None,
        collective_timeout: int = DEFAULT_COLLECTIVE_TIMEOUT,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        """Each keyword is the :class:`~jaxnb._core.options.ClusterOptions` field of its name (the
        one declaration of the options, their checks and ``%jax_cluster start``'s flags)."""
        given = {name: value for name, value in locals().items() if name != "self"}
        self.group = Group(resolve(ClusterOptions(**given)))

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def options(self) -> ClusterOptions:
        """The options this cluster starts (and restarts) with."""
        return self.group.options

    @property
    def running(self) -> bool:
        """True between a successful :meth:`start` and :meth:`stop`."""
        return self.group.running

    def start(self) -> JaxCluster:
        """Start the engines and join them into one ``jax.distributed`` group; returns the cluster.

        Raises:
            jaxnb.ClusterStateError: it is running already.
            jaxnb.StartError: it could not start (an engine did not join within
                ``init_timeout``, a host failed the preflight, ...); nothing was left running.
        """
        if self.running:
            raise ClusterStateError(ALREADY_RUNNING)
        group = self.group
        group.setup.clear()  # new engines: nothing of the old setup is on them
        group.warm_modules.clear()
        given = group.unnamed or group_size.full(group)
        group.options, group.full_options, group.lost, group.unnamed = given, None, [], None
        self._name_by_default()
        return self._start()

    def _start(self, at_least: int | None = None, phases: Stopwatch | None = None) -> JaxCluster:
        from jaxnb._lifecycle import spares, startup

        phases = Stopwatch() if phases is None else phases
        try:
            self._supervise()  # a named cluster: its supervisor, which the engines watch
            with phases.timed(START):
                startup.start_engines(self.group, at_least)
            # After ipyparallel registered its own exit hook (when its controller started):
            # hooks run last-registered first, so this fast stop runs before its slow one.
            if self.group.attachment is None:  # a named cluster outlives the kernel
                atexit.register(self.stop)
            elif self.group.unnamed is not None:  # named by jaxnb: unless the kernel restarts
                atexit.unregister(self._stop_if_shut_down)
                atexit.register(self._stop_if_shut_down)
            with phases.timed(JOIN):
                startup.join_group(self.group)
            self._record()
            spares.top_up_later(self.group)  # warm spares, once the start is done with the CPU
        except BaseException as exc:
            self.stop()
            if isinstance(exc, (StartError, KeyboardInterrupt)):
                raise
            raise StartError(f"the cluster could not start ({exc}); nothing was left running") from exc
        if self.options.platform == "cpu" and self.options.resolved_devices() > 1 and self.num_processes > 1:
            print(CPU_MULTI_DEVICE_NOTE, file=sys.stderr)
        return self

    def stop(self) -> None:
        """Stop every engine, spare and the controller; nothing is left running.

        Stopping a cluster that is not running does nothing.
        """
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        hold = self.group.attachment
        if hold is not None and hold.taken_over() is not None and not getattr(hold, "link_lost", False):
            self.group.let_go()  # another kernel holds it: not this one's to stop
            return
        self._halt()
        if hold is not None and hold.headless:  # the supervisor's own: it ends the rest itself
            return
        if hold is not None:  # and its supervisor, which removes what is left
            self.group.attachment = None
            if hasattr(hold, "refuse"):  # attached through --via: stopped on its host
                if not hold.stop():
                    raise ClusterStateError(f"cluster {hold.name!r} on {hold.host} could not be "
                                            f"stopped over ssh; run `python -m jaxnb stop "
                                            f"{hold.name}` on {hold.host}")
            else:
                attachment.stop(hold.name, hold.supervisor)

    def _halt(self) -> None:
        """Stop the engines and the controller (a named cluster's supervisor stays)."""
        from jaxnb._lifecycle import shutdown, spares

        self._loaded()  # attached here: ipyparallel's launchers, read after the attach
        with spares.held():  # no spares launched behind the stop's back
            shutdown.stop_all(self.group)

    def restart(self, replay: bool = False) -> JaxCluster:
        """Stop, then start again with the same options (new processes): on the warm
        spares when enough are ready (only a join), else stopping and starting everything.

        Args:
            replay: then run again, in order, the setup that succeeded since start (``run``
                cells on every process and ``push`` values; not ``process=I`` cells or
                pulls), so the engines' Python state comes back.

        Raises:
            jaxnb.StartError: the new processes could not start.
            jaxnb.ReplayError: a recorded setup step failed on the new engines.
        """
        self._here("restart")
        if not self._swap_spares():
            self._halt()
            self._start()
        if replay:
            self._replay()
        else:
            self.group.setup.clear()  # the new engines start empty
        return self

    def _replay(self, push: Callable[[dict[str, Any]], None] | None = None) -> float:
        """Run the recorded setup on the (new) engines; the seconds it took. ``push``: what
        sets a push's values there (default: ``push`` them)."""
        from jaxnb._cells import pull, spmd

        group = self.group

        def cell(code: str, timeout: float | None) -> None:
            spmd.run_cell(group, code, timeout=timeout if timeout is not None else self.options.timeout,
                           show=spmd.ShowMode(quiet=True))

        return group.setup.run(cell, push or (lambda values: pull.push(group, values)))

    @property
    def lost(self) -> list[str]:
        """The places (hosts, slots) of the cluster left out of the group now, one line each."""
        return list(self.group.lost)

    def __enter__(self) -> JaxCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if self.group.ipp is not None and self.group.attachment is None:
                self.stop()

    # ---- operations ------------------------------------------------------------------

    def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        all: bool = False,
        process: int | None = None,
        value: bool = False,
    ) -> CellOutcome:
        """Run ``code`` on every process (SPMD) and show the merged output.

        Args:
            code: Python source, run as a ``%%jax_cluster`` cell.
            timeout: seconds (default: the cluster's ``timeout``); ``0``: no timeout.
            all: show every process's output raw.
            process: run on process I only.
            value: return the cell's value (process 0's) in the outcome's ``value`` instead
                of showing it (what ``%%jax_cluster`` gives IPython as ``Out[n]``).

        Raises:
            jaxnb.ClusterStateError: the cluster is not running, or busy with a background run.
            jaxnb.RemoteError: the code raised on some processes (named, with their tracebacks).
            jaxnb.ProcessFailure: a process died, the processes diverged or the cell timed out.
            ValueError: ``process`` does not exist, or ``all`` and ``process`` given together.
        """
        from jaxnb._cells import spmd
        from jaxnb._failures import repair
        from jaxnb._lifecycle import spares

        check_run(timeout=timeout, all=all, process=process)
        self.group.require_idle()
        if process is not None and process not in self.process_indices:
            raise ValueError(f"{example('process', process)} does not exist; choose "
                             f"0..{self.num_processes - 1}")
        repair.ensure_ready(self.group)
        outcome = spmd.run_cell(
            self.group,
            code,
            timeout=(timeout if timeout is not None else self.options.timeout) or None,
            show=spmd.ShowMode(all=all, process=process),
            value=value,
        )
        if process is None:  # succeeded on every process: part of the setup to replay
            self.group.setup.cell(code, timeout)
            spares.warm(self.group, outcome.imported)  # and the spares import what it imported
        return outcome

    def push(self, **values: Any) -> None:
        """Set ``values`` as variables on every process (each must pickle).

        Example:
            >>> cluster.push(lr=0.1, data_dir="/data")   # doctest: +SKIP

        Raises:
            jaxnb.ClusterStateError: the cluster is not running, or busy with a background run.
            ValueError: a value cannot be pickled (nothing is sent).
        """
        from jaxnb._cells import pull
        from jaxnb._failures import repair

        self.group.require_idle()
        repair.ensure_ready(self.group)
        pull.push(self.group, values)
        self.group.setup.push(values)

    def pull(self, name: str) -> Any:
        """The value of ``name`` on the engines (global arrays gathered as NumPy).

        Args:
            name: a variable on the engines; objects other than global arrays come from
                process 0.

        Raises:
            jaxnb.ClusterStateError: the cluster is not running, or busy with a background run.
            ValueError: the value cannot be pickled (one line).
            jaxnb.RemoteError: another error on the engines (e.g. ``name`` is not defined).
        """
        from jaxnb._cells import pull
        from jaxnb._failures import repair

        self.group.require_idle()
        repair.ensure_ready(self.group)
        return pull.pull(self.group, name, self.options.timeout or DEFAULT_OPERATION_TIMEOUT)

    def __repr__(self) -> str:
        n = self.num_processes
        state = plural(n, "process", "processes") if self.running else "stopped"
        return f"<JaxCluster {state}, platform={self.options.platform}>"


def check_run(*, timeout: float | None = None, all: bool = False, process: int | None = None) -> None:
    """The checks of :meth:`JaxCluster.run`'s options that need no cluster (a one-line
    ``ValueError``); ``%%jax_cluster`` makes them before it asks for the cluster."""
    if all and process is not None:
        raise ValueError(f"{example('all', True)} and {option('process')} do not go together; "
                         "pick one")
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"{option('timeout')} takes seconds, 0 for none, got {timeout!r}; "
                         f"e.g. {example('timeout', 30)}")
