"""What the magics' flags and names accept: each parser raises a one-line ``UsageError`` (or
argparse's one-line error) that says what to pass."""

from __future__ import annotations

import shlex

from IPython.core.error import UsageError

#: ``%jax_cluster start``'s flags (argparse destinations); no other subcommand takes any.
START_FLAGS = {
    "n": "-n",
    "devices_per_process": "--devices-per-process",
    "platform": "--platform",
    "engines": "--engines",
    "hosts": "--hosts",
    "hostfile": "--hostfile",
    "python": "--python",
    "address": "--address",
    "workdir": "--workdir",
    "workdir_exclude": "--workdir-exclude",
    "partition": "--partition",
    "time_limit": "--time-limit",
    "account": "--account",
    "sbatch": "--sbatch",
    "no_init": "--no-init",
    "timeout": "--timeout",
    "init_timeout": "--init-timeout",
    "spares": "--spares",
}


def positive_int(flag: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"{flag} takes a whole number, got {text!r}; e.g. {flag} 2") from None
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}; e.g. {flag} 2")
        return value

    return parse


def count(flag: str):
    def parse(text: str) -> int:
        if not text.isdigit():
            raise UsageError(f"{flag} takes a whole number >= 0, got {text!r}; e.g. {flag} 0")
        return int(text)

    return parse


def seconds(flag: str, zero: bool = False):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"{flag} takes seconds, got {text!r}; e.g. {flag} 30") from None
        if zero and value == 0:
            return 0.0
        if value <= 0:
            raise UsageError(f"{flag} must be a positive number of seconds, got {text}")
        return value

    return parse


def process_index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--process takes a process index, got {text!r}; e.g. --process 0") from None
    if value < 0:
        raise UsageError(f"--process takes a process index ≥ 0, got {value}; e.g. --process 0")
    return value


def patterns(text: str | None) -> list[str]:
    """``--workdir-exclude '*.ckpt,data'`` → ``["*.ckpt", "data"]`` (IPython keeps the quotes)."""
    unquoted = (text or "").strip()
    if len(unquoted) > 1 and unquoted[0] == unquoted[-1] and unquoted[0] in "'\"":
        unquoted = unquoted[1:-1]
    return [p.strip() for p in unquoted.split(",") if p.strip()]


def names(line: str, magic: str, exactly_one: bool = False) -> list[str]:
    names = shlex.split(line)
    flags = [n for n in names if n.startswith("-")]
    if flags:
        raise UsageError(f"{magic} takes no flags (got {' '.join(flags)}); e.g. {magic} x")
    if not names or (exactly_one and len(names) != 1):
        what = "one NAME" if exactly_one else "NAME [NAME ...]"
        raise UsageError(f"{magic} takes {what}; e.g. {magic} x")
    for name in names:
        if not name.isidentifier():
            raise UsageError(f"{magic}: {name!r} is not a Python name")
    return names
