"""The kernel's side of ``%jax_cluster attach NAME --via [user@]host``: a named cluster started on
another machine (a login node), reached over ssh.

One ssh connection of this kernel's own (a ``ControlMaster``, honouring ``JAXNB_SSH_CONFIG`` and
batch mode, so it never prompts) carries everything: ``python -m jaxnb hold NAME`` on the host
(:mod:`jaxnb._attach.hold`), which takes the cluster over there, prints its record and the
controller's connection as JSON, and stands for this kernel while it runs; and ipyparallel's
own ssh tunnels (``ipp.Client(..., sshserver=...)``), forwarded through that connection. Its
end ends them all: nothing of it is left on either machine. The host is validated as ``--hosts``
entries are before it reaches ssh; the name as cluster names are; the interpreter is quoted.
The connection's key stays in this kernel's memory (no file is written here).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any

from jaxnb._core import cluster_names as names
from jaxnb._core import run_reports
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.host_entries import HostEntry, HostError, parse_entry

#: How long reaching the host and reading the record may take.
CONNECT_SECONDS = 30.0
#: How long ``python -m jaxnb stop NAME`` on the host may take.
STOP_SECONDS = 60.0
#: Runs ssh with SIGINT ignored (kept across exec, and ssh keeps it so): the kernel's Stop button
#: signals the kernel's whole process group, which must not end this kernel's ssh connection.
NO_SIGINT = ("sh", "-c", 'trap "" INT; exec "$@"', "sh")
#: What ipyparallel's tunnel (pyzmq's ``openssh_tunnel``) puts on ssh's command line unquoted.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./-]+\Z")

NONE_THERE = ("no cluster named {name!r} runs on {host}; `ssh {host} {python} -m jaxnb list` shows "
              "those that do, `%jax_cluster start --name {name}` in a kernel there starts one")
TAKEN_THERE = "{line} (on {host}; `%jax_cluster attach {name} --via {host}` takes it back)"
LINK_LOST = ("the ssh connection to {host} was lost; cluster {name!r} may still run there: "
             "`%jax_cluster attach {name} --via {host}` attaches again")
#: Seconds one read of a file on the host may take; how often a run's reports are read there.
READ_SECONDS = 30.0
HOST_POLL_SECONDS = 0.5
NOT_THROUGH_SSH = ("`{what}` does not work through `--via`: cluster {name!r} runs on {host} and "
                   "this kernel reaches it over ssh; do it in a kernel on {host} "
                   "(`%jax_cluster attach {name}` there), or stop it and start it again")
#: ``--break-lock`` through ``--via``: such runs take no lock on the host.
NO_LOCK_THROUGH_SSH = ("`{what}` does not work through `--via`: runs started from this kernel take no "
                       "lock in {host}'s run folders; leave it out, or break the lock in a kernel "
                       "on {host} (`%jax_cluster attach {name}` there)")


def check_via(text: str) -> HostEntry:
    """``[user@]host`` as ``--hosts`` entries are checked (one line when wrong); no count, no
    IPv6 literal (ipyparallel's tunnel cannot take one: name the host in your ssh config)."""
    entry = parse_entry(text)
    if entry.explicit or ":" in entry.host:
        raise HostError(f"--via takes [user@]host, got {text!r}; e.g. --via alice@login1 (an "
                        "IPv6 address: give it a name in ~/.ssh/config)")
    return entry


def check_python(python: str, host: str) -> None:
    """``--python``: a path on ``host`` (one line when not: no newline reaches its shell)."""
    if not python or "\n" in python:
        raise ValueError(f"--python takes the interpreter's path on {host}, got {python!r}")


class RemoteHold:
    """This kernel's hold on named cluster ``name`` on another host (what ``Group.attachment``
    holds for a local one: ``name``, ``supervisor``, ``taken_over()``, ``loaded()``)."""

    loading = None  # nothing is read after the attach (ipyparallel's cluster file is there)
    headless = False  # a kernel's hold, never the supervisor's own

    def __init__(self, name: str, entry: HostEntry, python: str) -> None:
        self.name, self.entry, self.python = names.check(name), entry, python
        self.host = entry.target
        self.supervisor: dict[str, Any] = {}
        #: The host record's runs when this kernel attached, and those it started since (newest last).
        self.runs: list[Any] = []
        self.link_lost = False
        self._said: list[dict[str, Any]] = []
        self._folder = _private_folder()
        self.socket = os.path.join(self._folder, "ssh")
        self._master: subprocess.Popen | None = None
        self._holder: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._heard = threading.Event()

    # ---- the ssh connection ---------------------------------------------------------------

    @property
    def sshserver(self) -> str:
        """ipyparallel's ``sshserver=``: this kernel's connection to the host (its tunnels are
        forwarded through it, with its settings)."""
        return f"-S {self.socket} {self.host}"

    def _ssh(self, *command: str) -> list[str]:
        return [*NO_SIGINT, "ssh", "-S", self.socket, "-o", "ControlMaster=no", "--", self.host,
                *command]

    def connect(self, timeout: float = CONNECT_SECONDS) -> dict[str, Any]:
        """Reach the host, take the cluster over there; its record and controller connection."""
        python = shlex.quote(self.python)
        missing = shlex.quote(f"no interpreter {self.python} on {self.host}; pass --python PATH")
        # the hold is the connection's own session (a multiplexed one would end at the Stop
        # button: ssh's mux client does not keep SIGINT ignored)
        self._open(timeout, f"test -x {python} || {{ echo {missing} >&2; exit 127; }}; "
                            f"exec {python} -m jaxnb hold {self.name}")
        self._holder = self._master
        self._reader = threading.Thread(target=self._read, name="jaxnb-via", daemon=True)
        self._reader.start()
        self._heard.wait(timeout)  # the first line, or the end
        first = self._said[0] if self._said else None
        if first is None or "record" not in first:
            why = self._refused(first)
            self.close()
            raise ClusterStateError(why)
        self.supervisor = first["record"].get("supervisor") or {}
        listed = first["record"].get("runs")
        self.runs = listed if isinstance(listed, list) else []
        return first

    def _read(self) -> None:
        """Collect the hold's JSON lines (``_said``) until it ends (``_heard``: a line came,
        or the end)."""
        assert self._holder is not None and self._holder.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            for line in self._holder.stdout:
                with contextlib.suppress(ValueError):
                    doc = json.loads(line)
                    if isinstance(doc, dict):
                        self._said.append(doc)
                        self._heard.set()
        self._heard.set()

    def _says(self, key: str) -> dict[str, Any] | None:
        """The hold's line with ``key``, once it said one."""
        return next((doc for doc in list(self._said) if key in doc), None)

    def _refused(self, first: dict[str, Any] | None) -> str:
        """One line: why the host did not hand the cluster over."""
        if first is not None and "none" in first:
            return NONE_THERE.format(name=self.name, host=self.host, python=self.python)
        if first is not None and "error" in first:
            return f"{self.host}: {first['error']}"
        said = ""
        if self._holder is not None and self._holder.stderr is not None:
            with contextlib.suppress(Exception):
                self._holder.kill()
                said = self._holder.stderr.read().strip()
        lines = said.splitlines()
        if lines and lines[-1].startswith("no interpreter"):
            return lines[-1]
        why = lines[-1] if lines else f"no answer within {CONNECT_SECONDS:g} s"
        return (f"{self.host} did not hand over cluster {self.name!r} ({why}); check jaxnb is "
                f"installed for {self.python} there, or pass --python PATH")

    # ---- while attached -------------------------------------------------------------------

    def loaded(self, seconds: float = 60.0) -> None:
        """Nothing to wait for (the local attach's ``loaded``)."""

    def taken_over(self) -> str | None:
        """One line when another kernel took the cluster over on the host, or the ssh link is
        gone; ``None`` while this kernel holds it."""
        taken = self._says("taken_over")
        if taken is not None:
            return TAKEN_THERE.format(line=taken["taken_over"], host=self.host, name=self.name)
        holder = self._holder
        if holder is None or holder.poll() is None:
            return None
        self.link_lost = True
        return LINK_LOST.format(host=self.host, name=self.name)

    def refuse(self, what: str) -> ClusterStateError:
        """The one-line error for ``what`` (restart, scale), which needs the host's processes."""
        said = NO_LOCK_THROUGH_SSH if what.lstrip("-") in ("break_lock", "break-lock") else NOT_THROUGH_SSH
        return ClusterStateError(said.format(what=what, name=self.name, host=self.host))

    def signal(self, pids: list[int], signum: int) -> None:
        """``kill -SIGNUM PID...`` on the host (whole numbers only reach its shell)."""
        if pids and self._master is not None and self._master.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(self._ssh("kill", f"-{int(signum)}", *(str(int(p)) for p in pids)),
                               capture_output=True, timeout=10, stdin=subprocess.DEVNULL)

    def note_run(self, name: str, folder: str, kind: str) -> None:
        """Note a run started from here (its folder on the host) in the host's record, through
        the hold there (one JSON line on its stdin); nothing when the connection is gone."""
        self.runs.append({"name": name, "folder": folder, "kind": kind})
        holder = self._holder
        if holder is not None and holder.poll() is None and holder.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                holder.stdin.write(json.dumps({"run": name, "folder": folder, "kind": kind}) + "\n")
                holder.stdin.flush()

    def tail(self, file: str) -> run_reports.Tail:
        """A run's reports file on the host, read over this kernel's ssh connection."""
        return _HostTail(self, file)

    def read_from(self, path: str, offset: int | None) -> bytes | None:
        """File ``path`` on the host from byte ``offset`` on (``tail``; nothing there runs what
        it reads; ``None``: only whether it is there, as ``b""``); None when it is not there.
        A ``ClusterStateError`` (one line, what to do) once the connection is gone."""
        if self._master is None or self._master.poll() is not None:
            raise ClusterStateError(LINK_LOST.format(host=self.host, name=self.name))
        quoted = shlex.quote(path)
        command = f"test -f {quoted}" + ("" if offset is None else
                                         f" && exec tail -c +{int(offset) + 1} -- {quoted}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            out = subprocess.run(self._ssh(command), capture_output=True, timeout=READ_SECONDS,
                                 stdin=subprocess.DEVNULL)
            return out.stdout if out.returncode == 0 else None
        return None

    # ---- the end --------------------------------------------------------------------------

    def detach(self) -> None:
        """Leave the cluster running on the host with no kernel attached."""
        holder = self._holder
        if holder is not None and holder.poll() is None and holder.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                holder.stdin.write("detach\n")
                holder.stdin.flush()
            # its answer, not its end: the connection waits for the client's tunnels to close
            deadline = time.monotonic() + 10
            while self._says("detached") is None and holder.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
        self.close()

    def stop(self) -> bool:
        """``python -m jaxnb stop NAME`` on the host (nothing is left there); False: it did
        not run there (said in one line by the caller)."""
        try:
            if self._master is None or self._master.poll() is not None:
                self.close()
                self._open()
            out = subprocess.run(self._ssh(shlex.quote(self.python), "-m", "jaxnb", "stop", self.name),
                                 capture_output=True, text=True, timeout=STOP_SECONDS,
                                 stdin=subprocess.DEVNULL)
        except (subprocess.TimeoutExpired, ClusterStateError):
            return False
        finally:
            self.close()
        return out.returncode == 0

    def _open(self, timeout: float = CONNECT_SECONDS, command: str = "cat >/dev/null") -> None:
        """Open this kernel's ssh connection to the host, running ``command`` there (a one-line
        error when it cannot). Its stdin is a pipe from this kernel: the kernel's end (even by
        SIGKILL) ends it, and the command there."""
        from jaxnb._hosts.ssh_connections import ssh_options

        if not os.path.isdir(self._folder):
            self._folder = _private_folder()
            self.socket = os.path.join(self._folder, "ssh")
        self._master = master = subprocess.Popen(
            [*NO_SIGINT, "ssh", *ssh_options(self._folder, master=self.socket), "--", self.host,
             command],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket):
            if master.poll() is not None or time.monotonic() > deadline:
                if master.poll() is None:
                    master.kill()
                    master.wait(5)
                said = master.stderr.read().strip().splitlines() if master.stderr else []
                self.close()
                if said and said[-1].startswith("no interpreter"):
                    raise ClusterStateError(said[-1])
                raise ClusterStateError(f"cannot reach {self.host} over ssh ("
                                        f"{said[-1] if said else 'no answer'}); check that `ssh "
                                        f"{self.host}` works without a password prompt")
            time.sleep(0.05)

    def close(self) -> None:
        """End the holder and the ssh connection (and with it every tunnel); remove its folder."""
        for proc in (self._holder, self._master):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(5)
        for proc in (self._holder, self._master):
            for stream in (proc.stdin, proc.stdout, proc.stderr) if proc is not None else ():
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()
        shutil.rmtree(self._folder, ignore_errors=True)


def _private_folder() -> str:
    """A 0700 folder for the ssh socket, on a path ipyparallel's tunnel can put on ssh's
    command line as it is (no space, no ``:``; short: socket paths are limited)."""
    base = tempfile.gettempdir()
    if not _PLAIN_PATH.match(base) or len(base) > 40:
        base = "/tmp"
    _remove_stale(base)
    return tempfile.mkdtemp(prefix="jaxnb-via-", dir=base)


def _remove_stale(base: str, age: float = 60.0) -> None:
    """Remove this user's empty folders left by kernels that were killed (a live connection's
    folder holds its socket: ``rmdir`` leaves it; a new one is spared for ``age`` seconds)."""
    import glob
    import stat

    for path in glob.glob(os.path.join(glob.escape(base), "jaxnb-via-*")):
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
                    and time.time() - info.st_mtime > age):
                os.rmdir(path)


