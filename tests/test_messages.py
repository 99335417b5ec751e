"""jaxnb's words: every magic, subcommand, flag and method a message names exists; the
message helpers and error grouping behave (pure, milliseconds)."""

from __future__ import annotations

import ast
import functools
import pathlib
import re

import ipyparallel as ipp
import pytest
from support.sources import parsed

import jaxnb
from jaxnb._core import messages
from jaxnb._core.errors import RemoteError, remote_error
from jaxnb.magics import SUBCOMMANDS, jax_cluster, jax_debug, jax_profile, jax_train, jax_tune

PACKAGE = pathlib.Path(jaxnb.__file__).parent
MAGIC = re.compile(r"%%?(jax_\w+)")
SUBCOMMAND = re.compile(r"`%jax_cluster (\w+)")
FLAG = re.compile(r"(?<![\w-])(--[a-z]+(?:-[a-z]+)*)(?![\w-])")
METHOD = re.compile(r"`[\w.()]*?\.?(\w+)\(\)`")
MAGICS = {"jax_cluster", "jax_train", "jax_mesh", "jax_pull", "jax_push", "jax_tune", "jax_profile",
          "jax_debug", "jax_who", "jax_diff"}
#: Flags of other programs that jaxnb runs (in shell commands, not in messages).
OTHER_PROGRAMS_FLAGS = {
    "--ppid",  # ps(1), on a remote host
    "--gres", "--nodelist", "--exclude", "--export", "--job-name", "--ntasks",  # sbatch/srun (Slurm)
    "--logdir", "--port",  # xprof / tensorboard, in the commands %%jax_profile prints
    "--json",  # `python -m jaxnb list --json`, the terminal command `list --via` runs on the host
}


@functools.cache
def _texts() -> list[tuple[str, str]]:
    """Every string literal of the package but docstrings (f-string parts included)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        tree = parsed(path)
        docstrings = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    docstrings.add(id(body[0].value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found.append((path.name, node.value))
    return found


def _flags() -> set[str]:
    parsers = [jax_cluster.jax_cluster.parser, jax_cluster.jax_cluster_cell.parser,
               jax_train.jax_train.parser, jax_tune.jax_tune.parser, jax_profile.jax_profile.parser,
               jax_debug.jax_debug.parser]
    return {option for parser in parsers for option in parser._option_string_actions}


def test_messages_name_only_magics_that_exist():
    named = {(f, m) for f, text in _texts() for m in MAGIC.findall(text)}
    assert named, "expected messages that name magics"
    assert {(f, m) for f, m in named if m not in MAGICS} == set()


def test_messages_name_only_subcommands_that_exist():
    named = {(f, s) for f, text in _texts() for s in SUBCOMMAND.findall(text)}
    assert {"restart", "reset", "start", "stop"} <= {s for _, s in named}
    assert {(f, s) for f, s in named if s not in SUBCOMMANDS} == set()


def test_messages_name_only_flags_that_exist():
    flags = _flags()
    assert {"--no-init", "--steps", "--config", "--process", "--all"} <= flags
    # Messages are sentences; a lone "--flag" string is a command-line argument of another tool.
    named = {(f, flag) for f, text in _texts() if " " in text for flag in FLAG.findall(text)}
    assert {(f, flag) for f, flag in named if flag not in flags | OTHER_PROGRAMS_FLAGS} == set()


def test_messages_name_only_methods_that_exist():
    owners = [jaxnb, jaxnb.JaxCluster, jaxnb.Result, jaxnb.Checkpoint]
    named = {(f, m) for f, text in _texts() for m in METHOD.findall(text)}
    assert {"wait", "stop", "start"} <= {m for _, m in named}
    missing = {(f, m) for f, m in named if not any(hasattr(o, m) for o in owners)}
    assert missing == set()


def test_hints_end_in_what_to_do():
    for hint in (messages.RESTART, messages.RESET):
        assert hint.startswith("run `%jax_cluster ")
    assert messages.NOT_STARTED.endswith("(or `jaxnb.JaxCluster().start()`)")
    assert "\n" not in messages.BUSY.format(name="x")


def test_labels_name_processes_by_jax_index_in_order():
    assert messages.label(3) == "[p3]"
    assert messages.labels([2, 0, 1]) == "[p0], [p1], [p2]"


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (ValueError("bad value\nmore"), "ValueError: bad value"),
        (ipp.error.RemoteError("JaxRuntimeError", "Gloo all-reduce failed\nx", ""),
         "JaxRuntimeError: Gloo all-reduce failed"),
        (KeyError(), "KeyError"),
    ],
)
def test_first_line_of_local_and_remote_errors(error, line):
    assert messages.first_line(error) == line


def test_first_line_is_cut_to_width():
    assert messages.first_line(ValueError("x" * 500), width=40).endswith("...")
    assert len(messages.first_line(ValueError("x" * 500), width=40)) == 40


def test_remote_errors_group_identical_tracebacks():
    def remote(value: str, cell: int) -> ipp.error.RemoteError:
        tb = f"Cell In[{cell}], line 2\n    raise ValueError\nValueError: {value}"
        return ipp.error.RemoteError("ValueError", value, tb)

    error = remote_error({1: remote("same", 3), 0: remote("same", 5), 2: remote("other", 3)})
    assert isinstance(error, RemoteError)
    assert error.processes == [0, 1, 2]
    assert str(error).startswith("ValueError: same (on processes [p0], [p1], [p2])")
    assert [tb.splitlines()[0] for tb in error.tracebacks] == ["---- [p0], [p1] ----", "---- [p2] ----"]
    rendered = error._render_traceback_()
    assert rendered[0].startswith("RemoteError: ValueError: same")  # the cause first
