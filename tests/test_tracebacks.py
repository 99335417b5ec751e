"""Remote tracebacks cut to the user's frames (millisecond tests on recorded text)."""

from __future__ import annotations

from jaxnb._core.tracebacks import user_frames

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
    shown, hidden = user_frames(TRAIN)
    assert hidden == 4
    assert "do_apply" not in shown and "_contract" not in shown and "<string>" not in shown
    assert "----> 3     return config['a'] / 0" in shown and "mylib/model.py:7" in shown
    assert shown.startswith("-----") and shown.endswith("ZeroDivisionError: division by zero")


def test_a_traceback_of_jaxnb_frames_only_is_kept_whole():
    text = TRAIN.split("Cell In[3]")[0] + "ZeroDivisionError: x"
    assert user_frames(text) == (text, 0)
