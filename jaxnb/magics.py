"""IPython magics: parsing and dispatch over :class:`jaxnb.JaxCluster`, nothing else.

Each magic (and each mode of ``%jax_cluster``) has its own parser, so a flag
that a mode does not use is a one-line ``UsageError``, and ``%jax_cluster?``,
``%%jax_cluster?`` and ``%jax_train?`` list exactly the flags they take. The
magics keep their cluster on the instance; scripts reach it with
:func:`current_cluster`.
"""

from __future__ import annotations

import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, needs_local_scope
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb import _mesh
from jaxnb._cluster import JaxCluster
from jaxnb._core.errors import ClusterStateError, StartError
from jaxnb._core.messages import ALREADY_RUNNING, NOT_STARTED
from jaxnb._core.options import OptionError
from jaxnb._train import magic as train_magic

SUBCOMMANDS = ("start", "status", "stop", "restart", "reset", "stacks")
#: ``%jax_cluster start``'s flags (argparse destinations); no other subcommand takes any.
START_FLAGS = {
    "n": "-n",
    "devices_per_process": "--devices-per-process",
    "platform": "--platform",
    "engines": "--engines",
    "hosts": "--hosts",
    "hostfile": "--hostfile",
    "python": "--python",
    "address": "--address",
    "no_init": "--no-init",
    "timeout": "--timeout",
    "init_timeout": "--init-timeout",
    "spares": "--spares",
}
DEFAULT_INIT_TIMEOUT = 60.0


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


def _count(flag: str):
    def parse(text: str) -> int:
        if not text.isdigit():
            raise UsageError(f"{flag} takes a whole number >= 0, got {text!r}; e.g. {flag} 0")
        return int(text)

    return parse


def _seconds(flag: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"{flag} takes seconds, got {text!r}; e.g. {flag} 30") from None
        if value <= 0:
            raise UsageError(f"{flag} must be a positive number of seconds, got {text}")
        return value

    return parse


def _process_index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--process takes a process index, got {text!r}; e.g. --process 0") from None
    if value < 0:
        raise UsageError(f"--process takes a process index ≥ 0, got {value}; e.g. --process 0")
    return value