def attach(name: str, via: str, python: str) -> tuple[RemoteHold, dict[str, Any], dict[str, Any]]:
    """Take cluster ``name`` over on host ``via``: the hold, the record, the controller's
    connection (a ``ClusterStateError`` or ``HostError`` in one line when it cannot)."""
    names.check(name)
    entry = check_via(via)
    check_python(python, entry.target)
    hold = RemoteHold(name, entry, python)
    first = hold.connect()
    return hold, first["record"], first["connection"]


def site() -> Any:
    """Where a cluster attached through ssh runs, as failure handling and stop see it: reached
    through ipyparallel only (never by pid: its pids are the host's), not resizable here."""
    from jaxnb._hosts.site_jobs import Site

    class ThroughSsh(Site):
        name = "attached through --via"
        leaves_group_on_stop = False  # the host's supervisor ends every process

        def spares(self, options: Any) -> int:
            return 0

        def signal(self, group: Any, chosen: list[int], signum: int) -> None:
            """By pid on the host, over this kernel's ssh connection (the engines there have
            no nanny to carry ipyparallel's ``send_signal``): an interrupt reaches them."""
            hold = group.attachment
            if isinstance(hold, RemoteHold):
                hold.signal([int(group.processes[p].pid) for p in chosen], int(signum))

    return ThroughSsh()


class _HostTail(run_reports.Tail):
    """:class:`run_reports.Tail` of a file on the host of a cluster attached through ``--via``."""

    def __init__(self, hold: RemoteHold, file: str) -> None:
        super().__init__(file)
        self.hold = hold
        self._read_at = -HOST_POLL_SECONDS

    def exists(self) -> bool:
        return self.hold.read_from(self.file, None) is not None

    def _since(self, offset: int) -> bytes | None:
        """As often as the follower asks at most every ``HOST_POLL_SECONDS`` (an ssh command
        each time); nothing new in between."""
        now = time.monotonic()
        if now - self._read_at < HOST_POLL_SECONDS:
            return b""
        self._read_at = now
        return self.hold.read_from(self.file, offset)
