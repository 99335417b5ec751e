"""``%jax_train FUNC [--config EXPR] [--name RUN] [--storage DIR] [-o VAR] [--resume] [--break-lock]
[--background] [--attach] [--steps N] [--datasets NAME=VAR,…] [--profile-steps A:B] [--max-failures N]
[--keep-checkpoints N] [--min-processes K]``:
parse the line,
resolve FUNC and the config in the notebook, call ``JaxCluster.train`` (each flag is its keyword
of the same name)."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb.magics import accept, follow, kit


@magic_arguments(name="jax_train")
@argument("--config", metavar="EXPR", help="Python expression evaluated in the notebook: FUNC's argument "
          "(the rest of the line up to the next flag)")
@argument("func", nargs="?", default=None,
          help="the function: defined in the notebook, or on the engines (%%%%jax_cluster)")
@argument("--name", default=None, metavar="RUN", help="run name (folder under DIR); default: FUNC's name")
@argument("--storage", default=None, metavar="DIR", help="folder that holds runs; default: ./jaxnb_runs")
@argument("-o", "--output", default=None, metavar="VAR", help="store the Result in VAR")
@argument("--resume", action="store_true", help="continue run RUN from its latest checkpoint")
@argument("--break-lock", action="store_true", help="remove the run's lock left by a kernel "
          "that is gone (refused while its host answers)")
@argument("--background", action="store_true", help="return at once; VAR holds the live Result")
@argument("--attach", action="store_true", help="with --name RUN and no FUNC: show the live dashboard "
          "of run RUN going on on this attached cluster (every report since it began) until it ends")
@argument("--steps", type=accept.whole("--steps", least=1, example=1000), default=None, metavar="N",
          help="steps the run will report (progress and ETA)")
@argument("--datasets", default=None, metavar="NAME=VAR,…", help="engine-side datasets that "
          "jaxnb.get_dataset_shard(NAME) shards across the processes")
@argument("--profile-steps", default=None, metavar="A:B",
          help="trace steps A to B on every process (as %%%%jax_profile); the result in VAR.profile")
@argument("--max-failures", type=accept.failures("--max-failures"), default=None, metavar="N",
          help="when a process dies or a host is lost: restart, replay the setup, resume from the "
          "latest checkpoint, up to N times (default 0; -1: no limit)")
@argument("--keep-checkpoints", type=accept.whole("--keep-checkpoints", least=1, example=3), default=None,
          metavar="N", help="the newest checkpoints kept in the run's folder (default 3)")
@argument("--min-processes", type=accept.whole("--min-processes", least=1, example=2), default=None,
          metavar="K", help="with --max-failures: when a lost process or host is not back within "
          "seconds, go on with the processes left (at least K) and grow back when it answers")
def jax_train(line: str) -> None:
    """%jax_train FUNC [--config EXPR] [--name RUN] [--storage DIR] [-o VAR] [--resume] [--break-lock]
    [--background] [--attach] [--steps N] [--datasets NAME=VAR,…] [--profile-steps A:B] [--max-failures N]
    [--keep-checkpoints N] [--min-processes K]

    Run FUNC (no argument, or the config) on every JAX process with a live
    dashboard. --config EXPR is evaluated in the notebook (the rest of the
    line up to the next flag). %jax_train --attach --name RUN (no FUNC) shows
    again the live dashboard of run RUN going on on an attached named cluster,
    with every report since it began, and stores its Result in VAR at its end.
    """


#: ``%jax_train?``: the usage line and every flag.
#: The flags whose value is a Python expression, and an example of one.
EXPRESSIONS = {"--config": "dict(lr=1e-3)"}


def run(front: kit.Front, line: str, local_ns: dict | None) -> Any:
    """Parse, resolve FUNC and the config in the notebook, and call ``JaxCluster.train``."""
    rest, exprs = kit.split_expressions(line, jax_train, EXPRESSIONS)
    args = parse_argstring(jax_train, rest)
    store = kit.storing(front.shell, args.output)
    if args.attach:
        return _attach(front, args, store, bool(exprs))
    if args.func is None:
        raise UsageError("%jax_train needs FUNC, the function to run (or --attach --name RUN to "
                         "follow a run going on); see %jax_train?")
    options = {**kit.given(args, "func", "output", "config", "attach"),
               "datasets": kit.datasets(args.datasets)}
    cluster = front.require()
    fn = kit.find_function(args.func, "%jax_train", kit.namespace(front.shell, local_ns))
    config = kit.evaluate("--config", exprs.get("--config"), front.shell, local_ns)
    with kit.api_call():
        result = cluster.train(fn, config, **options, on_result=store)
    if args.background:
        store(result)  # the live Result: .running, .wait(), .stop(); filled in as the run goes
        return None
    return result


#: The flags that only start a run (refused with ``--attach``).
_STARTING = ("config", "resume", "break_lock", "background", "steps", "datasets", "profile_steps",
             "max_failures", "keep_checkpoints", "min_processes")


def _attach(front: kit.Front, args: Any, store: Any, config: bool) -> Any:
    """``--attach --name RUN``: the live dashboard of a run going on, until it ends; its Result."""
    starting = ["config"] * config + [n for n in _STARTING if getattr(args, n, None) not in (None, False)]
    return follow.follow(front, args, store, starting, "jax_train", "RUN")
