"""The run lock on shared machines: a lock left by a dead host or a dead pid is named and can be
broken (``--break-lock``), never while its holder may run; a release never lets two runs hold
one folder; a forked child does not keep it; a mount without ``flock`` falls back to a lease."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.other_user import (  # noqa: F401 - fixtures
    other_user_fixture,
    popen_as,
    run_as,
    shared_folder_fixture,
)

from jaxnb._core import file_lock, lock_break, run_folder
from jaxnb._core.file_lock import FileLock, holder

REPO = Path(__file__).resolve().parents[1]

#: Holds the lock at argv[1] as if pid argv[2] on host argv[3] took it (a dead host's, a dead pid's).
HOLDS_AS = r"""
import fcntl, json, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.ftruncate(fd, 0)
os.pwrite(fd, json.dumps({"pid": int(sys.argv[2]) or os.getpid(), "host": sys.argv[3],
                          "since": time.time()}).encode(), 0)
print("held", flush=True)
time.sleep(60)
"""

#: The victim's kernel, as the unprivileged user: refused, breaks the lock, then holds the folder.
BREAKS = r"""
import sys
from jaxnb._core import run_folder
try:
    run_folder.hold(sys.argv[1])
except FileExistsError as exc:
    print("refused", exc, flush=True)
print("broke", run_folder.break_lock(sys.argv[1]), flush=True)
lock = run_folder.hold(sys.argv[1])
print("held", lock.held, flush=True)
"""


def holding(*args: str, user=None) -> subprocess.Popen:
    if user is not None:
        proc = popen_as(user, HOLDS_AS, *args)
    else:
        proc = subprocess.Popen([sys.executable, "-c", HOLDS_AS, *args], stdout=subprocess.PIPE,
                                text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def ended(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.engines  # starts processes as another user
def test_a_lock_held_by_a_dead_host_is_broken_by_its_user(other_user, shared_folder):
    run = shared_folder / "fit"
    run.mkdir(mode=0o777)
    run.chmod(0o777)
    lock = str(run / "run.lock")
    gone = holding(lock, "4242", "gone-host.invalid", user=other_user)  # NFS keeps a crashed host's lock
    try:
        done = run_as(other_user, BREAKS, str(run))
    finally:
        ended(gone)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0].startswith(f"refused run 'fit' in {shared_folder} is live in another kernel "
                             "(pid 4242 on gone-host.invalid, since "), out
    assert out[1:] == ["broke True", "held True"]
    assert done.stderr.startswith(f"jaxnb: broke the lock {lock}, held by pid 4242 on "
                                  "gone-host.invalid, since ")
    assert done.stderr.rstrip().endswith(": gone-host.invalid does not answer on the network")


@pytest.mark.engines  # starts a Python process
def test_break_lock_refuses_while_the_holders_host_answers_or_its_pid_runs(tmp_path):
    lock = str(tmp_path / "run.lock")
    other = holding(lock, "4242", "localhost")
    try:
        with pytest.raises(FileExistsError) as refused:
            run_folder.break_lock(str(tmp_path))
        assert str(refused.value).startswith(f"{lock} is held by pid 4242 on localhost, which "
                                             "answers"), refused.value
        assert str(refused.value).endswith("and jaxnb cannot tell from here whether that pid "
                                           f"still runs; stop it there, or delete {lock} "
                                           "yourself once sure it is gone")
    finally:
        ended(other)
    alive = holding(lock, "0", socket.gethostname())
    try:
        with pytest.raises(FileExistsError) as refused:
            run_folder.break_lock(str(tmp_path))
        assert str(refused.value) == (
            f"{lock} is held by pid {alive.pid} on this host, which still runs; break_lock=True "
            "breaks only a lock whose holder is gone: stop that process or wait for its run to end")
        assert os.path.exists(lock)
    finally:
        ended(alive)


@pytest.mark.engines  # starts a Python process
def test_a_lock_kept_by_a_child_of_a_dead_kernel_is_named_stale_and_broken(tmp_path):
    lock = str(tmp_path / "run.lock")
    pid = dead_pid()
    child = holding(lock, str(pid), socket.gethostname())
    try:
        with pytest.raises(FileExistsError) as refused:
            run_folder.hold(str(tmp_path))
        assert str(refused.value) == (
            f"run '{tmp_path.name}' in {tmp_path.parent} is locked by pid {pid} on this host, "
            "which has ended: a process it started (multiprocessing's fork, a subprocess) still "
            f"holds {lock}; end that process, or pass break_lock=True")
        assert run_folder.break_lock(str(tmp_path)) is True
        run_folder.hold(str(tmp_path)).release()
    finally:
        ended(child)


FORKS = r"""
import os, sys, time
from jaxnb._core import run_folder
lock = run_folder.hold(sys.argv[1])
child = os.fork()
if child == 0:
    os.close(1), os.close(2)  # the test reads the parent's output to its end
    time.sleep(30)
    os._exit(0)
