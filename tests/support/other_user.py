"""A second, unprivileged user for the shared-machine tests, and a folder both can reach.

The tests plant links, world-writable folders and locks as root (the other user of a shared
machine), then run jaxnb's code as this user (``runuser``), with the system's Python and the
repository on ``PYTHONPATH`` (the modules these tests reach need only the standard library).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

NAME = "jaxnb-other"
REPO = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3"


def _ensure_user() -> pwd.struct_passwd:
    if os.geteuid() != 0 or not shutil.which("runuser") or not os.path.exists(PYTHON):
        pytest.skip("needs root, runuser and /usr/bin/python3 to run as a second user")
    try:
        return pwd.getpwnam(NAME)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", NAME], capture_output=True, text=True)
        try:  # another test worker may have made it meanwhile
            return pwd.getpwnam(NAME)
        except KeyError:
            raise RuntimeError(f"useradd {NAME} failed: {made.stderr.strip()}") from None


@pytest.fixture(name="other_user")
def other_user_fixture() -> pwd.struct_passwd:
    """The unprivileged user (made if absent)."""
    return _ensure_user()


@pytest.fixture(name="shared_folder")
def shared_folder_fixture(other_user: pwd.struct_passwd) -> Iterator[Path]:
    """A folder anyone may write (no sticky bit: team storage), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="jaxnb-shared-", dir="/tmp"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_as(user: pwd.struct_passwd, code: str, *args: str, timeout: float = 60,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run Python ``code`` as ``user``, in the repository, with ``args`` as ``sys.argv[1:]``."""
    return subprocess.run(
        ["runuser", "-u", user.pw_name, "--", "env", f"PYTHONPATH={REPO}", "HOME=/tmp",
         *(f"{k}={v}" for k, v in (env or {}).items()), PYTHON, "-c", code, *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout)


def owned_by(user: pwd.struct_passwd, path: Path, mode: int, text: str | None = None) -> Path:
    """``path`` (written with ``text`` when given) given to ``user`` with ``mode``."""
    if text is not None:
        path.write_text(text)
    os.chown(path, user.pw_uid, user.pw_gid)
    path.chmod(mode)
    return path


def popen_as(user: pwd.struct_passwd, code: str, *args: str) -> subprocess.Popen:
    """Start Python ``code`` as ``user`` (stdout piped, text)."""
    return subprocess.Popen(
        ["runuser", "-u", user.pw_name, "--", "env", f"PYTHONPATH={REPO}", "HOME=/tmp", PYTHON,
         "-c", code, *args], cwd=REPO, stdout=subprocess.PIPE, text=True)
