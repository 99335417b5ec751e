"""Orbax checkpoint storage: one process in pytest, two real JAX processes in subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from support.factories import free_port

from jaxnb._core import spelling
from jaxnb._core.run_folder import Checkpoint, check_fresh_run
from jaxnb._engine.checkpoint.store import CheckpointStore

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

REPO = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, os, sys, traceback
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

port, pid, run_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid,
    initialization_timeout=60,
)
from jaxnb._engine.checkpoint.store import CheckpointStore


def main():
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices())
    sharding = NamedSharding(mesh, P("x"))
    store = CheckpointStore(run_dir, keep=3)
    for step in range(1, 6):
        rows = np.full((2, 3), 10 * step + pid, np.float32)  # this process's half
        w = jax.make_array_from_process_local_data(sharding, rows, (4, 3))
        ck = store.save(step, {"w": w, "step": step, "bias": np.arange(3.0)})
        assert ck.step == step and ck.path.endswith(str(step)), ck
    latest = store.latest()
    target = {
        "w": jax.ShapeDtypeStruct((4, 3), np.float32, sharding=sharding),
        "step": 0,
        "bias": np.zeros(3),
    }
    out = latest.restore(target)
    shards = out["w"].addressable_shards
    as_saved = latest.restore()["w"]  # same topology: the saved global layout comes back
    print(json.dumps({
        "steps": store.steps(),
        "latest": latest.step,
        "local": [np.asarray(s.data).tolist() for s in shards],
        "index": [[sl.start for sl in s.index] for s in shards],
        "sharding_ok": out["w"].sharding == sharding,
        "as_saved": [isinstance(as_saved, jax.Array), str(as_saved.sharding.spec),
                     np.asarray(as_saved.addressable_shards[0].data).tolist()],
        "step": int(out["step"]),
        "bias": np.asarray(out["bias"]).tolist(),
    }))
    store.close()


try:
    main()
except BaseException:
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)  # skip jax's exit barrier, which would wait for the other process
jax.distributed.shutdown()
"""


GATHER_WORKER = r"""
import json, os, sys
import jax

port, pid = sys.argv[1], int(sys.argv[2])
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid,
    initialization_timeout=60,
)
from jaxnb._engine.group.gather import Gatherer

g = Gatherer("test", pid, 2)
through_kv = [g({"p": pid, "text": "x" * (5 * pid)}), g([pid])]
g.client = None  # as without a coordination client: XLA's process_allgather
print(json.dumps(through_kv + [g({"p": pid, "text": "y" * (3 * pid)})]))
sys.stdout.flush()
os._exit(0)
"""


#: What process 0 says when the coordinator's port was taken between free_port() and its bind
#: (by another test worker): the pair is started again on another port.
PORT_TAKEN = "Address already in use"


def _run_two_processes(tmp_path: Path, run_dir: Path, timeout: float = 90,
                       worker: str = WORKER) -> list[dict]:
    """Run ``worker`` as JAX processes 0 and 1; fail fast (killing both) if either fails."""
    for _ in range(2):
        procs = _start_two(tmp_path, run_dir, timeout, worker)
        if procs[0].returncode == 0 or PORT_TAKEN not in (tmp_path / "p0.e").read_text():
            break
    failed = [
        f"process {i} exited {p.returncode}:\n{(tmp_path / f'p{i}.e').read_text()[-3000:]}"
        for i, p in enumerate(procs)
        if p.returncode != 0
    ]
    assert not failed, "\n".join(failed)
    return [json.loads((tmp_path / f"p{i}.o").read_text().splitlines()[-1]) for i in range(2)]


def _start_two(tmp_path: Path, run_dir: Path, timeout: float, worker: str) -> list[subprocess.Popen]:
    """Processes 0 and 1 of ``worker`` on a fresh coordinator port, waited for (or killed)."""
    script = tmp_path / "worker.py"
    script.write_text(worker)
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="1", PYTHONPATH=str(REPO))
    port, procs = free_port(), []
    with contextlib.ExitStack() as files:
        try:
            for i in range(2):
                out, err = (files.enter_context(open(tmp_path / f"p{i}.{k}", "w")) for k in "oe")
                cmd = [sys.executable, str(script), str(port), str(i), str(run_dir)]
                procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=err))
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and any(p.poll() is None for p in procs):
                if any(p.poll() not in (None, 0) for p in procs):
                    break
                time.sleep(0.1)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
    return procs


