"""``%%jax_profile [--name RUN] [--storage DIR] [-o VAR]``: parse the line, call
``JaxCluster.profile`` (each flag is its keyword of the same name)."""

from __future__ import annotations

from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb.magics import kit


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


def run(front: kit.Front, line: str, cell: str) -> None:
    """Parse the line and call ``JaxCluster.profile``; VAR gets the result even if the cell raised."""
    args = parse_argstring(jax_profile, line)
    store = kit.storing(front.shell, args.output)
    cluster = front.require()
    with kit.api_call():
        cluster.profile(cell, **kit.given(args, "output"), on_result=store)
