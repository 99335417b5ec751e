"""The pure parts of checkpoint leaves: classification, fingerprints, the save plan (milliseconds)."""

from __future__ import annotations

import dataclasses
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxnb._engine.checkpoint import leaves as cl
from jaxnb._engine.checkpoint import plan, restore
from jaxnb._engine.checkpoint import structure as ctree


@dataclasses.dataclass(frozen=True)
class Loader:
    position: int
    seed: object


def test_plain_dataclasses_are_walked_and_rebuilt():
    tree = {"loader": Loader(3, np.arange(2)), "t": (1.0, None, [Loader(4, "x")])}
    paths, leaves, treedef = ctree.flatten(tree)
    assert paths == ["['loader'].position", "['loader'].seed", "['t'][0]", "['t'][2][0].position",
                     "['t'][2][0].seed"]
    back = ctree.unflatten(treedef, leaves)
    assert isinstance(back["loader"], Loader) and back["loader"].position == 3
    assert back["t"][1] is None and back["t"][2][0] == Loader(4, "x")


@pytest.mark.parametrize("value", [True, 7, 2**70, -0.1, float("inf"), 1 + 2j, "é", b"\0x"])
def test_python_values_round_trip_exactly(value):
    back = cl.decode_value(cl.encode_value(value))
    assert back == value and type(back) is type(value)


def test_kinds_in_one_process_and_several():
    x = jnp.arange(3.0)
    assert cl.prepare("a", x, 1).kind == cl.GLOBAL  # one process: Orbax writes it as it is
    local = cl.prepare("a", x, 2)
    assert local.kind == cl.LOCAL and local.record["layout"] == {"type": "single", "device": 0}
    np.testing.assert_array_equal(local.data, [0, 1, 2])
    key = cl.prepare("k", jax.random.key(1), 2)
    assert key.record["key_impl"] == "threefry2x32" and key.record["shape"] == [2]
    scalar = cl.prepare("s", np.float32(2), 2)
    assert scalar.kind == cl.NUMPY and scalar.record["scalar"]
    assert restore.as_saved(scalar.record, np.array([2.0], np.float32)) == np.float32(2)
    assert cl.prepare("v", 3, 2).kind == cl.VALUE
    text = cl.prepare("t", np.array(["a", "bc"]), 2)
    assert text.record["inline"]  # Orbax has no string dtype: kept in the manifest
    np.testing.assert_array_equal(restore.from_bytes(text.record, bytes(text.raw())), ["a", "bc"])


def test_local_layout_round_trip():
    x = jnp.ones((1, 2), jnp.bfloat16)
    leaf = cl.prepare("p", x, 2)
    back = restore.as_saved(leaf.record, leaf.data)
    assert back.dtype == jnp.bfloat16 and back.sharding == x.sharding
    pm = jax.pmap(lambda a: a * 2)(jnp.ones((1, 3)))
    leaf = cl.prepare("pm", pm, 2)
    back = restore.as_saved(leaf.record, leaf.data)
    assert back.sharding == pm.sharding
    np.testing.assert_array_equal(back, pm)


def _deleted():
    x = jnp.ones(2)
    x.delete()
    return x


@pytest.mark.parametrize(("leaf", "said"), [
    (lambda: 1, "is a function (<lambda>)"),
    (io.StringIO(), "is an open file (StringIO)"),
    (_deleted(), "buffer was deleted"),
    (object(), "is a builtins.object object"),
    (np.array([object()]), "NumPy array of Python objects"),
    (jax.ShapeDtypeStruct((2,), jnp.float32), "ShapeDtypeStruct"),
])
def test_refusals_name_the_path_in_one_line(leaf, said):
    with pytest.raises(cl.LeafError) as err:
        paths, leaves, _ = ctree.flatten({"opt": [leaf]})
        [cl.prepare(p, x, 2) for p, x in zip(paths, leaves, strict=True)]
    msg = str(err.value)
    assert msg.startswith("checkpoint leaf ['opt'][0] ") and said in msg and "\n" not in msg


def _summary(values):
    leaves = [cl.prepare(f"[{i}]", v, 2) for i, v in enumerate(values)]
    return plan.summary(leaves, [leaf.path for leaf in leaves], None), leaves


