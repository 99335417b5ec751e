"""``jaxnb.get_dataset_shard`` and ``--datasets`` on the shared 2-process cluster, and the pure parts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from IPython.core.error import UsageError

from jaxnb import RemoteError

DATASETS_CELL = """
import grain
import jax
import numpy as np

# One file per process: on one host, two processes writing the same file race each other.
MEMMAP_PATH = MEMMAP_PATH.replace(".npy", f"-p{jax.process_index()}.npy")
N = 37  # odd: one row is left out so that both processes get 18
cols = {"x": np.arange(N * 3, dtype=np.int32).reshape(N, 3), "id": np.arange(N)}
records = [{"x": cols["x"][i], "id": cols["id"][i]} for i in range(N)]
grain_ds = grain.MapDataset.source(records)
mm = np.lib.format.open_memmap(MEMMAP_PATH, mode="w+", dtype=np.int64, shape=(N, 2))
mm[:] = np.arange(N * 2).reshape(N, 2)
mm.flush()
memmap_ds = np.load(MEMMAP_PATH, mmap_mode="r")
not_records = list(range(N))
a_generator = (i for i in range(N))
"""


@pytest.fixture(scope="module")
def engines(cluster, tmp_path_factory):
    """The shared cluster with a few datasets of every kind built on every process."""
    path = tmp_path_factory.mktemp("datasets") / "tokens.npy"
    cluster.run(f"MEMMAP_PATH = {str(path)!r}\n" + DATASETS_CELL)
    return cluster


# ---- functions that run on the engines --------------------------------------------------


def read_all(config):
    """The row ids of two epochs on every process, and each process's batch sizes."""
    import numpy as np
    from jax.experimental import multihost_utils

    import jaxnb

    shard = jaxnb.get_dataset_shard("data")
    epochs, sizes = [], []
    for _ in range(2):
        batches = list(shard.iter_batches(**config["kw"]))
        assert all(isinstance(v, np.ndarray) for b in batches for v in b.values())
        ids = [b["id"] if config["key"] == "id" else b["data"][:, 0] // 2 for b in batches]
        sizes.append([len(i) for i in ids])
        flat = np.concatenate(ids)  # as many rows on every process, or the gather fails
        epochs.append(np.asarray(multihost_utils.process_allgather(flat)).tolist())
    jaxnb.report({"epochs": epochs, "sizes": sizes})


def read_global(config):
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    import jaxnb

    seen, shardings = [], set()
    for batch in jaxnb.get_dataset_shard("data").iter_jax_batches(config["global_batch_size"]):
        ids = batch["id"]
        assert isinstance(ids, jax.Array) and not ids.is_fully_addressable
        shardings.add(str(ids.sharding.spec))
        seen.append(np.asarray(multihost_utils.process_allgather(ids, tiled=True)).tolist())
        assert batch["x"].shape == (config["global_batch_size"], 3)
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("data", "model"))
    again = jaxnb.get_dataset_shard("data").iter_jax_batches(
        config["global_batch_size"], sharding=NamedSharding(mesh, P("data", None)),
        prefetch_batches=3)
    x = next(again)["x"]  # the GPT-2 page's layout: rows over "data", columns whole
    assert x.sharding.spec == P("data", None) and x.shape == (config["global_batch_size"], 3)
    assert np.asarray(x.addressable_shards[0].data)[:, 0].tolist() == [
        3 * (2 * i + jax.process_index()) for i in range(4)]
    jaxnb.report({"seen": seen, "specs": sorted(shardings), "position": again.position()})


def uses(config):
    import jaxnb

    next(iter(jaxnb.get_dataset_shard(config["name"]).iter_batches(**config.get("kw", {}))))


# ---- tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("var, key", [("cols", "id"), ("records", "id"), ("grain_ds", "id"),
                                      ("memmap_ds", "data")])
def test_every_kind_gives_disjoint_equal_shares(engines, tmp_path, var, key):
    result = engines.train(read_all, {"kw": {"batch_size": 4}, "key": key}, storage=tmp_path,
                           datasets={"data": var})
    [report] = result.history
    assert report["sizes"] == [[4, 4, 4, 4, 2]] * 2  # 18 rows per process: 4 batches and 2 rows
    for epoch in report["epochs"]:
        assert epoch[0] == list(range(0, 36, 2)) and epoch[1] == list(range(1, 36, 2))
        # disjoint, and row 36 left out: 37 = 2 * 18 + 1, every process gets as many rows


