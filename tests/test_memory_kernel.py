"""Memory in a real Jupyter kernel: ``%jax_cluster memory`` (a widget with its static copies), and
an out-of-memory error explained: one process of two allocates more
than the machine has (XLA refuses it up front: RESOURCE_EXHAUSTED, no swapping), in a cell,
in a cell where the other process then waits in a collective, and inside ``%jax_train``; and an
engine the kernel's OOM killer kills (in a memory cgroup of its own, so only it can be hit).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import time

import pytest
from support.factories import refused_allocations, unavailable

#: Starts engines (or a kernel): not in `bash dev test fast`.
pytestmark = pytest.mark.engines

#: 4 TiB: more than any machine running the suite; XLA's CPU client refuses it at once.
TOO_MUCH = "jnp.ones((1 << 42,), jnp.uint8)"
SETUP = """%%jax_cluster
import jax, jax.numpy as jnp, numpy as np, jaxnb
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((2,), ("data",))
params = {"w": jax.device_put(np.ones((2048, 1024), np.float32), NamedSharding(mesh, P())),
          "b": jax.device_put(np.ones((2048,), np.float32), NamedSharding(mesh, P("data")))}
state, new_state = jnp.zeros((512, 512)), jnp.ones((512, 512))

def train():
    activations = jnp.ones((256, 1024))
    for step in range(1, 6):
        if step == 3 and jax.process_index() == 1:
            hidden = """ + TOO_MUCH + """
        total = jax.jit(lambda b: b.sum())(params["b"])  # a collective: p0 waits in it for p1
        jaxnb.report({"loss": float(total) / step})
