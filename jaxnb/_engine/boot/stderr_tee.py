"""What an engine writes to fd 2 from C or C++ reaches its log at once, and the cell's output.

ipykernel points an engine's fd 2 at a pipe that one of its threads reads and forwards to
the notebook and to the log. A process that aborts right after writing (``std::terminate``
with gloo's "Received data size doesn't match expected size", a failed XLA ``CHECK``) dies
before that thread has read or echoed the words, and the one line that says why is lost.

So jaxnb's engines keep ipykernel off fd 2 (ipyparallel's ``IPEngine.out_stream_factory``:
:func:`jaxnb._core.ipykernel_internals.tee_out_stream`) and point it at a small tee process
instead: it writes what arrives to the log first, then back to the engine, whose thread
forwards it to the cell as ipykernel's would. An engine that dies has had every byte it wrote logged already.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

#: The tee: copy stdin to the log, then to the engine's pipe (which fails once the engine is
#: gone: the log still gets the rest). Exits at EOF: when the engine, and every process that
#: inherited its fd 2, have ended.
_TEE = """
import os, sys
source, log, engine = (int(a) for a in sys.argv[1:4])
while data := os.read(source, 65536):
    os.write(log, data)
    if engine >= 0:
        try:
            os.write(engine, data)
        except OSError:
            os.close(engine)
            engine = -1
"""

_tee: list[subprocess.Popen] = []


def start() -> tuple[int, int] | None:
    """Point fd 2 at a new tee into the log (fd 2 as this process started); the descriptor
    where what it wrote comes back, and one of the log (``None``: no tee, fd 2 as it was)."""
    if _tee:
        return None
    to_tee, from_engine = os.pipe()
    back, to_engine = os.pipe()
    log = os.dup(2)
    try:
        _tee.append(subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _TEE, "0", str(log), str(to_engine)],
            stdin=to_tee, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(log, to_engine), start_new_session=True,
        ))
    except OSError:
        for fd in (to_tee, from_engine, back, to_engine, log):
            os.close(fd)
        return None
    for fd in (to_tee, to_engine):
        os.close(fd)
    sys.stderr.flush()
    os.dup2(from_engine, 2)
    os.close(from_engine)
    return back, log


def pid() -> int:
    """The tee's pid (0: this process has none)."""
    return _tee[0].pid if _tee else 0


def forward(back: int, write: Callable[[str], Any]) -> None:
    """What reached fd 2 (read from ``back``), to the cell's stderr through ``write``, but the
    C++ libraries' informational lines, which stay in the log (:mod:`.cxx_lines`)."""
    from jaxnb._engine.boot import cxx_lines

    router = cxx_lines.Router()
    with contextlib.suppress(OSError):
        while True:
            if not select.select([back], [], [], 1.0)[0]:  # quiet: held lines now due
                late = "".join(router.expired(time.monotonic()))
                if late:
                    write(late)
                continue
            data = os.read(back, 65536)
            if not data:
                break
            text = router.feed(data.decode(errors="replace"))
            if text:
                write(text)
