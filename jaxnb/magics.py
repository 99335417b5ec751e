"""IPython magics: thin dispatch over :class:`jaxnb.JaxCluster` (parsing and messages only)."""

from __future__ import annotations

import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, needs_local_scope
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb._cluster import JaxCluster
from jaxnb._errors import NOT_STARTED, ClusterStateError, StartError
from jaxnb._options import OptionError

SUBCOMMANDS = ("start", "status", "stop", "restart", "reset", "stacks")


def _positive_int(flag: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"{flag} takes a whole number, got {text!r}; e.g. {flag} 2") from None
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}; e.g. {flag} 2")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--timeout takes seconds, got {text!r}; e.g. --timeout 30") from None
    if value <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {text}")
    return value


@magics_class
class JaxnbMagics(Magics):
    """``%jax_cluster``, ``%%jax_cluster``, ``%jax_train``, ``%jax_mesh``, ``%jax_pull``, ``%jax_push``."""

    cluster: JaxCluster | None = None

    # ---- %jax_cluster / %%jax_cluster -----------------------------------------------

    @magic_arguments()
    @argument("command", nargs="?", default=None, help=f"one of: {', '.join(SUBCOMMANDS)}")
    @argument("-n", type=_positive_int("-n"), default=None, help="number of JAX processes")
    @argument(
        "--devices-per-process",
        type=_positive_int("--devices-per-process"),
        default=None,
        help="simulated CPU devices per process",
    )
    @argument("--platform", default="cpu", help="cpu, gpu or tpu")
    @argument("--engines", default="local", help="ipyparallel launcher: local, ssh, mpi, slurm, ...")
    @argument("--hosts", default=None, help="comma-separated [user@]host[:count] (ssh launcher)")
    @argument("--hostfile", default=None, help="file with one [user@]host[:count] per line")
    @argument("--python", default=None, help="interpreter on the hosts (default: this one's path)")
    @argument("--address", default=None, help="this machine's address the hosts connect to")
    @argument("--no-init", action="store_true", help="leave jax.distributed.initialize to you")
    @argument("--timeout", type=_seconds, default=None, help="default seconds per cell")
    @argument("--init-timeout", type=_seconds, default=60.0, help="seconds to join jax.distributed")
    @argument("--all", action="store_true", help="cell: show every process's output raw")
    @argument("--process", type=int, default=None, help="cell: show only process I")
    @line_magic
    @cell_magic
    def jax_cluster(self, line: str = "", cell: str | None = None) -> Any:
        """Start/inspect/stop the JAX cluster, or (as a cell magic) run a cell on every process.

        Line: ``%jax_cluster start|status|stop|restart|reset|stacks [options]``.
        Cell: ``%%jax_cluster [--all] [--process I] [--timeout S]``.
        """
        args = parse_argstring(self.jax_cluster, line)
        if cell is not None:
            if args.command is not None:
                raise UsageError(
                    f"%%jax_cluster takes only --all, --process, --timeout; got {args.command!r}"
                )
            return self._run_cell(cell, args)
        if args.command is None:
            raise UsageError(f"%jax_cluster needs a subcommand: {', '.join(SUBCOMMANDS)}")
        if args.command not in SUBCOMMANDS:
            raise UsageError(
                f"unknown subcommand {args.command!r}; use one of: {', '.join(SUBCOMMANDS)}"
            )
        return getattr(self, f"_cluster_{args.command}")(args)

    def _require(self) -> JaxCluster:
        cluster = type(self).cluster
        if cluster is None or not cluster.running:
            raise UsageError(NOT_STARTED)
        return cluster

    def _cluster_start(self, args: Any) -> None:
        current = type(self).cluster
        if current is not None and current.running:
            raise UsageError(
                "a jaxnb cluster is already running; use `%jax_cluster restart` to start it "
                "again, or `%jax_cluster stop` first"
            )
        hosts = [h for h in (args.hosts or "").split(",") if h.strip()]
        try:
            cluster = JaxCluster(
                args.n,
                devices_per_process=args.devices_per_process,
                platform=args.platform,
                engines=args.engines,
                hosts=hosts,
                hostfile=args.hostfile,
                python=args.python,
                address=args.address,
                init=not args.no_init,
                timeout=args.timeout,
                init_timeout=args.init_timeout,
            )
        except OptionError as exc:
            raise UsageError(str(exc)) from None
        type(self).cluster = cluster
        try:
            cluster.start()
        except StartError as exc:
            type(self).cluster = None
            raise UsageError(str(exc)) from None
        self._show_status(cluster)

    def _cluster_status(self, args: Any) -> None:
        self._show_status(self._require())

    def _show_status(self, cluster: JaxCluster) -> None:
        from jaxnb._widgets.devices import show_devices

        show_devices(cluster.status())

    def _cluster_stop(self, args: Any) -> None:
        cluster = type(self).cluster
        if cluster is None:
            print("jaxnb: no cluster to stop")
            return
        cluster.stop()
        print("jaxnb: cluster stopped")

    def _cluster_restart(self, args: Any) -> None:
        cluster = type(self).cluster
        if cluster is None:
            raise UsageError("no cluster to restart; start one with `%jax_cluster start`")
        try:
            cluster.restart()
        except StartError as exc:
            raise UsageError(str(exc)) from None
        self._show_status(cluster)

    def _cluster_reset(self, args: Any) -> None:
        cluster = self._require()
        try:
            print(f"jaxnb: {cluster.reset()}")
        except ClusterStateError as exc:
            raise UsageError(str(exc)) from None

    def _cluster_stacks(self, args: Any) -> None:
        from jaxnb import _stacks

        print(_stacks.collect(self._require()))

    def _run_cell(self, cell: str, args: Any) -> None:
        cluster = self._require()
        try:
            cluster.run(cell, timeout=args.timeout, all=args.all, process=args.process)
        except (ValueError, ClusterStateError) as exc:
            raise UsageError(str(exc)) from None

    # ---- values ----------------------------------------------------------------------

    @line_magic
    def jax_pull(self, line: str) -> None:
        """``%jax_pull NAME [NAME ...]``: set NAME in the notebook to its value on the engines."""
        names = _names(line, "%jax_pull")
        cluster = self._require()
        for name in names:
            try:
                self.shell.user_ns[name] = cluster.pull(name)
            except (NameError, ClusterStateError) as exc:
                raise UsageError(str(exc)) from None

    @line_magic
    def jax_push(self, line: str) -> None:
        """``%jax_push NAME [NAME ...]``: send notebook variables to every process."""
        names = _names(line, "%jax_push")
        cluster = self._require()
        missing = [n for n in names if n not in self.shell.user_ns]
        if missing:
            raise UsageError(f"name {missing[0]!r} is not defined in the notebook; define it first")
        try:
            cluster.push(**{n: self.shell.user_ns[n] for n in names})
        except ClusterStateError as exc:
            raise UsageError(str(exc)) from None

    @line_magic
    def jax_mesh(self, line: str) -> None:
        """``%jax_mesh NAME``: draw the mesh, or the sharding of the global array, NAME."""
        (name,) = _names(line, "%jax_mesh", exactly_one=True)
        from jaxnb import _mesh

        try:
            _mesh.show_remote(self._require(), name)
        except (NameError, TypeError) as exc:
            raise UsageError(str(exc)) from None

    @needs_local_scope
    @line_magic
    def jax_train(self, line: str, local_ns: dict | None = None) -> Any:
        """Run FUNC on every process with a live dashboard.

        ``%jax_train FUNC [--config EXPR] [--name RUN] [--storage DIR] [-o VAR] [--resume]
        [--background]``. Runs FUNC on every process with a live dashboard and returns its ``Result``.
        """
        from jaxnb._train import magic

        return magic.run(self, line, local_ns)


def _names(line: str, magic: str, exactly_one: bool = False) -> list[str]:
    names = shlex.split(line)
    if not names or (exactly_one and len(names) != 1):
        what = "one NAME" if exactly_one else "NAME [NAME ...]"
        raise UsageError(f"{magic} takes {what}; e.g. {magic} x")
    for name in names:
        if not name.isidentifier():
            raise UsageError(f"{magic}: {name!r} is not a Python name")
    return names


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jaxnb``."""
    ipython.register_magics(JaxnbMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext jaxnb``: stops the cluster."""
    if JaxnbMagics.cluster is not None:
        JaxnbMagics.cluster.stop()
        JaxnbMagics.cluster = None
