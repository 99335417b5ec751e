"""IPython magics: parsing and dispatch over :class:`jaxnb.JaxCluster`, nothing else.

Each magic (and each mode of ``%jax_cluster``) has its own parser, so a flag
that a mode does not use is a one-line ``UsageError``, and ``%jax_cluster?``,
``%%jax_cluster?`` and ``%jax_train?`` list exactly the flags they take. The
magics keep their cluster on the instance; scripts reach it with
:func:`current_cluster`.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, needs_local_scope
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb import _magic_args as accept
from jaxnb import _mesh
from jaxnb._cluster import JaxCluster
from jaxnb._core.errors import ClusterStateError, StartError, short_interrupt
from jaxnb._core.host_entries import HostError, parse_hosts
from jaxnb._core.messages import ALREADY_RUNNING, NOT_STARTED
from jaxnb._core.options import OptionError
from jaxnb._profile import magic as profile_magic
from jaxnb._train import magic as train_magic
from jaxnb._tune import magic as tune_magic

SUBCOMMANDS = ("start", "status", "stop", "restart", "reset", "stacks")
DEFAULT_INIT_TIMEOUT = 60.0


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
    @argument("-n", type=accept.positive_int("-n"), default=None, metavar="N", help="start: JAX processes")
    @argument(
        "--devices-per-process",
        type=accept.positive_int("--devices-per-process"),
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
    @argument("--workdir", default=None, metavar="DIR", help="start: engines start in DIR on every host")
    @argument(
        "--workdir-exclude", default=None, metavar="PATTERNS",
        help="start: comma-separated file patterns left out of --workdir's copy, e.g. '*.ckpt,data'",
    )
    @argument("--partition", default=None, metavar="P", help="start: Slurm partition (--engines slurm)")
    @argument("--time-limit", default=None, metavar="T", help="start: Slurm time limit, e.g. 1:00:00")
    @argument("--account", default=None, metavar="A", help="start: Slurm account to charge")
    @argument(
        "--sbatch", action="append", default=None, metavar="OPTION",
        help="start: an extra #SBATCH line, e.g. --sbatch=--gres=gpu:8 (repeat for more)",
    )
    @argument("--no-init", action="store_true", default=None, help="start: leave jax.distributed to you")
    @argument("--timeout", type=accept.seconds("--timeout"), default=None, metavar="S",
              help="start: cell timeout")
    @argument(
        "--init-timeout",
        type=accept.seconds("--init-timeout"),
        default=None,
        metavar="S",
        help=f"start: seconds to join jax.distributed (default {DEFAULT_INIT_TIMEOUT:g})",
    )
    @argument("--spares", type=accept.count("--spares"), default=None, metavar="K",
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
            given = [flag for dest, flag in accept.START_FLAGS.items() if getattr(args, dest) is not None]
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
            if args.hosts is not None:
                parse_hosts(args.hosts)  # `--hosts ,` names no host: say so, start nothing
        except HostError as exc:
            raise UsageError(str(exc)) from None
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
                workdir=args.workdir,
                partition=args.partition,
                time_limit=args.time_limit,
                account=args.account,
                sbatch=args.sbatch or (),
                workdir_exclude=accept.patterns(args.workdir_exclude),
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
    @argument("--process", type=accept.process_index, default=None, metavar="I", help="show process I only")
    @argument(
        "--timeout", type=accept.seconds("--timeout", zero=True), default=None, metavar="S",
        help="cell timeout (0: none, also when the cluster was started with one)",
    )
    @cell_magic("jax_cluster")
    def jax_cluster_cell(self, line: str, cell: str) -> Any:
        """Run the cell on every JAX process (SPMD) and show the merged output.

        Identical output is shown once; output that differs is labelled [pI].
        """
        args = parse_argstring(self.jax_cluster_cell, line)
        if args.all and args.process is not None:
            raise UsageError("--all and --process I do not go together; pick one")
        cluster = self._require()
        merged = not args.all and args.process is None
        try:
            outcome = cluster.run(
                cell, timeout=args.timeout, all=args.all, process=args.process, value=merged
            )
        except (ValueError, ClusterStateError) as exc:
            raise UsageError(str(exc)) from None
        except KeyboardInterrupt as exc:
            raise short_interrupt(exc) from None
        return outcome.value  # process 0's value: IPython's Out[n] and `_`

    @cell_magic
    def jax_profile(self, line: str, cell: str) -> None:
        """Run the cell on every process while all of them trace it (``%%jax_profile?``)."""
        profile_magic.run(self._require, self.shell, line, cell)

    # ---- values and views -------------------------------------------------------------

    @line_magic
    def jax_pull(self, line: str) -> None:
        """``%jax_pull NAME [NAME ...]``: set NAME in the notebook to its value on the engines.

        A global array is gathered as NumPy; other objects come from process 0.
        """
        names = accept.names(line, "%jax_pull")
        cluster = self._require()
        for name in names:
            try:
                self.shell.user_ns[name] = cluster.pull(name)
            except (NameError, ValueError, ClusterStateError) as exc:
                raise UsageError(str(exc)) from None

    @line_magic
    def jax_push(self, line: str) -> None:
        """``%jax_push NAME [NAME ...]``: send notebook variables to every process."""
        names = accept.names(line, "%jax_push")
        cluster = self._require()
        missing = [n for n in names if n not in self.shell.user_ns]
        if missing:
            raise UsageError(f"name {missing[0]!r} is not defined in the notebook; define it first")
        try:
            cluster.push(**{n: self.shell.user_ns[n] for n in names})
        except (ValueError, ClusterStateError) as exc:
            raise UsageError(str(exc)) from None

    @line_magic
    def jax_mesh(self, line: str) -> None:
        """``%jax_mesh NAME``: draw the mesh, the sharding of the global array, or the leaves
        (shape, dtype, spec, bytes per device) of the pytree NAME; NAME may be an
        expression, e.g. ``%jax_mesh params['w1']``."""
        name = line.strip()
        flags = [t for t in name.split() if t.startswith("--") or (t[:1] == "-" and t[1:2].isalpha())]
        if flags:
            raise UsageError(f"%jax_mesh takes no flags (got {' '.join(flags)}); e.g. %jax_mesh mesh")
        if not name:
            raise UsageError("%jax_mesh takes one NAME or expression; e.g. %jax_mesh mesh")
        if not name.isidentifier():
            try:
                compile(name, "<%jax_mesh>", "eval")
            except SyntaxError:
                raise UsageError(
                    f"%jax_mesh: {name!r} is neither a Python name nor an expression; "
                    "e.g. %jax_mesh params['w1']"
                ) from None
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

    @needs_local_scope
    @line_magic
    def jax_tune(self, line: str, local_ns: dict | None = None) -> Any:
        """Hyperparameter search (Optuna); each trial one %jax_train run; a ``TuneResult``."""
        return tune_magic.run(self._require, self.shell, line, local_ns)


# %jax_train's help is its parser's (every flag, --config included).
JaxnbMagics.jax_train.__doc__ = train_magic.HELP
JaxnbMagics.jax_tune.__doc__ = tune_magic.HELP
JaxnbMagics.jax_profile.__doc__ = profile_magic.HELP


def _show_status(cluster: JaxCluster) -> None:
    from jaxnb._widgets.devices import show_devices

    show_devices(cluster.status())


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
