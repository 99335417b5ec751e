"""What the hardware is doing, in JupyterLab in headless Chromium: ``%jax_cluster memory`` and a
training dashboard with memory per process, FLOP/s and where the wall time went.

``JAXNB_SCREENSHOTS=1`` writes the README's pictures ``docs/images/memory.png`` and
``docs/images/dashboard_hardware.png``. Skipped (one line) where Chromium is missing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import lab_server
from support.factories import unavailable

unavailable("browser tests", lab_server.missing())

from support.browser_page import (  # noqa: E402 - only importable where playwright is installed
    Watched,
    cell,
    chromium,
    dashboard,
    open_notebook,
    plot_state,
    run_and_wait,
    run_cell,
    screenshot,
    wait_done,
    wait_for,
)

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

SETUP = "%load_ext jaxnb\n%jax_cluster start -n 2 --devices-per-process 1 --spares 0"
FUNCS = """%%jax_cluster
import time, jax, jax.numpy as jnp, numpy as np, jaxnb
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((2,), ("data",))
params = {"w1": jax.device_put(np.ones((1024, 1024), np.float32), NamedSharding(mesh, P())),
          "w2": jax.device_put(np.ones((1024, 512), np.float32), NamedSharding(mesh, P("data")))}

X = jax.random.normal(jax.random.key(0), (256, 512))
Y = X @ (jax.random.normal(jax.random.key(1), (512, 512)) / 20)

@jax.jit
def step(w):  # least squares: the loss falls
    err = X @ w - Y
    return w - 2e-4 * (X.T @ err), jnp.mean(err ** 2)

def train(config):
    w = jnp.zeros((512, 512))
    for i in range(config["steps"]):
        w, loss = step(w)
        time.sleep(0.02)
        jaxnb.report({"loss": loss, "batch_size": 256}, checkpoint={"w": w} if i % 100 == 99 else None)"""
MEMORY = "%jax_cluster memory"
TRAIN = "%jax_train train --config dict(steps=400) --steps 400 --name hardware"
CELLS = [SETUP, FUNCS, MEMORY, TRAIN]
C = {name: i for i, name in enumerate(["setup", "funcs", "memory", "train"])}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lab_server.LabServer]:
    yield from lab_server.serving(tmp_path_factory.mktemp("lab"))


@pytest.fixture(scope="module")
def lab(server: lab_server.LabServer) -> Iterator[Watched]:
    with chromium(device_scale_factor=2) as context:
        yield open_notebook(context, server.page_url(server.write_notebook("hardware.ipynb", CELLS)))
    server.shutdown_kernels()


@pytest.mark.timeout(600)
def test_memory_view_and_dashboard_with_memory_flops_and_time(lab: Watched) -> None:
    page = lab.page
    run_and_wait(page, C["setup"], timeout_s=180)
    run_and_wait(page, C["funcs"])
    view = run_and_wait(page, C["memory"]).locator(".jaxnb-memory").first
    view.wait_for(timeout=60_000)
    text = view.inner_text()
    assert "memory per process and device" in text and "live arrays" in text and "host memory" in text
    assert "params['w1']" in text and "P() replicated on 2 devices" in text and "P('data',)" in text
    screenshot(view, "memory")

    run_cell(page, C["train"])
    dash = dashboard(cell(page, C["train"]).locator(".jp-OutputArea"))
    dash.wait_for(timeout=60_000)
    live = wait_for(lambda: "memory (peak)" in (s := plot_state(dash))["text"] and "FLOP/s" in s["text"]
                    and "time" in s["text"] and s, what="memory, FLOP/s and the time split, live")
    assert any("arrays (peak" in " ".join(row) for row in live["rows"]), live["rows"]
    wait_for(lambda: plot_state(dash)["visible"] and "steps/s" in plot_state(dash)["text"], what="rates")
    out = wait_done(page, C["train"], timeout_s=300)
    final = plot_state(dashboard(out))
    assert "finished" in final["text"] and "examples/s" in final["text"]
    assert "steps " in final["text"] and "data wait" in final["text"] and "FLOP/s per device" in final["text"]
    screenshot(dashboard(out), "dashboard_hardware")
    lab.check_clean()
