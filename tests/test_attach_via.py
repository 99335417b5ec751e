"""``%jax_cluster attach NAME --via HOST`` in a real Jupyter kernel, on the lab of ssh hosts.

A named cluster is started on a lab host (over ssh, by a script there that starts it and
detaches, as a kernel on a login node would); the notebook's kernel, on this machine, attaches
to it through ssh (ipyparallel's tunnels), runs a ``%%jax_cluster`` cell there, interrupts one
(the Stop button), is taken over by a kernel on the host and told so in one line, attaches
again, detaches, attaches again and stops it: nothing is left on the host or in the kernel.
The host finds its records where the ssh session says (``SetEnv JAXNB_CLUSTERS_DIR`` in the
kernel's ssh config, as a user may set it; the lab's sshd accepts it). The lab hosts' names do
not resolve, so the cluster starts without ``jax.distributed`` (``init=False``): gloo would
need its host's name.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import sys
import tempfile

import psutil
import pytest
from support.clusters import wait_until
from support.kernel_harness import Kernel

pytestmark = pytest.mark.engines
NAME = "far"
#: Run on the host: start a named cluster, give its engines some state, leave it running.
START = ("import sys, jaxnb\n"
         "c = jaxnb.JaxCluster(n=2, name=sys.argv[1], spares=0, init=False).start()\n"
         "c.run('import os, socket\\nwhere = socket.gethostname()')\n"
         "c.detach()\n")
#: Run on the host: a kernel there takes the cluster over (and goes).
TAKE = "import sys, jaxnb\njaxnb.JaxCluster.attach(sys.argv[1]).group.let_go()\n"
WHERE = "%%jax_cluster\nprint(where, os.getpid())"


@pytest.fixture(scope="module")
def lab(make_lab):
    """One host; a folder it sees as its own (as a login node's disk, which the laptop lacks)."""
    return make_lab(1, private=(tempfile.mkdtemp(prefix="jaxnb-private-"),))


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """The host's folder of cluster records (this machine's tests keep theirs elsewhere)."""
    return str(tmp_path_factory.mktemp("host-clusters"))


@pytest.fixture(scope="module")
def kernel(lab, records, make_kernel):
    """The notebook's kernel; its ssh config reaches the lab and sets the host's records folder."""
    config = os.path.join(lab.directory, "ssh_config_via")
    with open(lab.ssh_config) as f, open(config, "w") as out:
        out.write(f.read() + f"  SetEnv JAXNB_CLUSTERS_DIR={records}\n")
    return make_kernel(None, "import jaxnb, os", env={"JAXNB_SSH_CONFIG": config})


def on_host(lab, records, code: str, name: str, timeout: float = 120) -> str:
    """Run ``code`` (a script given ``name``) with this Python on the lab host, over ssh (its
    records in ``records``); the script lies in the lab's folder (the hosts share the disk)."""
    script = os.path.join(lab.directory, "on_host.py")
    with open(script, "w") as f:
        f.write(code)
    out = lab.ssh(lab.hosts[0], f"cd /tmp && env JAXNB_CLUSTERS_DIR={records} {sys.executable} "
                                f"{script} {name} </dev/null", timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def host_cli(lab, records, *args: str) -> str:
    out = lab.ssh(lab.hosts[0], f"env JAXNB_CLUSTERS_DIR={records} {sys.executable} -m jaxnb "
                                f"{' '.join(args)}", timeout=60)
    return out.stdout + out.stderr


def holding(lab) -> list[str]:
    """``python -m jaxnb hold`` processes on the host (the attached kernel's stand-in)."""
    return [line for line in lab.leftovers() if "jaxnb hold" in line]


def one_line(out) -> str:
    said = ((out.error or {}).get("evalue") or out.shown).strip()
    assert len(said.strip().splitlines()) == 1, said
    return said


def kernel_ssh_pids(kernel) -> list[int]:
    """The kernel's ssh processes (its connection to the host, the hold)."""
    found = []
    for proc in psutil.Process(kernel.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.name() == "ssh" and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
    return found



@pytest.fixture(scope="module")
def started(lab, records):
    """The named cluster, started on the lab host (the last test stops it)."""
    on_host(lab, records, START, NAME)
    return NAME


def test_a_killed_kernel_leaves_no_ssh_here_and_no_hold_there(started, lab, kernel):
    config = kernel.value("os.environ['JAXNB_SSH_CONFIG']")
    with Kernel() as doomed:  # its own kernel: SIGKILLed, as by the out-of-memory killer
        doomed.ok(f"%load_ext jaxnb\nimport os\nos.environ['JAXNB_SSH_CONFIG'] = {config!r}")
        doomed.ok(f"%jax_cluster attach {started} --via {lab.hosts[0].address}")
        assert holding(lab)
        processes = [psutil.Process(p) for p in kernel_ssh_pids(doomed)]
        assert processes, "no ssh connection to the host"
        doomed.kill()  # the kernel's pid only: its ssh processes see their stdin end
        wait_until(lambda: not holding(lab), timeout=20, what="the hold on the host ending")
        psutil.wait_procs(processes, timeout=20)
        assert not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


COUNTING = """%%jax_cluster
import os, time, jaxnb
def counting(config):
    saved = jaxnb.get_checkpoint()  # a directory of ours: the step it holds
    first = 1 if saved is None else int(open(os.path.join(saved.path, "step")).read()) + 1
    for step in range(first, config["steps"] + 1):
        folder = None
        if step % 10 == 0:
            folder = os.path.join(config["scratch"], str(step))
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "step"), "w") as f:
                f.write(str(step))
        jaxnb.report({"step": step, "loss": 1.0 / step}, checkpoint=folder)
        time.sleep(0.01)"""


def test_jax_train_through_via_runs_on_the_host_and_keeps_its_folder_there(started, kernel, lab, records):
    host, storage = lab.hosts[0], lab.private_dir  # the host's own folder: not this machine's
    kernel.ok(f"%jax_cluster attach {NAME} --via {host.address}")
    kernel.ok(COUNTING)
    train = (f"%jax_train counting --config dict(steps={{steps}}, scratch={storage + '/scratch'!r}) "
             f"--storage {storage} --name {{name}}")
    out = kernel.ok(train.format(steps=30, name="over-ssh") + " -o r")
    assert out.displays, "no dashboard"
    assert kernel.value("[r.steps, r.error, r.failures, r.checkpoint.step]") == [
        list(range(1, 31)), None, [], 30], out.shown
    kept = lab.ssh(host, f"ls {storage}/over-ssh; wc -l < {storage}/over-ssh/reports.jsonl")
    assert kept.returncode == 0 and "reports.jsonl" in kept.stdout, kept.stdout + kept.stderr
    assert int(kept.stdout.split()[-1]) >= 30, kept.stdout
    assert not os.listdir(storage), [(d, f) for d, _, f in os.walk(storage)]  # nothing here
    assert "over-ssh (done)" in host_cli(lab, records, "list")  # noted in the host's record
    # The host's folder decides: a second run there is refused, --resume goes on from step 30.
    refused = one_line(kernel.run(train.format(steps=40, name="over-ssh")))
    assert "over-ssh" in refused and "resume" in refused, refused
    kernel.ok(train.format(steps=40, name="over-ssh") + " --resume -o r2")
    assert kernel.value("[r2.steps, r2.error]") == [list(range(31, 41)), None]
    # In the background: the kernel is free while the run goes on there; wait() has it all.
    kernel.ok(train.format(steps=200, name="later") + " --background -o r3")
    assert kernel.value("[r3.wait(120).steps[-1], r3.error]") == [200, None]
    refused = one_line(kernel.run(train.format(steps=40, name="again") + " --max-failures 1"))
    assert "`--max-failures` does not work through `--via`" in refused, refused
    refused = one_line(kernel.run(train.format(steps=40, name="again") + " --break-lock"))
    assert "`--break-lock` does not work through `--via`: runs started from this kernel take no lock" \
        in refused, refused
    assert not os.listdir(storage), [(d, f) for d, _, f in os.walk(storage)]
    # A search: its study (Optuna's journal) stays here, each trial's run folder is the host's.
    kernel.ok(f"%jax_tune counting --space dict(steps=jaxnb.tune.choice([3, 4])) --trials 2 "
              f"--storage {storage} --name search -o t")
    assert kernel.value("[len(t.trials), sorted(t.best_config)]") == [2, ["steps"]]
    assert "study.journal" in os.listdir(os.path.join(storage, "search"))
    trial = lab.ssh(host, f"ls {storage}/search/trial_0000")
    assert "reports.jsonl" in trial.stdout, trial.stdout + trial.stderr
    assert "trial_0000" not in host_cli(lab, records, "list")  # trials are not runs of their own


def test_a_run_whose_kernel_died_is_followed_from_a_new_kernel_through_via(started, kernel, lab):
    """The laptop's kernel dies during a background run; a new kernel attaches through ssh and
    follows the run from the host's folder (read over its ssh connection): every report."""
    host, storage = lab.hosts[0], lab.private_dir
    config = kernel.value("os.environ['JAXNB_SSH_CONFIG']")
    train = (f"%jax_train counting --config dict(steps=500, scratch={storage + '/scratch'!r}) "
             f"--storage {storage} --name orphan --background -o r")
    with Kernel() as doomed:
        doomed.ok(f"%load_ext jaxnb\nimport os\nos.environ['JAXNB_SSH_CONFIG'] = {config!r}")
        doomed.ok(f"%jax_cluster attach {NAME} --via {host.address}")
        doomed.ok(COUNTING)
        doomed.ok(train)
        wait_until(lambda: doomed.value("len(r.steps)") >= 20, timeout=60, what="20 reports")
        doomed.kill()
    wait_until(lambda: not holding(lab), timeout=20, what="the dead kernel's hold ending")
    kernel.ok(f"%jax_cluster attach {NAME} --via {host.address}")
    out = kernel.ok("%jax_train --attach --name orphan -o f")  # its folder: from the host's record
    assert out.displays, "no dashboard"
    assert kernel.value("[f.wait(120).steps, f.error]") == [list(range(1, 501)), None]
    again = f"jaxnb.current_cluster().result('orphan', storage={storage!r}, show=False).wait(60)"
    assert kernel.value(f"{again}.steps[-1]") == 500  # or named
    assert "orphan" not in os.listdir(storage)  # read there, not copied here


def test_attach_via_a_host_runs_cells_there_is_taken_over_detaches_and_stops_leaving_nothing(
        started, kernel, lab, records):
    host = lab.hosts[0]
    attach = f"%jax_cluster attach {NAME} --via {host.address}"
    shown = kernel.ok(attach)
    assert shown.displays  # the devices widget
    assert f"through ssh to {host.address} (encrypted)" in str(shown.displays), shown.displays
    out = kernel.ok(WHERE)
    lines = dict(re.findall(r"\[(p\d)\] labhost1 (\d+)", out.stdout))
    assert sorted(lines) == ["p0", "p1"], out.stdout
    assert {int(pid) for pid in lines.values()} <= set(host.pids()), "the cell ran elsewhere"
    assert kernel.value("jaxnb.current_cluster().options.name") == NAME
    assert "attached (kernel pid" in host_cli(lab, records, "list")
    listed = kernel.ok(f"%jax_cluster list --via {host.address}").stdout.splitlines()
    assert listed[0].startswith("NAME") and listed[1].split()[:2] == [NAME, "2"], listed
    assert "attached (kernel pid" in listed[1], listed
    assert kernel_ssh_pids(kernel), "no ssh connection to the host"
    # the Stop button: the engines on the host are interrupted (by pid there, over ssh)
    msg_id = kernel.send("%%jax_cluster\nimport time\nprint('started', flush=True)\ntime.sleep(60)")
    kernel.collect(msg_id, timeout=60, until="started")
    kernel.interrupt()
    out = kernel.collect(msg_id, timeout=30)
    assert out.error is not None and out.error["ename"] == "KeyboardInterrupt", out.shown
    assert "jaxnb: interrupted [p0], [p1]" in out.stderr, out.shown
    assert "[p0] labhost1" in kernel.ok(WHERE).stdout
    refused = one_line(kernel.run("%jax_cluster restart"))
    assert "does not work through `--via`" in refused and host.address in refused, refused
    refused = one_line(kernel.run("%jax_train --attach --name mlp"))  # a run folder on the host
    assert f"no run 'mlp' in the record of the cluster on {host.address}" in refused, refused
    assert "--storage /ABSOLUTE/DIR" in refused, refused

    on_host(lab, records, TAKE, NAME)  # a kernel on the host takes it over
    wait_until(lambda: not holding(lab), timeout=10, what="the hold on the host seeing it")
    said = one_line(kernel.run(WHERE))
    assert "taken over by another kernel" in said and f"--via {host.address}" in said, said
    wait_until(lambda: not kernel_ssh_pids(kernel), timeout=10, what="the kernel's ssh ending")

    kernel.ok(attach)
    out = kernel.ok("%jax_cluster detach")
    assert f"`%jax_cluster attach {NAME} --via {host.address}` takes it back" in out.stdout
    assert "idle since" in host_cli(lab, records, "list")
    assert "idle since" in kernel.ok(f"%jax_cluster list --via {host.address}").stdout
    assert not kernel_ssh_pids(kernel)

    kernel.ok(attach)
    kernel.ok("%jax_cluster stop")
    wait_until(lambda: not lab.leftovers(), timeout=20, what="every process on the host ending")
    assert not kernel_ssh_pids(kernel)
    left = {n: pathlib.Path(records, n).read_text()[-500:] for n in os.listdir(records)}
    assert left == {}, left
    assert kernel.value("jaxnb.current_cluster().running") is False


def test_a_wrong_attach_via_is_one_line_and_runs_nothing(kernel, lab):
    address = lab.hosts[0].address
    said = one_line(kernel.run(f"%jax_cluster attach nope --via {address}"))
    assert f"no cluster named 'nope' runs on {address}; " in said, said
    said = one_line(kernel.run(f"%jax_cluster attach {NAME} --via {address} --python /no/such/python"))
    assert f"no interpreter /no/such/python on {address}" in said, said
    for bad in ("-oProxyCommand=touch${IFS}/tmp/x", "a;b", f"{address}:2"):
        said = one_line(kernel.run(f"%jax_cluster attach {NAME} --via={bad}"))
        assert "host" in said, said
    said = one_line(kernel.run(f"%jax_cluster stop --via {address}"))
    assert "--via goes with `%jax_cluster attach NAME --via HOST` or `%jax_cluster list" in said, said
    said = one_line(kernel.run(f"%jax_cluster list --via {address} --python /no/such/python"))
    assert f"no interpreter /no/such/python on {address}" in said, said
    said = one_line(kernel.ok(f"%jax_cluster list --via {address}"))  # after the last test's stop
    assert said == f"jaxnb: no cluster to attach runs on {address} (a script's unnamed cluster ends " \
                   "with the script)", said
    assert not kernel_ssh_pids(kernel)
    assert not lab.leftovers()
