"""The GPT-2 page's loop ported as written (``tests/gpt2_port.py``) on 2 processes: a run
preempted at step 25 and resumed from its step-20 checkpoint reports exactly what a
straight run reports (losses, validation losses), data included."""

from __future__ import annotations

import pathlib

PORT = pathlib.Path(__file__).with_name("gpt2_port.py")


def test_the_gpt2_loop_resumes_exactly(cluster, tmp_path):
    data = tmp_path / "openwebtext"
    cluster.run(PORT.read_text())  # the page's code, defined on every process
    cluster.run(
        f"write_token_files({str(data)!r}) if jax.process_index() == 0 else None\n"
        "from jax.experimental import multihost_utils\n"
        "multihost_utils.sync_global_devices('token files')\n"
        f"train_ds = make_bin_xy_dataset({str(data / 'train.bin')!r}, seqlen=32, "
        "num_sequences=60, seed=2357)\n"  # 7 batches of 4 per process: 40 steps are 6 epochs
        f"val_ds = make_bin_xy_dataset({str(data / 'val.bin')!r}, seqlen=32, "
        "num_sequences=400, seed=2357)\n")
    datasets = {"train": "train_ds", "val": "val_ds"}

    def config(name, **extra):
        return {"checkpoint_root": str(tmp_path / "ckpt" / name), **extra}

    try:
        whole = cluster.train("train_loop_per_worker", config("whole"), name="whole",
                              storage=tmp_path, datasets=datasets)
        first = cluster.train("train_loop_per_worker", config("cut", preempt_after_step=25),
                              name="cut", storage=tmp_path, datasets=datasets)
        assert first.checkpoint.step == 20 and first.checkpoint.user_managed
        rest = cluster.train("train_loop_per_worker", config("cut"), name="cut",
                             storage=tmp_path, datasets=datasets, resume=True)
    finally:
        cluster.run("jax.set_mesh(None)")  # the page sets a global mesh: leave none behind
    assert whole.error is None and rest.error is None

    def losses(history, after=0):
        return [{k: v for k, v in h.items() if k != "elapsed_s"} for h in history
                if h["step"] > after]

    assert [h["step"] for h in whole.history] == [5, 10, 10, 15, 20, 20, 25, 30, 30, 35, 40, 40]
    assert losses(first.history) == losses(whole.history)[:7]
    assert losses(rest.history) == losses(whole.history, after=20)  # same batches, same losses
    assert whole.history[-1]["train_loss"] < whole.history[0]["train_loss"]
