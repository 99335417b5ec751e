"""`JaxCluster`: the lifecycle of one SPMD group of JAX processes on ipyparallel engines."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import shutil
import sys
from typing import Any

import ipyparallel as ipp

from jaxnb import _shutdown, _startup
from jaxnb._errors import ALREADY_RUNNING, NOT_STARTED, ClusterStateError, StartError
from jaxnb._options import ClusterOptions

CPU_MULTI_DEVICE_NOTE = (
    "jaxnb: several CPU devices per process: gloo collectives can deadlock with many steps in "
    "flight, so jaxnb.report() keeps one step in flight; in loops without report(), fetch a value "
    "(e.g. float(loss)) every few steps. See README, 'CPU collectives'."
)


@dataclasses.dataclass
class ProcessInfo:
    """One JAX process: its index, engine, host, pid, platform and local devices."""

    process_index: int
    engine_id: int
    host: str
    pid: int
    platform: str | None
    local_devices: list[dict]
    global_device_count: int | None
    state: str = "idle"
    #: The address its host is reached on (the interface that routes to the notebook's machine).
    address: str = ""
    #: Its parent's pid (for an engine on another host: the shell that reports its exit).
    parent_pid: int = 0


def _tpu_workers() -> tuple[list[str], str | None]:
    """On a TPU VM slice: its workers (in worker order) and this worker; else none."""
    from jaxnb._options import OptionError
    from jaxnb._tpu import SliceError, discover

    try:
        found = discover()
    except SliceError as exc:
        raise OptionError(str(exc)) from None
    if found is None:
        return [], None
    return list(found.workers), found.workers[found.this]


class JaxCluster:
    """A set of ipyparallel engines, one per JAX process, with ``jax.distributed`` initialised.

    >>> with JaxCluster(n=2) as cluster:          # doctest: +SKIP
    ...     cluster.run("import jax; print(jax.device_count())")
    """

    def __init__(
        self,
        n: int | None = None,
        *,
        devices_per_process: int | None = None,
        platform: str = "cpu",
        engines: str = "local",
        hosts: list[str] | tuple[str, ...] | None = None,
        hostfile: str | None = None,
        python: str | None = None,
        address: str | None = None,
        init: bool = True,
        timeout: float | None = None,
        init_timeout: float = 60.0,
        collective_timeout: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        extra = {} if collective_timeout is None else {"collective_timeout": collective_timeout}
        if hostfile is not None:  # one [user@]host[:count] per line, after any --hosts
            from jaxnb._hosts import HostError, read_hostfile

            try:
                hosts = [*(hosts or ()), *(str(e) for e in read_hostfile(hostfile))]
            except HostError as exc:
                from jaxnb._options import OptionError

                raise OptionError(str(exc)) from None
        local_host = None
        if platform == "tpu" and not hosts and engines == "local":
            hosts, local_host = _tpu_workers()  # a TPU VM slice: one engine per worker
        self.options = ClusterOptions(
            n=n,
            devices_per_process=devices_per_process,
            platform=platform,  # type: ignore[arg-type]
            engines=engines,
            hosts=tuple(hosts or ()),
            init=init,
            timeout=timeout,
            init_timeout=init_timeout,
            env=tuple(sorted((env or {}).items())),
            python=python,
            address=address,
            local_host=local_host,
            **extra,
        )
        self.processes: list[ProcessInfo] = []
        self.suspect: str | None = None
        self._group_cut = False  # gloo connections closed: the group needs a reset
        self.busy_with: str | None = None
        self._ipp: ipp.Cluster | None = None
        self._client: ipp.Client | None = None
        self._view: ipp.DirectView | None = None
        self._stacks_dir: str | None = None
        self._coordinator: str | None = None

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between a successful :meth:`start` and :meth:`stop`."""
        return self._client is not None

    def start(self) -> JaxCluster:
        """Start the engines and join them into one ``jax.distributed`` group."""
        if self.running:
            raise ClusterStateError(ALREADY_RUNNING)
        try:
            atexit.register(self.stop)  # runs before ipyparallel's slower atexit clean-up
            _startup.start_engines(self)
            _startup.join_group(self)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, (StartError, KeyboardInterrupt)):
                raise
            raise StartError(f"the cluster could not start ({exc}); nothing was left running") from exc
        if self.options.platform == "cpu" and self.options.resolved_devices() > 1 and self.num_processes > 1:
            print(CPU_MULTI_DEVICE_NOTE, file=sys.stderr)
        return self

    def _coordinator_address(self, first_engine: int) -> str:
        """``host:port`` for the coordination service, on process 0's host."""
        return _startup.coordinator_address(self, first_engine)

    def _wait_joined(self, pending: dict[int, Any], pids: dict[int, int], coordinator: str) -> dict:
        """Each process's description once all joined (or a :class:`StartError`)."""
        return _startup.wait_joined(self, pending, pids, coordinator)

    def stop(self) -> None:
        """Stop every engine and the controller; nothing is left running (see ``_shutdown``)."""
        ipp_cluster, client = self._ipp, self._client
        self._ipp = self._client = self._view = None
        self.processes = []
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if ipp_cluster is not None:
            _shutdown.stop_all(ipp_cluster, client, self.options.is_local)
        elif client is not None:
            with contextlib.suppress(Exception):
                client.close()
        if self._stacks_dir is not None:
            shutil.rmtree(self._stacks_dir, ignore_errors=True)
            self._stacks_dir = None

    def restart(self) -> JaxCluster:
        """Stop, then start again with the same options (new processes)."""
        self.stop()
        return self.start()

    def __enter__(self) -> JaxCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if self._ipp is not None:
                self.stop()

    # ---- access ----------------------------------------------------------------------

    def _require_running(self) -> None:
        if not self.running:
            raise ClusterStateError(NOT_STARTED)

    @property
    def client(self) -> ipp.Client:
        """The ipyparallel client connected to the engines."""
        self._require_running()
        assert self._client is not None
        return self._client

    @property
    def view(self) -> ipp.DirectView:
        """A DirectView on all engines, ordered by JAX process index."""
        self._require_running()
        assert self._view is not None
        return self._view

    @property
    def process_indices(self) -> list[int]:
        """``[0, 1, …, N-1]``."""
        return [p.process_index for p in self.processes]

    @property
    def num_processes(self) -> int:
        """How many JAX processes the cluster has."""
        return len(self.processes)

    @property
    def coordinator_address(self) -> str | None:
        """Address of the ``jax.distributed`` coordinator (on process 0's host)."""
        return self._coordinator

    def engine_for(self, process_index: int) -> int:
        """The ipyparallel engine id that carries ``process_index``."""
        return self.processes[process_index].engine_id

    def _require_idle(self) -> None:
        """Refuse work while a background training run holds the engines."""
        self._require_running()
        if self.busy_with:
            from jaxnb._train.driver import BUSY

            raise ClusterStateError(BUSY.format(name=self.busy_with))

    def _mark_suspect_after_error(self, errors: dict, processes: list[int]) -> None:
        if 0 < len(errors) < len(processes):
            self.suspect = "some processes raised while others did not"

    # ---- operations ------------------------------------------------------------------

    def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        all: bool = False,
        process: int | None = None,
    ) -> Any:
        """Run ``code`` on every process (SPMD) and show the merged output."""
        from jaxnb import _spmd

        self._require_idle()
        if process is not None and process not in self.process_indices:
            raise ValueError(
                f"--process {process} does not exist; choose 0..{self.num_processes - 1}"
            )
        self._ensure_ready()
        return _spmd.run_cell(
            self,
            code,
            timeout=timeout if timeout is not None else self.options.timeout,
            show=_spmd.ShowMode(all=all, process=process),
        )

    def push(self, **values: Any) -> None:
        """Set ``values`` as variables on every process."""
        self._require_idle()
        self._ensure_ready()
        self.view.push(values, block=True)

    def pull(self, name: str) -> Any:
        """The value of ``name`` on the engines (global arrays gathered as NumPy)."""
        from jaxnb._engine import values

        self._require_idle()
        self._ensure_ready()
        replies = self.view.apply_async(values.fetch, name).get(timeout=self._op_timeout())
        return values.choose(name, replies)

    def status(self) -> list[ProcessInfo]:
        """One entry per process, with its current state (idle, busy, dead)."""
        self._require_running()
        queue = self.client.queue_status()
        alive = {p.pid: _shutdown.pid_alive(p.pid) for p in self.processes} if self.options.is_local else {}
        for info in self.processes:
            q = queue.get(info.engine_id)
            if alive.get(info.pid) is False or q is None:
                info.state = "dead"
            elif self.busy_with:
                info.state = f"busy ({self.busy_with})"
            else:
                info.state = "busy" if q.get("queue", 0) else "idle"
        return self.processes

    def reset(self) -> str:
        """Repair the ``jax.distributed`` group in place (Python state kept); says what it did."""
        from jaxnb import _repair

        self._require_idle()
        return _repair.reset(self)

    def train(self, fn: Any, config: Any = None, **options: Any) -> Any:
        """Run ``fn`` (or ``fn(config)``) on every process with a live dashboard; a ``Result``."""
        from jaxnb._train.driver import train

        self._require_running()
        self._ensure_ready()
        return train(self, fn, config, **options)

    def _ensure_ready(self) -> None:
        """After a failure: check that the processes agree (repair the group if not)."""
        from jaxnb import _repair

        self._require_running()
        _repair.ensure_ready(self)

    def _op_timeout(self) -> float:
        return self.options.timeout or 300.0

    def __repr__(self) -> str:
        state = f"{self.num_processes} processes" if self.running else "stopped"
        return f"<JaxCluster {state}, platform={self.options.platform}>"

