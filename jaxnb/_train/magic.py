"""``%jax_train FUNC [--config EXPR] [--name RUN] [--storage DIR] [-o VAR] [--resume] [--background]
[--steps N] [--datasets NAME=VAR,…] [--profile-steps A:B] [--max-failures N]``: parse the line,
resolve FUNC and the config in the notebook, train."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxnb._core.errors import ClusterStateError
from jaxnb._core.messages import article
from jaxnb._profile import train_magic as profiled_steps
from jaxnb._train import dataset_names

_CONFIG = re.compile(r"(?:^|\s)--config(?:=|\s+|$)")
_NEXT_FLAG = re.compile(
    r"\s(?:--name|--storage|-o|--output|--resume|--background|--steps|--datasets|--profile-steps"
    r"|--max-failures)(?=[\s=]|$)"
)


@magic_arguments(name="jax_train")
@argument("--config", metavar="EXPR", help="Python expression evaluated in the notebook: FUNC's argument "
          "(the rest of the line up to the next flag)")
@argument("func", help="the function: defined in the notebook, or on the engines (%%%%jax_cluster)")
@argument("--name", default=None, metavar="RUN", help="run name (folder under DIR); default: FUNC's name")
@argument("--storage", default=None, metavar="DIR", help="folder that holds runs; default: ./jaxnb_runs")
@argument("-o", "--output", default=None, metavar="VAR", help="store the Result in VAR")
@argument("--resume", action="store_true", help="continue run RUN from its latest checkpoint")
@argument("--background", action="store_true", help="return at once; VAR holds the live Result")
@argument("--steps", default=None, metavar="N", help="steps the run will report (progress and ETA)")
@argument("--datasets", default=None, metavar="NAME=VAR,…", help="engine-side datasets that "
          "jaxnb.get_dataset_shard(NAME) shards across the processes")
@argument("--profile-steps", default=None, metavar="A:B",
          help="trace steps A to B on every process (as %%%%jax_profile); the result in VAR.profile")
@argument("--max-failures", default=None, metavar="N", help="when a process dies or a host is lost: "
          "restart, replay the setup, resume from the latest checkpoint, up to N times (default 0)")
def jax_train(line: str) -> None:
    """%jax_train FUNC [--config EXPR] [--name RUN] [--storage DIR] [-o VAR] [--resume]
    [--background] [--steps N] [--datasets NAME=VAR,…] [--profile-steps A:B] [--max-failures N]

    Run FUNC (no argument, or the config) on every JAX process with a live
    dashboard. --config EXPR is evaluated in the notebook (the rest of the
    line up to the next flag).
    """


#: ``%jax_train?``: the usage line and every flag.
HELP = jax_train.__doc__


def split_config(line: str) -> tuple[str, str | None]:
    """``line`` without ``--config EXPR``, and EXPR (which may contain spaces and quotes)."""
    match = _CONFIG.search(line)
    if match is None:
        return line, None
    start = match.end()
    following = _NEXT_FLAG.search(line, start)
    end = following.start() if following else len(line)
    expr = line[start:end].strip()
    if not expr:
        raise UsageError("--config needs a Python expression; e.g. --config dict(lr=1e-3)")
    return line[: match.start()] + " " + line[end:], expr


def run(cluster_of: Callable[[], Any], shell: Any, line: str, local_ns: dict | None) -> Any:
    """Parse, resolve FUNC and the config in the notebook, and call ``JaxCluster.train``.

    ``cluster_of()`` gives the running cluster (or raises ``UsageError``), once the line parsed.
    """
    rest, config_expr = split_config(line)
    args = parse_argstring(jax_train, rest)
    if args.output is not None and not args.output.isidentifier():
        raise UsageError(f"-o takes a Python name, got {args.output!r}; e.g. -o result")
    steps = _step_count(args.steps)
    try:
        datasets = dataset_names.parse(args.datasets) if args.datasets is not None else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    window = profiled_steps.window(args.profile_steps, args.background)
    max_failures = _max_failures(args.max_failures)
    cluster = cluster_of()
    fn = _function(args.func, shell.user_ns, local_ns or {})
    config = _evaluate(config_expr, shell.user_ns, local_ns or {})

    def store(result: Any) -> None:
        if args.output:
            shell.user_ns[args.output] = result

    train = cluster.train if window is None else profiled_steps.trainer(cluster, fn, args.name, window)
    try:
        result = train(fn, config, name=args.name, storage=args.storage,
                       resume=args.resume, background=args.background, total_steps=steps,
                       on_result=store, datasets=datasets, max_failures=max_failures)
    except (ValueError, FileExistsError, ClusterStateError) as exc:
        raise UsageError(str(exc)) from None
    if args.background:
        store(result)  # the live Result: .running, .wait(), .stop(); filled in as the run goes
        return None
    return result


def _step_count(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or int(text) == 0:
        raise UsageError(f"--steps takes a positive whole number, got {text!r}; e.g. --steps 1000")
    return int(text)


def _max_failures(text: str | None) -> int:
    if text is None:
        return 0
    if not text.isdigit():
        raise UsageError(f"--max-failures takes a whole number >= 0, got {text!r}; "
                         "e.g. --max-failures 2")
    return int(text)


def _function(name: str, user_ns: dict, local_ns: dict) -> Any:
    """The notebook's function called ``name``, else ``name`` itself (defined on the engines)."""
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        raise UsageError(f"%jax_train takes a function name, got {name!r}; e.g. %jax_train train")
    ns = {**user_ns, **local_ns}
    if parts[0] not in ns:
        return name
    value = ns[parts[0]]
    try:
        for part in parts[1:]:
            value = getattr(value, part)
    except AttributeError as exc:
        raise UsageError(f"{name}: {exc}") from None
    if not callable(value):
        raise UsageError(f"{name} is {article(type(value).__name__)} in the notebook, not a function")
    return value


def unquote(expr: str) -> str:
    """``"dict(lr=0.1)"`` as a shell user types it: the expression inside one pair of quotes."""
    if len(expr) >= 2 and expr[0] == expr[-1] and expr[0] in "'\"":
        try:
            words = shlex.split(expr)
        except ValueError:
            return expr
        if len(words) == 1:
            return words[0]
    return expr


def _evaluate(expr: str | None, user_ns: dict, local_ns: dict) -> Any:
    if expr is None:
        return None
    expr = unquote(expr)
    try:
        return eval(expr, user_ns, local_ns)
    except Exception as exc:
        raise UsageError(
            f"--config {expr!r} could not be evaluated in the notebook: {type(exc).__name__}: {exc}"
        ) from None
