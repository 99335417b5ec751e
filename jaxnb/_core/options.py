"""Validated options of a jaxnb cluster (what `%jax_cluster start` accepts)."""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

Platform = Literal["cpu", "gpu", "tpu"]
PLATFORMS: tuple[str, ...] = ("cpu", "gpu", "tpu")

#: Default simulated devices per CPU process: see README "CPU collectives".
DEFAULT_CPU_DEVICES_PER_PROCESS = 1
DEFAULT_CPU_PROCESSES = 2


class OptionError(ValueError):
    """A wrong option value; the message says what to pass instead."""


@dataclasses.dataclass(frozen=True)
class ClusterOptions:
    """Everything needed to start (and restart) the same cluster."""

    n: int | None = None
    devices_per_process: int | None = None
    platform: Platform = "cpu"
    engines: str = "local"
    hosts: tuple[str, ...] = ()
    init: bool = True
    timeout: float | None = None
    init_timeout: float = 60.0
    heartbeat_timeout: int = 10
    collective_timeout: int = 60
    env: tuple[tuple[str, str], ...] = ()
    #: Interpreter on the hosts (``None``: this notebook's own interpreter path).
    python: str | None = None
    #: This machine's address the hosts connect back to (``None``: the one that routes to them).
    address: str | None = None
    #: The ``hosts`` entry that is this machine (a TPU VM worker): its engine runs here, not over ssh.
    local_host: str | None = None
    #: ``--workdir``: the folder engines start in on every host (copied where not seen).
    workdir: str | None = None
    #: ``--workdir-exclude``: patterns of files left out of the copy (data, checkpoints).
    workdir_exclude: tuple[str, ...] = ()
    #: ``--engines slurm``: ``--partition``, ``--time-limit``, ``--account``, ``--sbatch`` options.
    slurm: tuple[tuple[str, str], ...] = ()
    #: Warm spare engines kept for a fast restart (``None``: one per process; 0: none).
    spares: int | None = None

    def __post_init__(self) -> None:
        from jaxnb._core.host_entries import HostError, check_address, parse_entry

        try:  # normalised `[user@]host[:count]` entries
            object.__setattr__(self, "hosts", tuple(str(parse_entry(h)) for h in self.hosts))
            if self.address is not None:
                object.__setattr__(self, "address", check_address(self.address))
        except HostError as exc:
            raise OptionError(str(exc)) from None
        if self.python is not None and not self.python.strip():
            raise OptionError("--python must be a path to an interpreter, e.g. --python /opt/venv/bin/python")
        if self.workdir is not None:
            if not os.path.isdir(self.workdir):
                raise OptionError(
                    f"--workdir {self.workdir} is not a folder on this machine; pass an existing "
                    "folder, e.g. --workdir ."
                )
            object.__setattr__(self, "workdir", os.path.abspath(self.workdir))
        elif self.workdir_exclude:
            raise OptionError("--workdir-exclude needs --workdir DIR")
        if self.engines == "slurm" and self.hosts:
            raise OptionError(
                "--hosts does not go with --engines slurm (Slurm picks the nodes); drop --hosts, "
                "or name nodes with --sbatch=--nodelist=NODES"
            )
        if self.slurm and self.engines != "slurm":
            flags = ", ".join("--" + k.replace("_", "-") for k, _ in self.slurm)
            one = len(self.slurm) == 1
            raise OptionError(
                f"{flags} {'is' if one else 'are'} for --engines slurm only; add --engines slurm "
                f"or drop {'it' if one else 'them'}"
            )
        if self.n is not None and (not isinstance(self.n, int) or self.n < 1):
            raise OptionError(f"-n must be a whole number ≥ 1, got {self.n!r}; e.g. -n 2")
        k = self.devices_per_process
        if k is not None and (not isinstance(k, int) or k < 1):
            raise OptionError(
                f"--devices-per-process must be a whole number ≥ 1, got {k!r}; e.g. "
                "--devices-per-process 2"
            )
        if self.platform not in PLATFORMS:
            raise OptionError(
                f"unknown --platform {self.platform!r}; use one of {', '.join(PLATFORMS)}"
            )
        if k is not None and self.platform == "gpu" and k != 1:
            raise OptionError("--platform gpu places one engine per GPU; drop --devices-per-process")
        if self.is_local and self.python is not None:
            raise OptionError(
                "--python is the interpreter on the hosts; local engines run this notebook's own "
                "interpreter: drop --python, or pass --hosts"
            )
        if self.is_local and self.address is not None:
            raise OptionError(
                "--address is this machine's address for engines on other hosts; local engines "
                "use loopback: drop --address, or pass --hosts"
            )
        if self.spares is not None and (isinstance(self.spares, bool) or not isinstance(self.spares, int)
                                        or self.spares < 0):
            raise OptionError(f"--spares must be a whole number >= 0, got {self.spares!r}; "
                              "e.g. --spares 0 to keep none")
        for name in ("timeout", "init_timeout"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                flag = "--" + name.replace("_", "-")
                raise OptionError(f"{flag} must be a positive number of seconds, got {value!r}")

    @property
    def is_local(self) -> bool:
        """True when every engine runs on this machine."""
        return self.engines == "local" and not self.hosts

    def resolved_n(self) -> int:
        """Number of processes: given, one per host or GPU, or the CPU default."""
        if self.n is not None:
            return self.n
        if self.hosts:
            return sum(entry.count for entry in self.host_entries())
        if self.platform == "gpu":
            return _count_local_gpus() or 1
        return DEFAULT_CPU_PROCESSES

    def host_entries(self) -> tuple:
        """``--hosts`` as :class:`jaxnb._core.host_entries.HostEntry` values."""
        from jaxnb._core.host_entries import parse_entry

        return tuple(parse_entry(h) for h in self.hosts)

    def resolved_python(self) -> str:
        """The interpreter engines run on their hosts."""
        import sys

        return self.python or sys.executable

    def resolved_devices(self) -> int:
        """Devices per process (simulated on CPU)."""
        if self.devices_per_process is not None:
            return self.devices_per_process
        return DEFAULT_CPU_DEVICES_PER_PROCESS


def local_gpu_count() -> int:
    """GPUs on this machine (``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi``; 0 if none)."""
    return _count_local_gpus()


def _count_local_gpus() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return len([v for v in visible.split(",") if v.strip()])
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return 0
    return len([line for line in out.stdout.splitlines() if line.startswith("GPU")])
