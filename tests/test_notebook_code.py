"""Notebook code as both sides name it: cells by their file's hash, functions by their code
objects; and the count words of the messages built from them (milliseconds)."""

from __future__ import annotations

from ipykernel.compiler import get_file_name
from ipyparallel.error import RemoteError

from jaxnb._core import notebook_cells
from jaxnb._core.errors import remote_error
from jaxnb._core.notebook_cells import CELL_FILE, as_compiled, cell_name, remember_cell, remembered
from jaxnb._core.sent_functions import code_key, functions_reached
from jaxnb._failures.stacks import format_stack


def test_a_cell_is_named_as_ipykernel_names_its_file():
    code = "x = 1\nprint(x)\n"
    match = CELL_FILE.search(get_file_name(code))
    assert match is not None and match["name"] == cell_name(code)
    assert CELL_FILE.search("<ipython-input-3-abc>") is not None
    assert CELL_FILE.search("/home/me/model.py") is None


def test_remembered_cells_are_compiled_and_the_oldest_are_forgotten():
    first = "%time y = 2\ny\n"
    remember_cell(first)
    assert remembered(cell_name(first)) == as_compiled(first)
    assert "get_ipython()" in as_compiled(first)  # line numbers refer to IPython's text
    for i in range(notebook_cells.REMEMBERED_CELLS):
        remember_cell(f"z = {i}\n")
    assert remembered(cell_name(first)) is None
    assert remembered(cell_name("z = 0\n")) == "z = 0\n"


def test_invalid_python_is_kept_as_written():
    assert as_compiled("def broken(:\n") == "def broken(:\n"


def _helper() -> int:
    return 1


def _caller() -> int:
    return _helper() + _helper()


def _outer():  # type: ignore[no-untyped-def]
    def inner() -> int:
        return _caller()

    def uses_inner() -> int:
        return inner()

    return uses_inner


def test_the_functions_a_sent_function_reaches_are_walked_once_each():
    reached = list(functions_reached(_outer()))
    names = [f.__name__ for f in reached]
    assert names[0] == "uses_inner"
    assert sorted(names) == ["_caller", "_helper", "inner", "uses_inner"]  # closure, then globals
    assert len(list(functions_reached(_outer(), limit=2))) == 2
    assert list(functions_reached(len)) == []  # no Python code: nothing to walk


def test_a_code_object_is_keyed_by_qualified_name_and_first_line():
    inner = _outer().__closure__[0].cell_contents
    assert code_key(inner.__code__) == f"_outer.<locals>.inner:{inner.__code__.co_firstlineno}"
    assert code_key(_helper.__code__) == f"_helper:{_helper.__code__.co_firstlineno}"


CELL = "import jax\nprint(float(total(1.0)))\n"


def _dump(library_frames: int) -> str:
    site = "/usr/lib/python3/site-packages"
    frames = [f'  File "{site}/jax/_src/dispatch.py", line 10 in wait',
              f'  File "{site}/jax/_src/api.py", line 20 in call']
    frames += [f'  File "{site}/numpy/core/f{i}.py", line {i + 1} in f{i}' for i in range(library_frames)]
    frames += [f'  File "/tmp/ipykernel_7/{cell_name(CELL)}.py", line 2 in <module>',
               f'  File "{site}/IPython/core/interactiveshell.py", line 3577 in run_code',
               '  File "<frozen runpy>", line 88 in _run_module_as_main']
    return "Current thread 0x00007f00 (most recent call first):\n" + "\n".join(frames) + "\n"


def test_a_stack_names_the_cell_line_and_folds_library_frames():
    lines = format_stack(_dump(3), CELL).splitlines()
    assert [line.strip() for line in lines] == [
        "jax/_src/dispatch.py:10 in wait",
        "jax/_src/api.py:20 in call",
        "... 3 more frames in numpy",
        "cell line 2: print(float(total(1.0)))",
    ]
    assert "... 1 more frame in numpy" in format_stack(_dump(1), CELL)
    assert "line 2 of an earlier cell" in format_stack(_dump(0), "other = 1\n")


def test_a_remote_error_counts_the_frames_it_left_out():
    jaxnb_frame = "File /x/jaxnb/_engine/run/reporting.py:161, in execute()\n--> 161     run.fn()\n"
    users = "Cell In[3], line 3, in bad(config)\n----> 3     return 1 / 0\n"
    end = "ZeroDivisionError: division by zero"

    def error(frames: int) -> RemoteError:
        text = (jaxnb_frame + "\n") * frames + users + "\n" + end
        return RemoteError("ZeroDivisionError", "division by zero", text)

    assert "(1 frame of jaxnb not shown;" in str(remote_error({0: error(1)}))
    assert "(2 frames of jaxnb not shown;" in str(remote_error({0: error(2)}))
