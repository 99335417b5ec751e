"""The compilation cache's folder holds code: made 0700, and refused (the cache off, the reason
in ``%jax_cluster status``) when another user could write it or owns it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.other_user import (  # noqa: F401 - fixtures
    other_user_fixture,
    owned_by,
    run_as,
    shared_folder_fixture,
)

from jaxnb._widgets.devices import cache_lines

REPO = Path(__file__).resolve().parents[1]
ASKS = "import sys\nfrom jaxnb._engine.compile.cache_folder import refusal\nprint(refusal(sys.argv[1]))\n"

WRITABLE = ("{folder} is writable by others, mode {mode}: the cache holds executables this job "
            "runs, so anyone who can write it could run code in the job; chmod 700 it")


def test_planted_cache_folders_are_refused_to_a_second_user(other_user, shared_folder):
    planted = shared_folder / "xla"  # root's, and anyone may write it
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    (shared_folder / "mine").mkdir()
    theirs = owned_by(other_user, shared_folder / "mine", 0o700)
    fresh = shared_folder / "home" / "cache"
    (shared_folder / "home").mkdir()
    owned_by(other_user, shared_folder / "home", 0o755)

    def asked(folder: Path) -> str:
        done = run_as(other_user, ASKS, str(folder))
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert asked(planted) == (f"{planted} belongs to root, not to {other_user.pw_name}: the cache "
                              "holds executables this job runs, so only a folder of yours is used")
    assert asked(theirs) == "None"
    theirs.chmod(0o757)
    assert asked(theirs) == WRITABLE.format(folder=theirs, mode="drwxr-xrwx")
    assert asked(fresh) == "None"
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700


ENABLES = """
import json, os
from jaxnb._engine.compile import cache
print(json.dumps([cache.enable_from_env(), cache.describe()]))
"""


@pytest.mark.engines  # starts a Python process that loads JAX
def test_a_world_writable_cache_is_turned_off_and_status_says_why(tmp_path):
    folder = tmp_path / "xla"
    folder.mkdir()
    folder.chmod(0o777)
    done = subprocess.run([sys.executable, "-c", ENABLES], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO),
                                            "JAXNB_COMPILE_CACHE": str(folder)})
    assert done.returncode == 0, done.stderr
    folder_used, described = json.loads(done.stdout.splitlines()[-1])
    problem = WRITABLE.format(folder=folder, mode="drwxrwxrwx").replace("others", "its group and others")
    assert folder_used is None and described["folder"] is None
    assert described["problem"] == problem

    class Process:
        host, compile_cache = "here", described

    assert cache_lines([Process()]) == [
        f"compile cache: off ({problem}; pass compile_cache='DIR' with a folder it can write)"]
