"""Every process's Python stack (``%jax_cluster stacks``), mapped to notebook cell lines.

Engines dump their threads with ``faulthandler`` on a signal (see
:mod:`jaxnb._engine.boot.stack_dumps`), which works even while the main thread waits
inside an XLA collective. Only the main thread is shown, trimmed to the frames
that say where the cell (or the training function, run through ipyparallel's
``apply``) waits; frames of any cell jaxnb ran are shown as
``cell line N: <source>``, and jaxnb's own frames are left out.
"""

from __future__ import annotations

import re
import time

from jaxnb._core.messages import label, plural
from jaxnb._core.notebook_cells import CELL_FILE, as_compiled, cell_name, remembered
from jaxnb._core.state import Group
from jaxnb._core.tracebacks import is_entry
from jaxnb._hosts import site

#: How long to wait for the engines to write their dumps.
DUMP_TIMEOUT_SECONDS = 1.0
#: Library frames shown above the innermost cell frame before the rest are folded.
INNER_FRAMES = 2
#: Longest "where" summary (the full line is in the stack below it).
WHERE_WIDTH = 100
NO_DUMP = "(no stack dump: the engine runs on another host or did not answer)"

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>.*)$')
#: The outermost frame of an engine's main thread, started by ``python -m`` (runpy)
#: or ``python -c`` (see :func:`jaxnb._lifecycle.launch.python_cmd`).
_OUTERMOST = ("_run_module_as_main", "<module>")
_HEADER = re.compile(r"^(?:Current thread 0x|Thread 0x|Stack \(most recent call first\))")


def collect(group: Group, processes: list[int] | None = None, cell_code: str = "") -> str:
    """Dump the processes' stacks and return them as one text, one section per process."""
    chosen = group.indices if processes is None else list(processes)
    dumps = read(request(group, chosen))
    return "\n".join(section(group, p, dumps.get(p), cell_code) for p in chosen)


def section(group: Group, p: int, dump: str | None, cell_code: str = "") -> str:
    """``[pI] pid … on host`` and the trimmed main-thread stack of one process."""
    info = group.processes[p]
    body = format_stack(dump, cell_code) if dump else NO_DUMP
    return f"{label(p)} pid {info.pid} on {info.host}:\n{body}"


def request(group: Group, processes: list[int]) -> dict[int, str]:
    """Ask the processes to dump their stacks now; their dump files by process."""
    return site.of(group).request_stacks(group, processes)


def read(paths: dict[int, str], timeout: float = DUMP_TIMEOUT_SECONDS) -> dict:
    """The dumps asked for by :func:`request`, once written (or what is there at ``timeout``)."""
    deadline = time.monotonic() + timeout
    texts: dict[int, str] = {}
    sizes: dict[int, int] = {}
    while True:
        for p, path in paths.items():
            text = _read(path)
            if text and len(text) == sizes.get(p) and is_complete(text):
                texts[p] = text
            sizes[p] = len(text)
        if len(texts) == len(paths) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    for p, path in paths.items():
        texts.setdefault(p, _read(path))
    return {p: t for p, t in texts.items() if t}


def is_complete(text: str) -> bool:
    """A dump is complete once it reaches the main thread's outermost frame."""
    lines = text.rstrip().splitlines()
    frame = _FRAME.match(lines[-1]) if lines else None
    return frame is not None and frame["func"] in _OUTERMOST


def main_thread(dump: str) -> list[tuple[str, int, str]]:
    """Frames (file, line, function), innermost first, of the thread that runs cells."""
    threads: list[list[tuple[str, int, str]]] = []
    current = -1
    for line in dump.splitlines():
        if _HEADER.match(line):
            threads.append([])
            if not line.startswith("Thread"):
                current = len(threads) - 1
            continue
        m = _FRAME.match(line)
        if m and threads:
            threads[-1].append((m["file"], int(m["line"]), m["func"]))
    for frames in threads:
        if frames and frames[-1][2] in _OUTERMOST:
            return frames
    return threads[current] if threads else []


