"""``%jax_cluster list --via [user@]host`` (``jaxnb.clusters(via=...)``): the named clusters of
another machine (a login node), read with ``python -m jaxnb list --json`` over one ssh command
in batch mode (``JAXNB_SSH_CONFIG`` honoured). The host is checked as ``--via`` is for
``attach``, the interpreter quoted; the answer is JSON, kept only where it has the fields of a
listing (reading it runs nothing)."""

from __future__ import annotations

import json
import shlex
import subprocess
from typing import Any

from jaxnb._core.errors import ClusterStateError
from jaxnb._hosts.attach_via import CONNECT_SECONDS, NO_SIGINT, check_python, check_via
from jaxnb._hosts.ssh_connections import ssh_options

CANNOT = ("cannot list the clusters on {host} ({why}); check that `ssh {host}` works without a "
          "password prompt and that jaxnb is installed for {python} there (or pass --python PATH)")


def clusters_on(via: str, python: str) -> list[dict[str, Any]]:
    """The named clusters running on host ``via`` (as :func:`jaxnb._attach.listing.clusters`
    gives them there), with ``python`` there; a ``ClusterStateError`` in one line when not."""
    entry = check_via(via)
    check_python(python, entry.target)
    host, quoted = entry.target, shlex.quote(python)
    missing = shlex.quote(f"no interpreter {python} on {host}; pass --python PATH")
    command = (f"test -x {quoted} || {{ echo {missing} >&2; exit 127; }}; "
               f"exec {quoted} -m jaxnb list --json")
    try:  # a connection of its own (no socket folder), ended with the command
        out = subprocess.run([*NO_SIGINT, "ssh", *ssh_options("", shared=False), "--", host, command],
                             capture_output=True, text=True, timeout=CONNECT_SECONDS,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ClusterStateError(CANNOT.format(host=host, why=f"no answer within {CONNECT_SECONDS:g} s",
                                              python=python)) from None
    said = out.stderr.strip().splitlines()
    if out.returncode != 0:
        if said and said[-1].startswith("no interpreter"):
            raise ClusterStateError(said[-1])
        why = said[-1] if said else f"exit status {out.returncode}"
        raise ClusterStateError(CANNOT.format(host=host, why=why, python=python))
    rows = _rows(out.stdout)
    if rows is None:
        raise ClusterStateError(CANNOT.format(host=host, python=python,
                                              why="its `jaxnb list --json` printed no listing"))
    return rows


def _rows(text: str) -> list[dict[str, Any]] | None:
    """The listing in the last line of ``text`` (rows without a listing's fields left out), or
    ``None`` when that line is not a JSON list."""
    lines = text.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    if not isinstance(found, list):
        return None
    return [row for row in found if _is_row(row)]


def _is_row(row: Any) -> bool:
    return (isinstance(row, dict) and isinstance(row.get("name"), str)
            and isinstance(row.get("processes"), int) and isinstance(row.get("hosts"), list)
            and all(isinstance(h, str) for h in row["hosts"]) and isinstance(row.get("runs"), list)
            and all(isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("name", "kind", "state"))
                    for r in row["runs"])
            and (row.get("attached") is None or isinstance(row.get("attached"), int))
            and (row.get("idle_since") is None or isinstance(row.get("idle_since"), (int, float))))
