"""What the magics' flags accept: each reader turns a flag's text into the value the Python API
takes, or raises a one-line ``UsageError`` that says what to pass.

Ranges and choices are checked once, by the Python API (``ClusterOptions``, ``TuneOptions``,
``JaxCluster.train`` …), whose messages name the flag when a magic calls it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError

from jaxnb._core.host_entries import HostError, parse_hosts


def whole(flag: str, least: int = 0, example: int = 2) -> Callable[[str], int]:
    """A whole number (``least`` only words the message: the API checks the range)."""
    what = "a positive whole number" if least else "a whole number >= 0"

    def parse(text: str) -> int:
        if not text.isdigit():
            raise UsageError(f"{flag} takes {what}, got {text!r}; e.g. {flag} {example}")
        return int(text)

    return parse


def failures(flag: str) -> Callable[[str], int]:
    """A whole number, or -1 for no limit (``--max-failures -1``, as Ray's ``max_failures=-1``)."""
    whole_number = whole(flag)

    def parse(text: str) -> int:
        if text == "-1":
            return -1
        try:
            return whole_number(text)
        except UsageError:
            raise UsageError(f"{flag} takes a whole number >= 0, or -1 for no limit, got {text!r}; "
                             f"e.g. {flag} 2") from None

    return parse


def seconds(flag: str) -> Callable[[str], float]:
    """A number of seconds."""

    def parse(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise UsageError(f"{flag} takes seconds, got {text!r}; e.g. {flag} 30") from None

    return parse


def hosts(flag: str) -> Callable[[str], list[str]]:
    """``--hosts a,b:2`` → ``["a", "b:2"]``; ``--hosts ,`` names no host: say so."""

    def parse(text: str) -> list[str]:
        try:
            parse_hosts(text)
        except HostError as exc:
            raise UsageError(str(exc)) from None
        return [h.strip() for h in text.split(",") if h.strip()]

    return parse


def unquoted(text: str) -> str:
    """``"p x; w"`` → ``p x; w``: a flag's text without the one pair of quotes IPython keeps."""
    text = text.strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def patterns(text: str | None) -> list[str]:
    """``--workdir-exclude '*.ckpt,data'`` → ``["*.ckpt", "data"]`` (IPython keeps the quotes)."""
    return [p.strip() for p in unquoted(text or "").split(",") if p.strip()]


def variable(flag: str) -> Callable[[str], tuple[str, str]]:
    """``--env NAME=VALUE`` → ``("NAME", "VALUE")``; ``--env NAME`` takes this kernel's value.
    Messages name the variable, never its value."""
    from jaxnb._core.options import VARIABLE_NAME

    def parse(text: str) -> tuple[str, str]:
        name, has_value, value = unquoted(text).partition("=")
        if not VARIABLE_NAME.match(name):  # without '=' the text may be a value: not echoed
            what = f"{name[:40]!r} is" if has_value else "what it was given is"
            raise UsageError(f"{flag} takes NAME=VALUE or NAME, and {what} not a variable name (letters, "
                             f"digits and '_', not starting with a digit); e.g. {flag} NCCL_DEBUG=WARN")
        if not has_value:
            if name not in os.environ:
                raise UsageError(f"{flag} {name}: {name} is not set in this kernel; set it, or pass "
                                 f"{flag} {name}=VALUE")
            value = os.environ[name]
        return name, value

    return parse


#: ``jaxnb._core.options.Flag.text`` -> the reader of such a flag's text, given the flag.
FLAG_TEXT: dict[str, Callable[[str], Callable[[str], Any]]] = {
    "text": lambda flag: str,
    "positive": lambda flag: whole(flag, least=1),
    "count": lambda flag: whole(flag, least=0, example=0),
    "seconds": seconds,
    "hosts": hosts,
    "patterns": lambda flag: patterns,
    "env": variable,
}


def names(line: str, magic: str) -> list[str]:
    """``%jax_pull a b``: the Python names a magic takes, and no flag."""
    found = shlex.split(line)
    flags = [n for n in found if n.startswith("-")]
    if flags:
        raise UsageError(f"{magic} takes no flags (got {' '.join(flags)}); e.g. {magic} x")
    if not found:
        raise UsageError(f"{magic} takes NAME [NAME ...]; e.g. {magic} x")
    for name in found:
        if not name.isidentifier():
            raise UsageError(f"{magic}: {name!r} is not a Python name")
    return found
