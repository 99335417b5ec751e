"""The preflight: what each host's interpreter has (versions, GPUs), and what differs from here.

One small program (:data:`REPORT`) runs on every host over its shared ssh
connection before anything is launched; it prints one JSON line. The notebook
side compares it with the same report made here and names, one line per host,
what differs and how to fix it. With ``--platform gpu`` the report also counts
the host's GPUs (``nvidia-smi -L``), so a host entry without ``:count`` gets one
engine per GPU.
"""

from __future__ import annotations

import json

from jaxnb._core.host_entries import HostEntry
from jaxnb._core.spelling import Code, example

#: The packages whose versions must match the notebook's (a mismatch fails late otherwise:
#: inside ``jax.distributed.initialize`` or in the first collective).
PACKAGES = ("jax", "jaxlib", "jaxnb")
MARKER = "__jaxnb_preflight__"

_REPORT_FUNCTION = """
def _jaxnb_report(count_gpus):
    import importlib.metadata as m, platform, shutil, subprocess, sys
    def version(name):
        try:
            return m.version(name)
        except m.PackageNotFoundError:
            return None
    found = {"python": platform.python_version(), "executable": sys.executable,
             "packages": {name: version(name) for name in PACKAGES__}, "gpus": None}
    if count_gpus:
        smi = shutil.which("nvidia-smi")
        found["gpus"] = 0
        if smi:
            try:
                out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
                found["gpus"] = sum(1 for line in out.splitlines() if line.startswith("GPU "))
            except (OSError, subprocess.SubprocessError):
                found["gpus"] = None
    return found
""".replace("PACKAGES__", repr(PACKAGES))

#: Run on a host as ``python -c REPORT ... COUNT_GPUS`` (last argument ``1`` or ``0``); prints
#: ``MARKER {json}``. Imports no JAX.
REPORT = _REPORT_FUNCTION + (
    "import json as _json, sys as _sys\n"
    f"print({MARKER!r}, _json.dumps(_jaxnb_report(_sys.argv[-1] == '1')))\n"
)


def local_report() -> dict:
    """The same report for the notebook's own interpreter (in this process)."""
    namespace: dict = {}
    exec(_REPORT_FUNCTION, namespace)  # the very code the hosts run
    return dict(namespace["_jaxnb_report"](False))


def parse(stdout: str) -> dict:
    """The report in a host's output (``{}`` when it printed none)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            return dict(json.loads(line[len(MARKER):]))
    return {}


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def differences(here: dict, there: dict) -> list[str]:
    """What differs on a host, e.g. ``["jaxlib 0.4.30 (here 0.4.31)"]`` (Python: major.minor)."""
    found = []
    if _minor(there.get("python", "")) != _minor(here.get("python", "")):
        found.append(f"Python {there.get('python')} (here {here.get('python')})")
    for name in PACKAGES:
        mine, theirs = here["packages"].get(name), there.get("packages", {}).get(name)
        if mine != theirs:
            found.append(f"{name} {theirs or 'not installed'} (here {mine})")
    return found


def mismatch_lines(here: dict, reports: dict[str, dict], python: str) -> list[str]:
    """One line per host whose environment differs: what differs and the command that fixes it."""
    lines = []
    for target, there in reports.items():
        diffs = differences(here, there)
        if not diffs:
            continue
        pins = " ".join(
            f"'{n}=={here['packages'][n]}'" for n in PACKAGES
            if here["packages"].get(n) and here["packages"][n] != there.get("packages", {}).get(n)
            and n != "jaxnb"
        )
        fix = []
        if any(d.startswith("Python") for d in diffs):
            fix.append(f"use Python {_minor(here['python'])} there ({example('python', Code('PATH'))})")
        if pins:
            fix.append(f"run `{python} -m pip install {pins}` there")
        if any(d.startswith("jaxnb") for d in diffs):
            fix.append(f"install jaxnb {here['packages']['jaxnb']} there (the notebook's)")
        lines.append(f"{target}: {', '.join(diffs)}; {'; '.join(fix)}")
    return lines


def refusal(lines: list[str], checked: int, hosts: str, fix: str) -> str:
    """The error of a preflight that found ``lines`` (one a host that differs) among ``checked``
    ``hosts`` ("hosts", "nodes of Slurm job 12"): cause first, then each host's line."""
    return (f"preflight: {len(lines)} of {checked} {hosts} differ from this notebook; nothing was "
            f"launched; {fix}\n" + "\n".join(f"    {line}" for line in lines))


def counted_entries(entries: tuple[HostEntry, ...], reports: dict[str, dict]) -> tuple[HostEntry, ...]:
    """``--platform gpu``: an entry without ``:count`` gets one engine per GPU its host has."""
    import dataclasses

    result = []
    for entry in entries:
        gpus = reports.get(entry.target, {}).get("gpus")
        if not entry.explicit and gpus:
            entry = dataclasses.replace(entry, count=int(gpus), explicit=True)
        result.append(entry)
    return tuple(result)


def no_gpu_lines(entries: tuple[HostEntry, ...], reports: dict[str, dict]) -> list[str]:
    """Hosts where ``nvidia-smi -L`` found no GPU (``--platform gpu`` needs one)."""
    return [
        f"{e.target}: no GPU found (nvidia-smi -L lists none, or nvidia-smi is not on its PATH)"
        for e in entries
        if not e.explicit and reports.get(e.target, {}).get("gpus") == 0
    ]