def test_shuffle_changes_order_each_epoch_but_not_the_rows(engines, tmp_path):
    kw = {"batch_size": 6, "drop_last": True, "local_shuffle_buffer_size": 100,
          "local_shuffle_seed": 5}
    result = engines.train(read_all, {"kw": kw, "key": "id"}, storage=tmp_path,
                           datasets={"data": "cols"})
    [report] = result.history
    (first, other), (second, _) = report["epochs"]
    assert first != second and sorted(first) == sorted(second) == list(range(0, 36, 2))
    assert sorted(other) == list(range(1, 36, 2)) and report["sizes"] == [[6, 6, 6]] * 2


def test_global_batches_are_split_over_every_device(engines, tmp_path):
    result = engines.train(read_global, {"global_batch_size": 8}, storage=tmp_path,
                           datasets={"data": "cols"})
    [report] = result.history
    assert report["specs"] == ["P('batch',)"]
    # 18 rows per process, 4 per batch: 4 batches (the last 2 rows dropped); in each batch
    # process 0's rows, then process 1's
    assert report["seen"] == [[8 * k + 2 * i + p for p in (0, 1) for i in range(4)]
                              for k in range(4)]
    position = report["position"]  # what was taken, not what the threads read ahead
    assert (position["epoch"], position["taken"], position["next"]) == (1, 1, 8)  # row 8 of 36


@pytest.mark.parametrize("datasets, config, message", [
    ({"data": "nowhere"}, {"name": "data"},
     "dataset 'data': 'nowhere' is not defined on the engines; build it in a %%jax_cluster cell"),
    ({"data": "a_generator"}, {"name": "data"},
     "dataset 'data' (a_generator) is a generator; pass a Grain MapDataset, a random-access source"),
])
def test_bad_datasets_are_refused_before_the_run_starts(engines, tmp_path, datasets, config,
                                                         message):
    with pytest.raises(ValueError) as info:
        engines.train(uses, config, storage=tmp_path, datasets=datasets)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("datasets, config, message", [
    ({"data": "cols"}, {"name": "val"},
     "get_dataset_shard('val'): no dataset named 'val' was passed to this run (passed: data); "
     "add --datasets val=VAR"),
    ({"data": "cols"}, {"name": "data", "kw": {"batch_size": 19}},
     "dataset 'data': batch_size=19 is larger than this process's share (18 of 37 rows over 2 "
     "processes); pass at most 18"),
    ({"data": "not_records"}, {"name": "data", "kw": {"batch_size": 2}},
     "dataset 'data' (not_records): its records are ints, not dicts of arrays; make each record a dict"),
])
def test_misuse_inside_the_function_is_one_line_naming_the_dataset(engines, tmp_path, datasets,
                                                                   config, message):
    with pytest.raises(RemoteError) as info:
        engines.train(uses, config, storage=tmp_path, datasets=datasets)
    assert message in str(info.value)
    assert info.value.processes == [0, 1]
    engines.group.suspect = None


def test_the_magic_names_datasets(shared_magics, engines, tmp_path):
    shared_magics.run_cell(
        "import jaxnb\n"
        "def count_batches(config=None):\n"
        "    n = sum(1 for _ in jaxnb.get_dataset_shard('train').iter_batches(batch_size=3))\n"
        "    jaxnb.report({'batches': n})\n")
    out = shared_magics.run_line_magic(
        "jax_train", f"count_batches --datasets train=cols --storage {tmp_path}")
    assert out.history == [{"batches": 6}]
    for bad, says in [("train", "NAME=VAR pairs"), ("train=cols,train=cols", "twice"),
                      ("train=1x", "not a Python variable name")]:
        with pytest.raises(UsageError, match=says):
            shared_magics.run_line_magic("jax_train", f"count_batches --datasets {bad}")


def test_datasets_must_be_engine_variable_names(engines, tmp_path):
    with pytest.raises(ValueError, match="pass the NAME of a variable defined on the engines"):
        engines.train(uses, {"name": "data"}, storage=tmp_path, datasets={"data": [1, 2]})


# ---- pure parts (no cluster) ------------------------------------------------------------


