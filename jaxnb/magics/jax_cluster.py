"""``%jax_cluster start|status|memory|stop|restart|reset|stacks|scale N`` and ``%%jax_cluster``:
parse the line, call :class:`jaxnb.JaxCluster`.

``start``'s flags are made from :class:`jaxnb._core.options.ClusterOptions` (one flag per
option field that has a ``Flag``; the flag's destination is ``JaxCluster``'s keyword), so an
option is declared once. Only ``start`` takes them: any other subcommand given one is a
one-line ``UsageError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb._core import spelling
from jaxnb._core.errors import StartError, short_interrupt
from jaxnb._core.messages import ALREADY_RUNNING
from jaxnb._core.options import Flag, start_flags
from jaxnb.magics import accept, kit

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster

SUBCOMMANDS = ("start", "status", "stop", "restart", "reset", "stacks", "memory", "scale", "attach",
               "detach", "list")
#: ``%jax_cluster start``'s flags: ``JaxCluster`` keyword -> flag.
START_FLAGS = {keyword: spelling.flag_of(keyword) for keyword in start_flags()}


def _start_argument(keyword: str, flag: Flag) -> argument:
    """The ``@argument`` of one start flag (its destination: the keyword)."""
    name = spelling.flag_of(keyword)
    how: dict[str, Any] = {"dest": keyword, "default": None, "help": f"start: {flag.help}"}
    if flag.text == "off":
        how.update(action="store_const", const=False)
    elif flag.text == "lines":
        how.update(action="append", metavar=flag.metavar)
    elif flag.text == "env":  # repeated NAME[=VALUE]: a list of pairs, as env= takes
        how.update(action="append", type=accept.FLAG_TEXT[flag.text](name), metavar=flag.metavar)
    else:
        how.update(type=accept.FLAG_TEXT[flag.text](name), metavar=flag.metavar)
    return argument(name, **how)


def _with_start_flags(magic: Callable[..., Any]) -> Callable[..., Any]:
    for keyword, flag in reversed(start_flags().items()):  # the help lists them in order
        _start_argument(keyword, flag)(magic)
    return magic


@magic_arguments(name="jax_cluster")
@argument("command", nargs="?", default=None, help=f"one of: {', '.join(SUBCOMMANDS)}")
@argument("size", nargs="?", default=None, metavar="N|NAME",
          help="scale: the number of processes to grow or shrink the group to; attach: the "
               "cluster's name (default: default)")
@_with_start_flags
@argument("--via", default=None, metavar="[USER@]HOST",
          help="attach: the cluster runs on HOST (started there with --name), reached over ssh "
               "(with --python PATH: the interpreter there); list: the clusters of HOST")
@argument("--replay", action="store_true", default=None,
          help="restart: then run again the setup that succeeded since start (cells, pushes)")
def jax_cluster(line: str) -> None:
    """Start, inspect, repair or stop the cluster of JAX processes.

    ``%jax_cluster start [flags]``; ``status``; ``memory`` (per process and device: bytes in
    use, peak, limit, and the largest live arrays with the variables holding them); ``stop``;
    ``restart [--replay]`` (same flags as the last start; ``--replay``: then run again, in
    order, the ``%%jax_cluster`` cells and ``%jax_push`` values that succeeded since start);
    ``reset`` (repair the jax.distributed group in place); ``stacks`` (every process's Python
    stack); ``scale N`` (grow or shrink the group to N processes: restarted at that size with
    the setup replayed, or, during a run with --min-processes, from its next checkpoint);
    ``attach [NAME]`` (take over cluster NAME, default ``default``, started in any kernel on this
    machine, with its engines' Python state; ``attach NAME --via [USER@]HOST [--python PATH]``:
    one started on HOST, from a kernel on another machine, over ssh); ``detach`` (leave this
    cluster running without the kernel); ``list`` (the clusters on this machine: processes,
    hosts, runs, attached or idle since; ``list --via [USER@]HOST``: those of HOST, over ssh).
    Only ``start`` takes start flags (``--name NAME``, default
    ``default`` on this machine: the name another kernel attaches it by; ``--idle-timeout S``: it
    stops after S seconds with no kernel attached and nothing running, default 300 s unnamed).
    A cluster on this machine outlives a kernel that restarts or dies; an unnamed one stops when
    its kernel is shut down on purpose.
    """


@magic_arguments(name="%jax_cluster")
@argument("--all", action="store_true", default=None, help="show every process's output raw, labelled")
@argument("--process", type=accept.whole("--process", example=0), default=None, metavar="I",
          help="show process I only")
@argument("--timeout", type=accept.seconds("--timeout"), default=None, metavar="S",
          help="cell timeout (0: none, also when the cluster was started with one)")
def jax_cluster_cell(line: str) -> None:
    """Run the cell on every JAX process (SPMD) and show the merged output.

    Identical output is shown once; output that differs is labelled [pI].
    """


def line(front: kit.Front, text: str) -> None:
    """``%jax_cluster SUBCOMMAND [flags]``."""
    args = parse_argstring(jax_cluster, text)
    if args.command is None:
        raise UsageError(f"%jax_cluster needs a subcommand: {', '.join(SUBCOMMANDS)}")
    if args.command not in SUBCOMMANDS:
        raise UsageError(f"unknown subcommand {args.command!r}; use one of: {', '.join(SUBCOMMANDS)}")
    if args.replay and args.command != "restart":
        raise UsageError(f"--replay goes with `%jax_cluster restart`, not `{args.command}`")
    if args.command == "scale" and args.size is not None:
        args.size = accept.whole("scale", least=1, example=2)(args.size)
    elif args.size is not None and args.command != "attach":
        raise UsageError(f"`%jax_cluster {args.command}` takes no number or name; only `scale N` "
                         "and `attach NAME` do")
    if args.size is None and args.command == "scale":
        raise UsageError("`%jax_cluster scale N` takes the number of processes, e.g. "
                         "`%jax_cluster scale 2`")
    if args.via is not None and args.command not in ("attach", "list"):
        raise UsageError(f"--via goes with `%jax_cluster attach NAME --via HOST` or `%jax_cluster "
                         f"list --via HOST`, not `{args.command}`")
    options = kit.given(args, "command", "replay", "size", "via",
                        *(("python",) if args.via is not None else ()))
    if args.command != "start" and options:
        raise UsageError(f"`%jax_cluster {args.command}` takes no flags (got "
                         f"{', '.join(START_FLAGS[k] for k in options)}); flags go with "
                         "`%jax_cluster start`")
    if args.command == "start":
        _start(front, options)
    elif args.command == "restart":
        _restart(front, bool(args.replay))
    elif args.command == "stop":
        _stop(front)
    elif args.command == "scale":
        _scale(front, args.size)
    elif args.command in ("attach", "detach", "list"):
        from jaxnb.magics import jax_cluster_attach

        jax_cluster_attach.run(front, args.command, args.size, show_status, via=args.via,
                               python=args.python)
    else:
        cluster = front.require()
        with kit.api_call():
            if args.command == "status":
                show_status(cluster)
            elif args.command == "memory":
                show_memory(cluster.memory().processes)
            elif args.command == "reset":
                print(f"jaxnb: {cluster.reset()}")
            else:
                print(cluster.stacks())


def _start(front: kit.Front, options: dict[str, Any]) -> None:
    if front.cluster is not None and front.cluster.running:
        raise UsageError(ALREADY_RUNNING)
    from jaxnb._cluster import JaxCluster

    with kit.api_call():
        cluster = JaxCluster(**options)
    front.cluster = cluster
    try:
        with kit.api_call(StartError):
            cluster.start()
    except UsageError:
        front.cluster = None  # it stopped what it had started
        raise
    show_status(cluster)


def _stop(front: kit.Front) -> None:
    if front.cluster is None:
        print("jaxnb: no cluster to stop")
        return
    front.cluster.stop()
    print("jaxnb: cluster stopped")


def _restart(front: kit.Front, replay: bool) -> None:
    if front.cluster is None:
        raise UsageError("no cluster to restart; start one with `%jax_cluster start`")
    with kit.api_call(StartError):
        front.cluster.restart(replay=replay)
    show_status(front.cluster)
    if replay:
        print(f"jaxnb: replayed {front.cluster.group.setup.summary()}")


def _scale(front: kit.Front, size: int) -> None:
    cluster = front.require()
    with kit.api_call(StartError):
        cluster.scale(size)
    if cluster.busy_with:
        print(f"jaxnb: run {cluster.busy_with!r} goes on with {size} processes from its next "
              "checkpoint")
        return
    show_status(cluster)
    print(f"jaxnb: {cluster.num_processes} processes; replayed {cluster.group.setup.summary()}")


def cell(front: kit.Front, text: str, code: str) -> Any:
    """``%%jax_cluster [--all] [--process I] [--timeout S]``: process 0's value (``Out[n]``)."""
    args = parse_argstring(jax_cluster_cell, text)
    options = kit.given(args)
    from jaxnb._cluster import check_run

    with kit.api_call():
        check_run(**options)
    cluster = front.require()
    merged = not args.all and args.process is None
    try:
        with kit.api_call():
            outcome = cluster.run(code, **options, value=merged)
    except KeyboardInterrupt as exc:
        raise short_interrupt(exc) from None
    return outcome.value


def show_memory(processes: list[dict[str, Any]]) -> None:
    """The memory view of ``processes`` (what ``JaxCluster.memory()`` found)."""
    from jaxnb._widgets.memory_view import show_memory as show

    show(processes)


def show_status(cluster: JaxCluster, ask: bool = True) -> None:
    """The devices widget for ``cluster``'s processes; ``ask=False``: as an attach shows it,
    without asking the engines (their compile caches) or waiting for the queues to settle."""
    from jaxnb._cluster_inspect import process_states
    from jaxnb._hosts import encryption, site
    from jaxnb._widgets.devices import show_devices

    local = not site.of(cluster.group).remote_engines
    via = cluster.group.via_host
    show_devices(cluster.status() if ask else process_states(cluster.group, settle=False), lost=cluster.lost,
                 notes=[encryption.status_line(cluster.group.client, local, via)])