def test_plan_shares_identical_leaves_and_packs_the_rest():
    s0, l0 = _summary([np.arange(4.0), 5, np.float32(1)])
    s1, l1 = _summary([np.arange(4.0), 6, np.float32(1)])
    p = plan.plan([s0, s1], me=1)
    assert p.shared == [True, False, True] and p.per_process == [1]
    assert p.records_len == [0, 0] and p.width == len(cl.encode_value(6))
    for q, leaves in enumerate((l0, l1)):
        records, values = plan.unpack(p, q, plan.pack(p, q, leaves))
        assert records is None and cl.decode_value(values[1]) == 5 + q


def test_plan_keeps_a_process_own_records_when_they_differ():
    s0, _ = _summary([np.zeros(2, np.float32)])
    s1, l1 = _summary([np.zeros(3, np.float32)])  # another shape: a different record
    p = plan.plan([s0, s1], me=0)
    assert p.shared == [False] and p.records_len[0] == 0 and p.records_len[1] > 0
    records, values = plan.unpack(p, 1, plan.pack(p, 1, l1))
    assert records[0]["shape"] == [3]
    np.testing.assert_array_equal(restore.from_bytes(records[0], values[0]), np.zeros(3))


def test_fingerprint_tells_apart_values_dtypes_and_shapes():
    fp = lambda v: plan.fingerprint(cl.prepare("x", v, 2))  # noqa: E731
    base = fp(np.arange(6.0))
    assert fp(np.arange(6.0)) == base
    assert fp(np.arange(6.0)[::-1].copy()) != base
    assert fp(np.arange(6.0).reshape(2, 3)) != base
    assert fp(np.arange(6.0).astype(np.float32)) != base


def test_plan_refuses_other_processes_problems_and_other_structures():
    s0, _ = _summary([1, 2])
    s1, _ = _summary([1])
    with pytest.raises(ValueError, match=r"process 1 .* differs from process 0's"):
        plan.plan([s0, s1], me=0)
    bad = plan.summary([], [], "checkpoint leaf ['f'] is a function (f); leave it out")
    with pytest.raises(ValueError, match=r"process 1 could not save its checkpoint: checkpoint leaf"):
        plan.plan([s0, bad], me=0)
    with pytest.raises(cl.LeafError, match="is a function"):
        plan.plan([s0, bad], me=1)


def test_like_target_casts_and_places():
    record = cl.prepare("w", np.arange(3.0), 2).record
    got = restore.like(record, np.arange(3.0), jnp.zeros(3, jnp.bfloat16))
    assert isinstance(got, jax.Array) and got.dtype == jnp.bfloat16
    sds = jax.ShapeDtypeStruct((3,), jnp.float32, sharding=jax.sharding.SingleDeviceSharding(
        jax.devices()[0]))
    assert restore.like(record, np.arange(3.0), sds).sharding == sds.sharding
    assert restore.like(record, np.arange(3.0), np.zeros(3, np.int32)).dtype == np.int32
    key_record = cl.prepare("k", jax.random.key(2), 2).record
    key = restore.like(key_record, np.array([0, 2], np.uint32), jax.random.key(0))
    assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(jax.random.key(2)))


def test_equal_local_leaf_becomes_a_replicated_global_array_without_copy():
    x = jnp.arange(6.0).reshape(2, 3)
    leaf = cl.prepare("w", x, 2)
    g = cl.across_processes(leaf.array, leaf.record["layout"], 1)
    assert g.shape == x.shape and g.sharding.is_fully_replicated
    assert g.addressable_shards[0].data.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(g, x)


def test_fingerprints_in_pieces_on_threads_agree_with_one_thread(monkeypatch):
    monkeypatch.setattr(plan, "CHUNK_BYTES", 1024)  # 10 pieces per leaf below
    values = [np.arange(2560.0, dtype=np.float32), np.arange(5.0), 3, jnp.ones(2)]
    leaves = [cl.prepare(f"[{i}]", v, 2) for i, v in enumerate(values)]
    threaded = plan.fingerprints(leaves)
    assert threaded == [plan.fingerprint(leaf) for leaf in leaves]
    swapped = np.arange(2560.0, dtype=np.float32)
    swapped[[0, 2000]] = swapped[[2000, 0]]  # the same sum, other pieces
    assert plan.fingerprints([cl.prepare("[0]", swapped, 2)])[0] != threaded[0]
