"""A real 2-process cluster on a JAX whose private parts moved (issue 41's "Done when"): a copy
of the installed JAX, first on the engines' path, whose ``_cache_write`` has JAX 0.11's five
parameters (host callbacks go elsewhere) and whose test-event hook is renamed. With default
options the cluster starts, a jitted cell runs, every process writes and reads the persistent
cache, and ``%jax_cluster status`` says in one line which feature is off and why.
"""

from __future__ import annotations

import html
import os
import pathlib

import jax
import pytest
from support.factories import Clusters

from jaxnb._engine.jax_internals import JIT_MISSES
from jaxnb._widgets.devices import devices_html, features_off

pytestmark = pytest.mark.engines

JAX_0_10_DEF = ("executable: xc.LoadedExecutable,\n                 host_callbacks: Sequence[Any]) -> None:")
JAX_0_11_DEF = "executable: xc.LoadedExecutable) -> None:\n  host_callbacks = ()"
JAX_0_10_CALL = "cache_key, compile_time, module_name, backend, executable, host_callbacks\n  )"
JAX_0_11_CALL = "cache_key, compile_time, module_name, backend, executable\n  )"

STEP = """\
import jax, jax.numpy as jnp
def heavy(x):
    for i in range(24):
        x = jnp.tanh(x @ x.T @ x) * (i + 1) + jnp.sin(x)
    return x
step = jax.jit(heavy)
total = float(step(jnp.ones((32, 32))).sum())
"""


def moved_copy(root: pathlib.Path) -> pathlib.Path:
    """The installed ``jax`` package linked file by file under ``root``, but its compiler.py
    (JAX 0.11's ``_cache_write``) and util.py (``test_event_listener`` renamed)."""
    source = pathlib.Path(jax.__file__).parent
    for path in source.rglob("*"):
        if "__pycache__" in path.parts or path.is_dir():
            continue
        target = root / "jax" / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(path)
    compiler = root / "jax" / "_src" / "compiler.py"
    text = (source / "_src" / "compiler.py").read_text()
    if tuple(int(v) for v in jax.__version__.split(".")[:2]) >= (0, 11):  # the GPU machine's JAX
        pytest.skip("the installed JAX already has 0.11's writer; the suite runs on it as it is")
    assert JAX_0_10_DEF in text and JAX_0_10_CALL in text, "the installed JAX's writer changed"
    compiler.unlink()
    compiler.write_text(text.replace(JAX_0_10_DEF, JAX_0_11_DEF).replace(JAX_0_10_CALL, JAX_0_11_CALL))
    util = root / "jax" / "_src" / "util.py"
    text = (source / "_src" / "util.py").read_text()
    util.unlink()
    util.write_text(text.replace("test_event_listener", "event_listener"))
    return root


@pytest.mark.timeout(300)
def test_default_options_work_on_a_jax_whose_writer_and_hook_moved(tmp_path):
    root = moved_copy(tmp_path / "moved")
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    with Clusters() as make:
        cluster = make(2, env={"PYTHONPATH": path}, compile_cache=str(tmp_path / "xla"))
        cluster.run(STEP + f"""
import inspect, jax._src.compiler as c, jax._src.util as u
assert jax.__file__.startswith({str(root)!r}), jax.__file__
assert not hasattr(u, "test_event_listener")
assert getattr(c._cache_write, "jaxnb_every_process", False)  # jaxnb's writer took 0.11's shape
""")
        first = [p.compile_cache for p in cluster.status()]
        assert all(c["writes"] >= 1 and c["entries"] >= 1 for c in first), first  # p1 writes too
        cluster.run("jax.clear_caches()\nagain = float(step(jnp.ones((32, 32))).sum())\n"
                    "assert again == total")
        processes = cluster.status()
        assert all(p.compile_cache["hits"] >= 1 for p in processes), processes  # read back
        [line] = features_off(processes)
        assert line.startswith(f"{JIT_MISSES}: off (JAX's test-event hook is gone") and "\n" not in line
        assert "step_fn" in line and html.escape(line) in devices_html(processes)