print(child, flush=True)
"""


@pytest.mark.engines  # starts a Python process that forks
def test_a_forked_child_does_not_keep_the_kernels_lock(tmp_path):
    done = subprocess.run([sys.executable, "-c", FORKS, str(tmp_path)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    child = int(done.stdout.strip())
    try:
        run_folder.hold(str(tmp_path)).release()  # the kernel is gone; its child holds nothing
    finally:
        os.kill(child, 9)


WAITS = r"""
import sys
from jaxnb._core.file_lock import FileLock
lock = FileLock(sys.argv[1])
print("waiting", flush=True)
lock.acquire(wait=True)
print("held", flush=True)
sys.stdin.readline()
"""


@pytest.mark.engines  # starts a Python process
def test_a_release_that_removes_the_lock_file_never_leaves_two_holders(tmp_path):
    run_dir = tmp_path / "runs" / "fit"
    made = run_folder.make(str(run_dir))
    lock = run_folder.hold(str(run_dir))
    waiter = subprocess.Popen([sys.executable, "-c", WAITS, str(run_dir / "run.lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert waiter.stdout is not None and waiter.stdout.readline() == "waiting\n"
        time.sleep(0.5)  # it has opened the file and waits in flock
        run_folder.release(lock, made)  # removes the file (the run left nothing else)
        assert waiter.stdout.readline() == "held\n"
        with pytest.raises(FileExistsError, match="is live in another kernel"):
            run_folder.hold(str(run_dir))
    finally:
        ended(waiter)


def test_a_mount_without_flock_is_said_in_one_line_and_a_lease_holds_the_folder(tmp_path,
                                                                                monkeypatch,
                                                                                capsys):
    def no_locks(fd, how):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(file_lock.fcntl, "flock", no_locks)  # an NFS mount with nolock
    path = str(tmp_path / "run.lock")
    first = FileLock(path)
    assert first.acquire() is None
    err = capsys.readouterr().err
    assert err.startswith("jaxnb: the ") and err.count("\n") == 1
    assert (f"has no file locks (No locks available: NFS mounted nolock, or Lustre without -o "
            f"flock); {path} is held by a lease written in it instead, renewed every 20 s and "
            "taken over 60 s after its holder stops renewing") in err
    record = json.loads(Path(path).read_text())
    assert record["until"] > time.time() + 50
    second = FileLock(path).acquire()
    assert second is not None and second.pid == os.getpid()
    first.release()
    assert FileLock(path).acquire() is None


def test_a_lease_left_by_a_dead_pid_on_this_host_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setattr(file_lock.fcntl, "flock",
                        lambda fd, how: (_ for _ in ()).throw(OSError(errno.ENOSYS, "lustre")))
    path = tmp_path / "run.lock"
    path.write_text(json.dumps({"pid": dead_pid(), "host": socket.gethostname(), "since": 1.0,
                                "until": time.time() + 600}))
    lock = FileLock(str(path))
    assert lock.acquire() is None
    assert holder(str(path)).pid == os.getpid()
    lock.release()


def test_a_host_that_does_not_resolve_does_not_answer():
    assert lock_break.host_answers("gone-host.invalid") is None


HOLD_ONCE = r"""
import sys
from jaxnb._core import run_folder
try:
    run_folder.hold(sys.argv[1])
    print("held")
except OSError as exc:
    print(type(exc).__name__, exc)
"""


@pytest.mark.engines  # starts processes as another user
def test_another_users_lock_is_named_not_a_raw_permission_error(other_user, shared_folder):
    run = shared_folder / "fit"
    run.mkdir()
    run.chmod(0o777)
    lock = str(run / "run.lock")
    theirs = holding(lock, "0", socket.gethostname())  # root's run, root's 0644 lock file
    try:
        done = run_as(other_user, HOLD_ONCE, str(run))
        assert done.stdout.startswith(f"FileExistsError run 'fit' in {shared_folder} is live in "
                                      f"another kernel (pid {theirs.pid} on "), done
    finally:
        ended(theirs)
    done = run_as(other_user, HOLD_ONCE, str(run))
    assert done.stdout.strip() == (
        f"PermissionError {lock} belongs to root and this user cannot write it (an earlier run of "
        "theirs); pass another name for a run of your own, or ask root to remove it")


def reports_once(config=None):
    import jaxnb

    jaxnb.report({"loss": 1.0})


def test_the_magics_break_a_lock_left_by_a_dead_host(shared_magics, tmp_path, capsys):
    """``%jax_train … --break-lock`` and ``%jax_tune … --break-lock``: the run (the search)
    goes on once the lock of a host that does not answer is broken; without it, refused."""
    from IPython.core.error import UsageError

    from jaxnb import tune

    ip = shared_magics
    ip.user_ns.update(reports_once=reports_once, tune=tune)
    run_lock, study_lock = tmp_path / "reports_once" / "run.lock", tmp_path / "study" / "search.lock"
    gone = [holding(str(path), "4242", "gone-host.invalid") for path in (run_lock, study_lock)
            if path.parent.mkdir() is None]
    try:
        with pytest.raises(UsageError, match=r"\(pid 4242 on gone-host.invalid, since "):
            ip.run_line_magic("jax_train", f"reports_once --storage {tmp_path}")
        ip.run_line_magic("jax_train", f"reports_once --storage {tmp_path} --break-lock -o run")
        assert ip.user_ns["run"].history == [{"loss": 1.0}]
        ip.run_line_magic("jax_tune", f"reports_once --space {{'x': tune.uniform(1, 3)}} "
                                      f"--trials 1 --name study --storage {tmp_path} --break-lock")
        err = capsys.readouterr().err
        assert f"jaxnb: broke the lock {run_lock}, held by pid 4242 on gone-host.invalid" in err
        assert f"jaxnb: broke the lock {study_lock}, held by pid 4242 on gone-host.invalid" in err
    finally:
        for proc in gone:
            ended(proc)
