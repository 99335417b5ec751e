"""``%%jax_profile [--name RUN] [--storage DIR] [-o VAR]``: parse the line, profile the cell."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb._core.errors import ClusterStateError


@magic_arguments(name="%jax_profile")
@argument("--name", default=None, metavar="RUN", help="run folder under DIR; default: profile")
@argument("--storage", default=None, metavar="DIR", help="folder that holds runs; default: ./jaxnb_runs")
@argument("-o", "--output", default=None, metavar="VAR", help="store the ProfileResult in VAR")
def jax_profile(line: str) -> None:
    """%%jax_profile [--name RUN] [--storage DIR] [-o VAR]

    Run the cell on every JAX process (as %%jax_cluster) while every process records a
    jax.profiler trace, started and stopped together. Writes DIR/RUN (open it with
    `xprof --logdir DIR/RUN`), a merged Perfetto trace, and shows a per-process step
    table that names the straggler. Mark steps with jax.profiler.StepTraceAnnotation.
    """


#: ``%%jax_profile?``: the usage line and every flag.
HELP = jax_profile.__doc__


def run(cluster_of: Callable[[], Any], shell: Any, line: str, cell: str) -> None:
    """Parse the line and call ``JaxCluster.profile``; VAR gets the result even if the cell raised."""
    args = parse_argstring(jax_profile, line)
    if args.output is not None and not args.output.isidentifier():
        raise UsageError(f"-o takes a Python name, got {args.output!r}; e.g. -o prof")
    cluster = cluster_of()

    def store(result: Any) -> None:
        if args.output:
            shell.user_ns[args.output] = result

    try:
        cluster.profile(cell, name=args.name, storage=args.storage, on_result=store)
    except (ValueError, ClusterStateError) as exc:
        raise UsageError(str(exc)) from None
