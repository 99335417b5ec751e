"""The pure parts of named clusters: which names are allowed (a name becomes a file name), the
JSON records (0600, replaced whole, never through a link, never code), and the options."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from jaxnb import JaxCluster
from jaxnb._attach import listing, record
from jaxnb._core import cluster_names as names

NONE_LINE = ("jaxnb: no cluster to attach runs on this machine (a script's unnamed cluster ends "
             "with the script)")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(names.ENV_FOLDER, str(tmp_path / "clusters"))
    return tmp_path / "clusters"


@pytest.mark.parametrize("name", ["default", "exp1", "a.b-c_d", "X" * 64])
def test_a_plain_file_name_names_a_cluster(name):
    assert names.check(name) == name


@pytest.mark.parametrize("name", ["", ".hidden", "../up", "a/b", "-flag", "a b", "é", "X" * 65,
                                  "a\nb", None, 3])
def test_anything_else_is_one_line_that_says_what_a_name_is(name):
    with pytest.raises(ValueError, match=r"^a cluster name is 1-64 letters.*got .*; e\.g\. --name exp1$"):
        names.check(name)


def test_the_folder_is_made_private(folder):
    assert names.record_path("x") == str(folder / "x.json")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


def test_a_record_is_private_json_replaced_whole(folder):
    path = names.record_path("x")
    record.write(path, {"a": [1, 2]})
    record.write(path, {"a": [3]})
    assert record.read(path) == {"a": [3]}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(folder)) == ["x.json"]  # no temporary file left


def test_a_record_is_never_read_or_written_through_a_link_nor_read_as_code(folder, tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text('{"a": 1}')
    path = names.record_path("linked")
    os.symlink(target, path)
    assert record.read(path) is None
    record.write(path, {"b": 2})  # replaces the link itself
    assert target.read_text() == '{"a": 1}' and not os.path.islink(path)
    (folder / "pickle.json").write_bytes(b"\x80\x04K\x01.")  # a pickle is not read
    assert record.read(str(folder / "pickle.json")) is None


def test_a_process_entry_names_this_process_and_not_a_later_one_with_its_pid():
    me = record.me()
    assert record.alive(me)
    assert not record.alive(dict(me, created=me["created"] - 100))
    assert not record.alive({"pid": "1"}) and not record.alive(None)


def test_no_cluster_listed_when_none_runs(folder):
    record.write(names.supervisor_path("gone"), {"supervisor": {"pid": 2**22 + 1, "created": 1.0}})
    assert listing.clusters() == []
    assert not os.path.exists(names.supervisor_path("gone"))  # a dead supervisor's file goes
    assert listing.table([]) == NONE_LINE


def test_the_options_of_a_named_cluster_are_checked_before_anything_starts():
    with pytest.raises(ValueError, match=r"^a cluster name is"):
        JaxCluster(name="../x")
    with pytest.raises(ValueError, match=r"^idle_timeout= is for a cluster on this machine, which "
                                         r"outlives its kernel; drop idle_timeout=, or hosts= and "
                                         r"engines=$"):
        JaxCluster(idle_timeout=10, hosts=["h1"])
    from jaxnb import ClusterStateError

    unnamed = JaxCluster(idle_timeout=10)  # in a kernel it would be named default
    with pytest.raises(ClusterStateError, match=r"^idle_timeout= is for a cluster that outlives "
                                                r"the process that started it: one started in a "
                                                r"Jupyter kernel, or named; pass name='exp1' too"):
        unnamed.start()  # this process is no kernel: nothing would count the idle time
    assert not unnamed.running
    with pytest.raises(ValueError, match=r"^idle_timeout= must be a positive number"):
        JaxCluster(name="x", idle_timeout=0)
    with pytest.raises(ValueError, match=r"^name= works with engines on this machine for now"):
        JaxCluster(name="x", hosts=["h1"])
    assert JaxCluster(name="x", idle_timeout=5).options.idle_timeout == 5


def test_detach_of_an_unnamed_or_stopped_cluster_says_what_to_do():
    from jaxnb import ClusterStateError

    with pytest.raises(ClusterStateError, match="no jaxnb cluster is running"):
        JaxCluster().detach()


def test_attach_of_a_name_nothing_runs_under_says_so(folder):
    from jaxnb import ClusterStateError

    with pytest.raises(ClusterStateError, match=r"^no cluster named 'nothing' runs on this machine; "):
        JaxCluster.attach("nothing")


def test_the_terminal_commands(folder):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "jaxnb", *args], capture_output=True, text=True,
                              timeout=60, env=dict(os.environ))

    assert cli("list").stdout.strip() == NONE_LINE
    missing = cli("stop", "nothing")
    assert missing.returncode == 1 and "no cluster named 'nothing'" in missing.stderr
    bad = cli("stop", "../x")
    assert bad.returncode == 2 and "a cluster name is" in bad.stderr


def test_the_supervisor_stands_by_only_for_a_well_formed_run():
    from jaxnb._attach import supervisor

    run = {"run": "r", "run_dir": "/runs/r", "run_id": "abc", "max_failures": 1,
           "driver": record.me()}
    assert supervisor.entry_of({"driving": run}) == run
    assert supervisor.entry_of({"driving": None}) is None and supervisor.entry_of({}) is None
    for odd in ({"run_dir": ["/"]}, {"max_failures": "1"}, {"run": None}, {"driver": 12}):
        assert supervisor.entry_of({"driving": dict(run, **odd)}) is None


def test_a_new_run_waits_for_the_one_the_supervisor_drives_on(folder):
    from jaxnb import ClusterStateError
    from jaxnb._attach.attachment import Attachment
    from jaxnb._core.options import ClusterOptions
    from jaxnb._core.state import Group
    from jaxnb._train import handing

    names.folder()  # made private, as a start makes it
    parent = record.process_entry(os.getppid())  # a live process that is not this one
    group = Group(ClusterOptions(name="exp1"))
    group.attachment = Attachment("exp1", None, parent)
    record.write(names.record_path("exp1"), {"driving": {"run": "mlp", "driver": parent}})
    with pytest.raises(ClusterStateError, match=r"^run 'mlp' is still running on this cluster \("):
        handing.check_free(group)
    record.write(names.record_path("exp1"), {"driving": {"run": "mlp", "driver": record.me()}})
    handing.check_free(group)  # this kernel's own run: busy_with says so
    record.write(names.record_path("exp1"), {"driving": None})
    handing.check_free(group)


def test_a_driver_that_cannot_drive_says_why_in_the_log_and_as_the_runs_end(folder, tmp_path, capfd):
    from jaxnb._cluster_driving import Driver
    from jaxnb._engine.run.journal import Journal
    from jaxnb._train import followed

    run_dir = str(tmp_path / "mlp")
    os.makedirs(run_dir)
    Journal(run_dir, "abc", None, recovers=True)  # an attempt under way, its kernel gone
    driver = Driver("gone", {"run": "mlp", "run_dir": run_dir, "run_id": "abc", "max_failures": 1,
                             "driver": {"pid": os.getpid(), "created": 1.0}})
    driver.start()
    driver.take_over()  # the cluster's record is gone: it cannot hold the cluster
    driver.thread.join(60)
    assert not driver.alive()
    result = followed.follow(None, run_dir, "mlp", None)  # type: ignore[arg-type]
    assert str(result.error) == ("run 'mlp' failed: the cluster's supervisor could not drive the run "
                                 "on without its kernel: ClusterStateError: cluster 'gone' has no "
                                 "record (it was stopped)")
    log = capfd.readouterr().err
    assert "could not drive run 'mlp' on: ClusterStateError" in log and "run 'mlp' ended: " in log


def test_a_death_the_supervisor_saw_is_booked_as_a_kernels_monitor_books_it(tmp_path):
    """The supervisor drives a run on with the kernel's own recovery rules: the death it saw
    (no kernel's monitor) is booked at its step, with its processes and the time it was seen;
    the same step again is refused, as in a kernel."""
    from jaxnb._train.recovery import Recovery, SeenDeath

    recovery = Recovery(3, None, str(tmp_path), "steady")
    died = RuntimeError("[p1] (pid 12 on vm) exited; the group is broken")
    failure, refused = recovery.record(SeenDeath(died, 7, {1: "exited"}, seen=1000.0))
    assert (failure.step, failure.processes, failure.time, refused) == (7, (1,), 1000.0, None)
    assert failure.cause.startswith("[p1] (pid 12 on vm) exited")
    again, refused = recovery.record(SeenDeath(died, 7, {1: "exited"}))
    assert recovery.failures == [failure, again]
    assert refused is not None and "step 7" in refused, refused


def test_a_followed_run_books_a_checkpoints_report_its_file_lacks(tmp_path):
    """Every process died between checkpoint 10's commit and process 0's line for it: the next
    attempt starts from 10, and the reader takes step 10's report from the checkpoint."""
    from jaxnb._core import run_reports
    from jaxnb._train import followed

    run_dir = tmp_path / "mlp"
    manifest = run_dir / "checkpoints" / "10" / "jaxnb" / "metadata"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"report": {"step": 10, "time": 5.0, "metrics": {"loss": 0.5}}}))
    events = [{"kind": "start", "resume": None}]
    events += [{"kind": "report", "step": s, "seq": s - 1, "time": float(s), "metrics": {"loss": 1 / s}}
               for s in range(1, 10)]
    events += [{"kind": "start", "resume": 10}, {"kind": "report", "step": 11, "seq": 0, "time": 11.0,
                                                  "metrics": {"loss": 0.4}}, {"kind": "end", "error": None}]
    (run_dir / run_reports.REPORTS_FILE).write_text("".join(run_reports.line(e) for e in events))
    result = followed.follow(None, str(run_dir), "mlp", None)  # type: ignore[arg-type]
    assert result.steps == list(range(1, 12))
    assert result.history[9] == {"loss": 0.5} and result.checkpoint.step == 10


