"""A cluster outlives its kernel, in real Jupyter kernels (``jupyter_client``).

Kernel A starts ``%jax_cluster start --name NAME`` (or unnamed: ``default``) and defines
variables on the engines; A is SIGKILLed (an out-of-memory kill) or restarted from the menu
(``restart_kernel(now=False)``); a kernel shut down on purpose ends its unnamed cluster;
kernel B attaches and finds the engines with their state; a third kernel takes it over and B
is told so in one line; ``python -m jaxnb list`` / ``stop`` work from a terminal; a detached
cluster with ``--idle-timeout`` stops itself and leaves no process; a ``--background`` run goes on
after its kernel was SIGKILLed, and a kernel that attaches later gets every report from the run
folder.
"""

from __future__ import annotations

import json
import pathlib

import psutil
import pytest
from support.clusters import wait_until
from support.named_clusters import clusters_dir_fixture, family, gone, jaxnb_cli, kernel  # noqa: F401 - fixtures

#: Starts kernels and engines: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

STATE = "%%jax_cluster\nimport jax\nx = 40 + jax.process_index()"


def test_a_killed_kernels_cluster_is_attached_with_its_state_taken_over_listed_and_stopped(
        clusters_dir):
    a = kernel()
    try:
        a.ok("%jax_cluster start -n 2 --name killed --spares 0")
        a.ok(STATE)
        processes = family(clusters_dir, "killed")
        assert len(processes) >= 4, processes  # the supervisor, the controller, two engines
        a.kill()  # SIGKILL, as the out-of-memory killer does
    finally:  # not Kernel.shutdown: it ends what the kernel started, the cluster included
        a.client.stop_channels()
        a.manager.shutdown_kernel(now=True)
        a.manager.cleanup_resources()
    assert not gone(processes), "the cluster died with the kernel"
    listed = jaxnb_cli("list")
    assert listed.returncode == 0 and "killed" in listed.stdout and "idle since" in listed.stdout, listed

    with kernel() as b, kernel() as c:
        assert b.ok("%jax_cluster attach killed").displays  # the devices widget
        b.ok("import sys")
        lean = "sorted(m for m in ('numpy', 'jax', 'matplotlib', 'optuna') if m in sys.modules)"
        assert b.value(lean) == [], "the attach loaded what it does not use"
        assert b.ok("%%jax_cluster\nprint(x)").stdout.split() == ["[p0]", "40", "[p1]", "41"]
        assert b.value("jaxnb.current_cluster().options.name") == "killed"
        b.ok("y = 2\n%jax_push y")
        assert b.value("jaxnb.clusters()[0]['attached']") == b.pid

        c.ok("import jaxnb; cluster = jaxnb.JaxCluster.attach('killed')")
        assert c.value("cluster.pull('y')") == 2
        taken = b.run("%%jax_cluster\nprint(x)")
        said = taken.error["evalue"] if taken.error else taken.shown
        assert "taken over by another kernel" in said and "%jax_cluster attach killed" in said, said
        assert len(said.strip().splitlines()) == 1, said
        assert f"kernel pid {c.pid}" in jaxnb_cli("list").stdout

        stopped = jaxnb_cli("stop", "killed")
        assert stopped.returncode == 0, stopped
        wait_until(lambda: gone(processes), timeout=20, what="every process of the cluster ending")
        assert jaxnb_cli("list").stdout.strip() == (
            "jaxnb: no cluster to attach runs on this machine (a script's unnamed cluster ends "
            "with the script)")
        assert jaxnb_cli("stop", "killed").returncode == 1
        assert not list(clusters_dir.glob("killed*")), list(clusters_dir.iterdir())


