"""One JupyterLab server on loopback for the browser tests: a temp dir, a token, a kernelspec.

The server (JupyterLab, which also serves Notebook 7's pages) runs this Python;
its kernels run this Python with this checkout first on ``PYTHONPATH``. Nothing
of the user's Jupyter setup is read or written: config, data, runtime, settings
and workspaces all live in the temp dir.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import nbformat
import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tutorials"))
import refresh_outputs

from .factories import free_port

KERNEL_NAME = "jaxnb-browser-tests"
REPO = pathlib.Path(__file__).resolve().parents[2]
#: Lab settings that keep pop-ups (news, update checks) off the page under test.
SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
    # every cell in the DOM and laid out (the default defers cells out of view)
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def chromium_path() -> str | None:
    """The system Chromium (Debian's ``chromium``), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def missing() -> str:
    """Why the browser tests cannot run here ('' when they can)."""
    if chromium_path() is None:
        return "chromium is not installed (apt-get install chromium; .ci/run does)"
    for module in ("jupyterlab", "notebook", "playwright"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[test]')"
    return ""


@dataclass
class LabServer:
    """A running server: its URL, token, notebook folder and process."""

    url: str
    token: str
    root: pathlib.Path
    process: subprocess.Popen

    def page_url(self, path: str, front_end: str = "lab") -> str:
        """The address of notebook ``path`` in JupyterLab ("lab") or Notebook 7 ("notebook")."""
        prefix = "lab/tree" if front_end == "lab" else "notebooks"
        return f"{self.url}/{prefix}/{path}?token={self.token}"

    def write_notebook(self, path: str, cells: list[str]) -> str:
        """Write a notebook of code ``cells`` that uses the test kernel; its path."""
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
        nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": KERNEL_NAME,
                                     "language": "python"}
        nbformat.write(nb, self.root / path)
        return path

    def api(self, path: str, method: str = "GET") -> object:
        """Call the server's REST API; the decoded JSON (None when empty)."""
        req = urllib.request.Request(f"{self.url}/api/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as reply:
            body = reply.read()
        return json.loads(body) if body else None

    def run_in_kernels(self, code: str, timeout: float = 90.0) -> None:
        """Run ``code`` in every kernel through its connection file, beside the page: a test's
        clean-up when its page cannot do it (a run left going would make the next tests fail)."""
        from jupyter_client import BlockingKernelClient

        for kernel in self.api("kernels"):  # type: ignore[union-attr]
            client = BlockingKernelClient()
            client.load_connection_file(str(self.root.parent / "runtime" / f"kernel-{kernel['id']}.json"))
            client.start_channels()
            try:
                client.execute_interactive(code, timeout=timeout, output_hook=lambda _msg: None)
            finally:
                client.stop_channels()

    def shutdown_kernels(self) -> None:
        """Shut every kernel down (each one's cluster stops with it)."""
        for kernel in self.api("kernels"):  # type: ignore[union-attr]
            self.api(f"kernels/{kernel['id']}", method="DELETE")


def _write_setup(tmp: pathlib.Path) -> dict[str, str]:
    """Kernelspec and Lab settings under ``tmp``; the environment that points Jupyter at them."""
    data = tmp / "data"
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    refresh_outputs.write_kernelspec(data, KERNEL_NAME,
                                     env={"PYTHONPATH": pythonpath, "JAX_PLATFORMS": "cpu"})
    # ipyparallel's server extension would list (and prune) every cluster in ~/.ipython
    server_config = tmp / "config" / "jupyter_server_config.json"
    server_config.parent.mkdir(parents=True)
    server_config.write_text(json.dumps({"ServerApp": {"jpserver_extensions": {"ipyparallel": False}}}))
    page_config = tmp / "config" / "labconfig" / "page_config.json"
    page_config.parent.mkdir(parents=True)
    page_config.write_text(json.dumps({"disabledExtensions": {"ipyparallel-labextension": True}}))
    for name, values in SETTINGS.items():
        target = tmp / "settings" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    env = dict(os.environ, JUPYTER_PATH=str(data), JUPYTER_DATA_DIR=str(tmp / "userdata"),
               JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"), PYTHONPATH=pythonpath)
    env.pop("JUPYTER_TOKEN", None)
    return env


def start(tmp: pathlib.Path, timeout: float = 90.0) -> LabServer:
    """Start JupyterLab in ``tmp`` on a free loopback port; return once it answers. A port taken
    meanwhile (by another test worker; what listens there may answer in another protocol) makes
    JupyterLab exit: it starts again on another one."""
    root = tmp / "notebooks"
    root.mkdir()
    env = _write_setup(tmp)
    token = secrets.token_hex(16)
    log = open(tmp / "server.log", "ab")  # noqa: SIM115 - lives as long as the server
    deadline = time.monotonic() + timeout
    for _attempt in range(5):
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
             f"--ServerApp.root_dir={root}",
             f"--MappingKernelManager.default_kernel_name={KERNEL_NAME}",
             "--ServerApp.open_browser=False", "--allow-root", "--LabApp.news_url=",
             "--ServerApp.disable_check_xsrf=True"],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        server = LabServer(f"http://127.0.0.1:{port}", token, root, process)
        while process.poll() is None:
            try:
                server.api("status")
                return server
            except (OSError, http.client.HTTPException):  # not up yet, or another's port
                if time.monotonic() > deadline:
                    stop(server)
                    raise RuntimeError(f"JupyterLab did not answer within {timeout:g} s") from None
                time.sleep(0.3)
        if "already in use" not in (tmp / "server.log").read_text(errors="replace"):
            break
    raise RuntimeError(f"JupyterLab exited ({process.returncode}); see {tmp / 'server.log'}")


def serving(tmp: pathlib.Path) -> Iterator[LabServer]:
    """A module fixture's body: a server in ``tmp``, stopped after; fails if it left processes."""
    server = start(tmp)
    yield server
    leaked = stop(server)
    assert not leaked, f"processes left after the server stopped (killed now): {leaked}"


def stop(server: LabServer, timeout: float = 30.0) -> list[str]:
    """Shut kernels and server down; the command lines of processes that had to be killed."""
    try:
        descendants = psutil.Process(server.process.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    with contextlib.suppress(OSError):
        server.shutdown_kernels()
    server.process.terminate()
    try:
        server.process.wait(timeout)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout)
    _, alive = psutil.wait_procs(descendants, timeout=timeout)
    leaked = []
    for proc in alive:
        try:
            leaked.append(" ".join(proc.cmdline())[:200])
            proc.kill()
        except psutil.Error:
            pass
    return leaked
