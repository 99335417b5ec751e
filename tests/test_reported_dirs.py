"""A checkpoint folder reported from a temporary folder (Ray's own examples) is copied into the
run folder before ``report()`` returns, so ``--resume`` restores it after the folder is gone."""

from __future__ import annotations

import json
import os

from jaxnb._engine.run import reported_dirs


def ray_temporary_checkpoints(config):
    """Ray Train's checkpointing example: save into a ``TemporaryDirectory``, report, let it go."""
    import json
    import os
    import tempfile

    import jaxnb as train  # was: from ray import train
    from jaxnb import Checkpoint  # was: from ray.train import Checkpoint

    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
            start = json.load(f)["done"]
    for step in range(start, start + config["steps"]):
        with tempfile.TemporaryDirectory() as folder:
            if train.get_context().get_world_rank() == 0:
                with open(os.path.join(folder, "state.json"), "w") as f:
                    json.dump({"done": step + 1, "temp": folder}, f)
            train.report({"step": step + 1, "start": start},
                         checkpoint=Checkpoint.from_directory(folder))


def test_a_checkpoint_saved_in_a_temporary_folder_resumes_after_it_is_gone(cluster, tmp_path):
    first = cluster.train(ray_temporary_checkpoints, {"steps": 3}, name="temp", storage=tmp_path)
    kept = tmp_path / "temp" / "reported" / "3"
    assert first.checkpoint.path == str(kept) and first.checkpoint.user_managed
    saved = json.loads((kept / "state.json").read_text())
    assert saved["done"] == 3 and not os.path.exists(saved["temp"])  # the original is gone
    again = cluster.train(ray_temporary_checkpoints, {"steps": 2}, name="temp", storage=tmp_path,
                          resume=True)
    assert [(h["step"], h["start"]) for h in again.history] == [(4, 3), (5, 3)]
    assert again.checkpoint.path == str(tmp_path / "temp" / "reported" / "5")


def test_a_folder_in_the_run_is_kept_in_place_and_one_outside_is_copied_whole(tmp_path):
    run = tmp_path / "run"
    inside = run / "mine" / "7"
    inside.mkdir(parents=True)
    assert reported_dirs.kept(str(run), 7, inside) == str(inside)
    outside = tmp_path / "tmp" / "ckpt"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "w.bin").write_bytes(b"\0" * 10)
    (outside / "meta.json").write_text("{}")
    (outside / "latest").symlink_to("sub")
    assert reported_dirs.kept(str(run), 8, outside) == str(run / "reported" / "8")
    copy = run / "reported" / "8"
    assert sorted(os.listdir(copy)) == ["latest", "meta.json", "sub"]
    assert (copy / "sub" / "w.bin").read_bytes() == b"\0" * 10
    assert os.readlink(copy / "latest") == "sub"
    # a folder only another process sees: that process's copy is the checkpoint
    assert reported_dirs.kept(str(run), 9, tmp_path / "gone") == str(run / "reported" / "9")
    assert not os.path.exists(run / "reported" / "9")
