"""`JaxCluster`: the lifecycle of one SPMD group of JAX processes on ipyparallel engines."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

import ipyparallel as ipp
import psutil

from jaxnb import _launch
from jaxnb._engine import process as engine_process
from jaxnb._errors import ALREADY_RUNNING, NOT_STARTED, ClusterStateError, StartError
from jaxnb._options import ClusterOptions

#: How long stopped processes get to disappear after SIGKILL.
KILL_WAIT_SECONDS = 5.0
#: How long remote engines get to leave jax.distributed before they are stopped.
REMOTE_SHUTDOWN_SECONDS = 2.0
CONTROLLER_CMD = [sys.executable, "-m", "jaxnb._engine.controller"]
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
        init: bool = True,
        timeout: float | None = None,
        init_timeout: float = 60.0,
        collective_timeout: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        extra = {} if collective_timeout is None else {"collective_timeout": collective_timeout}
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
            self._start_engines()
            self._join_group()
        except BaseException as exc:
            self.stop()
            if isinstance(exc, (StartError, KeyboardInterrupt)):
                raise
            raise StartError(f"the cluster could not start ({exc}); nothing was left running") from exc
        if self.options.platform == "cpu" and self.options.resolved_devices() > 1 and self.num_processes > 1:
            print(CPU_MULTI_DEVICE_NOTE, file=sys.stderr)
        return self

    def _start_engines(self) -> None:
        options = self.options
        n = options.resolved_n()
        self._stacks_dir = tempfile.mkdtemp(prefix="jaxnb-")
        cluster = self._ipp = _launch.build_cluster(options)
        cleanup = os.pathsep.join([*self._key_files(), self._stacks_dir])
        watchdog = {"JAXNB_PARENT_PID": str(os.getpid()), "JAXNB_CLEANUP_FILES": cleanup}
        cluster.start_controller_sync(controller_cmd=CONTROLLER_CMD, environment=watchdog)
        atexit.register(self.stop)  # runs before ipyparallel's slower atexit clean-up
        env = _launch.engine_environment(options, self._stacks_dir)
        if options.is_local:
            env.update(watchdog)
            controller = getattr(cluster.controller, "process", None)
            if controller is not None:
                env["JAXNB_CONTROLLER_PID"] = str(controller.pid)
        cluster.start_engines_sync(environment=env)
        self._client = client = cluster.connect_client_sync()
        deadline = time.monotonic() + options.init_timeout
        while len(client.ids) < n:
            self._raise_if_engines_exited()
            if time.monotonic() > deadline:
                raise StartError(
                    f"only {len(client.ids)} of {n} engines registered within "
                    f"{options.init_timeout:g} s; raise --init-timeout or check the engine logs"
                )
            time.sleep(0.02)
        engine_ids = sorted(client.ids)[:n]
        self._view = client[engine_ids]
        self._view.block = False

    def _join_group(self) -> None:
        options = self.options
        client = self._client
        assert client is not None and self._view is not None
        engine_ids = list(self._view.targets)
        n = len(engine_ids)
        coordinator = self._coordinator = self._coordinator_address(engine_ids[0])
        bind = coordinator if options.is_local else None
        try:
            hosts = self._view.apply_async(engine_process.hostname).get(timeout=30)
            pids = self._view.apply_async(os.getpid).get(timeout=30)
        except (ipp.error.CompositeError, ipp.error.EngineError, ipp.error.TimeoutError):
            self._raise_if_engines_exited()
            raise
        placements = engine_process.placements(hosts)
        pending = {}
        for index, eid in enumerate(engine_ids):
            # One engine per GPU: the engine's local rank picks its GPU on its own host.
            local_ids = [placements[index][0]] if options.platform == "gpu" else None
            pending[index] = client[eid].apply_async(
                engine_process.initialize,
                index,
                n,
                coordinator,
                bind,
                options.init,
                local_ids,
                options.heartbeat_timeout,
                int(options.init_timeout),
                placements[index],
            )
        infos = self._wait_joined(pending, dict(enumerate(pids)), coordinator)
        self.processes = [
            ProcessInfo(
                process_index=index,
                engine_id=eid,
                host=infos[index]["host"],
                pid=infos[index]["pid"],
                platform=infos[index]["platform"],
                local_devices=infos[index]["local_devices"],
                global_device_count=infos[index]["global_device_count"],
            )
            for index, eid in enumerate(engine_ids)
        ]
        self.suspect = None

    def _coordinator_address(self, first_engine: int) -> str:
        """``host:port`` for the coordination service, on process 0's host."""
        assert self._client is not None
        host0 = "127.0.0.1" if self.options.is_local else None
        if host0 is None:
            host0 = self._client[first_engine].apply_sync(engine_process.host_address)
        port = self._client[first_engine].apply_sync(engine_process.free_port, host0)
        return f"{host0}:{port}"

    def _wait_joined(self, pending: dict[int, Any], pids: dict[int, int], coordinator: str) -> dict:
        """Each process's description once all joined; a :class:`StartError` naming the first
        process that failed, died or did not join within ``init_timeout``."""
        from jaxnb import _health

        timeout = self.options.init_timeout
        deadline = time.monotonic() + timeout + 5
        launchers = {getattr(lch, "process", None) and lch.process.pid: lch
                     for lch in self._engine_launchers()}
        infos: dict[int, dict] = {}

        def raise_if_dead(index: int) -> None:
            launcher = launchers.get(pids[index])
            how = _health.exit_of(launcher.process) if launcher is not None else None
            if how is not None:
                tail = "\n".join("    " + ln for ln in _stderr_tail(launcher))
                raise StartError(
                    f"process {index} (pid {pids[index]}) {how} while joining jax.distributed; "
                    f"see its last lines below, fix the cause and start again\n{tail}"
                )

        while len(infos) < len(pending):
            for index, ar in pending.items():
                if index in infos or not ar.ready():
                    continue
                try:
                    infos[index] = ar.get(0)
                except ipp.error.RemoteError as exc:
                    raise_if_dead(index)
                    evalue = (str(exc.evalue).strip().splitlines() or [""])[0][:300]
                    raise StartError(
                        f"process {index} (pid {pids[index]}) could not join jax.distributed at "
                        f"{coordinator}: {exc.ename}: {evalue}"
                        + _not_joined(pending, infos, index)
                    ) from None
            for index in pids:
                if index not in infos:
                    raise_if_dead(index)
            if time.monotonic() > deadline:
                late = ", ".join(str(i) for i in pending if i not in infos)
                raise StartError(
                    f"process {late} did not join jax.distributed within {timeout:g} s; check "
                    f"that every host can reach {coordinator}, or raise --init-timeout"
                )
            time.sleep(0.02)
        return infos

    def _raise_if_engines_exited(self) -> None:
        from jaxnb import _health

        for launcher in self._engine_launchers():
            process = getattr(launcher, "process", None)
            how = _health.exit_of(process) if process is not None else None
            if how is not None:
                tail = "\n".join("    " + ln for ln in _stderr_tail(launcher))
                raise StartError(
                    f"an engine (pid {process.pid}) {how} during start-up; see its last lines "
                    f"below, fix the cause and start again\n{tail}"
                )

    def _engine_launchers(self) -> list[Any]:
        if self._ipp is None:
            return []
        found = []
        for engine_set in self._ipp.engines.values():
            found.extend(getattr(engine_set, "launchers", {}).values())
        return found

    def _key_files(self) -> list[str]:
        assert self._ipp is not None
        security = os.path.join(self._ipp.profile_dir, "security")
        cid = self._ipp.cluster_id
        return [
            os.path.join(security, f"ipcontroller-{cid}-engine.json"),
            os.path.join(security, f"ipcontroller-{cid}-client.json"),
            self._ipp.cluster_file,
        ]

    def stop(self) -> None:
        """Stop every engine and the controller; nothing is left running.

        Local processes are SIGKILLed all at once (a JAX engine has nothing to
        save, and one blocked in a collective would ignore anything gentler);
        remote engines first leave ``jax.distributed``, then ipyparallel stops them.
        """
        cluster, client = self._ipp, self._client
        self._client = self._view = None
        self.processes = []
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if cluster is not None and client is not None and not self.options.is_local:
            _leave_group(client)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        if cluster is not None:
            self._ipp = None
            _kill_all(_local_processes(cluster) if self.options.is_local else [], cluster)
            with contextlib.suppress(Exception):
                cluster.stop_engines_sync()
            with contextlib.suppress(Exception):
                cluster.stop_controller_sync()
            with contextlib.suppress(Exception):
                cluster.remove_cluster_file()
            for path in self._key_files_of(cluster):
                with contextlib.suppress(OSError):
                    os.unlink(path)
        if self._stacks_dir is not None:
            shutil.rmtree(self._stacks_dir, ignore_errors=True)
            self._stacks_dir = None

    @staticmethod
    def _key_files_of(cluster: ipp.Cluster) -> list[str]:
        security = os.path.join(cluster.profile_dir, "security")
        cid = cluster.cluster_id
        return [os.path.join(security, f"ipcontroller-{cid}-{kind}.json") for kind in ("engine", "client")]

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
        alive = {p.pid: _pid_alive(p.pid) for p in self.processes} if self.options.is_local else {}
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


