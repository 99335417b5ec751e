"""Hosts as users name them, in a real Jupyter kernel on the lab of ssh hosts (issue 24).

``--hosts gpu1,gpu2`` where the ssh config has ``Host gpu1`` / ``Host gpu2`` with
``HostName``, ``User`` and ``Port`` (the lab's sshd also listens on 2222, the
aliases' port), without ``--address``; and what a cluster on hosts leaves in the
temporary folder once it stops (nothing: no ``jaxnb-ssh-*``, no ``jaxnb-output-*``),
after a clean run and after a failure. One lab and one kernel for the module; the
kernel has a temporary folder of its own (``TMPDIR``), so other clusters on this
machine do not count.
"""

from __future__ import annotations

import os
import re
import tempfile

import pytest

pytestmark = pytest.mark.engines
PORT = 2222
ALIAS = "Host gpu{i}\n  HostName {address}\n  User root\n  Port {port}\n"
WHERE = ("%%jax_cluster\nimport jax, socket\n"
         "print('on', socket.gethostname(), jax.process_index(), jax.process_count())")


@pytest.fixture(scope="module")
def lab(make_lab):
    return make_lab(2, extra_ports=(PORT,))


@pytest.fixture(scope="module")
def kernel(lab, make_kernel):
    """A kernel whose ssh config names the lab hosts gpu1 and gpu2 (user root, port 2222 only there);
    ``kernel.tmp`` is its own temporary folder (short: ssh's socket paths are limited)."""
    config = os.path.join(lab.directory, "ssh_config_aliases")
    with open(lab.ssh_config) as f:
        common = f.read().split("\n", 1)[1]  # the lab's settings, after its `Host` line
    # Any other name logs in as nobody (who cannot): only the aliases' User gets in.
    common = common.replace("User root", "User nobody")
    assert "User nobody" in common
    with open(config, "w") as f:
        f.write("".join(ALIAS.format(i=h.index, address=h.address, port=PORT) for h in lab.hosts))
        f.write("Host *\n" + common)
    tmp = make_kernel.keep(tempfile.TemporaryDirectory(prefix="jxk"))  # removed after the kernel
    k = make_kernel(None, "import jaxnb, os", env={"JAXNB_SSH_CONFIG": config, "TMPDIR": tmp})
    k.tmp = tmp
    return k


def jaxnb_folders(tmp: str) -> list[str]:
    """The folders jaxnb made in the kernel's temporary folder."""
    return sorted(name for name in os.listdir(tmp) if name.startswith("jaxnb-"))


def start_on_aliases(kernel, lab) -> list:
    out = kernel.ok("%jax_cluster start --hosts gpu1,gpu2", timeout=240)
    assert "labhost1" in out.shown and "labhost2" in out.shown, out.shown
    return kernel.value("[[p.host, p.address, p.pid] for p in jaxnb.current_cluster().processes]")


def cut_output(kernel) -> str:
    """Run a cell whose output is cut; the folder that keeps its full output."""
    out = kernel.ok("%%jax_cluster\nfor i in range(2500): print(i)")
    note = re.search(r"each process's full output: (\S+)/p\*", out.stdout)
    assert note, out.stdout[-300:]
    return note[1]


def test_ssh_config_aliases_with_hostname_user_and_port_need_no_address(kernel, lab):
    processes = start_on_aliases(kernel, lab)
    assert sorted((host, address) for host, address, _ in processes) == [
        ("labhost1", lab.hosts[0].address), ("labhost2", lab.hosts[1].address)]
    for host, _, pid in processes:  # each engine runs in its own host's process table
        assert pid in lab.hosts[int(host[-1]) - 1].pids(), (host, pid)
    out = kernel.ok(WHERE)
    lines = set(out.stdout.splitlines())
    assert {"[p0] on labhost1 0 2", "[p1] on labhost2 1 2"} == lines or \
        {"[p0] on labhost2 0 2", "[p1] on labhost1 1 2"} == lines, out.stdout
    # jaxnb's ssh went where the aliases say: port 2222 (sshd also listens on 22)
    for host in lab.hosts:
        established = host.run("ss", "-tnH", "state", "established")
        local = [line.split()[2] for line in established.splitlines() if line.strip()]
        assert f"{host.address}:{PORT}" in local, established
        assert f"{host.address}:22" not in local, established
    # while it runs, its folders exist (so that their absence below means something)
    folder = cut_output(kernel)
    made = jaxnb_folders(kernel.tmp)
    assert any(n.startswith("jaxnb-ssh-") for n in made) and os.path.basename(folder) in made, made
    kernel.ok("%jax_cluster stop")
    assert not lab.engines()
    assert jaxnb_folders(kernel.tmp) == []


def test_a_stop_after_a_failure_leaves_no_folder_either(kernel, lab):
    processes = start_on_aliases(kernel, lab)
    cut_output(kernel)
    assert any(n.startswith("jaxnb-ssh-") for n in jaxnb_folders(kernel.tmp))
    os.kill(processes[1][2], 9)
    out = kernel.run("%%jax_cluster\nimport jax\njax.process_count()", timeout=120)
    # the cell sees the death (ProcessFailure), or, when the controller dropped the engine
    # first, the check before the cell names it (UsageError: restart)
    assert "[p1]" in out.shown and "was killed by SIGKILL" in out.shown, out.shown
    assert (out.error or {}).get("ename") == "ProcessFailure" or "UsageError" in out.shown, out.shown
    kernel.ok("%jax_cluster stop")
    assert not lab.engines()
    assert jaxnb_folders(kernel.tmp) == []


def test_a_start_that_fails_leaves_no_folder(kernel, lab):
    out = kernel.run(f"%jax_cluster start --hosts gpu1,gpu2 --python /no/such/python "
                     f"--address {lab.bridge_address}", timeout=120)  # --address: this test only
    assert "no interpreter /no/such/python" in out.shown, out.shown
    assert kernel.value("jaxnb.current_cluster() is None")
    assert not lab.engines()
    assert jaxnb_folders(kernel.tmp) == []