def test_an_unnamed_cluster_survives_a_restart_as_default_then_detached_it_stops_itself(
        clusters_dir, tmp_path):
    with kernel() as k:
        k.ok("%jax_cluster start -n 2 --idle-timeout 40")  # unnamed, with warm spares
        assert k.value("jaxnb.current_cluster().options.name") == "default"
        k.ok(STATE)
        k.ok(FORTY)
        k.ok(f"%jax_train forty --storage {tmp_path} --background -o live")
        wait_until(lambda: "report" in written(tmp_path / "forty"), timeout=60, what="a first report")
        k.manager.restart_kernel(now=False)  # Restart Kernel in JupyterLab, the run going on
        k.client.wait_for_ready(timeout=60)
        k.ok("%load_ext jaxnb\nimport jaxnb")
        k.ok("%jax_cluster attach")  # no name: default
        k.ok("%jax_train --attach --name forty -o again")  # its dashboard, to the run's end
        assert k.value("[m['step'] for m in again.history]") == list(range(1, 41))
        assert k.value("[again.error is None, again.stopped]") == [True, False]
        assert k.ok("%%jax_cluster\nprint(x)").stdout.split() == ["[p0]", "40", "[p1]", "41"]
        processes = family(clusters_dir, "default")
        out = k.ok("%jax_cluster detach")
        assert "left running" in out.stdout
        assert "idle since" in k.ok("%jax_cluster list").stdout
        wait_until(lambda: gone(processes), timeout=80, what="the idle cluster stopping itself")
        assert not list(clusters_dir.glob("default*")), list(clusters_dir.iterdir())
        assert "no jaxnb cluster is running" in k.run("%%jax_cluster\nprint(x)").shown


def test_an_unnamed_cluster_stops_with_its_kernel_shut_down_on_purpose_and_a_second_is_default_2(
        clusters_dir):
    with kernel() as a:
        a.ok("%jax_cluster start -n 1 --spares 0")
        processes = family(clusters_dir, "default")
        with kernel() as b:
            out = b.ok("%jax_cluster start -n 1 --spares 0")
            assert ("jaxnb: cluster 'default' runs in another kernel; this one is named "
                    "'default-2'") in out.stderr, out.shown
            assert b.value("jaxnb.current_cluster().options.name") == "default-2"
            second = family(clusters_dir, "default-2")
        # b was shut down (not restarted): its cluster went with it; a's is still there
        wait_until(lambda: gone(second), timeout=20, what="default-2 stopping with its kernel")
        assert not gone(processes)
        assert a.ok("%%jax_cluster\nprint(1 + 1)").stdout.split() == ["2"]
        with kernel() as c:  # takes 'default' over from a (a restart of a looks the same)
            c.ok("%jax_cluster attach")
            assert c.ok("%%jax_cluster\nprint(2 + 2)").stdout.split() == ["4"]
        # c, the kernel that last attached it, was shut down: 'default' went with it
        wait_until(lambda: gone(processes), timeout=20, what="default stopping with its attached kernel")
        assert not list(clusters_dir.glob("default*")), list(clusters_dir.iterdir())


FORTY = '''import time, jaxnb
def forty():
    for step in range(1, 41):
        time.sleep(0.2)  # 8 s: the kernel is killed well before the end, even on a loaded machine
        jaxnb.report({"step": step, "loss": 1.0 / step})'''


def written(run_dir: pathlib.Path) -> list[str]:
    """The kinds of the events in a run's ``reports.jsonl`` so far (``start``, ``report``, ``end``)."""
    try:
        text = (run_dir / "reports.jsonl").read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line)["kind"] for line in text.split("\n")[:-1] if line]  # whole lines only


def test_a_background_run_keeps_every_report_while_no_kernel_listens_and_a_new_kernel_follows_it(
        clusters_dir, tmp_path):
    a = kernel()
    try:
        a.ok("%jax_cluster start -n 2 --spares 0")  # unnamed: default
        a.ok(FORTY)
        processes = family(clusters_dir, "default")  # before the run: reading every process is slow
        a.ok(f"%jax_train forty --name forty --storage {tmp_path} --background -o live")
        # Read from the run folder, not from kernel A: a kernel that draws a dashboard on a
        # loaded machine answers in seconds, while the run goes on.
        wait_until(lambda: "report" in written(tmp_path / "forty"), timeout=60, what="a first report")
        heard = written(tmp_path / "forty")
        a.kill()  # SIGKILL while the run goes on
    finally:
        a.client.stop_channels()
        a.manager.shutdown_kernel(now=True)
        a.manager.cleanup_resources()
    assert "end" not in heard and heard.count("report") < 40, (
        "the run ended before its kernel was killed: make it longer")
    with kernel() as b:
        b.ok("%jax_cluster attach")  # default
        b.ok(f"r = jaxnb.current_cluster().result('forty', storage={str(tmp_path)!r}).wait(60)")
        assert b.value("r.steps") == list(range(1, 41))
        assert b.value("[m['step'] for m in r.history]") == list(range(1, 41))
        assert b.value("[r.error is None, r.stopped, r.running]") == [True, False, False]
        shown = b.ok("%jax_train --attach --name forty -o again")  # its folder from the record
        assert shown.displays and b.value("again.steps") == list(range(1, 41))
        assert "forty (done)" in b.ok("%jax_cluster list").stdout
        missing = b.run(f"%jax_train --attach --name nope --storage {tmp_path}")
        said = missing.error["evalue"] if missing.error else missing.shown
        assert "no run 'nope'" in said and len(said.strip().splitlines()) == 1, said
        b.ok("%jax_cluster stop")
        wait_until(lambda: gone(processes), timeout=20, what="every process of the cluster ending")


