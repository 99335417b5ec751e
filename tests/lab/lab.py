"""Make N test hosts on this machine: network namespaces on a bridge, each with a real sshd.

Each host has its own address (``10.77.0.11``, ``10.77.0.12``, ...), its own
hostname in its own UTS namespace (the names do not resolve anywhere, as on
many real clusters) and an ``sshd`` that accepts the lab's key for root. The
bridge's address in this (root) namespace is ``10.77.0.1``. All hosts share
this machine's filesystem and process table, so the same Python lives at the
same path everywhere. Traffic stays on the lab's addresses.

Needs root, ``ip`` (iproute2), ``unshare``, ``sshd`` and ``ssh-keygen``.
``python -m tests.lab.lab N`` builds one by hand (Enter tears it down);
``python -m tests.lab.lab check`` says whether the lab tests can run here.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
PREFIX = "jxlab"
SUBNET = os.environ.get("JAXNB_LAB_SUBNET", "10.77.0")


def missing() -> str | None:
    """Why the lab cannot be built here, or ``None`` when it can."""
    if os.geteuid() != 0:
        return "not root (network namespaces need root)"
    for tool in ("ip", "unshare", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2 openssh-client)"
    if not os.path.exists(SSHD):
        return "sshd is not installed (apt-get install openssh-server)"
    probe = f"{PREFIX}probe{os.getpid() % 10000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make network namespaces: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Host:
    """One lab host."""

    index: int
    address: str
    hostname: str
    netns: str
    veth: str  # its link's end on the bridge side (in the root namespace)
    sshd: subprocess.Popen | None = None

    def run(self, *cmd: str, check: bool = True, timeout: float = 30) -> str:
        """Run ``cmd`` inside this host's network namespace (not over ssh); its stdout."""
        out = subprocess.run(
            ["ip", "netns", "exec", self.netns, *cmd],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"{cmd} on {self.hostname} failed: {out.stderr.strip()}")
        return out.stdout

    def pids(self) -> list[int]:
        """Every process in this host's network namespace (its process table)."""
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def link(self, up: bool) -> None:
        """Take this host's link to the bridge down (as a pulled cable) or bring it back up."""
        subprocess.run(["ip", "link", "set", self.veth, "up" if up else "down"], check=True)


