"""A real Jupyter kernel, driven as a notebook front end drives it.

:class:`Kernel` starts an IPython kernel (``jupyter_client``, a kernelspec that
runs this Python; ``PYTHONPATH`` and the rest of the environment inherited),
runs cells and collects what a front end receives for each: streams, display
data, the execute result and the error (``ename``, ``evalue``, ``traceback``).
:meth:`Kernel.interrupt` is the Stop button (the kernel manager's interrupt).
:meth:`Kernel.shutdown` always stops the kernel and reports any engine or
controller process it left behind.

    with Kernel() as k:
        k.run("%load_ext jaxnb")
        out = k.run("%jax_cluster start -n 2")
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import signal
import sys
import tempfile
import time
from queue import Empty
from typing import Any

import psutil
from jupyter_client import AsyncKernelManager, KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from traitlets import CaselessStrEnum

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tutorials"))
import refresh_outputs

KERNEL_NAME = "jaxnb-test"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclasses.dataclass
class Output:
    """What a front end received for one cell."""

    stdout: str = ""
    stderr: str = ""
    displays: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None  # ename, evalue, traceback (list of str)
    status: str = ""  # the execute_reply's status: ok, error, aborted
    seconds: float = 0.0  # from sending the request to the kernel going idle
    error_at: float | None = None  # when the error message arrived (time.monotonic())
    idle_at: float | None = None  # when the kernel went idle again (time.monotonic())
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The input prompts the kernel showed (stdin requests), in order.
    prompts: list[str] = dataclasses.field(default_factory=list)
    #: An input prompt is waiting for an answer (``collect`` returned at it).
    prompting: bool = False

    @property
    def traceback(self) -> str:
        """The error's traceback as the notebook shows it, colours removed."""
        if self.error is None:
            return ""
        return _ANSI.sub("", "\n".join(self.error["traceback"]))

    @property
    def shown(self) -> str:
        """Everything the notebook shows as text: streams, error, plain-text data."""
        texts = [self.stdout, self.stderr]
        texts += [d["data"].get("text/plain", "") for d in self.displays]
        if self.result:
            texts.append(self.result["data"].get("text/plain", ""))
        return "\n".join([*texts, self.traceback])


#: The kernel's threads' stacks, written on SIGUSR2 to this file in its kernelspec's folder
#: (a cell that times out says where the kernel was).
STACKS_FILE = "kernel-stacks-{pid}.txt"


def _kernel_main(folder: pathlib.Path) -> str:
    """The kernel's ``python -c`` program: faulthandler armed on SIGUSR2, then ipykernel."""
    stacks = str(folder / STACKS_FILE)
    return ("import faulthandler, os, signal; "
            f"faulthandler.register(signal.SIGUSR2, file=open({stacks!r}.format(pid=os.getpid()), 'w'), "
            "all_threads=True); from ipykernel import kernelapp; kernelapp.launch_new_instance()")


def write_kernelspec(root: pathlib.Path) -> pathlib.Path:
    """The kernelspec ``KERNEL_NAME`` (this Python) under ``root/kernels``; that folder. Its
    kernels write their stacks on SIGUSR2 (``STACKS_FILE`` in the kernelspec's folder)."""
    kernels = refresh_outputs.write_kernelspec(root, KERNEL_NAME)
    spec_file = kernels / KERNEL_NAME / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec["argv"] = [sys.executable, "-c", _kernel_main(spec_file.parent), "-f", "{connection_file}"]
    spec_file.write_text(json.dumps(spec))
    return kernels