STEADY = '''import time, jaxnb
import numpy as np
def steady():
    start = jaxnb.get_checkpoint()
    for step in range(start.step + 1 if start else 1, 61):
        time.sleep(0.1)
        saved = {"w": np.full(2, step)} if step % 5 == 0 else None
        jaxnb.report({"step": step, "loss": offset + scale / step}, checkpoint=saved)'''


def events(run_dir) -> list[dict]:
    """The run's events as its folder holds them (JSON lines)."""
    try:
        lines = (run_dir / "reports.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.endswith("}")]


def test_a_run_recovers_while_no_kernel_is_attached_and_a_new_kernel_sees_the_failure(
        clusters_dir, tmp_path):
    a = kernel()
    try:
        a.ok("%jax_cluster start -n 2 --name driven --spares 0")
        a.ok("%%jax_cluster\noffset = 100")  # the setup the supervisor replays: a cell, a push
        a.ok("scale = 3\n%jax_push scale")
        a.ok(STEADY)
        a.ok(f"%jax_train steady --storage {tmp_path} --background --max-failures 1 -o live")
        wait_until(lambda: a.value("len(live.history)") >= 1, timeout=60, what="a first report")
        wait_until(lambda: json.loads((clusters_dir / "driven.supervisor.json").read_text())
                   .get("holds") == "steady", timeout=60, what="the supervisor holding the run's spec")
        a_pid = a.pid
        a.kill()  # SIGKILL: nothing of the kernel's driver is left
    finally:
        a.client.stop_channels()
        a.manager.shutdown_kernel(now=True)
        a.manager.cleanup_resources()
    run_dir = tmp_path / "steady"
    wait_until(lambda: max([e["step"] for e in events(run_dir) if e["kind"] == "report"] or [0]) >= 7,
               timeout=60, what="a checkpoint at step 5, then more steps")
    with open(clusters_dir / "driven.json") as f:
        doc = json.load(f)
    assert doc["kernel"]["pid"] == a_pid, doc  # no kernel attached since
    victim = psutil.Process(next(p["pid"] for p in doc["processes"] if p["process_index"] == 1))
    victim.kill()  # with no kernel attached
    wait_until(lambda: any(e["kind"] == "failure" or e.get("final") for e in events(run_dir)),
               timeout=120, what="the supervisor recovering the run")
    assert events(run_dir)[-1].get("final") is None, (clusters_dir / "driven.log").read_text()

    with kernel() as b:
        b.ok("%jax_cluster attach driven")
        b.ok(f"r = jaxnb.current_cluster().result('steady', storage={str(tmp_path)!r}).wait(180)")
        assert b.value("[r.error is None, r.stopped, r.running]") == [True, False, False], \
            b.value("str(r.error)")
        assert b.value("r.steps") == list(range(1, 61))
        assert b.value("r.metrics['loss']") == 100 + 3 / 60  # the setup was replayed
        failures = b.value("[(f.processes, f.cause, f.resumed_from, f.step) for f in r.failures]")
        assert len(failures) == 1, failures
        processes, cause, resumed_from, step = failures[0]
        assert processes == [1] and cause.startswith("[p1]"), failures
        assert resumed_from is not None and resumed_from % 5 == 0 and resumed_from <= step, failures
        log = (clusters_dir / "driven.log").read_text()
        assert "driving run 'steady' on" in log and "recovering run 'steady'" in log, log
        listed = b.value("[(r['name'], r['state']) for r in jaxnb.clusters()[0]['runs']]")
        assert listed == [["steady", "done"]], listed  # the run stays listed, with its end
        processes = family(clusters_dir, "driven")
        b.ok("%jax_cluster stop")
        wait_until(lambda: gone(processes), timeout=20, what="every process of the cluster ending")
