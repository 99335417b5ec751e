"""One shared ssh connection per host (``ControlMaster``), opened by a quick check of every
host at once: the check names a host that cannot be reached or lacks the interpreter or jaxnb,
with what ssh or the host printed, within seconds. Later ssh commands (launch, logs, stacks,
cuts, probes) reuse the connection."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
import time

from jaxnb._core.errors import StartError
from jaxnb._core.host_entries import HostEntry

#: ssh client config the lab tests (or a user) pass instead of ~/.ssh/config.
SSH_CONFIG_VARIABLE = "JAXNB_SSH_CONFIG"
CONNECT_TIMEOUT_SECONDS = 5
#: A broken link closes the shared connection after about 3 × 2 s.
ALIVE_INTERVAL_SECONDS = 2
_CHECK = (
    "import importlib.util as u, os, sys\n"
    "missing = [m for m in ('jaxnb', 'ipyparallel') if u.find_spec(m) is None]\n"
    "if missing: sys.exit('cannot import ' + ', '.join(missing) + ' with ' + sys.executable)\n"
    "os.makedirs(sys.argv[1], exist_ok=True)\n"
)


def ssh_options(
    control_dir: str, *, shared: bool = True, connect_timeout: int = CONNECT_TIMEOUT_SECONDS,
    master: str | None = None,
) -> list[str]:
    """ssh arguments: batch mode, short timeouts, one shared connection per host (``master``:
    this ssh is the shared connection, its socket at that path, ending with it)."""
    args = []
    config = os.environ.get(SSH_CONFIG_VARIABLE)
    if config:
        args += ["-F", config]
    args += [
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={connect_timeout}",
        "-o", f"ServerAliveInterval={ALIVE_INTERVAL_SECONDS}",
        "-o", "ServerAliveCountMax=3",
    ]
    if master is not None:
        args += ["-o", "ControlMaster=yes", "-o", f"ControlPath={master}", "-o", "ControlPersist=no"]
    elif shared:
        args += [
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={control_dir}/%C",
            "-o", "ControlPersist=30",
        ]
    else:
        args += ["-o", "ControlPath=none"]
    return args


def new_control_dir() -> str:
    """A private folder for the shared connections' sockets."""
    return tempfile.mkdtemp(prefix="jaxnb-ssh-")


def check_hosts(
    entries: tuple[HostEntry, ...], python: str, env: dict[str, str], control_dir: str,
    log_dir: str, timeout: float, count_gpus: bool = False, leave_out: str = "leave them out of --hosts",
) -> dict[str, dict]:
    """Reach every host at once (opening its shared connection); check its interpreter and jaxnb;
    return each host's preflight report (versions, GPUs: see :mod:`jaxnb._hosts.preflight`).

    Raises :class:`StartError` naming every host that failed, with what it printed, and that
    the user may fix them or ``leave_out`` them.
    """
    from jaxnb._hosts import preflight

    targets = list(dict.fromkeys(entry.target for entry in entries))
    assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    missing = shlex.quote(f"no interpreter {python} on this host")
    remote = (
        f"test -x {shlex.quote(python)} || {{ echo {missing} >&2; "
        f"exit 127; }}; env {assign} {shlex.quote(python)} -c "
        f"{shlex.quote(_CHECK + preflight.REPORT)} {shlex.quote(log_dir)} {int(count_gpus)}"
    )
    reports: dict[str, dict] = {}

    def check(target: str) -> str | None:
        try:
            out = subprocess.run(
                ["ssh", *ssh_options(control_dir), "--", target, remote],
                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return f"no answer within {timeout:g} s"
        if out.returncode == 0:
            reports[target] = preflight.parse(out.stdout)
            return None
        said = (out.stderr.strip() or out.stdout.strip()).splitlines()[-6:]
        if out.returncode == 255:
            return "cannot be reached over ssh: " + " | ".join(said)
        return " | ".join(said) or f"its check exited with status {out.returncode}"

    with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:
        problems = {t: p for t, p in zip(targets, pool.map(check, targets), strict=True) if p}
    if problems:
        lines = [f"    {t}: {p}" for t, p in problems.items()]
        raise StartError(
            f"{len(problems)} of {len(targets)} hosts cannot run an engine "
            f"({', '.join(problems)}); fix them (ssh access, --python {python}, jaxnb installed "
            f"there) or {leave_out}\n" + "\n".join(lines)
        )
    return reports


def close_connections(control_dir: str | None, targets: list[str]) -> None:
    """Close the shared connections (their master processes exit) and remove their folder."""
    if not control_dir:
        return
    procs = []
    for target in targets:
        with contextlib.suppress(OSError):
            procs.append(subprocess.Popen(
                ["ssh", *ssh_options(control_dir), "-O", "exit", "--", target],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            ))
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
    shutil.rmtree(control_dir, ignore_errors=True)


#: A zombie (exited, not yet reaped by its host's init) counts as gone.
_ALIVE = 's=$(ps -o stat= -p {pid}); case "$s" in ""|Z*) echo gone;; *) echo alive;; esac'


def probe(target: str, pid: int, control_dir: str, timeout: float = 3.0) -> tuple[str | None, bool]:
    """Over a fresh ssh connection: (``None`` or why ``target`` cannot be reached, whether
    process ``pid`` still runs there)."""
    why, said = _fresh(target, _ALIVE.format(pid=int(pid)), control_dir, timeout)
    return why, why is None and said.strip() == "alive"


def wait_answering(targets: list[str], control_dir: str, timeout: float) -> list[str]:
    """Try each target over fresh ssh connections (all at once, again and again) until it
    answers, for at most ``timeout`` s; the targets that never did."""
    deadline = time.monotonic() + timeout

    def answers(target: str) -> bool:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # connecting gets at most 3 s (one begun during a cut would wait out its SYN
            # retries after the link is back); the handshake may take the rest (seconds on
            # a loaded machine)
            if _fresh(target, "true", control_dir, min(3.0, max(1.0, left)), max(1.0, left))[0] is None:
                return True
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    if not targets:
        return []
    with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:
        answered = list(pool.map(answers, targets))
    return [t for t, ok in zip(targets, answered, strict=True) if not ok]


def _fresh(target: str, command: str, control_dir: str, timeout: float,
           whole: float | None = None) -> tuple[str | None, str]:
    """Run ``command`` on ``target`` over a new connection (connecting within ``timeout`` s,
    all of it within ``whole``, default one more): (why it failed or None, its stdout)."""
    args = ssh_options(control_dir, shared=False, connect_timeout=max(1, int(timeout)))
    whole = timeout + 1 if whole is None else max(whole, timeout)
    try:
        out = subprocess.run(
            ["ssh", *args, "--", target, command],
            capture_output=True, text=True, timeout=whole, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"no answer within {whole:g} s", ""
    if out.returncode == 0:
        return None, out.stdout
    why = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"ssh status {out.returncode}"
    return why, ""
