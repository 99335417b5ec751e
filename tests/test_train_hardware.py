"""MFU, goodput and memory of ``%jax_train`` runs, in a real Jupyter kernel on 2 CPU processes:
FLOPs per step counted from the traced step (the jitted step found, or ``step_fn=`` given)
against the count written out by hand, and the FLOP/s the dashboard shows; the wall time split
into parts that add up to it; each process's memory peak."""

from __future__ import annotations

import datetime
import re

import pytest

#: Starts engines (or a kernel): not in `bash dev test fast`.
pytestmark = pytest.mark.engines

SETUP = """%%jax_cluster
import time, jax, jax.numpy as jnp, numpy as np, jaxnb

@jax.jit
def step(w, x):
    return w - 1e-3 * (x.T @ jnp.tanh(x @ w))

W, X = jnp.ones((256, 256)) * 0.01, jnp.ones((128, 256))

def train(config):
    w, x = W, X
    compiled = step.trace(w, x) if config.get("give") else None
    for i in range(config["steps"]):
        w = step(w, x)
        time.sleep(0.01)
        jaxnb.report({"loss": float(w[0, 0]), "batch_size": 128, "tokens": 128 * 256},
                     step_fn=compiled)

class SlowRows:
    \"\"\"A random-access source that takes 10 ms a row: time the loop waits for its data.\"\"\"
    def __len__(self):
        return 400
    def __getitem__(self, i):
        time.sleep(0.01)
        return {"x": np.full((4,), i, np.float32)}

slow_rows = SlowRows()

def fed(config):
    held = jnp.ones((4 * 2**20,))  # 16 MiB live for the whole run: the memory peak sees it
    w, x = W, X
    batches = jaxnb.get_dataset_shard("rows").iter_batches(batch_size=10, prefetch_batches=0)
    for i, batch in enumerate(batches):
        w = step(w, x + batch["x"].sum())
        jaxnb.report({"loss": float(w[0, 0])}, checkpoint={"w": w} if i % 5 == 4 else None)
    del held
"""


@pytest.fixture(scope="module")
def kernel(make_kernel):
    return make_kernel("-n 2 --devices-per-process 1 --spares 0", "import jaxnb", SETUP)


def summary(out) -> dict[str, str]:
    """The dashboard's final text (its ``text/plain`` copy), as name -> value."""
    texts = [d["data"].get("text/plain", "") for d in out.displays]
    text = next(t for t in texts[::-1] if "FLOP/s" in t)
    return {line[:12].strip(): line[12:] for line in text.splitlines() if line[:12].strip()}


def kernel_seconds(out) -> float:
    """How long the kernel was busy with the cell, by its own clock (the messages' dates): the
    time the front end measures adds how long it took to read them, on a loaded machine."""
    dates = [as_date(m["header"]["date"]) for m in out.messages
             if m["header"]["msg_type"] == "status" or m["header"]["msg_type"] == "execute_input"]
    return (max(dates) - min(dates)).total_seconds()


def as_date(date: datetime.datetime | str) -> datetime.datetime:
    """A message header's date (jupyter_client gives a datetime, or the ISO text it came as)."""
    return date if isinstance(date, datetime.datetime) else datetime.datetime.fromisoformat(
        date.replace("Z", "+00:00"))


def number(text: str) -> float:
    value, unit = re.match(r"([\d.]+) (\w?)FLOP/s", text).groups()
    return float(value) * {"": 1, "M": 1e6, "G": 1e9, "T": 1e12}[unit]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("give", [False, True], ids=["found", "step_fn"])
def test_flops_per_step_are_the_steps_matrix_products_and_the_flops_shown_agree(kernel, tmp_path, give):
    out = kernel.ok(f"%jax_train train --config dict(steps=60, give={give}) --storage {tmp_path} -o run")
    cost = 2 * (2 * 128 * 256 * 256)  # x @ w and x.T @ tanh(...): two 128x256x256 products
    assert kernel.value("run.flops_per_step") == pytest.approx(cost, rel=0.01)
    items = summary(out)
    flops_per_step = float(re.search(r"\(([\d.e+]+) FLOPs per step", items["FLOP/s"])[1])
    assert flops_per_step == pytest.approx(cost, rel=1e-3)
    assert "matrix FLOPs of the traced " + ("step_fn" if give else "step") in items["FLOP/s"]
    rate = float(re.match(r"p0: ([\d.]+) steps/s", items["steps/s"])[1])
    assert number(items["FLOP/s"]) == pytest.approx(cost * rate, rel=0.01)  # 3 digits shown
    assert "MFU" not in items  # a CPU: FLOP/s only
    assert float(items["examples/s"].replace(",", "")) == pytest.approx(128 * rate, rel=0.01)


@pytest.mark.timeout(300)
def test_the_wall_time_splits_into_parts_that_add_up_to_it(kernel, tmp_path):
    out = kernel.ok(f"%jax_train fed --datasets rows=slow_rows --storage {tmp_path} -o run")
    goodput = kernel.value("run.goodput")
    parts, wall = goodput["parts"], goodput["wall"]
    assert sum(parts.values()) == pytest.approx(wall, rel=1e-9)
    assert wall == pytest.approx(kernel_seconds(out), rel=0.05)  # the cell's time, said by the kernel
    assert parts["data"] >= 200 * 0.01  # each process read its 200 rows at 10 ms each
    assert parts["checkpoint"] > 0 and parts["compile"] > 0 and parts["steps"] > 0
    assert parts["recovery"] == 0 and parts["idle"] >= 0
    for part in ("data", "checkpoint", "compile", "steps"):
        assert goodput["slowest"][part]["process"] in (0, 1)
        assert goodput["slowest"][part]["seconds"] >= parts[part] - 1e-9
    items = summary(out)
    assert items["time"].startswith("steps ") and " data wait " in items["time"]
    memory = kernel.value("{str(p): m for p, m in run.memory.items()}")
    assert set(memory) == {"0", "1"}
    for reading in memory.values():
        assert reading["source"] == "live arrays" and reading["peak"] >= 16 * 2**20
        assert reading["peak_rss"] >= reading["rss"] > 0
    assert "memory (peak)" in out.shown and "arrays (peak " in out.shown
