"""``--engines slurm`` for real: a Slurm cluster on the lab (munged, slurmctld, one slurmd per
lab host: tests/lab/slurm.py); jaxnb submits its engines through ipyparallel's Slurm
launcher. Start, a cell across hosts, a short %jax_train, a killed job step named, stop
cancels the job and leaves nothing; a queue that does not start the job is named with
Slurm's reason; no ``sbatch`` is one line. Skipped (with the reason) where the lab cannot
be built or Slurm is not installed (``.ci/run`` installs ``slurm-wlm munge``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output
from lab.lab import Lab

from jaxnb import ProcessFailure
from jaxnb.magics import current_cluster, use_cluster

TRAIN = """\
import jax, jax.numpy as jnp, jaxnb

def fit():
    total = jnp.zeros(())
    for step in range(3):
        total = total + 1
        jaxnb.report({"step": step, "total": float(total)})
"""


def jobs(lab: Lab) -> str:
    return subprocess.run(["squeue", "-h"], capture_output=True, text=True,
                          env={**os.environ, **lab.slurm.env}).stdout.strip()


#: What runs on the Slurm lab's hosts for good (everything else must end with the job).
DAEMONS = ("sshd", "slurmd")


@pytest.fixture(scope="module")
def slurm_lab(make_lab):
    """Two lab hosts running slurmd; each sees its own empty ``lab.private_dir`` (as ssh does):
    what the notebook's machine has there, the nodes do not."""
    return make_lab(2, slurm=True, private=(tempfile.mkdtemp(prefix="jaxnb-private-"),))


@pytest.fixture(scope="module")
def slurm_kernel(slurm_lab, make_kernel):
    """A real kernel that reaches the lab's Slurm and ssh (their settings are in the environment)."""
    return make_kernel(None)


@pytest.fixture
def magics(ip):
    previous = current_cluster(ip)
    use_cluster(None, ip)
    try:
        yield ip
    finally:
        if current_cluster(ip) is not None:
            current_cluster(ip).stop()
        use_cluster(previous, ip)


