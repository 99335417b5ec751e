"""``JaxCluster``'s life beyond the kernel: a named cluster (``name=``) has a supervisor that
outlives the kernel; ``attach`` takes it over from another kernel, ``detach`` leaves it running,
:func:`clusters` lists those of this machine (:mod:`jaxnb._attach`)."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

from jaxnb._attach import attachment, listing, record, runs
from jaxnb._core import cluster_names as names
from jaxnb._core import ipp_internals
from jaxnb._core.cluster_names import DEFAULT_NAME
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group, ProcessInfo

Self = TypeVar("Self", bound="Attaching")


def clusters(via: str | None = None, *, python: str | None = None) -> list[dict[str, Any]]:
    """The named clusters running on this machine (``via``: on ``[user@]host``, over ssh), one
    dict each: ``name``, ``processes`` (how many), ``hosts``, ``runs`` (its runs and searches,
    oldest first: each ``name``, ``kind`` "run" or "search", ``state``, ``folder``),
    ``attached`` (the pid of the kernel attached, or ``None``), ``idle_since``
    (``time.time()`` since when no kernel is attached and nothing runs, or ``None``) and
    ``idle_timeout``.

    Args:
        via: ``[user@]host``: list the clusters of that host (``python -m jaxnb list --json``
            run there over ssh, in batch mode).
        python: with ``via``, the interpreter on the host (default: this kernel's own path).

    Raises:
        jaxnb.ClusterStateError: the host cannot be reached, or has no jaxnb for ``python``.
        ValueError: ``via`` cannot name a host, or ``python`` was given without it.
    """
    if via is None:
        if python is not None:
            raise ValueError("python= goes with via= (the interpreter on that host)")
        return listing.clusters()
    from jaxnb._hosts import remote_list

    return remote_list.clusters_on(via, python or sys.executable)


class Attaching:
    """The attach and detach of :class:`jaxnb.JaxCluster` (a base class)."""

    group: Group

    @classmethod
    def attach(cls: type[Self], name: str = DEFAULT_NAME, *, via: str | None = None,
               python: str | None = None) -> Self:
        """Take over the named cluster ``name`` running on this machine (started by
        ``start(name=...)`` in any kernel): its engines with their Python state.
        A kernel that held it is told so, in one line, at its next use.

        Args:
            via: ``[user@]host``: the cluster runs on that host (a login node) and this kernel
                on another machine; it is reached over ssh, through ipyparallel's tunnels.
                ``restart`` and ``scale`` then work only in a kernel on the host.
            python: with ``via``, the interpreter on the host (default: this kernel's own path).

        Raises:
            jaxnb.ClusterStateError: no cluster of that name runs here (or on ``via``), or the
                host cannot be reached over ssh.
            ValueError: ``name`` cannot name a cluster, or ``via`` a host.
        """
        if via is not None:
            return cls._attach_via(name, via, python or sys.executable)
        if python is not None:
            raise ValueError("python= goes with via= (the interpreter on that host)")
        hold, doc = attachment.take_over(name)
        options = _options(doc["options"])
        cluster = cls.__new__(cls)
        cluster.group = group = Group(options)
        group.attachment = hold
        try:
            _connect(group, doc)
        except BaseException:
            group.let_go()
            raise
        if doc.get("unnamed") is not None:  # named by jaxnb: this kernel's shut-down stops it
            group.unnamed = _options(doc["unnamed"])
            atexit.register(cls._stop_if_shut_down, cluster)
        return cluster

    @classmethod
    def _attach_via(cls: type[Self], name: str, host: str, python: str) -> Self:
        """``attach(name, via=host)``: a client through ipyparallel's ssh tunnels."""
        import ipyparallel as ipp

        from jaxnb._hosts import attach_via as via

        hold, doc, connection = via.attach(name, host, python)
        cluster = cls.__new__(cls)
        cluster.group = group = Group(_options(doc["options"]))
        group.attachment, group.site = hold, via.site()
        try:
            # its host's name may not resolve here (ipyparallel would warn): ssh reaches it
            connection = {k: v for k, v in connection.items() if k != "location"}
            # password="": no login to try (pyzmq's probe gives up after 1 s under load); the
            # tunnels are forwarded through the connection already open, which never prompts
            group.client = ipp.Client(connection, sshserver=hold.sshserver, password="", timeout=30)
            _fill(group, doc)
            group.stacks_dir = None  # a folder on the host: nothing here removes it
        except BaseException:
            group.let_go()
            raise
        return cluster

    def detach(self) -> None:
        """Leave this named cluster running with no kernel attached (``--idle-timeout`` counts
        from now); any kernel can ``attach`` it again. An unnamed cluster cannot be detached.

        Raises:
            jaxnb.ClusterStateError: the cluster is not running, or not named.
        """
        group = self.group
        group.require_running()
        if group.attachment is None and (group.options.hosts or group.options.engines != "local"):
            raise ClusterStateError("this cluster ends with the kernel or script that started it "
                                    "(its engines are on other hosts, and only a cluster on this "
                                    "machine can be detached for now); stop it when done")
        if group.attachment is None:
            raise ClusterStateError("this cluster ends with its process (started by a script); "
                                    "give it a name to detach it later: `JaxCluster(name=NAME)` or "
                                    "`%jax_cluster start --name NAME`")
        if hasattr(group.attachment, "refuse"):  # through --via: the host records it
            group.attachment.detach()
        else:
            attachment.detach(group.attachment)
        group.let_go()

    def _name_by_default(self) -> None:
        """Before a start: an unnamed cluster started in a kernel, on this machine, is named
        ``default`` (:mod:`jaxnb._attach.default_name`); a line says when it is another name."""
        from jaxnb._attach import default_name, listing

        group = self.group
        if not default_name.applies(group.options):
            return
        running = lambda name: attachment.supervisor_of(name) is not None  # noqa: E731
        group.unnamed = group.options
        group.options, note = default_name.named(group.options, running, listing.left_running)
        if note is not None:
            print(note, file=sys.stderr)

    def _stop_if_shut_down(self) -> None:
        """At the exit of the kernel that started or attached a cluster named by default: stop
        it when the kernel was shut down on purpose (a restart, a crash or a kill leaves it
        running; so does a kernel another took it over from)."""
        from jaxnb._core import ipykernel_internals

        hold = self.group.attachment
        if hold is None or not self.group.running or hold.taken_over() is not None:
            return
        if ipykernel_internals.ending_for_good():
            with contextlib.suppress(Exception):  # its supervisor ends every process
                attachment.stop(hold.name, hold.supervisor)

    def _supervise(self) -> None:
        """Before a start: the supervisor of a named cluster (a new one unless it runs)."""
        group = self.group
        name = group.options.name
        if name is None:
            return
        hold = group.attachment
        if hold is None or attachment.supervisor_of(name) != hold.supervisor:
            group.attachment = attachment.launch(name, group.options.idle_timeout)

    def _loaded(self) -> None:
        """Once attached: wait for ipyparallel's cluster file to be read; if it could not be,
        end the processes the record names here (a stop or restart leaves none behind)."""
        group, hold = self.group, self.group.attachment
        if hold is None or hold.loading is None:
            return
        hold.loaded()
        doc = record.read(names.record_path(hold.name))
        if group.ipp is None and group.running and doc is not None:
            record.end_listed(doc)

    def _record(self) -> None:
        """After a start or a swap: what another kernel needs to attach, written down."""
        group = self.group
        if group.attachment is None or group.ipp is None:
            return
        group.ipp.shutdown_atexit = False  # the kernel's exit leaves it running
        kept = record.read(names.record_path(group.attachment.name)) or {}
        attachment.save(group.attachment, dict(describe(group), runs=kept.get("runs") or []))

    def _note_run(self, name: str, folder: str, kind: str) -> None:
        """A run or search starts on this named cluster: its folder, in the record (for
        ``list``, and for a kernel that attaches later to find it)."""
        hold = self.group.attachment
        if hold is None or self.group.busy_with:  # busy: it will be refused, not started
            return
        if hasattr(hold, "note_run"):  # attached through --via: the host's record, by its hold
            if kind == runs.RUN:  # a search's study stays on this machine
                hold.note_run(name, folder, kind)
            return
        doc = record.read(names.record_path(hold.name)) or {}
        attachment.update(hold, runs=runs.added(doc.get("runs"), name, folder, kind))

    def _run_folder(self, name: str) -> str | None:
        """The folder of run or search ``name`` as this named cluster's record has it (the
        host's, as it was at the attach, through ``--via``)."""
        hold = self.group.attachment
        if hold is None:
            return None
        if self.group.via_host is not None:
            return runs.folder_of(hold.runs, name)
        return runs.folder_of((record.read(names.record_path(hold.name)) or {}).get("runs"), name)


@dataclasses.dataclass
class Adopted:
    """The supervisor's hold of its own cluster (:func:`adopt`)."""

    group: Group
    #: Restart with the same options and replay the setup with ``push`` (a recovery's phases).
    restart: Callable[[Callable[[dict[str, Any]], None]], dict[str, float]]


def adopt(cls: Any, name: str) -> Adopted:
    """The supervisor's hold of its cluster ``name`` (``cls``: ``JaxCluster``), to drive a run on
    without a kernel (:mod:`jaxnb._cluster_driving`): the record's engines, ipyparallel's cluster
    file read before this returns; the record's attached kernel is left as it is."""
    doc = record.read(names.record_path(name))
    if doc is None:
        raise ClusterStateError(f"cluster {name!r} has no record (it was stopped)")
    cluster = cls.__new__(cls)
    cluster.group = group = Group(_options(doc["options"]))
    group.attachment = hold = attachment.Attachment(name, doc.get("idle_timeout"), record.me(),
                                                    headless=True)
    group.driving = doc.get("driving")
    _connect(group, doc, registered_only=True)
    hold.loaded()
    if group.ipp is None:
        group.let_go()
        raise ClusterStateError(f"ipyparallel's cluster file {doc['cluster_file']} could not be read")

    def restart(push: Callable[[dict[str, Any]], None]) -> dict[str, float]:
        return cast(dict[str, float], cls._recover(cluster, setup=lambda: cls._replay(cluster, push=push)))

    return Adopted(group, restart)


def describe(group: Group) -> dict[str, Any]:
    """The JSON record of a running named cluster (no code, no pickle)."""
    ipp = group.ipp
    files = ipp_internals.key_files(ipp)
    controller = ipp_internals.controller_process(ipp)
    pids = [p.pid for p in group.processes] + sorted(group.spare_pids)
    pids += [proc.pid for proc in (ipp_internals.launcher_process(lch)
                                   for lch in ipp_internals.engine_launchers(ipp))
             if proc is not None]
    if controller is not None:
        pids.append(controller.pid)
    full = group.full_options
    return {
        "cluster_file": ipp.cluster_file, "connection": files[1],
        "options": dataclasses.asdict(group.options),
        "full_options": None if full is None else dataclasses.asdict(full),
        "processes": [dataclasses.asdict(p) for p in group.processes],
        "coordinator": group.coordinator, "stacks_dir": group.stacks_dir,
        "engine_env": group.engine_env, "lost": list(group.lost),
        "pids": [record.process_entry(pid) for pid in sorted(set(pids))],
        "files": [*files, *([group.stacks_dir] if group.stacks_dir else [])],
        "hosts": sorted({p.host for p in group.processes}),
        "driving": group.driving,
        "unnamed": None if group.unnamed is None else dataclasses.asdict(group.unnamed),
    }


def _connect(group: Group, doc: dict[str, Any], registered_only: bool = False) -> None:
    """Fill ``group`` from a record: ipyparallel's cluster (from its cluster file), a client
    through the controller's connection file, the processes in their order."""
    import ipyparallel as ipp

    if not os.path.exists(doc["cluster_file"]):
        raise ClusterStateError(
            f"cluster {group.attachment.name!r} has lost its controller's files; stop it with "
            f"`python -m jaxnb stop {group.attachment.name}` and start it again")
    group.client = ipp.Client(doc["connection"], timeout=10)
    _fill(group, doc, registered_only)
    group.attachment.load_later(functools.partial(_load_cluster, group, doc["cluster_file"]))


def _fill(group: Group, doc: dict[str, Any], registered_only: bool = False) -> None:
    """The processes in their order, the view and the rest of ``group`` from a record
    (``registered_only``: the view holds only the engines the controller has)."""
    group.processes = [ProcessInfo(**p) for p in doc["processes"]]
    ids = [p.engine_id for p in group.processes]
    if registered_only:  # the supervisor's hold after a death: a dead engine is not there
        ids = [i for i in ids if i in group.client.ids]
    group.view = group.client[ids] if ids else None
    if group.view is not None:
        group.view.block = False
    group.coordinator, group.stacks_dir = doc.get("coordinator"), doc.get("stacks_dir")
    group.engine_env = doc.get("engine_env")
    group.lost = list(doc.get("lost") or [])
    if doc.get("full_options"):
        group.full_options = _options(doc["full_options"])


def _load_cluster(group: Group, cluster_file: str) -> None:
    """``group.ipp``: ipyparallel's cluster read from its file (its controller's and engines'
    launchers, for stop and restart), once read (about a second: not on the attach's path)."""
    import ipyparallel as ipp

    from jaxnb._lifecycle.launch import quiet_logger

    client = group.client
    with contextlib.suppress(Exception):  # gone meanwhile: the supervisor ends what is left
        ipp_cluster = ipp.Cluster.from_file(cluster_file, log=quiet_logger())
        ipp_cluster.shutdown_atexit = False
        if group.client is client and client is not None:
            group.ipp = ipp_cluster
            group.launchers = ipp_internals.launched_engines(ipp_cluster)


def _options(fields: dict[str, Any]) -> ClusterOptions:
    """Options read back from JSON (its lists as the tuples they were)."""
    given: dict[str, Any] = {k: (tuple(tuple(x) if isinstance(x, list) else x for x in v)
                                 if isinstance(v, list) else v) for k, v in fields.items()}
    return ClusterOptions(**given)