def format_stack(dump: str, cell_code: str = "") -> str:
    """The main thread's stack, most recent call first, trimmed to what says where it waits."""
    frames = main_thread(dump)
    if not frames:
        return "    " + dump.strip().replace("\n", "\n    ")
    outer = next((i for i, f in enumerate(frames) if is_entry(f[0], f[2])), None)
    if outer is None:
        return "    idle (not running a cell or a function)"
    frames = [f for f in frames[:outer] if not _is_jaxnb(f[0])]
    if not frames:
        return "    about to run a cell"
    lines: list[str] = []
    folded: list[str] = []
    for i, (file, line, func) in enumerate(frames):
        cell = _cell_frame(file, line, func, cell_code)
        if cell is None and _is_library(file) and i >= INNER_FRAMES:
            folded.append(_package(file))
            continue
        if folded:
            lines.append(_fold(folded))
            folded = []
        lines.append(cell or f"{_short(file)}:{line} in {func}")
    if folded:
        lines.append(_fold(folded))
    return "\n".join("    " + line for line in lines)


def where(dump: str | None, cell_code: str = "") -> str:
    """One line: where the main thread is in the current cell (else innermost), or ``idle``."""
    if not dump:
        return "an unknown line (no stack dump)"
    frames = main_thread(dump)
    outer = next((i for i, f in enumerate(frames) if is_entry(f[0], f[2])), None)
    if outer is None:
        return "idle"
    inside = frames[:outer]
    cells = [c for c in (_cell_frame(*f, cell_code) for f in inside) if c is not None]
    current = [c for c in cells if c.startswith("cell line")]
    if current or cells:
        text = (current or cells)[0]
        return text if len(text) <= WHERE_WIDTH else text[: WHERE_WIDTH - 3] + "..."
    # A function run through apply (a training run): its innermost frame of the user's code.
    own = [f for f in inside if not _is_library(f[0]) and not _is_jaxnb(f[0])]
    file, line, func = (own or inside or frames)[0]
    return f"{_short(file)}:{line} in {func}"


def waiting_in_jax(dump: str | None) -> bool:
    """True when the innermost Python frame of the main thread is inside JAX (or jaxlib)."""
    frames = main_thread(dump) if dump else []
    return bool(frames) and _package(frames[0][0]) in {"jax", "jaxlib"}


def _cell_frame(file: str, line: int, func: str, cell_code: str) -> str | None:
    m = CELL_FILE.search(file)
    if m is None:
        return None
    name = m["name"]
    current = bool(cell_code) and (name is None or cell_name(cell_code) == name)
    code = remembered(name) if name else None
    if current and code is None:
        code = as_compiled(cell_code)
    inside = f" in {func}" if func != "<module>" else ""
    other = "an earlier cell" if cell_code else "a cell"
    text = f"cell line {line}{inside}" if current else f"line {line} of {other}{inside}"
    lines = (code or "").splitlines()
    source = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return f"{text}: {source}" if source else text


def _is_jaxnb(file: str) -> bool:
    """A frame of jaxnb's own engine code (how a function is called, reports sent)."""
    path = file.replace("\\", "/")
    return "/jaxnb/_engine/" in path or "/jaxnb/_core/" in path


def _is_library(file: str) -> bool:
    return "site-packages" in file or "dist-packages" in file or file.startswith("<frozen")


def _package(file: str) -> str:
    """The installed package a frame's file belongs to ("python" outside site-packages)."""
    short = _short(file)
    return short.split("/")[0].removesuffix(".py") if short != file else "python"


def _short(file: str) -> str:
    """The path below site-packages (or dist-packages); other paths as they are."""
    parts = file.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1 :])
    return file


def _fold(packages: list[str]) -> str:
    names = ", ".join(dict.fromkeys(packages))
    return f"... {plural(len(packages), 'more frame')} in {names}"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""
