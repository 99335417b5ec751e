#!/usr/bin/env python
"""``jaxnb.get_dataset_shard``: what the input pipeline costs. Every number from the same run.

1. steps/s of the GPT-2 page's model (``tests/gpt2_port.py``, tiny sizes) on 2 processes
   under ``JaxCluster.train``, fed by ``get_dataset_shard`` (Grain, ``prefetch_batches=2``) in
   each of the three formats vs fed from batches already in memory: ``iter_batches`` of a dict
   of columns (the token windows as two arrays), ``iter_batches`` of the page's Grain
   ``MapDataset`` of per-record dicts, and ``iter_jax_batches`` (global arrays, of the columns).
   The two feeds alternate in rounds of ``--steps`` steps inside one run (which goes first
   alternates too); each ratio is the median of the per-round ratios (target >= 0.95), with the
   ratio of the total times beside it. Short rounds, many of them: a 2-core machine's speed
   drifts by several per cent within seconds, and alternating often cancels the drift.
2. ``iter_batches`` rows/s of one process's share (process 0 of 2) of a 2-D ``np.memmap``
   vs a plain NumPy loop slicing the same memmap (in this process, no cluster).
3. bytes of the saved position per process (one dataset's iterator; one positions-log line).

    python -m bench.datasets [--steps 50] [--rounds 21]

Writes ``bench/results/datasets.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import tempfile
import time

from bench._results import Results

PORT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "gpt2_port.py"


def feed_comparison(config: dict) -> None:
    """Engine side: the page's model and step, fed alternately from memory and from the shard."""
    import jax
    import optax
    from flax import nnx
    from jax.experimental import mesh_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxnb

    cfg = TrainingConfig(**config["model"])  # noqa: F821 (defined on the engines by PORT)
    feed_format = config["format"]
    mesh = Mesh(mesh_utils.create_device_mesh((jax.process_count(), 1)), ("data", "model"))
    data_sharding = NamedSharding(mesh, P("data", None))
    jax.set_mesh(mesh)
    try:
        model = create_model(rngs=nnx.Rngs(params=0, dropout=1), config=cfg)  # noqa: F821
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
        metrics = nnx.metrics.Average("loss")
        local = cfg.global_batch_size // jax.process_count()
        shape = (cfg.global_batch_size, cfg.seqlen)
        shard = jaxnb.get_dataset_shard("records" if feed_format == "records" else "columns")
        in_memory = list(shard.iter_batches(batch_size=local, drop_last=True))  # read once

        def run(batches, steps):
            loss = None
            start = time.perf_counter()
            for _ in range(steps):
                b = next(batches)
                if isinstance(b["x"], jax.Array):  # iter_jax_batches: global arrays already
                    x, y = b["x"], b["y"]
                else:
                    x = jax.make_array_from_process_local_data(data_sharding, b["x"], shape)
                    y = jax.make_array_from_process_local_data(data_sharding, b["y"], shape)
                loss = train_step(model, optimizer, metrics, (x, y))  # noqa: F821
            jax.block_until_ready(loss)
            return config["steps"] / (time.perf_counter() - start)

        def from_memory():
            while True:
                yield from in_memory

        def from_shard():
            while True:
                if feed_format == "jax":
                    yield from shard.iter_jax_batches(cfg.global_batch_size, sharding=data_sharding,
                                                      prefetch_batches=2)
                else:
                    yield from shard.iter_batches(batch_size=local, drop_last=True,
                                                  prefetch_batches=2)

        memory_it, shard_it = from_memory(), from_shard()
        run(memory_it, 5), run(shard_it, 5)  # compile and warm up
        rounds = []
        for i in range(config["rounds"]):  # which feed goes first alternates
            feeds = [("memory", memory_it), ("shard", shard_it)][:: 1 if i % 2 else -1]
            rounds.append({name: run(it, config["steps"]) for name, it in feeds})
        position = json.dumps(shard.current.position())
        jaxnb.report({"rounds": rounds, "position_bytes": len(position.encode())})
    finally:
        jax.set_mesh(None)


#: The formats of section 1: name -> what the shard is and how it is read.
FORMATS = {"columns": "iter_batches of a dict of columns",
           "records": "iter_batches of a Grain MapDataset of per-record dicts",
           "jax": "iter_jax_batches (global arrays) of the columns"}