def _pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _local_processes(cluster: ipp.Cluster) -> list[psutil.Process]:
    found = []
    for engine_set in cluster.engines.values():
        for launcher in getattr(engine_set, "launchers", {}).values():
            process = getattr(launcher, "process", None)
            if process is not None:
                found.append(process)
    return found


def _kill_all(engines: list[psutil.Process], cluster: ipp.Cluster) -> None:
    """SIGKILL the engines, their nannies and the controller's process group at once; wait."""
    family = []
    for proc in engines:
        with contextlib.suppress(psutil.Error):
            family.extend(proc.children(recursive=True))
        family.append(proc)
    controller = getattr(cluster.controller, "process", None) if cluster.controller else None
    if controller is not None:
        with contextlib.suppress(psutil.Error):
            family.extend(controller.children(recursive=True))
        family.append(controller)
        with contextlib.suppress(OSError):
            if os.getpgid(controller.pid) == controller.pid:
                os.killpg(controller.pid, signal.SIGKILL)
    for proc in family:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while family and time.monotonic() < deadline:
        family = [proc for proc in family if not _gone(proc)]
        if family:
            time.sleep(0.005)


def _gone(proc: psutil.Process) -> bool:
    """Exited. Our own children are reaped; others' zombies count as gone (init reaps them)."""
    try:
        if proc.status() != psutil.STATUS_ZOMBIE:
            return False
        if proc.ppid() != os.getpid():
            return True
    except psutil.NoSuchProcess:
        return True
    with contextlib.suppress(ChildProcessError):
        os.waitpid(proc.pid, os.WNOHANG)
    return not psutil.pid_exists(proc.pid)


def _leave_group(client: ipp.Client) -> None:
    """Ask every engine to leave jax.distributed at once, so none waits for the others."""
    with contextlib.suppress(Exception):
        ar = client[:].apply_async(engine_process.shutdown)
        ar.wait(REMOTE_SHUTDOWN_SECONDS)


def _stderr_tail(launcher: Any, lines: int = 12) -> list[str]:
    try:
        with open(launcher.output_file, errors="replace") as f:
            text = f.read()
    except (OSError, AttributeError):
        return []
    kept = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    return kept[-lines:]


def _not_joined(pending: dict[int, Any], infos: dict[int, dict], failed: int) -> str:
    late = [str(i) for i in pending if i not in infos and i != failed]
    return f" (process {', '.join(late)} had not joined either)" if late else ""