@magics_class
class JaxnbMagics(Magics):
    """``%jax_cluster``, ``%%jax_cluster``, ``%jax_train``, ``%jax_mesh``, ``%jax_pull``, ``%jax_push``."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        #: The cluster these magics drive (``None`` until ``%jax_cluster start``).
        self.cluster: JaxCluster | None = None

    # ---- %jax_cluster -----------------------------------------------------------------

    @magic_arguments(name="jax_cluster")
    @argument("command", nargs="?", default=None, help=f"one of: {', '.join(SUBCOMMANDS)}")
    @argument("-n", type=_positive_int("-n"), default=None, metavar="N", help="start: JAX processes")
    @argument(
        "--devices-per-process",
        type=_positive_int("--devices-per-process"),
        default=None,
        metavar="K",
        help="start: devices per process (simulated on CPU)",
    )
    @argument("--platform", default=None, metavar="cpu|gpu|tpu", help="start: cpu (default), gpu or tpu")
    @argument("--engines", default=None, metavar="LAUNCHER", help="start: local (default), ssh, mpi, ...")
    @argument("--hosts", default=None, metavar="H1,H2", help="start: hosts, each [user@]host[:count]")
    @argument("--hostfile", default=None, metavar="PATH", help="start: one [user@]host[:count] a line")
    @argument("--python", default=None, metavar="PATH", help="start: interpreter on the hosts")
    @argument("--address", default=None, metavar="ADDR", help="start: this machine's address for hosts")
    @argument("--no-init", action="store_true", default=None, help="start: leave jax.distributed to you")
    @argument("--timeout", type=_seconds("--timeout"), default=None, metavar="S", help="start: cell timeout")
    @argument(
        "--init-timeout",
        type=_seconds("--init-timeout"),
        default=None,
        metavar="S",
        help=f"start: seconds to join jax.distributed (default {DEFAULT_INIT_TIMEOUT:g})",
    )
    @argument("--spares", type=_count("--spares"), default=None, metavar="K",
              help="start: warm spare engines for a fast restart (default: one per process; 0: none)")
    @argument("--replay", action="store_true", default=None,
              help="restart: then run again the setup that succeeded since start (cells, pushes)")
    @line_magic("jax_cluster")
    def jax_cluster_line(self, line: str = "") -> None:
        """Start, inspect, repair or stop the cluster of JAX processes.

        ``%jax_cluster start [flags]``; ``status``; ``stop``; ``restart [--replay]`` (same
        flags as the last start; ``--replay``: then run again, in order, the ``%%jax_cluster``
        cells and ``%jax_push`` values that succeeded since start); ``reset`` (repair the
        jax.distributed group in place); ``stacks`` (every process's Python stack). Only
        ``start`` takes start flags.
        """
        args = parse_argstring(self.jax_cluster_line, line)
        if args.command is None:
            raise UsageError(f"%jax_cluster needs a subcommand: {', '.join(SUBCOMMANDS)}")
        if args.command not in SUBCOMMANDS:
            raise UsageError(
                f"unknown subcommand {args.command!r}; use one of: {', '.join(SUBCOMMANDS)}"
            )
        if args.replay and args.command != "restart":
            raise UsageError(f"--replay goes with `%jax_cluster restart`, not `{args.command}`")
        if args.command != "start":
            given = [flag for dest, flag in START_FLAGS.items() if getattr(args, dest) is not None]
            if given:
                raise UsageError(
                    f"`%jax_cluster {args.command}` takes no flags (got {', '.join(given)}); "
                    "flags go with `%jax_cluster start`"
                )
        getattr(self, f"_cluster_{args.command}")(args)

    def _require(self) -> JaxCluster:
        if self.cluster is None or not self.cluster.running:
            raise UsageError(NOT_STARTED)
        return self.cluster

    def _cluster_start(self, args: Any) -> None:
        if self.cluster is not None and self.cluster.running:
            raise UsageError(ALREADY_RUNNING)
        hosts = [h.strip() for h in (args.hosts or "").split(",") if h.strip()]
        try:
            cluster = JaxCluster(
                args.n,
                devices_per_process=args.devices_per_process,
                platform=args.platform or "cpu",
                engines=args.engines or "local",
                hosts=hosts,
                hostfile=args.hostfile,
                python=args.python,
                address=args.address,
                init=not args.no_init,
                timeout=args.timeout,
                init_timeout=args.init_timeout or DEFAULT_INIT_TIMEOUT,
                spares=args.spares,
            )
        except OptionError as exc:
            raise UsageError(str(exc)) from None
        self.cluster = cluster
        try:
            cluster.start()
        except StartError as exc:
            self.cluster = None
            raise UsageError(str(exc)) from None
        _show_status(cluster)

    def _cluster_status(self, args: Any) -> None:
        _show_status(self._require())

    def _cluster_stop(self, args: Any) -> None:
        if self.cluster is None:
            print("jaxnb: no cluster to stop")
            return
        self.cluster.stop()
        print("jaxnb: cluster stopped")

    def _cluster_restart(self, args: Any) -> None:
        if self.cluster is None:
            raise UsageError("no cluster to restart; start one with `%jax_cluster start`")
        try:
            self.cluster.restart(replay=bool(args.replay))
        except StartError as exc:
            raise UsageError(str(exc)) from None
        _show_status(self.cluster)
        if args.replay:
            print(f"jaxnb: replayed {self.cluster.group.setup.summary()}")

    def _cluster_reset(self, args: Any) -> None:
        cluster = self._require()
        try:
            print(f"jaxnb: {cluster.reset()}")
        except ClusterStateError as exc:
            raise UsageError(str(exc)) from None

    def _cluster_stacks(self, args: Any) -> None:
        print(self._require().stacks())

    # ---- %%jax_cluster ----------------------------------------------------------------

    @magic_arguments(name="%jax_cluster")
    @argument("--all", action="store_true", help="show every process's output raw, labelled")
    @argument("--process", type=_process_index, default=None, metavar="I", help="show process I only")
    @argument("--timeout", type=_seconds("--timeout"), default=None, metavar="S", help="cell timeout")
    @cell_magic("jax_cluster")
    def jax_cluster_cell(self, line: str, cell: str) -> None:
        """Run the cell on every JAX process (SPMD) and show the merged output.

        Identical output is shown once; output that differs is labelled [pI].
        """
        args = parse_argstring(self.jax_cluster_cell, line)
        if args.all and args.process is not None:
            raise UsageError("--all and --process I do not go together; pick one")
        cluster = self._require()
        try:
            cluster.run(cell, timeout=args.timeout, all=args.all, process=args.process)
        except (ValueError, ClusterStateError) as exc:
            raise UsageError(str(exc)) from None

    # ---- values and views -------------------------------------------------------------

    @line_magic
    def jax_pull(self, line: str) -> None:
        """``%jax_pull NAME [NAME ...]``: set NAME in the notebook to its value on the engines.

        A global array is gathered as NumPy; other objects come from process 0.
        """
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
        cluster = self._require()
        try:
            _mesh.show_remote(cluster.group, name)
        except (NameError, TypeError) as exc:
            raise UsageError(str(exc)) from None

    @needs_local_scope
    @line_magic
    def jax_train(self, line: str, local_ns: dict | None = None) -> Any:
        """Run FUNC on every process with a live dashboard; returns its ``Result``."""
        return train_magic.run(self._require, self.shell, line, local_ns)


# %jax_train's help is its parser's (every flag, --config included).
JaxnbMagics.jax_train.__doc__ = train_magic.HELP


def _show_status(cluster: JaxCluster) -> None:
    from jaxnb._widgets.devices import show_devices

    show_devices(cluster.status())


def _names(line: str, magic: str, exactly_one: bool = False) -> list[str]:
    names = shlex.split(line)
    flags = [n for n in names if n.startswith("-")]
    if flags:
        raise UsageError(f"{magic} takes no flags (got {' '.join(flags)}); e.g. {magic} x")
    if not names or (exactly_one and len(names) != 1):
        what = "one NAME" if exactly_one else "NAME [NAME ...]"
        raise UsageError(f"{magic} takes {what}; e.g. {magic} x")
    for name in names:
        if not name.isidentifier():
            raise UsageError(f"{magic}: {name!r} is not a Python name")
    return names


def _instance(shell: Any) -> JaxnbMagics | None:
    registry = getattr(getattr(shell, "magics_manager", None), "registry", {})
    found = registry.get(JaxnbMagics.__name__)
    return found if isinstance(found, JaxnbMagics) else None


def current_cluster(shell: Any = None) -> JaxCluster | None:
    """The cluster that ``%jax_cluster`` started in this IPython session (``None`` if none).

    ``shell`` defaults to the running IPython shell.
    """
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    magics = _instance(shell)
    return magics.cluster if magics is not None else None


def use_cluster(cluster: JaxCluster | None, shell: Any = None) -> None:
    """Make the magics of this IPython session drive ``cluster`` (one started from Python)."""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    magics = _instance(shell)
    if magics is None:
        raise UsageError("the jaxnb magics are not loaded; run `%load_ext jaxnb` first")
    magics.cluster = cluster


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jaxnb``."""
    if _instance(ipython) is None:
        ipython.register_magics(JaxnbMagics(ipython))


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext jaxnb``: stops the cluster."""
    magics = _instance(ipython)
    if magics is not None and magics.cluster is not None:
        magics.cluster.stop()
        magics.cluster = None
