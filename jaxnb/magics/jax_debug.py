"""``%jax_debug [--process I] [-c COMMANDS]``: parse the line, call ``JaxCluster.debug``."""

from __future__ import annotations

from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb.magics import accept, kit


@magic_arguments(name="%jax_debug")
@argument("--process", default=None, metavar="I", type=accept.whole("--process", example=1),
          help="the failed process to debug; default: the first that failed")
@argument("-c", "--commands", default=None, metavar="COMMANDS", type=accept.unquoted,
          help="pdb commands to run without a prompt, separated by ';' (papermill, scripts); with "
               "no failure to debug: the commands for the next jaxnb.breakpoint()")
def jax_debug(line: str) -> None:
    """%jax_debug [--process I] [-c COMMANDS]

    Post-mortem of the last cell or training run that raised, on the process that failed
    first (or --process I), at the frame that raised: pdb's commands (p, pp, l, ll, up, down,
    w, a, any expression; p1: COMMAND or all: COMMAND for other failed processes; q ends)
    typed at the prompt. JAX arrays print their shape, dtype and sharding, not their data.
    The frames stay on the processes until the next cell runs there.
    """


def run(front: kit.Front, line: str) -> None:
    """Parse the line and call ``JaxCluster.debug``."""
    args = parse_argstring(jax_debug, line)
    cluster = front.require()
    with kit.api_call():
        cluster.debug(**kit.given(args))
