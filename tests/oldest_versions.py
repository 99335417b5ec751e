"""Check that the oldest-versions venv (``bash dev test oldest``) runs what pyproject.toml
promises: each pin in ``.ci/oldest.txt`` is installed, and equals the floor pyproject.toml gives
(``>=X``) for that dependency. Run as a script; also a millisecond test of the two files."""

from __future__ import annotations

import pathlib
import re
import sys
from importlib import metadata

from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parent.parent


def pins() -> dict[str, str]:
    """``.ci/oldest.txt``: name -> version."""
    found = {}
    for line in (ROOT / ".ci" / "oldest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            found[name.strip().lower()] = version.strip()
    return found


def floors() -> dict[str, str]:
    """pyproject.toml's runtime dependencies: name -> floor."""
    text = (ROOT / "pyproject.toml").read_text()
    block = text[text.index("dependencies = [") : text.index("]", text.index("dependencies = ["))]
    return {m[1].lower(): m[2] for m in re.finditer(r'"([A-Za-z0-9_.-]+)>=([0-9.]+)"', block)}


def differences() -> list[str]:
    """What differs between pyproject's floors and the pins (jaxlib follows jax's pin)."""
    p, f = pins(), floors()
    out = [f"{name}: pyproject says >={floor}, .ci/oldest.txt pins {p.get(name)}"
           for name, floor in f.items() if name not in p or Version(p[name]) != Version(floor)]
    return out + [f"{name}: pinned but not a dependency" for name in p if name not in f and name != "jaxlib"]


def main() -> int:
    problems = differences()
    for name, version in pins().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed is None or Version(installed) != Version(version):
            problems.append(f"{name}: {installed} installed, {version} pinned")
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
