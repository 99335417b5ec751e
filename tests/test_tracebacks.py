"""Remote tracebacks cut to the user's frames (millisecond tests on recorded text)."""

from __future__ import annotations

from jaxnb._core.tracebacks import fold

#: A %jax_train error as an engine formatted it (recorded, colours removed).
TRAIN = """\
---------------------------------------------------------------------------
ZeroDivisionError                         Traceback (most recent call last)
File /x/site-packages/ipyparallel/engine/kernel.py:157, in IPythonParallelKernel.do_apply(self)
    156 try:
--> 157     exec(code, shell.user_global_ns, shell.user_ns)

File <string>:1
----> 1 'Could not get source, probably due dynamically evaluated source code.'

File /x/jaxnb/_core/contract.py:98, in EngineCall.__call__(self, *args, **kwargs)
---> 98     return getattr(importlib.import_module(module), name)(*args, **kwargs)

File /x/jaxnb/_engine/run/reporting.py:161, in execute()
--> 161     run.fn(*run.args)

Cell In[3], line 3, in bad(config)
      1 def bad(config):
      2     x = 1
----> 3     return config['a'] / 0

File /x/mylib/model.py:7, in step()
----> 7     raise ValueError

ZeroDivisionError: division by zero"""


def test_only_the_users_frames_are_kept():
    folded = fold(TRAIN)
    shown = folded.text
    assert folded.hidden == {"jaxnb": 2, "ipyparallel": 2}
    assert folded.note().startswith("(4 frames of jaxnb and ipyparallel not shown; every frame: ")
    assert "do_apply" not in shown and "_contract" not in shown and "<string>" not in shown
    assert "----> 3     return config['a'] / 0" in shown and "mylib/model.py:7" in shown
    assert shown.startswith("-----") and shown.endswith("ZeroDivisionError: division by zero")


def test_a_traceback_of_jaxnb_frames_only_is_kept_whole():
    text = TRAIN.split("Cell In[3]")[0] + "ZeroDivisionError: x"
    assert fold(text).text == text and fold(text).count == 0 and fold(text).note() == ""


#: An out-of-memory error as an engine formatted it (recorded, shortened): JAX's frames, and
#: the frames JAX hid itself (IPython's "skipping hidden" line).
OOM = """\
---------------------------------------------------------------------------
JaxRuntimeError                           Traceback (most recent call last)
Cell In[2], line 2
      1 import jax.numpy as jnp
----> 2 z = jnp.zeros((1 << 42,), jnp.float32)

File /v/lib/python3.11/site-packages/jax/_src/numpy/array_creation.py:95, in zeros(shape, dtype)
---> 95 return lax.full(shape, 0, dtype, sharding=sharding)

File /v/lib/python3.11/site-packages/jax/_src/lax/lax.py:3625, in full(shape, fill_value, dtype)
-> 3625   return broadcast(fill_value, shape)

File /v/lib/python3.11/site-packages/jax/_src/dispatch.py:88, in apply_primitive(prim, *args)
---> 88   outs = fun(*args)

    [... skipping hidden 5 frame]

File /v/lib/python3.11/site-packages/jax/_src/interpreters/pxla.py:395, in ExecuteReplicated.__call__
--> 395   results = self.xla_executable.execute_sharded(input_bufs)

File /home/me/jax/model.py:3, in mine()
----> 3     helper()

JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 17592186044416 bytes."""


def test_jax_frames_and_those_jax_hid_are_folded_with_the_count():
    folded = fold(OOM)
    assert folded.hidden == {"JAX": 4 + 5}
    assert "site-packages/jax" not in folded.text and "skipping hidden" not in folded.text
    assert "----> 2 z = jnp.zeros((1 << 42,), jnp.float32)\n\nFile /home/me/jax/model.py:3" in folded.text
    assert folded.text.endswith("Out of memory allocating 17592186044416 bytes.")
    assert folded.note().startswith("(9 frames of JAX not shown; ")
    both = fold(OOM.replace("File /home/me/jax/model.py:3", "File /x/jaxnb/_engine/run/reporting.py:3"))
    assert both.note().startswith("(10 frames of JAX and jaxnb not shown; ")
