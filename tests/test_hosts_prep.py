"""Before engines start on hosts: the preflight (versions, GPUs) and ``--workdir``, on the lab.

The lab's hosts get a fake ``nvidia-smi`` first on their PATH (labhost1 lists 2 GPUs,
labhost2 one) so ``--platform gpu`` counts GPUs for real over ssh; the engines then
run on CPU (``JAX_PLATFORMS=cpu``): no real GPU is used here. ``PRIVATE`` is a folder
each host sees empty (a tmpfs in its own mount namespace), so a ``--workdir`` inside
it is not on the hosts and must be copied. Skipped where the lab cannot be built.
"""

from __future__ import annotations

import os
import sys
import tempfile

import psutil
import pytest
from lab.lab import Lab, missing

from jaxnb import JaxCluster, StartError

WHY_NOT = missing()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no lab of ssh hosts: {WHY_NOT}")
FAKE_SMI = """#!/bin/sh
# A fake nvidia-smi for the lab: labhost1 has 2 GPUs, the others 1 (for counting only).
case "$(hostname)" in labhost1) n=2;; *) n=1;; esac
i=0
while [ $i -lt $n ]; do echo "GPU $i: Fake GPU (UUID: GPU-fake-$i)"; i=$((i+1)); done
"""


@pytest.fixture(scope="module")
def prep_lab():
    """Two lab hosts with the fake nvidia-smi and a private folder. Torn down even on failure."""
    tools = tempfile.mkdtemp(prefix="jaxnb-fake-smi-")
    private = tempfile.mkdtemp(prefix="jaxnb-private-")
    with open(os.path.join(tools, "nvidia-smi"), "w") as f:
        f.write(FAKE_SMI)
    os.chmod(os.path.join(tools, "nvidia-smi"), 0o755)
    os.chmod(tools, 0o755)
    built = None
    previous = os.environ.get("JAXNB_SSH_CONFIG")
    try:
        built = Lab(2, path=(tools,), private=(private,)).up()
        built.private_dir = private  # type: ignore[attr-defined]
        os.environ["JAXNB_SSH_CONFIG"] = built.ssh_config
        yield built
    finally:
        if previous is None:
            os.environ.pop("JAXNB_SSH_CONFIG", None)
        else:
            os.environ["JAXNB_SSH_CONFIG"] = previous
        if built is not None:
            built.down()
        import shutil

        shutil.rmtree(tools, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


def engine_pids(lab: Lab) -> list[int]:
    found = []
    for host in lab.hosts:
        for pid in host.pids():
            try:
                cmd = " ".join(psutil.Process(pid).cmdline())
            except psutil.Error:
                continue
            if "jaxnb._engine" in cmd:
                found.append(pid)
    return found


def test_a_host_with_another_jaxnb_is_named_before_anything_is_launched(prep_lab, tmp_path):
    """labhost2's interpreter sees jaxnb 0.0.9 installed (a dist-info first on its path, as
    an older `pip install` leaves), labhost1's the notebook's own."""
    dist = tmp_path / "old" / "jaxnb-0.0.9.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jaxnb\nVersion: 0.0.9\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$(hostname)" = labhost2 ]; then export PYTHONPATH={dist.parent}; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    first, second = prep_lab.addresses
    with pytest.raises(StartError) as caught:
        JaxCluster(hosts=prep_lab.addresses, python=str(wrapper)).start()
    text = str(caught.value)
    assert "preflight: 1 of 2 hosts differ from this notebook; nothing was launched" in text, text
    import importlib.metadata

    ours = importlib.metadata.version("jaxnb")
    assert f"    {second}: jaxnb 0.0.9 (here {ours}); install jaxnb {ours} there" in text, text
    assert first not in text
    assert engine_pids(prep_lab) == []


def test_gpu_hosts_get_one_engine_per_gpu_unless_counted(prep_lab):
    first, second = prep_lab.addresses
    cluster = JaxCluster(hosts=[first, second], platform="gpu", env={"JAX_PLATFORMS": "cpu"})
    try:
        cluster.start()
        assert cluster.options.hosts == (f"{first}:2", f"{second}:1")
        placed = [(p.host, p.process_index) for p in cluster.processes]
        assert placed == [("labhost1", 0), ("labhost1", 1), ("labhost2", 2)], placed
        ranks = cluster.view.apply_sync(os.getenv, "JAXNB_LOCAL_RANK")
        assert ranks == ["0", "1", "0"]
        cluster.run("import jax\nassert jax.process_count() == 3")
    finally:
        cluster.stop()
    cluster = JaxCluster(hosts=[f"{first}:1", second], platform="gpu", env={"JAX_PLATFORMS": "cpu"})
    try:
        cluster.start()
        assert [p.host for p in cluster.processes] == ["labhost1", "labhost2"]
    finally:
        cluster.stop()
    assert engine_pids(prep_lab) == []
