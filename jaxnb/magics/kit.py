"""What every magic does, each written once: split the expressions off a line, find a function
by name, evaluate an expression in the notebook, read ``--datasets``, keep ``-o VAR``, and call
the Python API so that its messages name the magic's flags.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shlex
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from jaxnb._core import spelling
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.messages import article
from jaxnb._train import dataset_names

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster


class Front(Protocol):
    """What a magic gets from ``JaxnbMagics``: the shell, and the session's cluster."""

    shell: Any
    cluster: JaxCluster | None

    def require(self) -> JaxCluster:
        """The running cluster, or a ``UsageError`` that says to start one."""
        ...


def declared(magic: Callable[..., Any]) -> list[argparse.Action]:
    """The arguments that ``magic``'s ``@argument`` declarations make (flags and positionals)."""
    parser = argparse.ArgumentParser(add_help=False)
    return [parser.add_argument(*d.args, **d.kwds)
            for d in getattr(magic, "decorators", ()) if isinstance(d, argument)]


def declared_flags(magic: Callable[..., Any]) -> list[str]:
    """Every flag that ``magic`` declares (``-o``, ``--output``, …)."""
    return [flag for action in declared(magic) for flag in action.option_strings]


def split_expressions(line: str, magic: Callable[..., Any], flags: dict[str, str]
                      ) -> tuple[str, dict[str, str]]:
    """``line`` without ``--config EXPR`` (each flag of ``flags``, which maps it to an example
    expression), and those EXPRs by flag.

    An expression runs to the next flag that ``magic`` declares, so it may hold spaces and
    quotes: ``--config dict(lr = 0.1) --name a``.
    """
    next_flag = re.compile(
        r"\s(?:" + "|".join(re.escape(f) for f in declared_flags(magic)) + r")(?=[\s=]|$)")
    found: dict[str, str] = {}
    for flag in flags:
        match = re.search(r"(?:^|\s)" + re.escape(flag) + r"(?:=|\s+|$)", line)
        if match is None:
            continue
        after_flag = line.index(flag, match.start()) + len(flag)
        following = next_flag.search(line, after_flag)
        end = following.start() if following else len(line)
        expr = line[match.end():end].strip() if end > match.end() else ""
        if not expr:
            raise UsageError(f"{flag} needs a Python expression; e.g. {flag} {flags[flag]}")
        found[flag] = expr
        line = line[: match.start()] + " " + line[end:]
    return line, found


def namespace(shell: Any, local_ns: dict | None) -> dict[str, Any]:
    """The names the notebook sees where the magic runs."""
    return {**shell.user_ns, **(local_ns or {})}


def find_function(name: str, magic: str, ns: dict[str, Any]) -> Any:
    """The notebook's function called ``name`` (dotted names too), else ``name`` itself: a
    function defined on the engines, looked up there when the run starts."""
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        raise UsageError(f"{magic} takes a function name, got {name!r}; e.g. {magic} train")
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


def evaluate(flag: str, expr: str | None, shell: Any, local_ns: dict | None) -> Any:
    """``expr`` evaluated in the notebook (``None`` when not given); quotes around it, as a
    shell user types them, are dropped."""
    if expr is None:
        return None
    expr = _unquote(expr)
    try:
        return eval(expr, shell.user_ns, local_ns or {})
    except Exception as exc:
        raise UsageError(f"{flag} {expr!r} could not be evaluated in the notebook: "
                         f"{type(exc).__name__}: {exc}") from None


def _unquote(expr: str) -> str:
    """``"dict(lr=0.1)"`` as a shell user types it: the expression inside one pair of quotes."""
    if len(expr) >= 2 and expr[0] == expr[-1] and expr[0] in "'\"":
        try:
            words = shlex.split(expr)
        except ValueError:
            return expr
        if len(words) == 1:
            return words[0]
    return expr


def datasets(text: str | None) -> dict[str, str] | None:
    """``--datasets train=train_ds,val=val_ds`` → ``{"train": "train_ds", "val": "val_ds"}``:
    names of variables on the engines, checked by the Python API as ``datasets=``."""
    if text is None:
        return None
    example = f"e.g. --datasets {dataset_names.EXAMPLE_TEXT}"
    pairs: dict[str, str] = {}
    for item in text.split(","):
        name, eq, var = (part.strip() for part in item.partition("="))
        if not eq or not name or not var:
            raise UsageError(f"--datasets takes NAME=VAR pairs separated by commas, got {item!r}; "
                             f"{example}")
        if name in pairs:
            raise UsageError(f"--datasets names {name!r} twice; give each dataset one name")
        pairs[name] = var
    return pairs


def storing(shell: Any, name: str | None) -> Callable[[Any], None]:
    """What ``-o VAR`` does with a result: set VAR in the notebook (nothing without ``-o``)."""
    if name is not None and not name.isidentifier():
        raise UsageError(f"-o takes a Python name, got {name!r}; e.g. -o result")

    def store(result: Any) -> None:
        if name:
            shell.user_ns[name] = result

    return store


@contextlib.contextmanager
def api_call(*also: type[Exception], first_line: bool = False) -> Iterator[None]:
    """Call the Python API as a magic: its messages name the flags (``--trials``, not
    ``trials=``), and a wrong value or state (or one of ``also``) is a ``UsageError`` with its
    message (``first_line``: only its first line; a start that fails lists its hosts below)."""
    caught: tuple[type[Exception], ...] = (ValueError, FileExistsError, ClusterStateError, *also)
    try:
        with spelling.as_flags():
            yield
    except caught as exc:
        said = str(exc) or type(exc).__name__
        raise UsageError(said.splitlines()[0] if first_line else said) from None


def given(args: argparse.Namespace, *magic_only: str) -> dict[str, Any]:
    """The flags given on the line as the API's keywords (a flag's destination is its keyword):
    those left out take the API's own defaults."""
    return {k: v for k, v in vars(args).items() if v is not None and k not in magic_only}
