"""A real Jupyter kernel on this Python, for output tests: run code, keep every IOPub message with its time.

The kernel runs ``sys.executable`` through a kernelspec written to a temporary
``JUPYTER_PATH`` (as the tutorial tests do); it inherits ``PYTHONPATH``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Iterator

from jupyter_client import KernelManager

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tutorials"))
from refresh_outputs import KERNEL_NAME, write_kernelspec


@dataclasses.dataclass
class Message:
    """One IOPub message of a cell, with the wall-clock time it reached this client."""

    at: float
    kind: str
    content: dict

    @property
    def text(self) -> str:
        """The text it shows: a stream's text, or a display's ``text/plain``."""
        if self.kind == "stream":
            return self.content["text"]
        return self.content.get("data", {}).get("text/plain", "")


@dataclasses.dataclass
class Run:
    """The IOPub messages of one executed cell; ``end``: when the kernel went idle."""

    messages: list[Message]
    end: float

    def stream(self, name: str = "stdout") -> str:
        return "".join(m.text for m in self.messages if m.kind == "stream" and m.content["name"] == name)

    def displays(self) -> list[Message]:
        return [m for m in self.messages if m.kind in ("display_data", "update_display_data")]

    def error(self) -> str | None:
        for m in self.messages:
            if m.kind == "error":
                return "\n".join(m.content["traceback"])
        return None


class Kernel:
    """A started kernel with its blocking client."""

    def __init__(self, kernel_name: str = KERNEL_NAME):
        self.manager = KernelManager(kernel_name=kernel_name)
        self.manager.start_kernel()
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 180) -> Run:
        """Execute ``code``; return its messages once the kernel is idle again."""
        msg_id = self.client.execute(code)
        messages = []
        deadline = time.monotonic() + timeout
        while True:
            msg = self.client.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
            at = time.time()
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "status" and msg["content"]["execution_state"] == "idle":
                return Run(messages, at)
            messages.append(Message(at, kind, msg["content"]))

    def check(self, code: str, timeout: float = 180) -> Run:
        """``run``, failing the test with the kernel's traceback if the cell raised."""
        run = self.run(code, timeout)
        if run.error():
            raise AssertionError(run.error())
        return run

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@contextlib.contextmanager
def kernelspec() -> Iterator[str]:
    """A ``JUPYTER_PATH`` holding the kernelspec ``KERNEL_NAME``, set for the duration."""
    previous = os.environ.get("JUPYTER_PATH")
    with tempfile.TemporaryDirectory(prefix="jaxnb-kernel-") as tmp:
        write_kernelspec(pathlib.Path(tmp) / "jupyter")
        os.environ["JUPYTER_PATH"] = str(pathlib.Path(tmp) / "jupyter")
        try:
            yield KERNEL_NAME
        finally:
            if previous is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = previous


@contextlib.contextmanager
def kernel() -> Iterator[Kernel]:
    """A real kernel for the duration; always shut down."""
    with kernelspec() as name:
        k = Kernel(name)
        try:
            yield k
        finally:
            k.shutdown()
