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
from lab.lab import Lab

from jaxnb import JaxCluster, StartError

pytestmark = pytest.mark.engines
FAKE_SMI = """#!/bin/sh
# A fake nvidia-smi for the lab: labhost1 has 2 GPUs, the others 1 (for counting only).
case "$(hostname)" in labhost1) n=2;; *) n=1;; esac
i=0
while [ $i -lt $n ]; do echo "GPU $i: Fake GPU (UUID: GPU-fake-$i)"; i=$((i+1)); done
"""


@pytest.fixture(scope="module")
def prep_lab(make_lab):
    """Two lab hosts with the fake nvidia-smi and a private folder. Torn down even on failure."""
    tools = tempfile.mkdtemp(prefix="jaxnb-fake-smi-")
    private = tempfile.mkdtemp(prefix="jaxnb-private-")
    with open(os.path.join(tools, "nvidia-smi"), "w") as f:
        f.write(FAKE_SMI)
    os.chmod(os.path.join(tools, "nvidia-smi"), 0o755)
    os.chmod(tools, 0o755)
    return make_lab(2, path=(tools,), private=(private,))


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


def test_workdir_copied_where_hosts_lack_it_then_only_what_changed(prep_lab, capsys):
    """The folder lies in the lab's private folder: no host sees it, so each gets a copy
    (rsync over the shared ssh connection); *.bin files stay behind; a second start copies
    nothing, a changed module only itself."""
    import shutil

    project = os.path.join(prep_lab.private_dir, "proj")
    os.makedirs(os.path.join(project, "data"))
    with open(os.path.join(project, "mymodel.py"), "w") as f:
        f.write("VALUE = 42\n")
    with open(os.path.join(project, "data", "big.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    cluster = JaxCluster(hosts=prep_lab.addresses, workdir=project, workdir_exclude=["*.bin"])
    copies = []
    try:
        capsys.readouterr()
        cluster.start()
        shown = capsys.readouterr().out
        for host in prep_lab.hosts:
            line = next((ln for ln in shown.splitlines() if f"copied to {host.address}:" in ln), "")
            assert line.endswith("(1 file, 11 B in " + line.split(" in ")[-1]), shown
            assert f"-{host.hostname} (" in line and "rsync)" in line, line
            copies.append(line.split(f"{host.address}:", 1)[1].split(" (")[0])
        cluster.run(
            "import os, socket, mymodel\n"
            "assert mymodel.VALUE == 42\n"
            "assert os.getcwd().endswith('-' + socket.gethostname()), os.getcwd()\n"
            "assert os.path.isdir('data') and not os.path.exists('data/big.bin')\n"
        )
        cluster.restart()
        shown = capsys.readouterr().out
        assert "unchanged copy on " + ", ".join(prep_lab.addresses) in shown, shown
        with open(os.path.join(project, "mymodel.py"), "w") as f:
            f.write("VALUE = 43\n")
        cluster.restart()
        shown = capsys.readouterr().out
        assert shown.count("(1 file, 11 B in ") == 2, shown
        cluster.run("import mymodel\nassert mymodel.VALUE == 43")
    finally:
        cluster.stop()
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)
    assert copies and all(c.startswith(os.path.expanduser("~/.cache/jaxnb/workdirs/proj-")) for c in copies)


def test_workdir_a_host_already_sees_is_not_copied(prep_lab, tmp_path, capsys):
    (tmp_path / "mymodel.py").write_text("VALUE = 7\n")
    cluster = JaxCluster(hosts=prep_lab.addresses[:1], workdir=str(tmp_path))
    try:
        capsys.readouterr()
        cluster.start()
        shown = capsys.readouterr().out
        assert f"--workdir {tmp_path}: already on {prep_lab.addresses[0]} (same content)" in shown
        assert "copied" not in shown
        cluster.run(f"import os, mymodel\nassert mymodel.VALUE == 7 and os.getcwd() == {str(tmp_path)!r}")
    finally:
        cluster.stop()


def test_workdir_copied_with_tar_where_rsync_is_missing(prep_lab, monkeypatch):
    """Without rsync on this machine, the copy goes through tar over the same ssh connection."""
    import shutil

    from jaxnb._hosts import ssh_connections, workdir

    project = os.path.join(prep_lab.private_dir, "tarproj")
    os.makedirs(os.path.join(project, "pkg"))
    with open(os.path.join(project, "pkg", "m.py"), "w") as f:
        f.write("X = 1\n")
    with open(os.path.join(project, "skip.ckpt"), "w") as f:
        f.write("big")
    which = shutil.which
    monkeypatch.setattr(workdir.shutil, "which", lambda name: None if name == "rsync" else which(name))
    control = ssh_connections.new_control_dir()
    placed = []
    try:
        placed = workdir.place(prep_lab.addresses[:1], project, ("*.ckpt",), sys.executable,
                                ssh_connections.ssh_options(control))
        (one,) = placed
        assert one.copied and one.how == "tar over ssh" and one.files == 1, one
        out = prep_lab.ssh(prep_lab.hosts[0], f"cat {one.folder}/pkg/m.py; ls {one.folder}")
        assert out.stdout.split() == ["X", "=", "1", "pkg"], out
        again = workdir.place(prep_lab.addresses[:1], project, ("*.ckpt",), sys.executable,
                               ssh_connections.ssh_options(control))
        assert not again[0].copied and again[0].folder == one.folder
    finally:
        for p in placed:
            shutil.rmtree(p.folder, ignore_errors=True)
        ssh_connections.close_connections(control, prep_lab.addresses[:1])
