"""The wheel, installed the way people install: ``pip wheel`` builds it from the checkout into
``dist/`` (CI keeps it there), then it goes into a fresh virtual environment with its
dependencies only (no system site-packages, no checkout on the path), and that environment
starts a 2-process cluster, runs a cell and stops it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"

SCRIPT = textwrap.dedent("""
    import sys, jaxnb
    assert jaxnb.__file__.startswith(sys.prefix), jaxnb.__file__  # the wheel, not the checkout
    with jaxnb.JaxCluster(n=2, spares=0) as cluster:  # no warm spares: 2 JAX imports fewer
        out = cluster.run("import jax; jax.process_index() * 10 + jax.process_count()", value=True)
        print("value:", out.value)
    print("stopped:", not cluster.running)
""")


@pytest.mark.engines
@pytest.mark.timeout(1200)  # a fresh venv copies JAX and its dependencies (from pip's cache)
def test_the_built_wheel_installs_into_a_fresh_venv_and_runs_a_cluster(tmp_path):
    started = time.monotonic()
    version = next(line.split('"')[1] for line in (ROOT / "pyproject.toml").read_text().splitlines()
                   if line.startswith("version ="))
    wheel = DIST / f"jaxnb-{version}-py3-none-any.whl"
    wheel.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(DIST), str(ROOT)],
                   check=True, timeout=300)
    assert wheel.exists()
    built = time.monotonic()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    # A clean environment, as a user's shell has: a PYTHONPATH that names the checkout (CI's
    # runner had one) let the new venv's pip see the checkout's jaxnb.egg-info and answer "jaxnb
    # is already installed", leaving the venv without it. --no-compile skips writing .pyc files
    # for thousands of modules, the slowest part of an install.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_TARGET", "PIP_PREFIX", "PIP_USER")}
    pip = subprocess.run([str(python), "-m", "pip", "install", "--no-compile", str(wheel)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=900)
    pip_said = "\n".join(line for line in (pip.stdout + pip.stderr).splitlines() if "is ignored" not in line)
    assert pip.returncode == 0, pip_said[-3000:]
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert (pathlib.Path(site) / "jaxnb" / "__init__.py").exists(), pip_said[-3000:]
    installed = time.monotonic()
    ran = subprocess.run([str(python), "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "value: 2" in ran.stdout and "stopped: True" in ran.stdout, ran.stdout
    print(f"wheel built in {built - started:.1f} s, installed in {installed - built:.1f} s, "
          f"cluster ran in {time.monotonic() - installed:.1f} s (load {os.getloadavg()[0]:.1f})")