def gpt2_feed(steps: int, rounds: int, folder: str, formats: list[str]) -> dict:
    """Section 1 for every format, on one cluster; the figures by format."""
    from jaxnb import JaxCluster

    found = {}
    with JaxCluster(n=2) as cluster:
        cluster.run(PORT.read_text())
        cluster.run(f"write_token_files({folder!r}) if jax.process_index() == 0 else None\n"
                    "from jax.experimental import multihost_utils\n"
                    "multihost_utils.sync_global_devices('tokens')\n"
                    f"train_ds = make_bin_xy_dataset({folder + '/train.bin'!r}, seqlen=64, "
                    "num_sequences=4096, seed=2357)\n"
                    "train_columns = {k: np.stack([train_ds[i][k] for i in range(len(train_ds))])"
                    " for k in ('x', 'y')}\n")
        for feed_format in formats:
            config = {"steps": steps, "rounds": rounds, "format": feed_format,
                      "model": {"seqlen": 64, "embed_dim": 64, "num_heads": 4,
                                "global_batch_size": 16}}
            name = f"feed_{feed_format}"
            result = cluster.train(feed_comparison, config, name=name, storage=folder,
                                   datasets={"records": "train_ds", "columns": "train_columns"})
            logs = sorted(pathlib.Path(folder, name, "datasets").glob("*.jsonl"))
            line = max((len(x) for f in logs for x in f.read_text().splitlines()), default=0)
            report = result.history[-1]
            ratios = [r["shard"] / r["memory"] for r in report["rounds"]]
            found[feed_format] = {
                "memory_steps_per_s": statistics.median(r["memory"] for r in report["rounds"]),
                "shard_steps_per_s": statistics.median(r["shard"] for r in report["rounds"]),
                "ratio": statistics.median(ratios), "ratios": ratios,
                "ratio_of_totals": sum(1 / r["memory"] for r in report["rounds"])
                / sum(1 / r["shard"] for r in report["rounds"]),
                "position_bytes": report["position_bytes"], "log_line_bytes": line}
    return found


def rows_per_second(folder: str, rows: int = 200_000, width: int = 64, batch: int = 256) -> dict:
    """One process's share (0 of 2) through iter_batches vs plain slicing, same memmap."""
    import numpy as np

    from jaxnb._engine.datasets.shard import DatasetShard
    from jaxnb._engine.datasets.source import source_of

    path = os.path.join(folder, "rows.npy")
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32, shape=(rows, width))
    mm[:] = np.arange(rows * width, dtype=np.int32).reshape(rows, width)
    mm.flush()
    mm = np.load(path, mmap_mode="r")
    out = {}
    for _ in range(2):  # the second pass is measured (page cache warm for both)
        shard = DatasetShard(source_of("rows", mm), 0, 2)
        start, n = time.perf_counter(), 0
        for b in shard.iter_batches(batch_size=batch, prefetch_batches=2):
            n += len(b["data"])
        out["iter_batches"] = n / (time.perf_counter() - start)
        start, n = time.perf_counter(), 0
        half = rows // 2
        for i in range(0, half, batch):
            n += len(np.array(mm[i:i + batch]))  # a copy of a contiguous half: the cheapest read
        out["numpy_slicing"] = n / (time.perf_counter() - start)
    out["ratio"] = out["iter_batches"] / out["numpy_slicing"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="steps per feed in each round")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help=f"the feeds of section 1, comma-separated (default: {','.join(FORMATS)})")
    args = parser.parse_args()
    unknown = sorted(set(args.formats.split(",")) - set(FORMATS))
    if unknown:
        parser.error(f"--formats: unknown {', '.join(unknown)}; pick from {', '.join(FORMATS)}")
    results = Results("datasets")
    print(f"load average at the start: {results.load_at_start}")
    with tempfile.TemporaryDirectory(prefix="jaxnb-bench-data-") as folder:
        rows = rows_per_second(folder)
        print(f"iter_batches: {rows['iter_batches']:,.0f} rows/s per process; NumPy slicing of the "
              f"same memmap: {rows['numpy_slicing']:,.0f} rows/s; ratio {rows['ratio']:.2f}")
        feeds = gpt2_feed(args.steps, args.rounds, folder, args.formats.split(","))
    for feed_format, feed in feeds.items():
        print(f"GPT-2 loop, 2 processes, {FORMATS[feed_format]}: {feed['shard_steps_per_s']:.1f} "
              f"steps/s, from memory {feed['memory_steps_per_s']:.1f} steps/s; ratio "
              f"{feed['ratio']:.3f} (median of {len(feed['ratios'])} rounds, "
              f"{min(feed['ratios']):.2f}–{max(feed['ratios']):.2f}; ratio of the total times "
              f"{feed['ratio_of_totals']:.3f}; target >= 0.95)")
    feed = next(iter(feeds.values()))
    print(f"saved position: {feed['position_bytes']} bytes per dataset iterator; "
          f"{feed['log_line_bytes']} bytes per positions-log line (per process, per report)")
    results.add(rows=rows, feeds=feeds)
    results.write()


if __name__ == "__main__":
    main()
