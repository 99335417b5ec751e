"""Timed cells for the output tests: every IOPub message of a cell with the time it arrived.

The kernel is :class:`kernel_harness.Kernel` (a real kernel on this Python,
always shut down, nothing left running); this module only adds :meth:`Kernel.timed`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator

from . import kernel_harness
from .factories import environment


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


class Kernel(kernel_harness.Kernel):
    """A real kernel whose cells can also be run with every message timed."""

    def timed(self, code: str, timeout: float = 180) -> Run:
        """Execute ``code``; return its messages (with arrival times) once the kernel is idle."""
        msg_id = self.send(code)
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
        """:meth:`timed`, failing the test with the kernel's traceback if the cell raised."""
        run = self.timed(code, timeout)
        if run.error():
            raise AssertionError(run.error())
        return run


@contextlib.contextmanager
def kernelspec() -> Iterator[str]:
    """A ``JUPYTER_PATH`` holding the test kernelspec (for nbclient), set for the duration."""
    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory(prefix="jaxnb-kernel-") as tmp, environment(JUPYTER_PATH=tmp):
        kernel_harness.write_kernelspec(pathlib.Path(tmp))
        yield kernel_harness.KERNEL_NAME

