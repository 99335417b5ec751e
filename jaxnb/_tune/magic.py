"""``%jax_tune FUNC --space EXPR [flags]``: parse the line, evaluate --space/--config in the
notebook, run the search (``jaxnb._tune.runner.tune``), store the ``TuneResult``."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb._core.errors import ClusterStateError
from jaxnb._tune.options import DEFAULT_METRIC, DEFAULT_TRIALS

_EXPR_FLAGS = ("--space", "--config")
_ALL_FLAGS = ("--space", "--config", "--trials", "--metric", "--mode", "--pruner", "--name",
              "--storage", "--steps", "--datasets", "--max-failures", "--resume", "--background",
              "-o", "--output")
_NEXT_FLAG = re.compile(r"\s(?:" + "|".join(re.escape(f) for f in _ALL_FLAGS) + r")(?=[\s=]|$)")


@magic_arguments(name="jax_tune")
@argument("func", help="the train function: defined in the notebook, or on the engines")
@argument("--space", metavar="EXPR", help="search space, evaluated in the notebook: a dict of "
          "jaxnb.tune.uniform/loguniform/randint/choice or Optuna distributions, or a function "
          "trial -> dict (rest of the line up to the next flag)")
@argument("--trials", default=None, metavar="N", help=f"trials in the study (default {DEFAULT_TRIALS})")
@argument("--metric", default=DEFAULT_METRIC, metavar="NAME",
          help=f"reported metric to optimise; a trial's value is its last report (default {DEFAULT_METRIC})")
@argument("--mode", default="min", metavar="min|max", help="minimise or maximise the metric")
@argument("--pruner", default="median", metavar="median|asha|none",
          help="stop bad trials early (default median)")
@argument("--config", metavar="EXPR", help="base config (a dict, evaluated in the notebook) the "
          "sampled values update")
@argument("--name", default=None, metavar="STUDY", help="study name (folder under DIR); default FUNC's name")
@argument("--storage", default=None, metavar="DIR", help="folder that holds studies; default ./jaxnb_runs")
@argument("--steps", default=None, metavar="N", help="steps each trial reports (progress)")
@argument("--datasets", default=None, metavar="NAME=VAR,…", help="engine-side datasets, as for %%jax_train")
@argument("--max-failures", default=None, metavar="N", help="restarts per trial after a process dies, "
          "as for %%jax_train (where this jaxnb build has it)")
@argument("--resume", action="store_true", help="continue study STUDY (after a kernel restart)")
@argument("--background", action="store_true", help="return at once; VAR holds the live "
          "TuneResult; the view's Stop search button ends the search after the current trial")
@argument("-o", "--output", default=None, metavar="VAR", help="store the TuneResult in VAR")
def jax_tune(line: str) -> None:
    """%jax_tune FUNC --space EXPR [--trials N] [--metric NAME] [--mode min|max]
    [--pruner median|asha|none] [--config EXPR] [--name STUDY] [--storage DIR] [--steps N]
    [--datasets NAME=VAR,…] [--max-failures N] [--resume] [--background] [-o VAR]

    Hyperparameter search with Optuna: each trial runs FUNC on every JAX process
    (as %jax_train) with the base config updated by the sampled values; reports of
    the metric feed the pruner; the study lives in DIR/STUDY, so --resume continues it.
    """


#: ``%jax_tune?``: the usage line and every flag.
HELP = jax_tune.__doc__


def split_expressions(line: str) -> tuple[str, dict[str, str]]:
    """``line`` without ``--space EXPR`` / ``--config EXPR``, and those EXPRs (spaces allowed)."""
    found: dict[str, str] = {}
    for flag in _EXPR_FLAGS:
        match = re.search(r"(?:^|\s)" + re.escape(flag) + r"(?:=|\s+|$)", line)
        if match is None:
            continue
        after_flag = line.index(flag, match.start()) + len(flag)
        following = _NEXT_FLAG.search(line, after_flag)
        end = following.start() if following else len(line)
        expr = line[match.end():end].strip() if end > match.end() else ""
        if not expr:
            raise UsageError(f"{flag} needs a Python expression; e.g. "
                             + ("--space dict(lr=jaxnb.tune.loguniform(1e-4, 1e-1))"
                                if flag == "--space" else "--config dict(steps=100)"))
        found[flag] = expr
        line = line[: match.start()] + " " + line[end:]
    return line, found


def run(cluster_of: Callable[[], Any], shell: Any, line: str, local_ns: dict | None) -> Any:
    """Parse, evaluate in the notebook, and call ``JaxCluster.tune``."""
    rest, exprs = split_expressions(line)
    args = parse_argstring(jax_tune, rest)
    if "--space" not in exprs:
        raise UsageError("%jax_tune needs --space; e.g. %jax_tune train --space "
                         "dict(lr=jaxnb.tune.loguniform(1e-4, 1e-1)) --metric loss")
    if args.output is not None and not args.output.isidentifier():
        raise UsageError(f"-o takes a Python name, got {args.output!r}; e.g. -o search")
    ns = {**shell.user_ns, **(local_ns or {})}
    trials = _whole("--trials", args.trials, DEFAULT_TRIALS)
    steps = _whole("--steps", args.steps, None)
    max_failures = _whole("--max-failures", args.max_failures, None, zero=True)
    space = _evaluate("--space", exprs["--space"], shell.user_ns, local_ns or {})
    config = _evaluate("--config", exprs.get("--config"), shell.user_ns, local_ns or {})
    datasets = _datasets(args.datasets, ns)
    cluster = cluster_of()
    fn = _function(args.func, ns)

    def store(result: Any) -> None:
        if args.output:
            shell.user_ns[args.output] = result

    try:
        result = cluster.tune(fn, space, trials=trials, metric=args.metric, mode=args.mode,
                              pruner=args.pruner, config=config, name=args.name,
                              storage=args.storage, steps=steps, max_failures=max_failures,
                              datasets=datasets, resume=args.resume,
                              background=args.background, on_result=store)
    except (ValueError, FileExistsError, ClusterStateError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    if args.background:
        store(result)  # the live TuneResult: .running, .wait(), .stop()
        return None
    return result


def _whole(flag: str, text: str | None, default: int | None, zero: bool = False) -> int | None:
    if text is None:
        return default
    if not text.isdigit() or (int(text) == 0 and not zero):
        what = "whole number" if zero else "positive whole number"
        raise UsageError(f"{flag} takes a {what}, got {text!r}; e.g. {flag} 20")
    return int(text)


def _function(name: str, ns: dict) -> Any:
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        raise UsageError(f"%jax_tune takes a function name, got {name!r}; e.g. %jax_tune train "
                         "--space ...")
    if parts[0] not in ns:
        return name  # defined on the engines
    value = ns[parts[0]]
    for part in parts[1:]:
        value = getattr(value, part, None)
    if not callable(value):
        raise UsageError(f"{name} is a {type(value).__name__} in the notebook, not a function")
    return value


def _evaluate(flag: str, expr: str | None, user_ns: dict, local_ns: dict) -> Any:
    if expr is None:
        return None
    try:
        return eval(expr, user_ns, local_ns)
    except Exception as exc:
        raise UsageError(f"{flag} {expr!r} could not be evaluated in the notebook: "
                         f"{type(exc).__name__}: {exc}") from None


def _datasets(text: str | None, ns: dict) -> dict[str, Any] | None:
    if text is None:
        return None
    found = {}
    for item in text.split(","):
        key, _, var = item.partition("=")
        if not key.isidentifier() or not var.isidentifier() or var not in ns:
            raise UsageError(f"--datasets takes NAME=VAR,… with VAR a notebook variable, got "
                             f"{item!r}; e.g. --datasets train=train_ds")
        found[key] = ns[var]
    return found