class IpcKernelManager(AsyncKernelManager):
    """papermill's and nbclient's kernels (``kernel_manager_class=``) on Unix sockets, as
    :class:`Kernel`'s: a TCP port found free can be taken by another process before the kernel
    binds it, and the kernel dies."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)


class Kernel:
    """One running kernel, with a blocking client."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="jaxnb-kernel-")
        kernels = write_kernelspec(pathlib.Path(self._tmp.name))
        specs = KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)
        # Unix sockets, not TCP ports: a port jupyter_client found free can be taken by another
        # process (an engine, a controller) before the kernel binds it; the kernel then dies with
        # "Address already in use", and the client, connected to that stranger's socket, blocks.
        self.manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs,
                                     transport="ipc", ip=os.path.join(self._tmp.name, "kernel"))
        self.manager.start_kernel(cwd=self._tmp.name)
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        # Every process seen below the kernel, by pid; a psutil.Process knows when its pid was
        # reused (pids wrap around quickly on a busy machine), so no stranger is ever killed.
        self.family: dict[int, psutil.Process] = {}
        self._partial: dict[str, Output] = {}  # outputs of cells still running
        self._started: dict[str, float] = {}
        self._stdin_ids: set[str] = set()  # requests that take input prompts

    # ---- running cells ---------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The kernel process's pid."""
        return self.manager.provisioner.process.pid  # type: ignore[union-attr]

    def stacks(self) -> str:
        """Where each of the kernel's threads is now (faulthandler's dump), for a timeout."""
        path = pathlib.Path(self._tmp.name) / "kernels" / KERNEL_NAME / STACKS_FILE.format(pid=self.pid)
        with contextlib.suppress(OSError, psutil.Error):
            os.kill(self.pid, signal.SIGUSR2)
            time.sleep(1.0)
            threads = path.read_text().split("\n\n")  # the cell's own (main) thread first
            threads.sort(key=lambda block: not block.startswith("Current thread"))
            return "the kernel's threads:\n" + "\n\n".join(threads)[:12000]
        return "(the kernel's threads could not be read)"

    def send(self, code: str, stdin: bool = False) -> str:
        """Send ``code`` for execution without waiting; the request's message id. ``stdin``:
        the front end answers input prompts (as JupyterLab does; papermill does not)."""
        msg_id = self.client.execute(code, allow_stdin=stdin)
        if stdin:
            self._stdin_ids.add(msg_id)
        return msg_id

    def collect(self, msg_id: str, timeout: float = 180, until: str | None = None,
                answers: list[str] | None = None) -> Output:
        """Gather the outputs of request ``msg_id`` until the kernel is idle again.

        With ``until``, return as soon as that text appears in stdout or stderr
        (the cell still runs; call :meth:`collect` again for the rest). ``answers`` are typed
        at the cell's input prompts, one each, in order; at a prompt with no answer left,
        return (``prompting``; :meth:`answer` one, then collect again, or interrupt).
        """
        out = self._partial.pop(msg_id, None) or Output()
        out.prompting = False
        answers = list(answers or [])
        started = self._started.setdefault(msg_id, time.monotonic())
        deadline = time.monotonic() + timeout
        while True:
            self.note_family()
            left = deadline - time.monotonic()
            if left <= 0:
                self._partial[msg_id] = out
                raise TimeoutError(f"the cell did not finish within {timeout:g} s:\n{out.shown}"
                                   f"\n{self.stacks()}")
            try:
                if msg_id not in self._stdin_ids:
                    raise Empty
                request = self.client.get_stdin_msg(timeout=0)
            except Empty:
                pass
            else:
                out.prompts.append(request["content"]["prompt"])
                if not answers:
                    out.prompting = True
                    self._partial[msg_id] = out
                    return out
                self.answer(answers.pop(0))
            try:
                wait = 0.05 if msg_id in self._stdin_ids else 0.5  # prompts are looked for between
                msg = self.client.get_iopub_msg(timeout=min(left, wait))
            except Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            out.messages.append(msg)
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    out.stdout += content["text"]
                else:
                    out.stderr += content["text"]
            elif kind in ("display_data", "update_display_data"):
                out.displays.append(content)
            elif kind == "execute_result":
                out.result = content
            elif kind == "error":
                out.error, out.error_at = content, time.monotonic()
            elif kind == "status" and content["execution_state"] == "idle":
                out.idle_at = time.monotonic()
                break
            if until is not None and until in out.stdout + out.stderr:
                self._partial[msg_id] = out
                return out
        out.seconds = time.monotonic() - started
        reply = self.client.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.client.get_shell_msg(timeout=30)
        out.status = reply["content"]["status"]
        return out

    def run(self, code: str, timeout: float = 180, answers: list[str] | None = None) -> Output:
        """Execute ``code`` and return what the front end received; with ``answers``, the front
        end takes input prompts and types these (see :meth:`collect`)."""
        return self.collect(self.send(code, stdin=answers is not None), timeout, answers=answers)

    def answer(self, text: str) -> None:
        """Type ``text`` at the input prompt the kernel is showing."""
        self.client.input(text)

    def ok(self, code: str, timeout: float = 180) -> Output:
        """:meth:`run`, failing loudly if the cell raised."""
        out = self.run(code, timeout)
        if out.error is not None or out.status != "ok":
            raise AssertionError(f"cell failed:\n{code}\n---\n{out.shown}")
        return out

    def value(self, expression: str) -> Any:
        """The value of a JSON-able ``expression`` evaluated in the kernel."""
        out = self.ok(f"import json as _j; print(_j.dumps({expression}))")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def interrupt(self) -> None:
        """Interrupt the kernel as the Stop button does."""
        self.manager.interrupt_kernel()

    # ---- processes -------------------------------------------------------------------

    def descendants(self) -> list[psutil.Process]:
        """Every process below the kernel now."""
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []

    def note_family(self) -> None:
        """Remember every process below the kernel (to check they are gone later)."""
        for proc in self.descendants():
            self.family.setdefault(proc.pid, proc)

    def left_running(self, wait: float = 10.0) -> list[str]:
        """Processes seen below the kernel that still run after ``wait`` seconds."""
        deadline = time.monotonic() + wait
        while True:
            left = [proc for proc in self.family.values() if _running(proc)]
            if not left or time.monotonic() > deadline:
                return [f"{proc.pid} {_command(proc)}" for proc in left]
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the kernel (as when it is killed by the OOM killer or a crash); return once
        it is dead (what it started may still run)."""
        self.note_family()
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.manager.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)

    def crash(self) -> None:
        """SIGKILL the kernel and every process below it, its cluster's supervisor included (as
        when the whole session dies: nothing is left to go on)."""
        self.note_family()
        self.kill()
        for proc in self.family.values():
            with contextlib.suppress(psutil.Error):
                proc.kill()

    def shutdown(self) -> list[str]:
        """Stop the kernel (always); processes it left running (should be none)."""
        self.note_family()
        try:
            self.client.stop_channels()
        finally:
            try:
                # A dead kernel too: shutting it down closes the manager's control socket,
                # without which ZeroMQ's clean-up blocks this process's exit for ever.
                self.manager.shutdown_kernel(now=not self.manager.is_alive())
            finally:
                if self.manager.is_alive():
                    self.manager.shutdown_kernel(now=True)
                self.manager.cleanup_resources()
        left = self.left_running()
        for proc in self.family.values():  # never leave them running, even when a test fails
            if _running(proc):
                with contextlib.suppress(psutil.Error):
                    proc.kill()  # psutil refuses if the pid now belongs to another process
        self._tmp.cleanup()
        return left

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        left = self.shutdown()
        assert not left, f"processes left running after the kernel stopped: {left}"


def _running(proc: psutil.Process) -> bool:
    """True while ``proc`` (this very process, not a later one with its pid) runs."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _command(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:120]
    except psutil.Error:
        return "?"
