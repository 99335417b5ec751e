"""`Group`: the record of one running SPMD group of JAX processes.

Every operation (start, cells, training, failure handling, repair, stop) takes
the group and may read or write its fields; :class:`jaxnb.JaxCluster` is a
thin front over it. Nothing here acts: this module only holds state and
answers questions about it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from typing import Any

from jaxnb._core.errors import ClusterStateError
from jaxnb._core.messages import BUSY, NOT_STARTED
from jaxnb._core.options import ClusterOptions
from jaxnb._core.replay import Replay
from jaxnb._core.temp_folders import TempFolders


class Suspect(str, enum.Enum):
    """Why the processes may disagree, so the next cell first checks the group (``repair``)."""

    PROCESS_DIED = "a process died"
    DIVERGED = "processes diverged"
    TIMED_OUT = "a cell timed out"
    CELL_INTERRUPTED = "a cell was interrupted"
    RUN_INTERRUPTED = "a training run was interrupted"
    UNFOLLOWED = "the notebook stopped following a training run"
    PARTIAL_ERROR = "some processes raised while others did not"
    RESET_FAILED = "a reset that failed"
    RESET_DID_NOT_HOLD = "a reset that did not hold"


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
    #: Its parent's pid; for an engine on another host, that of the shell that reports its exit.
    parent_pid: int = 0
    #: JAX's persistent compilation cache as this process sees it (``status()`` asks while the
    #: engines are idle): ``folder`` (``None``: off), ``entries`` and ``bytes`` on its host,
    #: its ``hits``, ``lookups``, ``writes`` and ``saved_seconds`` since it started.
    compile_cache: dict | None = None
    #: The pid of the process that copies its stderr to its log, on its host (0 when none does).
    log_writer_pid: int = 0


@dataclasses.dataclass
class Group:
    """What jaxnb knows about the running group; empty (``client is None``) when stopped."""

    options: ClusterOptions
    processes: list[ProcessInfo] = dataclasses.field(default_factory=list)
    #: ipyparallel's cluster (controller and engine launchers), client and view.
    ipp: Any = None  # ipyparallel.Cluster
    client: Any = None  # ipyparallel.Client
    view: Any = None  # ipyparallel.DirectView on every engine, ordered by process index
    #: pid → ipyparallel launcher of each engine started on this machine. A snapshot:
    #: ipyparallel forgets a launcher as soon as its process exits, which is exactly
    #: when jaxnb needs it (to read the exit status and the engine's last log lines).
    launchers: dict[int, Any] = dataclasses.field(default_factory=dict)
    #: JAX process index → the ssh launcher of its engine on another host (same reason).
    remote_launchers: dict[int, Any] = dataclasses.field(default_factory=dict)
    #: ``host:port`` of the jax.distributed coordination service (on process 0's host).
    coordinator: str | None = None
    #: Folder of the engines' stack-dump files (local clusters) and other launched files.
    stacks_dir: str | None = None
    #: Why the processes may disagree (an error, a timeout, an interrupt); ``None`` when safe.
    #: Written only through :meth:`mark_suspect` and :meth:`clear_suspect`.
    suspect: str | None = None
    #: Where the engines run (a :class:`jaxnb._hosts.site.Site`); ``None``: found from the
    #: options (this machine, ssh hosts, or a batch launcher's nodes).
    site: Any = None
    #: The gloo connections were closed: the group must be re-initialised before the next cell.
    group_cut: bool = False
    #: The background training run holding the engines, by name.
    busy_with: str | None = None
    #: The current (or last) training run's monitor: a new run waits for one asked to stop.
    current_run: Any = None
    #: pid → (size of its engine's log when the current cell began, the cell's request id):
    #: a death quotes only what the engine wrote after (see ``explain.mark_logs``).
    log_marks: dict[int, tuple[int, str]] = dataclasses.field(default_factory=dict)
    #: pids of engines jaxnb itself stopped (survivors of a death): named "stopped", not "killed".
    stopped_pids: set[int] = dataclasses.field(default_factory=set)
    #: The setup that succeeded since start (cells, pushes), for ``restart --replay`` and
    #: recovery; kept across a stop (the next start decides whether to replay or forget it).
    setup: Replay = dataclasses.field(default_factory=Replay)
    #: pids of the warm spare engines (started, registered, not in the group): see ``_spares``.
    spare_pids: set[int] = dataclasses.field(default_factory=set)
    #: When the spares were last taken and refilled (``jaxnb._lifecycle.refill.Refill``).
    refill: Any = None
    #: The environment the engines were started with (spares get the same).
    engine_env: dict[str, str] | None = None
    #: When the group was last repaired in place (``"cell 7"``, or the time outside a notebook):
    #: arrays, meshes and shardings made before it belong to the old group.
    repaired_at: str | None = None
    #: The third-party modules the setup's cells imported (what warm spares import); kept,
    #: like ``setup``, across a stop.
    warm_modules: list[str] = dataclasses.field(default_factory=list)
    #: ``%jax_debug -c`` given when no process held a failure: the commands that answer the
    #: ``jaxnb.breakpoint()`` stops of the next cell or run that reaches one (then forgotten).
    breakpoint_commands: list[str] | None = None
    #: The options the cluster was started with, while it runs at another size (``scale``, a
    #: ``--min-processes`` run that went on with fewer); ``None`` at its own size.
    full_options: ClusterOptions | None = None
    #: The places (hosts, slots) left out of the group now, one line each (``status`` shows them).
    lost: list[str] = dataclasses.field(default_factory=list)
    #: The running ``--min-processes`` run's size changes (``scale`` asks it), or ``None``; kept
    #: across the restarts of that run.
    resize: Any = None
    #: A run that recovers on a named cluster, as its record names it (JSON: the run, its folder,
    #: ``max_failures``, the process driving it), so that the supervisor drives it on when that
    #: process is gone (:mod:`jaxnb._train.handing`); ``None`` otherwise.
    driving: dict[str, Any] | None = None
    #: Folders this cluster's cells made under the temporary directory (removed at its stop).
    temp_folders: TempFolders = dataclasses.field(default_factory=TempFolders)
    #: A named cluster's hold (``jaxnb._attach.attachment.Attachment``): its ``taken_over()``
    #: says, in one line, that another kernel attached since; ``None`` for an unnamed cluster.
    attachment: Any = None
    #: The options as given, unnamed, when jaxnb named the cluster ``default`` (an unnamed start
    #: in a kernel: :mod:`jaxnb._attach.default_name`); the next start names it anew.
    unnamed: Any = None

    @property
    def running(self) -> bool:
        """True between a successful start and stop."""
        return self.client is not None

    @property
    def via_host(self) -> str | None:
        """The host of a cluster attached through ``--via`` (its runs' folders are there)."""
        return getattr(self.attachment, "host", None)

    @property
    def indices(self) -> list[int]:
        """``[0, 1, …, N-1]``."""
        return [p.process_index for p in self.processes]

    @property
    def size(self) -> int:
        """How many JAX processes the group has."""
        return len(self.processes)

    def engine_for(self, process: int) -> int:
        """The ipyparallel engine id that carries JAX process ``process``."""
        return self.processes[process].engine_id

    def engine(self, process: int) -> Any:
        """A DirectView on the engine of JAX process ``process``."""
        return self.client[self.engine_for(process)]

    def require_running(self) -> None:
        """Raise :class:`ClusterStateError` unless the group is running (and still this
        kernel's: another kernel that attached a named cluster took it over)."""
        if self.attachment is not None and self.running:
            lost = self.attachment.taken_over()
            if lost is not None:
                self.let_go()
                raise ClusterStateError(lost)
        if not self.running:
            raise ClusterStateError(NOT_STARTED)

    def let_go(self) -> None:
        """Forget the group without stopping anything (another kernel holds it now)."""
        client, hold = self.client, self.attachment
        self.attachment = None
        self.clear()
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        close = getattr(hold, "close", None)  # attached through --via: its ssh connection
        if close is not None:
            close()

    def require_idle(self) -> None:
        """Raise unless running and not held by a background training run."""
        self.require_running()
        if self.busy_with:
            raise ClusterStateError(BUSY.format(name=self.busy_with))

    def mark_suspect(self, reason: Suspect, detail: str = "") -> None:
        """The processes may disagree now (the next cell checks the group first)."""
        self.suspect = f"{reason.value} ({detail})" if detail else reason.value

    def clear_suspect(self) -> None:
        """The group was checked (or re-joined) and agrees."""
        self.suspect = None

    def mark_suspect_after_errors(self, failed: int, total: int) -> None:
        """Some processes raised while others did not: they may be one collective apart."""
        if 0 < failed < total:
            self.mark_suspect(Suspect.PARTIAL_ERROR)

    def clear(self) -> None:
        """Forget the processes and connections (after stop)."""
        self.processes = []
        self.ipp = self.client = self.view = None
        self.launchers = {}
        self.remote_launchers = {}
        self.coordinator = None
        self.clear_suspect()
        self.group_cut = False
        self.busy_with = None
        self.current_run = None
        self.spare_pids = set()
        self.engine_env = None
        self.repaired_at = None