@pytest.mark.engines
def test_slurm_start_cell_train_killed_step_stop(slurm_lab, magics, capsys):
    ip = magics
    with capture_output() as shown:
        ip.run_line_magic("jax_cluster", f"start --engines slurm -n 2 --address {slurm_lab.bridge_address} "
                          "--partition lab --time-limit 10 --sbatch=--nodes=2")
    cluster = current_cluster(ip)
    assert cluster is not None and cluster.running, shown.stdout
    assert [p.host for p in cluster.processes] == ["labhost1", "labhost2"]
    for p, host in zip(cluster.processes, slurm_lab.hosts, strict=True):
        assert p.pid in host.pids()
    assert cluster.coordinator_address.rsplit(":", 1)[0] == cluster.processes[0].address
    assert cluster.group.client.curve_serverkey  # the job's engines reach the controller encrypted
    engine_set = next(iter(cluster.group.ipp.engines.values()))
    job = engine_set.job_id
    assert engine_set.batch_file.startswith(cluster.group.stacks_dir)  # not in the notebook's folder
    assert not os.path.exists("slurm_engine.sbatch")
    assert f"{job} " in jobs(slurm_lab) and "jaxnb-" in jobs(slurm_lab)
    capsys.readouterr()
    cell = "import jax\nprint('processes', jax.process_count(), jax.device_count())"
    ip.run_cell_magic("jax_cluster", "", cell)
    assert "processes 2 2" in capsys.readouterr().out
    ip.run_cell_magic("jax_cluster", "", TRAIN)
    with capture_output():
        ip.run_line_magic("jax_train", "fit -o result")
    result = ip.user_ns["result"]
    assert result.error is None and [m["step"] for m in result.history] == [0, 1, 2]
    # The job step is killed (as by an out-of-memory kill or a preemption): named, with the job.
    subprocess.run(["scancel", "--signal=KILL", f"{job}.0"], check=True)
    with pytest.raises(ProcessFailure) as caught:
        cluster.run("import time\nfor _ in range(300): time.sleep(0.1)\n", timeout=60)
    text = str(caught.value)
    # named: the process, the job step and its job, where it ran, and how Slurm says it ended
    assert re.search(rf"\[p[01]\] .*(died in|ended with|ended:) step {job}\.0 of Slurm job {job} "
                     rf"[( ].*task [01] on labhost[12]", text), text
    ip.run_line_magic("jax_cluster", "stop")
    deadline = time.monotonic() + 20
    while (jobs(slurm_lab) or slurm_lab.leftovers(DAEMONS)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = slurm_lab.leftovers(DAEMONS)
    assert not jobs(slurm_lab) and not left, (jobs(slurm_lab), left)


@pytest.mark.engines
def test_a_job_the_queue_does_not_start_is_named_pending_with_the_reason(slurm_lab, magics):
    with pytest.raises(UsageError) as caught:
        magics.run_line_magic(
            "jax_cluster",
            f"start --engines slurm -n 2 --address {slurm_lab.bridge_address} --partition closed "
            "--init-timeout 3",
        )
    text = str(caught.value)
    assert "only 0 of 2 engines registered within 3 s" in text, text
    assert re.search(r"the Slurm job \d+ is still PENDING \(reason: PartitionDown\): the queue did "
                     r"not start it; wait and start again, or pick another --partition", text), text
    deadline = time.monotonic() + 20
    while jobs(slurm_lab) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not jobs(slurm_lab)  # stop cancelled it


def test_slurm_without_sbatch_is_one_line(ip, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UsageError, match="--engines slurm needs sbatch on this machine's PATH") as caught:
        ip.run_line_magic("jax_cluster", "start --engines slurm -n 2")
    assert "\n" not in str(caught.value)


def test_slurm_takes_no_hosts(ip):
    with pytest.raises(UsageError, match="--hosts does not go with --engines slurm"):
        ip.run_line_magic("jax_cluster", "start --engines slurm --hosts a,b")


def test_slurm_flags_need_engines_slurm(ip):
    says = "--partition is for --engines slurm only; add --engines slurm or drop it"
    with pytest.raises(UsageError, match=says):
        ip.run_line_magic("jax_cluster", "start --partition gpu")


def start_line(lab: Lab, more: str = "") -> str:
    return (f"%jax_cluster start --engines slurm -n 2 --address {lab.bridge_address} --partition lab "
            f"--time-limit 10 --sbatch=--nodes=2 {more}")


def wait_no_job(lab: Lab) -> None:
    deadline = time.monotonic() + 30
    while jobs(lab) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not jobs(lab), jobs(lab)


@pytest.mark.engines
def test_a_node_with_another_jaxnb_ends_the_start_named_before_any_engine(slurm_lab, slurm_kernel,
                                                                         tmp_path):
    """labhost2's interpreter sees jaxnb 0.0.9 (a dist-info first on its path, as an older `pip
    install` leaves); labhost1's the notebook's own. Slurm places the job on both."""
    dist = tmp_path / "old" / "jaxnb-0.0.9.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jaxnb\nVersion: 0.0.9\n")
    wrapper = tmp_path / "python"
    wrapper.write_text("#!/bin/sh\n"
                       f'if [ "$(hostname)" = labhost2 ]; then export PYTHONPATH={dist.parent}; fi\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    out = slurm_kernel.run(start_line(slurm_lab, f"--python {wrapper}"), timeout=240)
    import importlib.metadata

    ours = importlib.metadata.version("jaxnb")
    text = out.shown
    assert re.search(r"preflight: 1 of 2 nodes of Slurm job \d+ differ from this notebook; nothing "
                     r"was launched; its engines did not start", text), text
    second = slurm_lab.hosts[1]
    assert f"    labhost2 ({second.address}): jaxnb 0.0.9 (here {ours}); install jaxnb {ours} there" in text
    assert "labhost1" not in text, text
    assert slurm_lab.engines() == []
    wait_no_job(slurm_lab)  # the start cancelled it
    assert slurm_kernel.value("__import__('jaxnb').current_cluster() is None")


@pytest.mark.engines
def test_a_workdir_the_nodes_do_not_share_is_copied_to_them_before_the_engines_start(
        slurm_lab, slurm_kernel):
    """The folder lies in the lab's private folder: no node sees it (nor do the engines Slurm
    starts there), so each gets a copy over ssh, and its engines start in it."""
    project = slurm_lab.private_project("slurmproj")
    copies = []
    try:
        out = slurm_kernel.ok(start_line(slurm_lab, f"--workdir {project}"), timeout=240)
        for host in slurm_lab.hosts:
            line = next((ln for ln in out.stdout.splitlines() if f"copied to {host.address}:" in ln), "")
            assert f"-{host.hostname} (1 file, 11 B in " in line and "rsync)" in line, out.shown
            copies.append(line.split(f"{host.address}:", 1)[1].split(" (")[0])
        out = slurm_kernel.ok(
            "%%jax_cluster\nimport os, socket, mymodel\n"
            f"print('seen', os.path.exists({project!r}), mymodel.VALUE,\n"
            "      os.getcwd().endswith('-' + socket.gethostname()))")
        assert "seen False 42 True" in out.stdout and "[p" not in out.stdout, out.shown
        slurm_kernel.ok("%jax_cluster stop")
    finally:
        if slurm_kernel.value("__import__('jaxnb').current_cluster() is not None"):
            slurm_kernel.ok("%jax_cluster stop")
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)
    assert len(copies) == 2
    wait_no_job(slurm_lab)
    assert slurm_lab.engines() == []