def test_two_processes_save_keep_and_restore_sharded(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    results = _run_two_processes(tmp_path, run_dir)
    for pid, r in enumerate(results):
        assert r["steps"] == [3, 4, 5] and r["latest"] == 5
        assert r["local"] == [[[50.0 + pid] * 3] * 2]  # only its own rows, from step 5
        assert r["index"] == [[2 * pid, None]]
        assert r["as_saved"] == [True, str(P("x")), r["local"][0]]
        assert r["sharding_ok"] and r["step"] == 5 and r["bias"] == [0.0, 1.0, 2.0]
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["3", "4", "5"]
    # One process with one device cannot rebuild the saved 2-process layout: NumPy instead.
    ck = check_fresh_run(str(run_dir), resume=True)
    assert ck is not None and ck.step == 5
    full = ck.restore()
    assert isinstance(full["w"], np.ndarray)
    np.testing.assert_array_equal(full["w"], [[50] * 3] * 2 + [[51] * 3] * 2)


def test_single_process_roundtrip_with_scalars(tmp_path: Path) -> None:
    tree = {"w": jnp.arange(6.0).reshape(2, 3), "n": np.arange(3), "lr": 0.5, "epoch": 7}
    with CheckpointStore(str(tmp_path), keep=2) as store:
        assert store.latest() is None and store.steps() == []
        for step in (10, 20, 30):
            ck = store.save(step, tree)
            assert os.path.isdir(ck.path) and ck.step == step
        assert store.steps() == [20, 30]
        with pytest.raises(ValueError, match="not after the latest"):
            store.save(30, tree)
        got = store.latest().restore()
    np.testing.assert_array_equal(got["w"], tree["w"])
    np.testing.assert_array_equal(got["n"], tree["n"])
    assert got["lr"] == 0.5 and got["epoch"] == 7


def test_restore_with_target_uses_target_sharding(tmp_path: Path) -> None:
    device = jax.devices()[0]
    with CheckpointStore(str(tmp_path)) as store:
        ck = store.save(1, {"w": jnp.ones((2, 2))})
    sharding = jax.sharding.SingleDeviceSharding(device)
    for target in (
        {"w": jnp.zeros((2, 2))},
        {"w": jax.ShapeDtypeStruct((2, 2), jnp.float32, sharding=sharding)},
    ):
        got = ck.restore(target)["w"]
        assert isinstance(got, jax.Array) and got.sharding == sharding
        np.testing.assert_array_equal(got, np.ones((2, 2)))


def test_check_fresh_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "mnist"
    assert check_fresh_run(str(run_dir), resume=False) is None
    assert check_fresh_run(str(run_dir), resume=True) is None
    with CheckpointStore(str(run_dir)) as store:
        store.save(1, {"x": np.zeros(2)})
        store.save(2, {"x": np.ones(2)})
    with pytest.raises(FileExistsError) as err:
        check_fresh_run(str(run_dir), resume=False)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"run 'mnist' in {tmp_path} already has checkpoints (steps 1, 2);")
    assert "resume=True" in msg and "name='NEW'" in msg  # the Python API's spelling
    with spelling.as_flags(), pytest.raises(FileExistsError) as err:  # %jax_train's
        check_fresh_run(str(run_dir), resume=False)
    assert "--resume" in str(err.value) and "--name NEW" in str(err.value)
    ck = check_fresh_run(str(run_dir), resume=True)
    assert isinstance(ck, Checkpoint) and ck.step == 2
    np.testing.assert_array_equal(ck.restore()["x"], np.ones(2))


def test_user_directory_checkpoint(tmp_path: Path) -> None:
    ocp_dir = tmp_path / "mine"
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as saver:
        saver.save(ocp_dir, {"a": np.arange(4)})
    got = Checkpoint.from_directory(str(ocp_dir), step=3).restore()
    np.testing.assert_array_equal(got["a"], np.arange(4))

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "weights.bin").write_bytes(b"\0" * 8)
    ck = Checkpoint.from_directory(str(plain), step=4)
    assert ck.step == 4 and ck.path == str(plain) and ck.user_managed
    with pytest.raises(RuntimeError, match="user-managed directory") as err:
        ck.restore()
    assert "\n" not in str(err.value)


def test_gather_of_documents_of_any_size(tmp_path: Path) -> None:
    want = [[{"p": 0, "text": ""}, {"p": 1, "text": "xxxxx"}], [[0], [1]],
            [{"p": 0, "text": ""}, {"p": 1, "text": "yyy"}]]
    assert _run_two_processes(tmp_path, tmp_path, worker=GATHER_WORKER) == [want, want]


class _Plant:
    """Unpickled, it creates the file ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_checkpoint_of_the_pickled_format_is_refused_without_a_target(tmp_path: Path) -> None:
    """jaxnb-checkpoint/1 kept the structure as a pickle: it is never read (one line), while a
    target (which gives the structure) still restores the arrays and values."""
    import base64
    import pickle

    from jaxnb._engine.checkpoint.structure import StructureError

    with CheckpointStore(str(tmp_path)) as store:
        ck = store.save(1, {"w": jnp.ones(2), "n": 3})
    manifest = Path(ck.path, "jaxnb", "metadata")
    old = json.loads(manifest.read_text())
    old.pop("structure")
    old["format"] = "jaxnb-checkpoint/1"
    marker = tmp_path / "pickle-ran"
    old["treedef"] = base64.b64encode(pickle.dumps(_Plant(marker))).decode()
    manifest.write_text(json.dumps(old))
    with pytest.raises(StructureError) as err:
        ck.restore()
    assert not marker.exists()
    assert str(err.value) == (
        f"checkpoint {ck.path} keeps its structure as a pickle (an earlier jaxnb), which is never "
        "read; pass restore(target) with a pytree of the saved structure")
    got = ck.restore({"w": jnp.zeros(2), "n": 0})
    np.testing.assert_array_equal(got["w"], np.ones(2))
    assert got["n"] == 3 and not marker.exists()
