"""``--workdir DIR``: the notebook's folder on every host, compared by content, copied if needed.

Each host hashes (over its shared ssh connection) the folder at the same path and
at its copy's place (``~/.cache/jaxnb/workdirs/NAME-HOSTNAME``); a host that has
neither with this folder's content gets it copied there: ``rsync`` over the same
ssh connection (only what changed), or ``tar`` piped through ssh where either side
lacks rsync. Files matching ``--workdir-exclude`` patterns (data, checkpoints) are
left out of the hash and the copy. The engines then start in the folder each host
has, which is first on their ``sys.path`` (see :mod:`jaxnb._engine.boot.enter_workdir`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import time

from jaxnb._core.errors import StartError
from jaxnb._core.messages import plural
from jaxnb._core.spelling import bare

#: Left out unless the user's patterns say otherwise (never needed on the hosts).
DEFAULT_EXCLUDES = (".git", "__pycache__", ".ipynb_checkpoints")
MARKER = "__jaxnb_workdir__"

_TREE = """
def _jaxnb_tree(root, excludes):
    import fnmatch, hashlib, os
    def left_out(rel, name):
        for pattern in excludes:
            if "/" in pattern.strip("/"):
                if fnmatch.fnmatch(rel, pattern.strip("/")):
                    return True
            elif fnmatch.fnmatch(name, pattern.strip("/")):
                return True
        return False
    if not os.path.isdir(root):
        return None, 0, 0
    digest, files, size = hashlib.sha256(), 0, 0
    for folder, subfolders, names in os.walk(root):
        base = os.path.relpath(folder, root)
        base = "" if base == "." else base + "/"
        subfolders[:] = sorted(d for d in subfolders if not left_out(base + d, d))
        for name in sorted(names):
            rel = base + name
            path = os.path.join(folder, name)
            if left_out(rel, name) or not os.path.isfile(path):
                continue
            digest.update(rel.encode() + b"\\0")
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
                    size += len(chunk)
            digest.update(b"\\0")
            files += 1
    return digest.hexdigest(), files, size
"""

#: On a host: ``python -c _PROBE PATH NAME EXCLUDES_JSON``; prints MARKER {json}.
_PROBE = _TREE + f"""
import json, os, shutil, socket, sys
path, name, excludes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
copy = os.path.join(os.path.expanduser("~"), ".cache", "jaxnb", "workdirs",
                    name + "-" + socket.gethostname())
print({MARKER!r}, json.dumps({{"at_path": _jaxnb_tree(path, excludes)[0], "copy": copy,
      "at_copy": _jaxnb_tree(copy, excludes)[0], "rsync": bool(shutil.which("rsync")),
      "hostname": socket.gethostname()}}))
"""


@dataclasses.dataclass(frozen=True)
class Placed:
    """Where one host's engines start, and what it took to get the folder there."""

    target: str
    folder: str
    hostname: str = ""
    copied: bool = False
    files: int = 0
    size: int = 0
    seconds: float = 0.0
    how: str = ""


def tree(folder: str, excludes: tuple[str, ...]) -> tuple[str | None, int, int]:
    """(content hash, files, bytes) of ``folder`` without the excluded files; as hosts compute it."""
    namespace: dict = {}
    exec(_TREE, namespace)  # the very code the hosts run
    return namespace["_jaxnb_tree"](folder, list(excludes))


def copy_name(folder: str) -> str:
    """The copy's folder name on hosts: the folder's name and a hash of its path here."""
    return f"{os.path.basename(folder.rstrip('/')) or 'root'}-{hashlib.sha1(folder.encode()).hexdigest()[:8]}"


