"""``%jax_tune FUNC --space EXPR [flags]``: parse the line, evaluate --space/--config in the
notebook, call ``JaxCluster.tune`` (each flag is its keyword of the same name), store the
``TuneResult``."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb._tune.options import DEFAULT_METRIC, DEFAULT_TRIALS
from jaxnb.magics import accept, follow, kit


@magic_arguments(name="jax_tune")
@argument("func", nargs="?", default=None,
          help="the train function: defined in the notebook, or on the engines")
@argument("--space", metavar="EXPR", help="search space, evaluated in the notebook: a dict of "
          "jaxnb.tune.uniform/loguniform/randint/choice or Optuna distributions, or a function "
          "trial -> dict (rest of the line up to the next flag)")
@argument("--trials", type=accept.whole("--trials", least=1, example=DEFAULT_TRIALS), default=None,
          metavar="N", help=f"trials in the study (default {DEFAULT_TRIALS})")
@argument("--metric", default=None, metavar="NAME",
          help=f"reported metric to optimise; a trial's value is its last report (default {DEFAULT_METRIC})")
@argument("--mode", default=None, metavar="min|max", help="minimise (default) or maximise the metric")
@argument("--pruner", default=None, metavar="median|asha|none",
          help="stop bad trials early (default median)")
@argument("--config", metavar="EXPR", help="base config (a dict, evaluated in the notebook) the "
          "sampled values update")
@argument("--name", default=None, metavar="STUDY", help="study name (folder under DIR); default FUNC's name")
@argument("--storage", default=None, metavar="DIR", help="folder that holds studies; default ./jaxnb_runs")
@argument("--steps", type=accept.whole("--steps", least=1, example=1000), default=None, metavar="N",
          help="steps each trial reports (progress)")
@argument("--datasets", default=None, metavar="NAME=VAR,…", help="engine-side datasets, as for %%jax_train")
@argument("--max-failures", type=accept.failures("--max-failures"), default=None, metavar="N",
          help="restarts per trial after a process dies or a host is lost (-1: no limit), as for "
          "%%jax_train")
@argument("--keep-checkpoints", type=accept.whole("--keep-checkpoints", least=1, example=3), default=None,
          metavar="N", help="the newest checkpoints kept per trial (default 3)")
@argument("--seed", type=accept.whole("--seed", example=0), default=None, metavar="N",
          help="the sampler's seed: the same seed samples the same configs (default: random)")
@argument("--resume", action="store_true", help="continue study STUDY (after a kernel restart)")
@argument("--break-lock", action="store_true", help="remove the study's lock left by a kernel "
          "that is gone (refused while its host answers)")
@argument("--background", action="store_true", help="return at once; VAR holds the live "
          "TuneResult; the view's Stop search button ends the search after the current trial")
@argument("--attach", action="store_true", help="with --name STUDY and no FUNC: show the live view "
          "of search STUDY going on on this attached cluster (every trial since it began) until it "
          "ends")
@argument("-o", "--output", default=None, metavar="VAR", help="store the TuneResult in VAR")
def jax_tune(line: str) -> None:
    """%jax_tune FUNC --space EXPR [--trials N] [--metric NAME] [--mode min|max]
    [--pruner median|asha|none] [--config EXPR] [--name STUDY] [--storage DIR] [--steps N]
    [--datasets NAME=VAR,…] [--max-failures N] [--keep-checkpoints N] [--seed N] [--resume]
    [--break-lock] [--background] [--attach] [-o VAR]

    Hyperparameter search with Optuna: each trial runs FUNC on every JAX process
    (as %jax_train) with the base config updated by the sampled values; reports of
    the metric feed the pruner; the study lives in DIR/STUDY, so --resume continues it.
    %jax_tune --attach --name STUDY (no FUNC) shows again the live view of search STUDY
    going on on an attached named cluster, with every trial since it began, and stores
    its TuneResult in VAR at its end.
    """


#: The flags whose value is a Python expression, and an example of one.
EXPRESSIONS = {"--space": "dict(lr=jaxnb.tune.loguniform(1e-4, 1e-1))", "--config": "dict(steps=100)"}


#: The flags that only start a search (refused with ``--attach``).
_STARTING = ("trials", "metric", "mode", "pruner", "steps", "datasets", "max_failures",
             "keep_checkpoints", "seed", "resume", "break_lock", "background")


def run(front: kit.Front, line: str, local_ns: dict | None) -> Any:
    """Parse, evaluate in the notebook, and call ``JaxCluster.tune``."""
    rest, exprs = kit.split_expressions(line, jax_tune, EXPRESSIONS)
    args = parse_argstring(jax_tune, rest)
    if args.attach:
        starting = [f.lstrip("-") for f in exprs] + [
            n for n in _STARTING if getattr(args, n, None) not in (None, False)]
        return follow.follow(front, args, kit.storing(front.shell, args.output), starting,
                             "jax_tune", "STUDY")
    if args.func is None:
        raise UsageError("%jax_tune needs FUNC, the train function (or --attach --name STUDY to "
                         "follow a search going on); see %jax_tune?")
    if "--space" not in exprs:
        raise UsageError("%jax_tune needs --space; e.g. %jax_tune train --space "
                         "dict(lr=jaxnb.tune.loguniform(1e-4, 1e-1)) --metric loss")
    store = kit.storing(front.shell, args.output)
    options = {**kit.given(args, "func", "output", "space", "config", "attach"),
               "datasets": kit.datasets(args.datasets)}
    space = kit.evaluate("--space", exprs["--space"], front.shell, local_ns)
    config = kit.evaluate("--config", exprs.get("--config"), front.shell, local_ns)
    cluster = front.require()
    fn = kit.find_function(args.func, "%jax_tune", kit.namespace(front.shell, local_ns))
    with kit.api_call(first_line=True):
        result = cluster.tune(fn, space, config=config, **options, on_result=store)
    if args.background:
        store(result)  # the live TuneResult: .running, .wait(), .stop()
        return None
    return result