@pytest.mark.engines
def test_the_job_gets_only_the_environment_the_engines_need(slurm_lab, magics, monkeypatch, capsys):
    """``--export`` names the variables (never ALL): a token in the kernel's environment stays
    there; the engines get their own variables and a login's basics."""
    monkeypatch.setenv("JAXNB_LAB_SECRET_TOKEN", "s3cret")
    with capture_output() as shown:
        magics.run_line_magic("jax_cluster", f"start --engines slurm -n 2 --address "
                              f"{slurm_lab.bridge_address} --partition lab --time-limit 10")
    cluster = current_cluster(magics)
    assert cluster is not None and cluster.running, shown.stdout
    engine_set = next(iter(cluster.group.ipp.engines.values()))
    with open(engine_set.batch_file) as f:
        export = [line for line in f.read().splitlines() if line.startswith("#SBATCH --export=")]
    names = export[0].removeprefix("#SBATCH --export=").split(",")
    assert len(export) == 1 and "ALL" not in names and "JAXNB_LAB_SECRET_TOKEN" not in names
    assert {"PATH", "HOME", "IPP_CONNECTION_INFO", "JAX_PLATFORMS"} <= set(names), names
    capsys.readouterr()
    magics.run_cell_magic("jax_cluster", "", "import os\nprint('seen', os.environ.get("
                          "'JAXNB_LAB_SECRET_TOKEN'), 'HOME' in os.environ, os.environ['JAX_PLATFORMS'])")
    assert "seen None True cpu" in capsys.readouterr().out


def allocate(lab: Lab) -> str:
    """``salloc`` an allocation of the lab's two nodes (no shell: the kernel plays its shell)."""
    out = subprocess.run(["salloc", "--no-shell", "-N", "2", "-p", "lab", "-t", "10", "-J", "notebook"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, **lab.slurm.env})
    found = re.search(r"Granted job allocation (\d+)", out.stderr + out.stdout)
    assert found, out.stderr
    return found.group(1)