def test_a_process_the_saved_run_did_not_have_resumes_where_process_0_was(tmp_path):
    from jaxnb._engine.datasets.data_run import logged_positions

    folder = tmp_path / "datasets"
    folder.mkdir()
    entry = {"step": 30, "checkpoint": True, "num_processes": 2, "positions": {"train": {"next": 6}}}
    (folder / "process_0.jsonl").write_text(json.dumps(entry) + "\n")
    assert logged_positions(str(tmp_path), 0, 2, 30) == {"train": {"next": 6}}
    assert logged_positions(str(tmp_path), 0, 2, 31) == {}
    # process 3 of 4 had no file: every process is at the same place of the epoch
    assert logged_positions(str(tmp_path), 3, 4, 30) == {"train": {"next": 6}}


def test_the_checkpointed_report_wins_over_others_at_its_step(tmp_path):
    from jaxnb._engine.datasets.data_run import logged_positions

    folder = tmp_path / "datasets"
    folder.mkdir()
    lines = [{"step": 10, "checkpoint": False, "num_processes": 2, "positions": {"t": "a"}},
             {"step": 10, "checkpoint": True, "num_processes": 2, "positions": {"t": "b"}},
             {"step": 10, "checkpoint": False, "num_processes": 2, "positions": {"t": "c"}}]
    (folder / "process_1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    assert logged_positions(str(tmp_path), 1, 2, 10) == {"t": "b"}
    (folder / "process_1.jsonl").write_text(json.dumps({**lines[0], "positions": {"t": "x"}}) + "\n"
                                            + json.dumps(lines[2]) + "\n")
    assert logged_positions(str(tmp_path), 1, 2, 10) == {"t": "c"}  # the last report at the step


def test_a_log_line_cut_short_by_a_crash_loses_no_other_line(tmp_path):
    """A crash in the middle of a line, then a resumed run appending: every whole line is read."""
    from jaxnb._engine.datasets.data_run import DataRun, logged_positions

    folder = tmp_path / "datasets"
    folder.mkdir()
    whole = {"step": 10, "checkpoint": True, "num_processes": 2, "positions": {"t": "a"}}
    (folder / "process_0.jsonl").write_text(json.dumps(whole) + "\n" + '{"step": 11, "che')
    resumed = DataRun({"t": ("rows", np.arange(8))}, str(tmp_path), 0, 2, resume={"t": None},
                      resume_step=10)
    next(resumed.shard("t").iter_batches(batch_size=2))
    at_11 = resumed.record(11, checkpoint=True)
    resumed.close()
    assert at_11["t"]["taken"] == 1
    assert logged_positions(str(tmp_path), 0, 2, 10) == {"t": "a"}
    assert logged_positions(str(tmp_path), 0, 2, 11) == at_11


def test_sources_of_every_kind_and_their_refusals():
    from jaxnb._engine.datasets.source import DatasetError, source_of

    idx = np.array([2, 0])
    assert source_of("d", {"a": np.arange(5), "b": np.ones((5, 2))}).read(idx)["a"].tolist() == [2, 0]
    assert source_of("d", np.arange(10).reshape(5, 2)).read(idx)["data"].tolist() == [[4, 5], [0, 1]]
    records = [{"x": np.full(2, i)} for i in range(3)]
    assert source_of("d", records).read(idx)["x"].tolist() == [[2, 2], [0, 0]]
    for bad, says in [({"a": np.arange(3), "b": np.arange(4)}, "differ in length (a: 3, b: 4)"),
                      (5, "is a int; pass a Grain MapDataset"),
                      ({}, "empty dict"),
                      (np.array(1.0), "0-d NumPy array")]:
        with pytest.raises(DatasetError, match=says.replace("(", r"\(").replace(")", r"\)")):
            source_of("d", bad)
    with pytest.raises(DatasetError, match="its records are lists, not dicts of arrays"):
        source_of("d", [[1], [2]]).read(np.array([1, 0]))


class CountedSource:
    """A random-access source with ``__getitems__`` (as PyTorch's and Hugging Face's have)."""

    def __init__(self, n):
        self.n, self.batch_reads, self.record_reads = n, 0, 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.record_reads += 1
        return {"id": np.int64(i), "x": np.full(3, i)}

    def __getitems__(self, indices):
        self.batch_reads += 1
        return [{"id": np.int64(i), "x": np.full(3, i)} for i in indices]


def test_records_are_read_a_batch_at_a_time_where_the_source_can():
    import grain

    from jaxnb._engine.datasets.source import source_of

    idx = np.array([4, 1, 3])
    counted = CountedSource(6)
    batch = source_of("d", counted).read(idx)
    assert batch["id"].tolist() == [4, 1, 3] and batch["x"][:, 0].tolist() == [4, 1, 3]
    assert (counted.batch_reads, counted.record_reads) == (1, 0)
    records = [{"id": np.int64(i), "x": np.full(3, i)} for i in range(6)]
    mapped = grain.MapDataset.source(records).map(lambda r: {**r, "x": r["x"] * 2})
    batch = source_of("d", mapped).read(idx)
    assert batch["id"].tolist() == [4, 1, 3] and batch["x"][:, 0].tolist() == [8, 2, 6]


def _shard(n_rows, process, processes, resume=None):
    from jaxnb._engine.datasets.shard import DatasetShard
    from jaxnb._engine.datasets.source import source_of

    return DatasetShard(source_of("d", {"id": np.arange(n_rows)}), process, processes, resume)


def _ids(iterator):
    return [b["id"].tolist() for b in iterator]


@pytest.mark.parametrize("n_rows", [37, 40, 41])
@pytest.mark.parametrize("processes", [2, 3, 4])
@pytest.mark.parametrize("drop_last", [True, False])
def test_every_process_gets_as_many_batches_and_no_row_twice(n_rows, processes, drop_last):
    passes = [_ids(_shard(n_rows, p, processes).iter_batches(batch_size=4, drop_last=drop_last))
              for p in range(processes)]
    assert len({len(batches) for batches in passes}) == 1
    rows = [r for batches in passes for b in batches for r in b]
    assert len(rows) == len(set(rows))
    assert set(rows) <= set(range(n_rows // processes * processes))


def test_a_saved_position_continues_the_pass_or_starts_the_next_at_its_end():
    kw = {"batch_size": 3, "local_shuffle_buffer_size": 10, "local_shuffle_seed": 7}
    straight = _shard(20, 1, 2)
    first = straight.iter_batches(**kw)
    head = [next(first)["id"].tolist() for _ in range(2)]
    saved = first.position()
    tail = _ids(first)
    next_pass = _ids(straight.iter_batches(**kw))
    assert len(head + tail) == 4 and next_pass != head + tail  # another order next epoch

    resumed = _shard(20, 1, 2, resume=saved)
    assert _ids(resumed.iter_batches(**kw)) == tail
    assert _ids(resumed.iter_batches(**kw)) == next_pass
    at_end = _shard(20, 1, 2, resume=first.position())  # saved after the pass's last batch
    assert _ids(at_end.iter_batches(**kw)) == next_pass


def test_a_saved_position_with_other_settings_is_refused_in_one_line():
    first = _shard(20, 0, 2).iter_batches(batch_size=3)
    next(first)
    for shard, kw, says in [
        (_shard(20, 0, 2, first.position()), {"batch_size": 4}, "saved in batches of batch_size=3"),
        (_shard(21, 0, 2, first.position()), {"batch_size": 3}, "saved with 20 rows and now "
                                                                 "has 21"),
        (_shard(20, 0, 2, first.position()), {"batch_size": 3, "local_shuffle_buffer_size": 5},
         "saved unshuffled")]:
        with pytest.raises(ValueError, match=says) as info:
            shard.iter_batches(**kw)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_global_batches_are_put_ahead_but_the_position_counts_what_was_taken(prefetch):
    it = _shard(40, 0, 1).iter_jax_batches(4, prefetch_batches=prefetch)
    head = [np.asarray(next(it)["id"]).tolist() for _ in range(3)]
    assert head == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert (it.position()["taken"], it.position()["next"]) == (3, 12)  # not the batches put ahead
    rest = [np.asarray(b["id"]).tolist() for b in it]
    assert rest == [list(range(k, k + 4)) for k in range(12, 40, 4)]
    assert it.position()["next"] == 40


def test_a_sharding_naming_more_axes_than_a_column_has_is_cut_to_its_axes():
    """``P("data", None)`` for a batch with a 1-D labels column: JAX 0.11 refuses a spec longer
    than the array's axes, so each column gets the spec cut to its own (trailing ``None`` only)."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxnb._engine.datasets.global_batches import fitted

    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
    rows_whole = NamedSharding(mesh, P("data", None))
    assert fitted(rows_whole, 2) is rows_whole
    assert fitted(rows_whole, 1).spec == P("data") and fitted(rows_whole, 1).mesh == mesh
    split_columns = NamedSharding(mesh, P("data", "model"))
    assert fitted(split_columns, 1) is split_columns  # it splits an axis a 1-D column lacks: JAX says so
    assert fitted(NamedSharding(mesh, P("data")), 1).spec == P("data")
