"""Engines on other hosts through ipyparallel's ssh launcher, made fast and loud.

ipyparallel's ``SSHEngineSetLauncher`` starts hosts one after another, each with
several ssh round trips (shell probe, ``python --version``, ``ipython profile
create``, file copies). jaxnb keeps its launcher and its remote start command
and changes only how it is driven:

- every ssh shares one connection per host (:mod:`.ssh_connections`);
- hosts are launched in parallel; connection info goes in the environment
  (no files copied); no profile is created remotely.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shlex
import subprocess
import sys
import time
import uuid
from typing import Any

import psutil
from ipyparallel.cluster.launcher import LocalEngineLauncher, SSHEngineLauncher, SSHEngineSetLauncher
from ipyparallel.cluster.shellcmd import ShellCommandSend
from traitlets import Dict, List, Unicode

from jaxnb._core.contract import ENV_WORKDIR
from jaxnb._core.errors import StartError
from jaxnb._hosts import oom_killer

#: Wait up to ``timeout`` s for ``pid`` to exit (a zombie counts as exited); say which.
_WAIT = """
import time, psutil
deadline = time.monotonic() + ({timeout} or 60)
while True:
    try:
        gone = psutil.Process({pid}).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        gone = True
    if gone or time.monotonic() > deadline:
        break
    time.sleep(0.1)
