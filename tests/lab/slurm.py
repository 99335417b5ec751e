"""A Slurm cluster on the lab: one ``munged``, ``slurmctld`` and one ``slurmd`` per lab host.

Debian's ``slurm-wlm`` and ``munge``. Everything lives in the lab's folder (key,
sockets, spool, state, pid and log files, per node where Slurm allows ``%n``);
no cgroup plugin (``proctrack/linuxproc``, ``task/none``). ``munged`` and
``slurmctld`` run in this machine's network namespace (``slurmctld`` on the
bridge address, in a UTS namespace named ``labctl``), each ``slurmd`` in its
host's network namespace and its sshd's mount namespace (so a job sees the host's private
folders as ssh does) as node ``labhostN`` at the host's address. Clients (``sbatch``,
``squeue``, ``scancel``) find it through ``SLURM_CONF``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time

DAEMONS = ("munged", "slurmctld", "slurmd")
_CGROUP_V1 = " && ".join(
    ["mount -t tmpfs jxlab-cgroup /sys/fs/cgroup"]
    + [f"mkdir /sys/fs/cgroup/{c} && mount -t cgroup -o {c} {c} /sys/fs/cgroup/{c}"
       for c in ("freezer", "cpuset", "memory", "devices")]
)


def missing() -> str | None:
    """Why the lab cannot run Slurm here (``None`` when it can)."""
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "srun"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"{tool} is not installed (apt-get install slurm-wlm munge)"
    return None


def _which(tool: str) -> str:
    return shutil.which(tool) or f"/usr/sbin/{tool}"


class Slurm:
    """The lab's Slurm: ``up(lab)`` starts it, ``down()`` stops it and removes its files."""

    def __init__(self, lab) -> None:
        self.lab = lab
        self.dir = os.path.join(lab.directory, "slurm")
        self.procs: list[subprocess.Popen] = []
        base = 20000 + (os.getpid() % 2000) * 4
        self.ctld_port, self.slurmd_port = base, base + 1
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.socket = os.path.join(self.dir, "munge.socket")

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client needs to reach this cluster."""
        return {"SLURM_CONF": self.conf}

    def up(self) -> Slurm:
        os.makedirs(self.dir, mode=0o755)
        os.chmod(self.dir, 0o755)
        key = os.path.join(self.dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self._start("munged", [
            _which("munged"), "--foreground", "--force", f"--socket={self.socket}",
            f"--key-file={key}", f"--pid-file={self.dir}/munged.pid",
            f"--log-file={self.dir}/munged.log", f"--seed-file={self.dir}/munged.seed",
        ])
        self._wait(lambda: os.path.exists(self.socket), "munged")
        self._write_conf()
        self._start("slurmctld", [
            "unshare", "--uts", "sh", "-c",
            f"hostname labctl && exec {_which('slurmctld')} -D -i -f {self.conf}",
        ])
        for host in self.lab.hosts:
            os.makedirs(os.path.join(self.dir, f"spool-{host.hostname}"))
            # The host's own files, as its sshd sees them (the lab's private folders): slurmd runs
            # in sshd's mount namespace. Its fresh /sys (from `ip netns exec`) gets a cgroup v1
            # tree: slurmd 22.05 loads its cgroup plugin even with no cgroup plugin configured.
            assert host.sshd is not None
            self._start(f"slurmd{host.index}", [
                "ip", "netns", "exec", host.netns, "nsenter", f"--mount=/proc/{host.sshd.pid}/ns/mnt",
                "unshare", "--uts", "sh", "-c",
                f"hostname {host.hostname} && {_CGROUP_V1} && "
                f"exec {_which('slurmd')} -D -N {host.hostname} -f {self.conf}",
            ])
        self._wait(self._nodes_idle, "every slurmd to register (sinfo idle)", timeout=60)
        return self

    def _start(self, name: str, cmd: list[str]) -> None:
        with open(os.path.join(self.dir, f"{name}.out"), "w") as log:
            self.procs.append(subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **self.env},
            ))

    def _nodes_idle(self) -> bool:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                             env={**os.environ, **self.env}, check=False)
        states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
        return len(states) == len(self.lab.hosts) and all(s == "idle" for s in states.values())

    def _wait(self, ready, what: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [p for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = ""
                for name in sorted(os.listdir(self.dir)):
                    if name.endswith((".log", ".out")):
                        with open(os.path.join(self.dir, name), errors="replace") as f:
                            logs += f"--- {name}\n" + "".join(f.readlines()[-15:])
                raise RuntimeError(f"lab Slurm: waited in vain for {what}\n{logs}")
            time.sleep(0.2)

    def _write_conf(self) -> None:
        d = self.dir
        nodes = "\n".join(
            f"NodeName={h.hostname} NodeAddr={h.address} CPUs=1 State=UNKNOWN" for h in self.lab.hosts
        )
        names = ",".join(h.hostname for h in self.lab.hosts)
        with open(os.path.join(d, "cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        with open(self.conf, "w") as f:
            f.write(f"""\
ClusterName=jaxnblab
SlurmctldHost=labctl({self.lab.bridge_address})
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=5
{nodes}
PartitionName=lab Nodes={names} Default=YES MaxTime=INFINITE State=UP
PartitionName=closed Nodes={names} Default=NO MaxTime=INFINITE State=DOWN
""")

    def down(self) -> None:
        """Stop every daemon (and what slurmd started), remove nothing else (the lab's folder goes)."""
        for proc in reversed(self.procs):
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
        self.procs = []
