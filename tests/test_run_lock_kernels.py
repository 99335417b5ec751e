"""One live run per run folder, in real kernels: a second kernel starting the same run is refused
in one line naming the first; once the first kernel is killed (SIGKILL) its cluster (named
``default`` or ``default-N``) trains on and the run is still refused, naming that cluster; once it
is stopped, the run resumes there."""

from __future__ import annotations

import socket

import pytest
from support.clusters import wait_until
from support.factories import started_kernel, stop_orphaned

SLOW = """\
def slow(config):
    import time
    import jaxnb
    checkpoint = jaxnb.get_checkpoint()
    for step in range(checkpoint.step + 1 if checkpoint else 1, config["steps"] + 1):
        jaxnb.report({"step": step}, checkpoint={"step": step} if step == 1 else None)
        if jaxnb.should_stop():
            return
        time.sleep(0.2)


def plain():
    import jaxnb
    next(iter(jaxnb.get_dataset_shard("d").iter_batches(batch_size=2)))
    jaxnb.report({"step": 1})
"""

#: Starts kernels and engines: not in `bash dev test fast`.
pytestmark = pytest.mark.engines


def test_a_live_run_is_refused_in_another_kernel_and_on_its_orphaned_cluster_then_resumes(tmp_path):
    with started_kernel("-n 1 --spares 0", SLOW) as second:
        with started_kernel("-n 1 --spares 0", SLOW) as first:
            first.ok(f"%jax_train slow --config dict(steps=10**6) --storage {tmp_path} --name shared "
                     "--background -o live")
            wait_until(lambda: (tmp_path / "shared" / "checkpoints" / "1").is_dir(), 60,
                       "the first kernel's run saves step 1")
            for flags in ("", " --resume"):
                out = second.run(f"%jax_train slow --config dict(steps=3) --storage {tmp_path} "
                                 f"--name shared{flags}")
                said = out.stderr.strip()  # IPython shows a UsageError as its one line
                assert said.startswith("UsageError: ") and out.stdout == "", out.shown
                said = said.removeprefix("UsageError: ")
                assert said.startswith(f"run 'shared' in {tmp_path} is live in another kernel (pid "
                                       f"{first.pid} on {socket.gethostname()}, since "), said
                assert said.endswith("); wait for it to end or stop it there, or pass --name NEW "
                                     "for a new run") and "\n" not in said, said
            orphaned = first.value("__import__('jaxnb').current_cluster().options.name")
            first.kill()  # default or default-N outlives it, and its engines still train the run
            out = second.run(f"%jax_train slow --config dict(steps=3) --storage {tmp_path} "
                             "--name shared --resume")
            said = out.stderr.strip().removeprefix("UsageError: ")
            assert said == (f"run 'shared' in {tmp_path} is live on cluster {orphaned!r}, which no "
                            f"kernel holds (the kernel that started it is gone); `%jax_cluster "
                            f"attach {orphaned}` then `%jax_train --attach --name shared` follows "
                            f"or stops it; or pass --name NEW for a new run"), out.shown
            stop_orphaned(orphaned)
        out = second.ok(f"%jax_train slow --config dict(steps=3) --storage {tmp_path} "
                        "--name shared --resume -o again")
        assert second.value("[h['step'] for h in again.history]") == [2, 3], out.shown
        # a name reused without a checkpoint: one line says what happens to its folder
        second.ok("%%jax_cluster\nimport numpy as np\nrows = np.arange(8)")
        second.ok(f"%jax_train plain --storage {tmp_path} --name once --datasets d=rows")
        assert (tmp_path / "once" / "datasets").is_dir()  # its positions log
        out = second.ok(f"%jax_train plain --storage {tmp_path} --name once --datasets d=rows")
        assert (f"jaxnb: run 'once' in {tmp_path} has no checkpoint: it starts over in the same "
                "folder (the earlier run's files there are replaced)\n") in out.stdout, out.stdout