print("__running=0__" if gone else "__running=1__")
"""


class FastSSHEngineLauncher(SSHEngineLauncher):
    """ipyparallel's ssh engine launcher, started without its per-engine set-up round trips
    (the host check did them once per host)."""

    #: Set once its engine is known to be gone from its host.
    exited = False
    #: Set when jaxnb stops it (its ssh connection is about to close).
    closing = False
    #: How its engine ended (``was killed by SIGKILL on host``), once read from its log.
    exit_how: str | None = None
    #: When it started its engine (``time.monotonic()``), for the host's kernel log.
    started_at: float | None = None

    @property
    def ssh_sender(self) -> ShellCommandSend:
        """ipyparallel's remote command sender, sending its small receiver with each command
        (so the host's Python need not import all of ipyparallel for every command)."""
        if self._jaxnb_sender is None:
            self._jaxnb_sender = ShellCommandSend(
                self.ssh_cmd, [*self.ssh_args, "--", self.location], self.remote_python,
                send_receiver_code=True, log=self.log,
            )
        return self._jaxnb_sender

    _jaxnb_sender: ShellCommandSend | None = None

    def wait_one(self, timeout: float | None) -> int:
        """Wait on the host until the engine exits (psutil only, not all of ipyparallel) and
        record it; a lost connection is not an exit (the host may come back), and nothing is
        raised while stopping."""
        try:
            out = self.ssh_sender.check_output_python_code(_WAIT.format(pid=int(self.pid), timeout=timeout))
        except subprocess.CalledProcessError:
            if self.closing:
                return -1
            time.sleep(1.0)
            raise TimeoutError("its host does not answer") from None
        if "__running=1__" in out:
            raise TimeoutError("still running")
        self.exited = True
        return -1

    def start(self, hostname: str | None = None, user: str | None = None, port: Any = None) -> None:
        if hostname is not None:
            self.hostname = hostname
        if user is not None:
            self.user = user
        env = self.get_env()
        self.started_at = time.monotonic()
        # ipyparallel's receiver unsets a variable given as "": `env NAME=` sets it empty (no value
        # on the command line); the others travel on ssh's stdin
        empty = [f"{k}=" for k, v in env.items() if v == ""]
        self.pid = self.ssh_sender.cmd_start(
            (["env", *empty] if empty else []) + self.program + self.program_args,
            env={k: v for k, v in env.items() if v != ""}, output_file=self.remote_output_file
        )
        self.notify_start({"host": self.location, "pid": self.pid})
        self._start_waiting()

    def remote_tail(self, lines: int = 40) -> str:
        """The last lines of this engine's log on its host ("" if it cannot be read)."""
        with contextlib.suppress(Exception):
            return self.ssh_sender.check_output(
                ["tail", "-n", str(lines), self.remote_output_file], timeout=5, stdin=subprocess.DEVNULL
            )
        return ""

    def kernel_log(self, lines: int = 300) -> tuple[str, float | None]:
        """The end of its host's kernel log, ``dmesg`` ("" where it cannot be read), and when
        this engine started on that log's clock (``None``: unknown; a pid can be reused)."""
        elapsed = None if self.started_at is None else time.monotonic() - self.started_at
        with contextlib.suppress(Exception):
            out = self.ssh_sender.check_output(
                [f"cat /proc/uptime 2>/dev/null; dmesg 2>/dev/null | tail -n {int(lines)}"],
                timeout=5, stdin=subprocess.DEVNULL)
            first, _, log = out.partition("\n")
            return log, oom_killer.since_start(first, elapsed)
        return "", None

    def abandon(self) -> None:
        """Its host cannot be reached: stop waiting on the engine there (it cannot be killed
        from here now)."""
        self.closing = True

    def kill_group(self, remove_files: bool = True) -> None:
        """SIGKILL the engine, its process group and its nanny (a child in a session of its own);
        ``remove_files``: also what it leaves on its host (not while other engines there use it)."""
        self.closing = True
        pid = started_pid(self)
        if pid is None:  # never started: nothing of it runs (and `kill -1` would kill everything)
            return
        # Also remove what it leaves on its host: the connection file (it holds the message
        # key) and its stacks folder.
        leftovers = [self.remote_connection_files.get("engine", "")] if remove_files else []
        stacks = self.get_env().get("JAXNB_STACKS_DIR", "")
        if remove_files and os.path.basename(stacks).startswith("jaxnb-"):
            leftovers.append(stacks)
        remove = " ".join(shlex.quote(p) for p in leftovers if p)
        # The shell (pid), the engine (its child) and the engine's nanny (the engine's child,
        # in a session of its own).
        family = f"for c in $(ps -o pid= --ppid {pid}); do kill -9 $(ps -o pid= --ppid $c) $c; done"
        # Only while that pid is still the engine's shell (never a reused pid).
        ours = f"ps -o args= -p {pid} | grep -q jaxnb"
        with contextlib.suppress(Exception):
            self.ssh_sender.check_output(
                [f"if {ours}; then {family} 2>/dev/null; kill -9 -- -{pid} {pid} 2>/dev/null; fi; "
                 f"rm -rf -- {remove}; true"],
                timeout=5, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        self.exited = True


class FastSSHEngineSetLauncher(SSHEngineSetLauncher):
    """Starts every host's engines in parallel (ipyparallel's starts them one host at a time)."""

    launcher_class = FastSSHEngineLauncher
    control_dir = Unicode("", config=True, help="folder of the shared ssh connections' sockets")
    local_targets = List(Unicode(), config=True, help="entries whose engines run on this machine")
    workdirs = Dict(config=True, help="--workdir: target -> the folder its engines start in")

    def start(self, n: int) -> list[str]:
        engine_traits = self.launcher_class.class_traits(config=True)
        shared = set(self.traits(config=True)).intersection(engine_traits)
        inherited = shared.difference({"location", "user", "hostname", "to_send", "to_fetch"})
        inherited = inherited.union({"profile_dir", "cluster_id"})
        jobs: list[tuple[str, Any, str | None, str]] = []  # key, launcher, user, host
        for full_host, count in self.engines.items():
            user, host = full_host.split("@", 1) if "@" in full_host else (None, full_host)
            for i in range(min(count, n - len(jobs))):
                kwargs = {attr: getattr(self, attr) for attr in inherited}
                key = f"{full_host}/{i}"
                if full_host in self.local_targets:  # this machine: ipyparallel's local launcher
                    local = set(LocalEngineLauncher.class_traits()) - {"engine_cmd"}  # no shell
                    launcher = self.launchers[key] = LocalEngineLauncher(
                        parent=self, identifier=f"local-{i}",
                        **{k: v for k, v in kwargs.items() if k in local},
                    )
                else:
                    launcher = self.launchers[key] = self.launcher_class(
                        parent=self, identifier=key, to_send=[], **kwargs
                    )
                    if full_host in self.workdirs:  # its copy of --workdir
                        launcher.environment = {**launcher.environment,
                                                ENV_WORKDIR: self.workdirs[full_host]}
                launcher.loop  # noqa: B018 - bind the event loop on this thread
                launcher.jaxnb_place = (full_host, i)  # its --hosts entry and its index there
                launcher.on_stop(self._notice_engine_stopped)
                jobs.append((key, launcher, user, host))

        def launch(job: tuple) -> str | None:
            key, launcher, user, host = job
            try:
                if isinstance(launcher, FastSSHEngineLauncher):
                    launcher.start(user=user, hostname=host)
                else:
                    launcher.start()
            except Exception as exc:  # reported with the host's name
                return f"{key.rsplit('/', 1)[0]}: {exc}"
            return None

        with concurrent.futures.ThreadPoolExecutor(max(1, len(jobs))) as pool:
            failed = [f for f in pool.map(launch, jobs) if f]
        if failed:
            raise StartError(
                "could not launch engines: " + "; ".join(failed)
                + "; check ssh access to those hosts and start again"
            )
        keys = [key for key, *_ in jobs]
        self.notify_start(keys)
        self.n = len(keys)
        return keys

    def kill_all(self) -> None:
        """SIGKILL every engine of this set on its host, all hosts at once."""
        kill_each(list(self.launchers.values()))


def kill_each(launchers: list[Any], remove_files: bool = True) -> None:
    """SIGKILL the launchers' engines, each on its host, all at once (see :func:`kill`)."""
    started = [lch for lch in launchers if started_pid(lch) is not None]
    if started:
        with concurrent.futures.ThreadPoolExecutor(len(started)) as pool:
            list(pool.map(lambda lch: kill(lch, remove_files), started))


def started_pid(launcher: Any) -> int | None:
    """The pid of the process a launcher started, or ``None`` when it started none (ipyparallel's
    launchers say -1 then; a pid ≤ 1 must never reach ``kill``)."""
    pid = getattr(launcher, "pid", None)
    return pid if isinstance(pid, int) and pid > 1 else None


def kill(launcher: Any, remove_files: bool = True) -> None:
    """SIGKILL an engine (and its nanny) on its host, or here for a local one (then reap it)."""
    if isinstance(launcher, FastSSHEngineLauncher):
        launcher.kill_group(remove_files)
        return
    process = getattr(launcher, "process", None)
    if process is None:
        return
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
    with contextlib.suppress(OSError):
        process.kill()
    with contextlib.suppress(Exception):
        process.wait(5)


def run_python(launcher: Any, code: str, *args: str, timeout: float = 5) -> str:
    """Run ``code`` with ``args`` in the engine's interpreter on the engine's host; its stdout."""
    if isinstance(launcher, FastSSHEngineLauncher):
        quoted = [shlex.quote(a) for a in (code, *args)]
        return str(launcher.ssh_sender.check_output(
            [launcher.remote_python, "-c", *quoted], timeout=timeout, stdin=subprocess.DEVNULL
        ))
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
        check=True, stdin=subprocess.DEVNULL,
    ).stdout


#: What the shell around a remote engine writes to its log when the engine exits.
EXIT_LINE = "jaxnb: the engine exited with status"


def reporting_exit(engine_cmd: list[str]) -> list[str]:
    """``engine_cmd`` run by a shell that then writes its exit status to the log (stderr):
    the only process that can know it is the engine's parent. ipyparallel appends the
    engine's arguments, which the shell passes on (``"$@"``)."""
    command = " ".join(shlex.quote(part) for part in engine_cmd)
    script = f'{command} "$@"; s=$?; echo "{EXIT_LINE} $s" >&2; exit $s'
    return ["/bin/sh", "-c", script, "jaxnb-engine"]


def exit_status(log: str) -> str | None:
    """How the engine ended, from the shell's last line in its log (``None`` if not there)."""
    import signal as signals

    for line in reversed(log.splitlines()):
        if line.startswith(EXIT_LINE):
            text = line[len(EXIT_LINE):].strip()
            if not text.isdigit():
                return None
            code = int(text)
            if code > 128:
                with contextlib.suppress(ValueError):
                    return f"was killed by {signals.Signals(code - 128).name}"
            return f"exited with status {code}"
    return None


def send_text(launcher: FastSSHEngineLauncher, text: str) -> None:
    """Write ``text`` to the engine's connection file on its host (0600, atomically)."""
    path = launcher.remote_connection_files["engine"]
    folder = os.path.dirname(path) or "."
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"  # hosts may share a home folder
    launcher.ssh_sender.check_output(
        [f"umask 077 && mkdir -p {shlex.quote(folder)} && cat > {shlex.quote(tmp)} && "
         f"mv {shlex.quote(tmp)} {shlex.quote(path)}"],
        input=text, timeout=10,
    )


def place(launcher: Any) -> tuple[str, int]:
    """The ``--hosts`` target a launcher's engine runs on, and its index among that host's."""
    return tuple(getattr(launcher, "jaxnb_place", ("", 0)))


def exited(launcher: Any) -> bool:
    """True once an ssh launcher's engine is known gone (local engines: see jaxnb._hosts.processes)."""
    return bool(getattr(launcher, "exited", False))


def remote_log_dir(profile_dir: str) -> str:
    """Where ipyparallel's ssh launcher puts engine logs on the hosts (relative to home)."""
    home = os.path.expanduser("~").rstrip("/") + "/"
    relative = profile_dir[len(home):] if profile_dir.startswith(home) else profile_dir
    return os.path.join(relative, "log")