def test_a_followed_run_whose_file_cannot_be_read_any_more_ends_its_result_with_one_line(tmp_path):
    """Through --via the reports are read over ssh: a lost connection must end the wait with a
    line that says what to do, not leave ``wait()`` running for ever."""
    from jaxnb._core import run_reports
    from jaxnb._core.errors import ClusterStateError
    from jaxnb._core.host_entries import parse_entry
    from jaxnb._hosts.attach_via import RemoteHold
    from jaxnb._train import followed

    hold = RemoteHold("far", parse_entry("login1"), sys.executable)  # never connected
    with pytest.raises(ClusterStateError, match="the ssh connection to login1 was lost"):
        followed.follow(None, str(tmp_path / "mlp"), "mlp", None, hold.tail("/r/mlp/reports.jsonl"))  # type: ignore[arg-type]

    run_dir = tmp_path / "mlp"
    run_dir.mkdir()
    file = run_dir / run_reports.REPORTS_FILE
    file.write_text(run_reports.line({"kind": "start", "resume": None}))

    class Cut(run_reports.Tail):
        """The file as read over a link that is cut after the first read."""

        def _since(self, offset: int) -> bytes | None:
            if self.offset:
                return hold.read_from(self.file, offset)
            return super()._since(offset)

    result = followed.follow(None, str(run_dir), "mlp", None, Cut(str(file)))  # type: ignore[arg-type]
    assert result.running or result.error is not None
    result.wait(10)
    assert not result.running
    assert str(result.error).startswith("stopped following run 'mlp', which may go on: the ssh "
                                        "connection to login1 was lost"), result.error