def place(
    targets: list[str], folder: str, excludes: tuple[str, ...], python: str, ssh_args: list[str],
) -> list[Placed]:
    """Make ``folder`` (this content) available on every host; where each has it."""
    excludes = (*DEFAULT_EXCLUDES, *excludes)
    here, files, _ = tree(folder, excludes)
    probe_args = [folder, copy_name(folder), json.dumps(list(excludes))]
    remote = " ".join(shlex.quote(a) for a in [python, "-c", _PROBE, *probe_args])
    local_rsync = shutil.which("rsync") is not None

    def one(target: str) -> Placed:
        out = subprocess.run(["ssh", *ssh_args, "--", target, remote], capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
        found = next((json.loads(line[len(MARKER):]) for line in out.stdout.splitlines()
                      if line.startswith(MARKER)), None)
        if out.returncode != 0 or found is None:
            said = (out.stderr.strip() or out.stdout.strip()).splitlines()[-3:]
            raise StartError(f"{bare('workdir')}: cannot check {folder} on {target}: {' | '.join(said)}")
        name = found["hostname"]
        if found["at_path"] == here:
            return Placed(target, folder, name)
        copy = found["copy"]
        if found["at_copy"] == here:
            return Placed(target, copy, name)
        started = time.monotonic()
        if local_rsync and found["rsync"]:
            sent, count = _rsync(target, folder, copy, excludes, ssh_args)
            how = "rsync"
        else:
            sent, count = _tar(target, folder, copy, excludes, ssh_args), files
            how = "tar over ssh"
        return Placed(target, copy, name, True, count, sent, time.monotonic() - started, how)

    with concurrent.futures.ThreadPoolExecutor(max(1, len(targets))) as pool:
        return list(pool.map(one, targets))


def _rsync(target: str, folder: str, copy: str, excludes: tuple[str, ...],
           ssh_args: list[str]) -> tuple[int, int]:
    rules = [f"--exclude={'/' + p.strip('/') if '/' in p.strip('/') else p}" for p in excludes]
    shell = " ".join(shlex.quote(a) for a in ["ssh", *ssh_args])
    out = subprocess.run(
        ["rsync", "-a", "--delete", "--stats", "--mkpath", *rules, "-e", shell, "--",
         folder.rstrip("/") + "/", f"{target}:{copy}/"],
        capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL,
    )
    if out.returncode != 0:
        said = out.stderr.strip().splitlines()[-3:]
        raise StartError(f"{bare('workdir')}: rsync to {target}:{copy} failed: {' | '.join(said)}")
    sent = _stat(out.stdout, "Total transferred file size")
    count = _stat(out.stdout, "Number of regular files transferred")
    return sent, count


def _stat(text: str, name: str) -> int:
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return int(line.split(":", 1)[1].split()[0].replace(",", ""))
    return 0


def _tar(target: str, folder: str, copy: str, excludes: tuple[str, ...], ssh_args: list[str]) -> int:
    rules = [f"--exclude={p}" for p in excludes]
    unpack = f"rm -rf {shlex.quote(copy)} && mkdir -p {shlex.quote(copy)} && tar -C {shlex.quote(copy)} -xf -"
    tar = subprocess.Popen(["tar", "-C", folder, *rules, "-cf", "-", "."], stdout=subprocess.PIPE)
    out = subprocess.run(["ssh", *ssh_args, "--", target, unpack], stdin=tar.stdout, capture_output=True,
                         text=True, timeout=3600)
    tar.wait()
    if out.returncode != 0 or tar.returncode != 0:
        raise StartError(f"{bare('workdir')}: copying to {target}:{copy} failed: {out.stderr.strip()[-300:]}")
    return tree(folder, excludes)[2]


def summary(folder: str, placed: list[Placed]) -> list[str]:
    """Lines for the notebook: which hosts have the folder, what was copied, how big, how long."""
    lines = []
    seen = [p.target for p in placed if not p.copied and p.folder == folder]
    cached = [p.target for p in placed if not p.copied and p.folder != folder]
    if seen:
        lines.append(f"jaxnb: --workdir {folder}: already on {', '.join(seen)} (same content)")
    if cached:
        lines.append(f"jaxnb: --workdir {folder}: unchanged copy on {', '.join(cached)}")
    for p in placed:
        if p.copied:
            lines.append(
                f"jaxnb: --workdir {folder} copied to {p.target}:{p.folder} ({plural(p.files, 'file')}, "
                f"{_size(p.size)} in {p.seconds:.2f} s, {p.how})"
            )
    return lines


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return f"{n} B"
