"""The debugger's pure parts (milliseconds, no engines): answers of several processes merged as a
cell's output, values described without their data, frames shown as tracebacks show them,
pdb's commands on a traceback and on a live frame, the notebook's command lines."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxnb._core.merged_text import merge
from jaxnb._core.tracebacks import is_hidden
from jaxnb._engine.layout.value import array_text, describe_value

# ---- answers merged like a cell's output ---------------------------------------------------


def test_identical_answers_are_shown_once():
    assert merge({0: "(8, 4)\n", 1: "(8, 4)\n"}) == "(8, 4)\n"


def test_differing_answers_are_labelled_and_common_lines_kept_once():
    text = merge({0: "> here\n0\n", 1: "> here\n1\n"})
    assert text == "> here\n[p0] 0\n[p1] 1\n"


def test_one_answer_is_shown_as_it_is():
    assert merge({1: "x = 3\n"}) == "x = 3\n"
    assert merge({}) == ""


# ---- frames that are not the user's ------------------------------------------------------


def test_frames_of_jaxnb_ipyparallel_and_ipython_are_hidden():
    assert is_hidden("File /x/site-packages/jaxnb/_engine/run/reporting.py:200, in execute")
    assert is_hidden("File /x/site-packages/ipyparallel/engine/kernel.py:180, in do_apply")
    assert not is_hidden("Cell In[3], line 4, in train")
    assert not is_hidden("File /x/site-packages/jax/_src/numpy/lax_numpy.py:10, in reshape")


# ---- values described from their metadata ------------------------------------------------


def test_a_jax_array_is_described_without_its_data():
    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    x = jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, P("data")))
    assert describe_value(x) == {"type": "Array", "shape": [8, 4], "dtype": "float32",
                                 "sharding": "P('data',)", "bytes": 128}
    assert array_text(x) == "Array(shape=(8, 4), dtype=float32, sharding=P('data',))"
    y = jnp.ones(3, jnp.int32)
    assert describe_value(y)["sharding"] == f"{y.devices().pop().platform}:0"


def test_numpy_scalars_trees_and_others_are_described():
    assert describe_value(np.zeros((2, 3), np.int8)) == {
        "type": "ndarray", "shape": [2, 3], "dtype": "int8", "sharding": "host (NumPy)", "bytes": 6}
    params = {"w": jnp.zeros((4, 4)), "b": jnp.zeros(4)}
    row = describe_value(params)
    assert row["type"] == "dict (2 leaves)" and row["dtype"] == "float32" and row["bytes"] == 80
    assert describe_value(3)["type"] == "int" and describe_value(3)["shape"] is None
    assert describe_value(len) == {"type": "builtin_function_or_method", "shape": None,
                                   "dtype": None, "sharding": None, "bytes": None}


# ---- pdb on a failure's frames, one command at a time ------------------------------------


def _inner(scale):
    x = jnp.zeros((8, 4))
    y = 3 * scale
    raise ValueError(f"boom {x.shape} {y}")


def _outer():
    params = {"w": jnp.ones((2, 2)), "step": 7}
    _inner(params["step"])


def _console():
    from jaxnb._engine.debug import frames
    from jaxnb._engine.debug.console import Console

    try:
        _outer()
    except ValueError as exc:
        tb = exc.__traceback__
    return Console(frames.of_traceback(tb), tb)


def test_the_console_starts_at_the_frame_that_raised_and_prints_values():
    console = _console()
    here = console.here().splitlines()
    assert here[0].startswith("> File ") and here[0].endswith(", in _inner"), here
    assert here[1] == '-> raise ValueError(f"boom {x.shape} {y}")'
    assert console.answer("p y") == "21\n"
    assert console.answer("y + 1") == "22\n"
    assert console.answer("p x") == "Array(shape=(8, 4), dtype=float32, sharding=cpu:0)\n"
    assert console.answer("a") == "scale = 7\n"


def test_up_down_and_where_walk_the_users_frames():
    console = _console()
    assert console.answer("up").splitlines()[0].endswith(", in _outer")
    shown = console.answer("pp params")
    assert "'w': Array(shape=(2, 2), dtype=float32, sharding=cpu:0)" in shown and "'step': 7" in shown
    assert console.answer("down").splitlines()[0].endswith(", in _inner")
    where = console.answer("w").splitlines()
    marks = [line[:2] for line in where if not line.startswith("->")]
    assert marks[-1] == "> " and set(marks[:-1]) == {"  "}, where


def test_stepping_and_unknown_names_answer_one_line():
    console = _console()
    for line in ("n", "s", "b 3", "until"):
        answer = console.answer(line)
        assert answer.count("\n") == 1 and "does not step" in answer, answer
    assert console.answer("nope") == "*** NameError: name 'nope' is not defined\n"
    assert console.answer("l").count("->") == 1
    assert console.answer("") == ""


def test_the_console_on_a_live_frame():
    import sys

    from jaxnb._engine.debug import frames
    from jaxnb._engine.debug.console import Console

    marker = "here"  # noqa: F841 - read by the console
    console = Console(frames.of_frame(sys._getframe()))
    assert console.answer("p marker") == "'here'\n"
    assert "in test_the_console_on_a_live_frame" in console.here()


# ---- the notebook's side: command lines, where they go, the comparisons -----------------


def test_commands_split_at_semicolons_outside_strings_and_brackets():
    from jaxnb._debug.prompt import split_commands

    assert split_commands("p x; up;; p y\nw") == ["p x", "up", "p y", "w"]
    assert split_commands("p 'a;b'; p f(1, [2; 3])") == ["p 'a;b'", "p f(1, [2; 3])"]
    assert split_commands("all: p x.shape; p1: p y") == ["all: p x.shape", "p1: p y"]
    assert split_commands('p "unterminated; w') == ['p "unterminated', "w"]


def test_a_command_goes_to_its_processes_and_answers_merge_like_a_cell(capsys):
    from jaxnb._debug.prompt import Console

    asked = []

    def ask(processes, line):
        asked.append((processes, line))
        return {p: f"{line} on {p}\n" if "x" in line else "same\n" for p in processes}

    console = Console(ask, [0, 1], [0, 1])
    assert console.run(["p y", "p1: p x", "all: p x", "h", "p5: p y", "c", "p never"], False) == "c"
    assert asked == [([0, 1], "p y"), ([1], "p x"), ([0, 1], "p x")]
    out = capsys.readouterr().out
    assert "(jaxnb p0,p1) p y\nsame\n(jaxnb p0,p1) p1: p x\np x on 1\n" in out
    assert "(jaxnb p0,p1) all: p x\n[p0] p x on 0\n[p1] p x on 1\n" in out
    assert "p1: COMMAND, all: COMMAND" in out  # help
    assert "jaxnb: [p5] is not in this session; it holds [p0], [p1] (e.g. p0: p x)\n" in out
    assert Console(ask, [1], [1]).run(["q"], False) == "q"
    assert Console(ask, [1], [1]).run([], False) == ""


def test_no_input_prompt_under_pytest():
    from jaxnb._debug.prompt import stdin_available

    assert not stdin_available()


def _row(pieces, kind="Array", shape=(2,)):
    return {"type": kind, "shape": list(shape), "dtype": "float32", "pieces": pieces}


def test_agreement_from_fingerprints():
    from jaxnb._debug.compare import agreement

    assert agreement({0: _row({"": [1]}), 1: _row({"": [1]})}, [0, 1]) == ("yes", [])
    assert agreement({0: _row({"": [1]}), 1: _row({"": [2]}), 2: _row({"": [2]})}, [0, 1, 2]) == (
        "no: [p1], [p2] differ", [1, 2])
    assert agreement({0: _row({"": [1]})}, [0, 1]) == ("no: not defined on [p1]", [1])
    assert agreement({0: _row({"": [1]}), 1: _row({"": [1]}, shape=(3,))}, [0, 1])[1] == [1]
    sharded = agreement({0: _row({"@[0:1]": [1]}), 1: _row({"@[1:2]": [2]})}, [0, 1])
    assert sharded[0].startswith("— (sharded")
    assert agreement({0: _row({"": None}, "function"), 1: _row({"": None}, "function")}, [0, 1]) == ("—", [])


def test_a_difference_row_says_which_processes_and_why():
    from jaxnb._debug.compare import difference_row

    def piece(fp, shape=(2,), value=None, number=None):
        found = {"path": "['w']", "block": None, "fp": fp, "shape": list(shape), "dtype": "<f4",
                 "value": value}
        if number is not None:
            found["number"] = number
        return found

    assert difference_row("k", {0: piece([1]), 1: piece([1])}, [0, 1]) is None
    row = difference_row("k", {0: piece([1]), 1: piece([2])}, [0, 1])
    assert row["differing"] == [1] and row.pop("measure") is True
    numbers = {0: piece([1], value="3", number=3), 1: piece([2], value="5", number=5)}
    row = difference_row("k", numbers, [0, 1])
    assert row["largest"] == 2 and row["note"] == "p0: 3, p1: 5"
    row = difference_row("k", {0: piece([1]), 1: piece([2], shape=(3,))}, [0, 1])
    assert row["note"] == "shapes differ: p0 (2,) <f4, p1 (3,) <f4" and "measure" not in row
    row = difference_row("k", {0: piece([1])}, [0, 1])
    assert row["differing"] == [1] and row["note"] == "not in the pytree there"


def test_the_magic_reads_its_flags_without_the_quotes_ipython_keeps():
    from IPython.core.magic_arguments import parse_argstring

    from jaxnb.magics import jax_debug, kit

    args = parse_argstring(jax_debug.jax_debug, '--process 1 -c "p x; w"')
    assert kit.given(args) == {"process": 1, "commands": "p x; w"}
    assert kit.given(parse_argstring(jax_debug.jax_debug, "")) == {}