@pytest.mark.engines
@pytest.mark.timeout(600)
def test_inside_an_salloc_allocation_the_engines_are_a_step_of_it(slurm_lab, tmp_path):
    """A kernel with ``SLURM_JOB_ID`` (as in an ``salloc`` shell or a batch job that runs Jupyter):
    ``--engines slurm`` runs ``srun`` on the allocation's nodes, submits no second job, trains,
    recovers from a killed step with ``--max-failures -1`` (a new step), and its stop ends the
    step and leaves the allocation running."""
    from support.factories import started_kernel

    job = allocate(slurm_lab)
    try:
        with started_kernel(None, env={**slurm_lab.slurm.env, "SLURM_JOB_ID": job}) as kernel:
            out = kernel.ok(f"%jax_cluster start --engines slurm -n 2 --address {slurm_lab.bridge_address}",
                            timeout=240)
            listed = jobs(slurm_lab).splitlines()
            assert len(listed) == 1 and listed[0].split()[0] == job, (listed, out.shown)  # no sbatch
            out = kernel.ok("%%jax_cluster\nimport os, socket, jax\nprint('in', os.environ['SLURM_JOB_ID'], "
                            "socket.gethostname(), jax.process_count())")
            assert f"[p0] in {job} labhost1 2" in out.stdout and f"[p1] in {job} labhost2 2" in out.stdout, \
                out.shown
            kernel.ok("%%jax_cluster\n" + TRAIN)
            kernel.ok("%jax_train fit -o result")
            assert kernel.value("[m['step'] for m in result.history]") == [0, 1, 2]
            recovered_in_a_new_step(kernel, slurm_lab, job, tmp_path)
            kernel.ok("%jax_cluster stop")
            steps = subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%j"], capture_output=True,
                                   text=True, env={**os.environ, **slurm_lab.slurm.env}).stdout.split()
            assert not [s for s in steps if s.startswith("jaxnb-")], steps
            assert jobs(slurm_lab).split()[0] == job  # the allocation is the user's: it stays
            assert slurm_lab.engines() == []
    finally:
        subprocess.run(["scancel", job], env={**os.environ, **slurm_lab.slurm.env}, check=False)
    wait_no_job(slurm_lab)


def recovered_in_a_new_step(kernel, lab: Lab, job: str, tmp_path) -> None:
    """``--max-failures -1`` on Slurm: the engines' step killed mid-run (as a preemption or an
    out-of-memory kill would), the run goes on in a new step of the same allocation."""
    from support.clusters import wait_until
    from support.fault_cells import COUNTING_LOOP

    env = {**os.environ, **lab.slurm.env}

    def our_steps() -> list[str]:
        out = subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%i|%j"], capture_output=True,
                             text=True, env=env).stdout.split()
        return [line.split("|")[0] for line in out if "|jaxnb-" in line]

    kernel.ok("%%jax_cluster\n" + COUNTING_LOOP)
    flag = tmp_path / "reached"
    msg_id = kernel.send(f"%jax_train counting --config dict(steps=30, say_at=8, pause=0.1, "
                         f"flag={str(flag)!r}) --storage {tmp_path} --max-failures -1 -o run")
    wait_until(flag.exists, timeout=120, what="the run reaching step 8")
    (step,) = our_steps()
    subprocess.run(["scancel", "--signal=KILL", step], check=True, env=env)
    try:
        out = kernel.collect(msg_id, timeout=300)
    except TimeoutError as exc:  # where it hung: the kernel's stacks (in exc) and the queue
        queue = subprocess.run(["squeue", "-s", "-j", job], capture_output=True, text=True, env=env)
        said = f"squeue -s after killing step {step}:\n{queue.stdout}{queue.stderr}"
        raise TimeoutError(f"{exc}\n{said}") from None
    assert out.status == "ok" and kernel.value("run.error is None"), out.shown
    assert "(1, no limit)" in out.shown, out.shown
    assert kernel.value("[h['step'] for h in run.history]") == list(range(1, 31))
    assert our_steps() not in ([], [step]), our_steps()  # a new step of the same allocation
    assert jobs(lab).split()[0] == job and len(jobs(lab).splitlines()) == 1