"""


@pytest.fixture(scope="module")
def kernel(make_kernel):
    """A real kernel with jaxnb loaded, 2 processes of one device each, arrays on them."""
    return make_kernel("-n 2 --devices-per-process 1 --spares 0", "import jaxnb", SETUP)


def explained(text: str) -> None:
    """The explanation as the notebook shows it, cause first."""
    first = next(line for line in text.splitlines() if "ran out of memory" in line)
    assert "[p1] ran out of memory on cpu:" in first and "XLA asked for 4.4 TB" in first, first
    assert "; limit host memory" in first and "GB free" in first, first
    assert "Largest live arrays on cpu:" in text and "of [p1]" in text
    table = text[text.index("Largest live arrays"):text.index("What to try:")]
    assert "params['w']" in table and "P() replicated on 2 devices" in table and "8.4 MB" in table
    tips = text[text.index("What to try:"):]
    assert "shard `params['w']`: replicated, 2 devices each hold the same 8.4 MB" in tips
    assert any(f"donate buffers: {a} and {b}" in tips
               for a, b in (("`state`", "`new_state`"), ("`new_state`", "`state`")))
    assert "rematerialise" in tips and "lower the per-process batch" in tips
    assert text.index("What to try:") < text.index("RESOURCE_EXHAUSTED: Out of memory allocating")  # below


@pytest.mark.timeout(300)
def test_jax_cluster_memory_shows_a_widget_with_html_and_text_copies(kernel):
    out = kernel.ok("%jax_cluster memory")
    (bundle,) = [d["data"] for d in out.displays]
    assert "application/vnd.jupyter.widget-view+json" in bundle
    html, text = bundle["text/html"], bundle["text/plain"]
    assert "memory per process and device" in html and "live arrays" in html and "RSS" in html
    lines = text.splitlines()
    assert lines[1].split() == ["process", "device", "in", "use", "peak", "limit", "process", "RSS", "(peak)"]
    assert lines[2].startswith("[p0]     cpu:0 (cpu)")
    assert "live arrays" in lines[2] and "host memory" in lines[2]
    assert lines[3].startswith("[p1]")
    rows = {line.split()[0]: line for line in lines[6:]}
    assert "P() replicated on 2 devices  8.4 MB" in rows["params['w']"]
    assert rows["params['w']"].endswith("2 devices: [p0], [p1]")
    assert "P('data',)" in rows["params['b']"] and "4.1 kB" in rows["params['b']"]  # half on each
    bad = kernel.run("%jax_cluster memory -n 3")
    assert "UsageError: `%jax_cluster memory` takes no flags (got -n)" in bad.shown


@refused_allocations
@pytest.mark.timeout(300)
def test_an_allocation_too_large_on_one_process_is_explained_in_one_line_then_the_arrays(kernel):
    started = time.monotonic()
    out = kernel.run(f"%%jax_cluster\nif jax.process_index() == 1:\n    x = {TOO_MUCH}\n")
    seconds = time.monotonic() - started
    assert out.error is not None and out.error["ename"] == "RemoteError", out.shown
    explained(out.traceback)
    assert out.error["evalue"].startswith("[p1] ran out of memory on cpu:")
    print(f"a 4 TiB allocation on one process failed and was explained in {seconds:.1f} s")
    assert kernel.ok("%%jax_cluster\nprint('still usable', float(params['w'].sum()))").stdout


@refused_allocations
@pytest.mark.timeout(300)
def test_the_other_process_waiting_in_a_collective_is_released(kernel):
    out = kernel.run("%%jax_cluster\n"
                     f"if jax.process_index() == 1:\n    x = {TOO_MUCH}\n"
                     "total = jax.jit(lambda b: b.sum())(params['b'])\nprint(float(total))\n")
    assert out.error is not None and out.error["ename"] == "ProcessFailure", out.shown
    explained(out.traceback)
    assert "Then: processes diverged: [p1] raised JaxRuntimeError: RESOURCE_EXHAUSTED" in out.traceback
    assert "still running: [p0]" in out.traceback and "jaxnb interrupted [p0]" in out.traceback
    kernel.ok(SETUP)  # the group was repaired: arrays of the old group are made again
    after = kernel.ok("%%jax_cluster\nprint('after', float(jax.jit(lambda b: b.sum())(params['b'])))")
    assert "after 2048.0" in after.shown


@refused_allocations
@pytest.mark.timeout(300)
def test_inside_a_train_function_the_arrays_it_holds_are_named(kernel, tmp_path):
    out = kernel.run(f"%jax_train train --storage {tmp_path} -o run")
    assert out.error is not None, out.shown
    explained(out.traceback)
    assert "activations (in train)" in out.traceback  # a local of the train function
    assert "status      failed — [p1] ran out of memory on cpu:" in out.shown  # the dashboard's copy
    assert kernel.value("run.error.summary").startswith("[p1] ran out of memory")
    assert kernel.value("'RESOURCE_EXHAUSTED' in run.error.xla_text")
    assert kernel.value("len(run.history)") == 2


MEMORY_CGROUP = pathlib.Path("/sys/fs/cgroup/memory")


def _cgroup_missing() -> str | None:
    if os.geteuid() != 0:
        return "not root (a memory cgroup is made for the engine)"
    if not (MEMORY_CGROUP / "cgroup.procs").exists():
        return f"no cgroup v1 memory controller at {MEMORY_CGROUP}"
    return None


@contextlib.contextmanager
def memory_cgroup(limit: int):
    """A memory cgroup of ``limit`` bytes: what runs in it, and only that, the OOM killer kills."""
    folder = MEMORY_CGROUP / f"jaxnb-test-{os.getpid()}"
    folder.mkdir()
    try:
        (folder / "memory.limit_in_bytes").write_text(str(limit))
        yield folder
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                folder.rmdir()
                break
            time.sleep(0.1)


@pytest.mark.timeout(300)
def test_an_engine_the_oom_killer_kills_is_named_so(kernel):
    """Run last: the group is broken after, and restarted."""
    unavailable("the OOM killer test", _cgroup_missing())
    pid = kernel.value("jaxnb.current_cluster().processes[1].pid")
    with memory_cgroup(700 * 2**20) as cgroup:
        (cgroup / "cgroup.procs").write_text(str(pid))
        out = kernel.run("%%jax_cluster\nif jax.process_index() == 1:\n"
                         "    filled = np.ones(2**30 // 8 * 2)  # 2 GiB, touched: over the cgroup's limit\n")
    assert out.error is not None and out.error["ename"] == "ProcessFailure", out.shown
    said = out.error["evalue"]
    assert f"[p1] (pid {pid} on " in said, said
    assert "was killed by the kernel's OOM killer (host memory)" in said, said
    kernel.ok("%jax_cluster restart")