@dataclass
class Lab:
    """N hosts on one bridge, and the ssh settings to reach them."""

    n: int
    tag: str = field(default_factory=lambda: str(os.getpid() % 100000))
    hosts: list[Host] = field(default_factory=list)
    directory: str = ""
    bridge_address: str = f"{SUBNET}.1"
    #: Folders put first on PATH in the hosts' ssh sessions (e.g. a fake ``nvidia-smi``).
    #: The lab owns them: :meth:`down` removes them.
    path: tuple[str, ...] = ()
    #: Folders each host sees empty and its own (a tmpfs in the host's mount namespace): what
    #: the notebook's machine has there, the hosts do not (as without shared storage).
    #: The lab owns them too.
    private: tuple[str, ...] = ()
    #: Also run Slurm on the hosts (``tests/lab/slurm.py``): ``self.slurm`` then has its settings.
    with_slurm: bool = False
    slurm: object = None
    #: Ports every host's sshd listens on besides 22 (e.g. 2222, for an ssh-config ``Port``).
    extra_ports: tuple[int, ...] = ()

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.tag}b"[:15]

    @property
    def ssh_config(self) -> str:
        """An ssh client config file that reaches the lab's hosts as root with the lab key."""
        return os.path.join(self.directory, "ssh_config")

    @property
    def addresses(self) -> list[str]:
        return [h.address for h in self.hosts]

    @property
    def private_dir(self) -> str:
        """The first private folder."""
        return self.private[0]

    @contextlib.contextmanager
    def running(self) -> Iterator[Lab]:
        """The lab up, with jaxnb's ssh (and Slurm's tools) set to reach it; all undone at
        the end, even on failure."""
        previous = dict(os.environ)
        try:
            self.up()
            os.environ["JAXNB_SSH_CONFIG"] = self.ssh_config
            if self.slurm is not None:
                os.environ.update(self.slurm.env)
            yield self
        finally:
            for name in ("JAXNB_SSH_CONFIG", *(self.slurm.env if self.slurm is not None else ())):
                if name in previous:
                    os.environ[name] = previous[name]
                else:
                    os.environ.pop(name, None)
            self.down()

    def up(self) -> Lab:
        """Build the bridge, the hosts and their sshd; wait until every sshd answers."""
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def _up(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="jaxnb-lab-")
        os.chmod(self.directory, 0o755)
        self._keys()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.bridge_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        os.makedirs("/run/sshd", exist_ok=True)
        for i in range(1, self.n + 1):
            host = Host(
                index=i,
                address=f"{SUBNET}.{10 + i}",
                hostname=f"labhost{i}",
                netns=f"{PREFIX}{self.tag}h{i}",
                veth=f"{PREFIX}{self.tag}v{i}"[:15],
            )
            self.hosts.append(host)
            _ip("netns", "add", host.netns)
            _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
            _ip("link", "set", host.veth, "master", self.bridge)
            _ip("link", "set", host.veth, "up")
            host.run("ip", "link", "set", "lo", "up")
            host.run("ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
            host.run("ip", "link", "set", "eth0", "up")
            mounts = "".join(f"mount -t tmpfs jxlab {shlex.quote(p)} && " for p in self.private)
            with open(os.path.join(self.directory, f"sshd{i}.log"), "w") as log:
                host.sshd = subprocess.Popen(
                    ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount", "sh", "-c",
                     f"hostname {host.hostname} && {mounts}"
                     f"exec {SSHD} -D -e -f {self._sshd_config(host)}"],
                    stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
                )
        for host in self.hosts:
            self._wait_ssh(host)
        if self.with_slurm:
            from .slurm import Slurm

            self.slurm = Slurm(self)
            self.slurm.up()

    def ssh(self, host: Host, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
        """Run ``command`` on ``host`` over ssh."""
        return subprocess.run(
            ["ssh", "-F", self.ssh_config, host.address, command],
            capture_output=True, text=True, timeout=timeout, check=False,
        )

    def _wait_ssh(self, host: Host) -> None:
        deadline = time.monotonic() + 20
        while True:
            try:
                out = self.ssh(host, "hostname", timeout=10)
            except subprocess.TimeoutExpired as exc:
                out = subprocess.CompletedProcess(exc.cmd, 255, "", f"no answer within {exc.timeout} s")
            if out.returncode == 0 and out.stdout.strip() == host.hostname:
                return
            if time.monotonic() > deadline:
                with open(os.path.join(self.directory, f"sshd{host.index}.log")) as f:
                    log = f.read()
                raise RuntimeError(f"lab host {host.address} did not answer ssh: {out.stderr}{log}")
            time.sleep(0.1)

    def _keys(self) -> None:
        d = self.directory
        for name in ("client_key", "host_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(d, name)],
                           check=True)
        shutil.copy(os.path.join(d, "client_key.pub"), os.path.join(d, "authorized_keys"))
        with open(self.ssh_config, "w") as f:
            f.write(
                f"Host {SUBNET}.*\n"
                "  User root\n"
                f"  IdentityFile {d}/client_key\n"
                "  IdentitiesOnly yes\n"
                "  StrictHostKeyChecking no\n"
                "  UserKnownHostsFile /dev/null\n"
                "  LogLevel ERROR\n"
                "  BatchMode yes\n"
            )

    def _sshd_config(self, host: Host) -> str:
        path = os.path.join(self.directory, f"sshd_config{host.index}")
        d = self.directory
        with open(path, "w") as f:
            f.write(
                "".join(f"Port {port}\n" for port in (22, *self.extra_ports))
                + f"ListenAddress {host.address}\n"
                f"HostKey {d}/host_key\n"
                f"AuthorizedKeysFile {d}/authorized_keys\n"
                f"PidFile {d}/sshd{host.index}.pid\n"
                "PermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "UsePAM no\n"
                "StrictModes no\n"
                "UseDNS no\n"
                "MaxStartups 100:30:200\n"
                "MaxSessions 100\n"
                "AcceptEnv *\n"
                "Subsystem sftp internal-sftp\n"
            )
            if self.path:
                f.write(f"SetEnv PATH={':'.join(self.path)}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin\n")
        return path

    def private_project(self, name: str, files: dict[str, str] | None = None) -> str:
        """A folder in the first private folder (none of the hosts sees it) holding ``files``
        (name -> text; by default ``mymodel.py`` with ``VALUE = 42``)."""
        folder = os.path.join(self.private_dir, name)
        os.makedirs(folder)
        for file, text in (files or {"mymodel.py": "VALUE = 42\n"}).items():
            with open(os.path.join(folder, file), "w") as f:
                f.write(text)
        return folder

    def engines(self) -> list[int]:
        """The pids of jaxnb engines in the hosts' process tables."""
        found = []
        for host in self.hosts:
            for pid in host.pids():
                with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"jaxnb._engine" in f.read():
                        found.append(pid)
        return found

    def leftovers(self, besides: tuple[str, ...] = ("sshd",)) -> list[str]:
        """What still runs on the hosts besides the daemons named (``host: command``)."""
        import psutil

        found = []
        for host in self.hosts:
            for pid in host.pids():
                with contextlib.suppress(psutil.Error):
                    proc = psutil.Process(pid)
                    if proc.name() not in besides and proc.status() != psutil.STATUS_ZOMBIE:
                        found.append(f"{host.hostname}: {' '.join(proc.cmdline())[:100]}")
        return found

    def down(self) -> None:
        """Remove everything the lab made: processes on its hosts, sshd, namespaces, bridge, files."""
        if self.slurm is not None:
            self.slurm.down()
            self.slurm = None
        for host in self.hosts:
            for pid in host.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if host.sshd is not None:
                with contextlib.suppress(OSError):
                    os.killpg(host.sshd.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    host.sshd.wait(5)
            subprocess.run(["ip", "link", "del", host.veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        self.hosts = []
        for folder in (self.directory, *self.path, *self.private):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")


if __name__ == "__main__":
    if sys.argv[1:] == ["check"]:  # one line for `bash dev test`
        why = missing()
        print(f"lab tests (several ssh hosts) skipped: {why}" if why else "lab tests: will run")
        if not why:
            from tests.lab.slurm import missing as slurm_missing

            no_slurm = slurm_missing()
            no_mpi = None if shutil.which("mpiexec") else "no mpiexec (apt-get install openmpi-bin)"
            print(f"Slurm lab tests skipped: {no_slurm}" if no_slurm else "Slurm lab tests: will run")
            print(f"MPI lab tests skipped: {no_mpi}" if no_mpi else "MPI lab tests: will run")
        sys.exit(0)
    why = missing()
    if why:
        sys.exit(f"no lab: {why}")
    lab = Lab(int(sys.argv[1]) if len(sys.argv) > 1 else 2).up()
    print("lab up:", lab.addresses, "ssh -F", lab.ssh_config, "; Enter tears it down")
    try:
        input()
    finally:
        lab.down()
