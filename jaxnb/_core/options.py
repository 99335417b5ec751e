"""The options of a jaxnb cluster, declared once and checked (``JaxCluster``'s keywords,
``%jax_cluster start``'s flags)."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from jaxnb._core.contract import COMPILE_CACHE_OFF
from jaxnb._core.spelling import bare, example, option

Platform = Literal["cpu", "gpu", "tpu"]
PLATFORMS: tuple[str, ...] = ("cpu", "gpu", "tpu")

#: Default simulated devices per CPU process: see README "CPU collectives".
DEFAULT_CPU_DEVICES_PER_PROCESS = 1
DEFAULT_CPU_PROCESSES = 2
#: Seconds the processes may take to join ``jax.distributed``.
DEFAULT_INIT_TIMEOUT = 60.0
#: Seconds a CPU collective may wait for the other processes (XLA's gloo timeout).
DEFAULT_COLLECTIVE_TIMEOUT = 60


class OptionError(ValueError):
    """A wrong option value; the message says what to pass instead."""


#: An environment variable's name (it goes on launchers' command lines: ``mpiexec -x``, sbatch).
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: What each Slurm option may hold, so that it stays one option of one ``#SBATCH`` line: (the
#: pattern, what it says, an example). ``sbatch`` lines are options themselves (any printable
#: text that starts with ``-``); none may hold a line break or another control character.
SLURM_VALUES = {
    "partition": (r"[A-Za-z0-9_][A-Za-z0-9_.,-]*", "a partition name (letters, digits, '_', '.', "
                  "'-'; several separated by commas)", "gpu"),
    "account": (r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "an account name (letters, digits, '_', '.', '-')",
                "proj42"),
    "time_limit": (r"(\d+-)?\d+(:\d+){0,2}|(?i:unlimited|infinite)", "a Slurm time (MINUTES, "
                   "[DAYS-]HOURS:MINUTES:SECONDS, ...)", "1:00:00"),
    "sbatch": (r"-[^\x00-\x1f\x7f]*", "an sbatch option on one line", "--gres=gpu:8"),
}


@dataclasses.dataclass(frozen=True)
class Flag:
    """How ``%jax_cluster start`` takes an option (its help lists these)."""

    help: str
    metavar: str | None = None
    #: How the flag's text becomes the value (``jaxnb.magics.accept.FLAG_TEXT``): "text",
    #: "positive", "count", "seconds", "hosts", "patterns", "lines" (the flag repeated),
    #: "env" (repeated ``NAME=VALUE`` or ``NAME``), "off" (a flag without value that sets the
    #: option to False).
    text: str = "text"


def _option(default: Any, flag: Flag | None = None, shown: bool = True) -> Any:
    """A field that is a ``JaxCluster`` keyword, and with ``flag`` a ``%jax_cluster start`` flag
    (``shown=False``: left out of the options' ``repr``, which may reach a log)."""
    return dataclasses.field(default=default, repr=shown, metadata={"keyword": True, "flag": flag})


@dataclasses.dataclass(frozen=True)
class ClusterOptions:
    """Everything needed to start (and restart) the same cluster: the one declaration of the
    cluster's options.

    Each field made by ``_option`` is a keyword of :class:`jaxnb.JaxCluster` of the same name
    (typed there too, for IDEs) and, with a :class:`Flag`, a flag of ``%jax_cluster start``
    (built from it: ``devices_per_process`` is ``--devices-per-process``, ``init=False`` is
    ``--no-init``); ``tests/test_api.py`` checks all three agree. Adding an option is one
    field here (its check in ``__post_init__``) and its typed keyword in
    ``JaxCluster.__init__``. The other fields are set by jaxnb.
    """

    n: int | None = _option(None, Flag("JAX processes", "N", "positive"))
    devices_per_process: int | None = _option(
        None, Flag("devices per process (simulated on CPU)", "K", "positive"))
    platform: Platform = _option(  # noqa: RUF009 (a field, as all _option; ruff knows str, not Platform)
        "cpu", Flag("cpu (default), gpu or tpu", "cpu|gpu|tpu"))
    engines: str = _option("local", Flag("local (default), ssh, mpi, ...", "LAUNCHER"))
    hosts: tuple[str, ...] = _option((), Flag("hosts, each [user@]host[:count]", "H1,H2", "hosts"))
    #: Read into ``hosts`` when the cluster is made (``jaxnb._cluster_options.resolve``).
    hostfile: str | None = _option(None, Flag("one [user@]host[:count] a line", "PATH"))
    #: Interpreter on the hosts (``None``: this notebook's own interpreter path).
    python: str | None = _option(None, Flag("interpreter on the hosts", "PATH"))
    #: This machine's address the hosts connect back to (``None``: the one that routes to them).
    address: str | None = _option(None, Flag("this machine's address for hosts", "ADDR"))
    #: The folder engines start in on every host (copied where not seen).
    workdir: str | None = _option(None, Flag("engines start in DIR on every host", "DIR"))
    #: Patterns of files left out of the workdir's copy (data, checkpoints).
    workdir_exclude: tuple[str, ...] = _option((), Flag(
        "comma-separated file patterns left out of --workdir's copy, e.g. '*.ckpt,data'",
        "PATTERNS", "patterns"))
    partition: str | None = _option(None, Flag("Slurm partition (--engines slurm)", "P"))
    time_limit: str | None = _option(None, Flag("Slurm time limit, e.g. 1:00:00", "T"))
    account: str | None = _option(None, Flag("Slurm account to charge", "A"))
    sbatch: tuple[str, ...] = _option((), Flag(
        "an extra #SBATCH line, e.g. --sbatch=--gres=gpu:8 (repeat for more)", "OPTION", "lines"))
    init: bool = _option(True, Flag("leave jax.distributed to you", None, "off"))
    timeout: float | None = _option(None, Flag("cell timeout", "S", "seconds"))
    init_timeout: float = _option(DEFAULT_INIT_TIMEOUT, Flag(
        f"seconds to join jax.distributed (default {DEFAULT_INIT_TIMEOUT:g})", "S", "seconds"))
    #: Warm spare engines kept for a fast restart (``None``: one per process; 0: none).
    spares: int | None = _option(None, Flag(
        "warm spare engines for a fast restart (default: one per process; 0: none)", "K", "count"))
    #: JAX's persistent compilation cache: a folder (``~`` is each host's home), ``"off"``, or
    #: ``None``: on, in each host's ``~/.cache/jaxnb/xla`` (``$XDG_CACHE_HOME/jaxnb/xla``).
    compile_cache: str | None = _option(None, Flag(
        "JAX's persistent compilation cache: a folder, or off (default: ~/.cache/jaxnb/xla "
        "on each host)", "DIR|off"))
    #: A named cluster outlives the kernel: another kernel attaches it by this name. ``None``:
    #: in a Jupyter kernel, on this machine, ``default`` (:mod:`jaxnb._attach.default_name`).
    name: str | None = _option(None, Flag(
        "the name another kernel attaches the cluster by; it outlives this kernel (default: "
        "default, in a Jupyter kernel on this machine)", "NAME"))
    #: Seconds a cluster that outlives its kernel lives with no kernel attached and nothing
    #: running (``None``: until stopped when named, 300 s when named ``default`` by jaxnb).
    idle_timeout: float | None = _option(None, Flag(
        "stop it after S seconds with no kernel attached and nothing running (default: never "
        "with --name, 300 without)", "S", "seconds"))
    collective_timeout: int = _option(DEFAULT_COLLECTIVE_TIMEOUT)
    #: Extra environment variables of the engines (a dict; kept as sorted pairs). Their values
    #: are never shown (they may be keys): not in the ``repr``, status, errors or logs.
    env: tuple[tuple[str, str], ...] = _option((), Flag(
        "an environment variable of every engine: NAME=VALUE, or NAME for this kernel's value "
        "(repeat for more; values are never shown), e.g. --env NCCL_DEBUG=WARN", "NAME[=VALUE]",
        "env"), shown=False)
    heartbeat_timeout: int = 10
    #: The ``hosts`` entry that is this machine (a TPU VM worker): its engine runs here, not over ssh.
    local_host: str | None = None

    def __post_init__(self) -> None:
        from jaxnb._core.host_entries import HostError, check_address, parse_entry

        self._normalise()
        try:  # normalised `[user@]host[:count]` entries
            object.__setattr__(self, "hosts", tuple(str(parse_entry(h)) for h in self.hosts))
            if self.address is not None:
                object.__setattr__(self, "address", check_address(self.address))
        except HostError as exc:
            raise OptionError(str(exc)) from None
        self._check_places()
        self._check_name()
        self._check_slurm_values()
        self._check_numbers()

    def _normalise(self) -> None:
        """Sequences as tuples, ``env`` as sorted pairs (the options are frozen and compared)."""
        for name in ("hosts", "workdir_exclude", "sbatch"):
            value = getattr(self, name)
            value = () if value is None else (value,) if isinstance(value, str) else tuple(value)
            object.__setattr__(self, name, value)
        env = self.env
        pairs = env.items() if isinstance(env, Mapping) else (env or ())
        object.__setattr__(self, "env", tuple(sorted((str(k), str(v)) for k, v in pairs)))
        bad = next((k for k, _ in self.env if not VARIABLE_NAME.match(k)), None)
        if bad is not None:
            raise OptionError(f"env= names {bad!r}, which is not an environment variable name "
                              "(letters, digits and '_', not starting with a digit); e.g. "
                              "env={'WANDB_API_KEY': key}")

    def _check_places(self) -> None:
        if self.python is not None and not self.python.strip():
            raise OptionError(f"{option('python')} must be a path to an interpreter, e.g. "
                              f"{example('python', '/opt/venv/bin/python')}")
        if self.workdir is not None:
            if not os.path.isdir(self.workdir):
                raise OptionError(f"{example('workdir', self.workdir)} is not a folder on this "
                                  f"machine; pass an existing folder, e.g. {example('workdir', '.')}")
            object.__setattr__(self, "workdir", os.path.abspath(self.workdir))
        elif self.workdir_exclude:
            raise OptionError(f"{option('workdir_exclude')} needs {example('workdir', 'DIR')}")
        self._check_compile_cache()
        if self.engines == "slurm" and self.hosts:
            raise OptionError(
                f"{option('hosts')} does not go with {example('engines', 'slurm')} (Slurm picks "
                f"the nodes); drop {option('hosts')}, or name nodes with "
                f"{example('sbatch', ['--nodelist=NODES'], '--nodelist=NODES')}"
            )
        if self.slurm and self.engines != "slurm":
            names = ", ".join(option(k) for k, _ in self.slurm)
            one = len(self.slurm) == 1
            raise OptionError(
                f"{names} {'is' if one else 'are'} for {example('engines', 'slurm')} only; add "
                f"{example('engines', 'slurm')} or drop {'it' if one else 'them'}"
            )
        if self.platform not in PLATFORMS:
            raise OptionError(f"unknown {bare('platform')} {self.platform!r}; use one of "
                              f"{', '.join(PLATFORMS)}")
        if self.devices_per_process not in (None, 1) and self.platform == "gpu":
            raise OptionError(f"{example('platform', 'gpu')} places one engine per GPU; drop "
                              f"{option('devices_per_process')}")
        if self.is_local and self.python is not None:
            raise OptionError(
                f"{option('python')} is the interpreter on the hosts; local engines run this "
                f"notebook's own interpreter: drop {option('python')}, or pass {option('hosts')}"
            )
        if self.is_local and self.address is not None:
            raise OptionError(
                f"{option('address')} is this machine's address for engines on other hosts; local "
                f"engines use loopback: drop {option('address')}, or pass {option('hosts')}"
            )

    def _check_name(self) -> None:
        """A name becomes a file name; a cluster that outlives its kernel (and idles) runs here."""
        if self.name is not None:
            from jaxnb._core.cluster_names import check

            try:
                check(self.name)
            except ValueError as exc:
                raise OptionError(str(exc)) from None
            if not self.is_local:
                raise OptionError(f"{option('name')} works with engines on this machine for now; "
                                  f"drop {option('name')}, or {option('hosts')} and "
                                  f"{option('engines')}")
        elif self.idle_timeout is not None and not self.is_local:
            raise OptionError(f"{option('idle_timeout')} is for a cluster on this machine, which "
                              f"outlives its kernel; drop {option('idle_timeout')}, or "
                              f"{option('hosts')} and {option('engines')}")

    def _check_compile_cache(self) -> None:
        """``compile_cache``: ``None``, ``"off"``, or a folder (made absolute unless it starts
        with ``~``, which each host expands to its own home)."""
        value = self.compile_cache
        if value is None:
            return
        if not isinstance(value, str) or not value.strip() or any(c in value for c in "\n\r\0"):
            raise OptionError(f"{option('compile_cache')} takes a folder or off, got {value!r}; "
                              f"e.g. {example('compile_cache', '/scratch/xla')} or "
                              f"{example('compile_cache', COMPILE_CACHE_OFF)}")
        value = value.strip()
        if value.lower() == COMPILE_CACHE_OFF:
            value = COMPILE_CACHE_OFF
        elif not value.startswith("~"):
            value = os.path.abspath(value)
        object.__setattr__(self, "compile_cache", value)

    def _check_slurm_values(self) -> None:
        """Each Slurm option stays one option of one ``#SBATCH`` line (no line break, no space)."""
        for name, (pattern, what, good) in SLURM_VALUES.items():
            values = getattr(self, name)
            for value in values if isinstance(values, tuple) else (values,):
                if value is not None and not (isinstance(value, str) and re.fullmatch(pattern, value)):
                    raise OptionError(f"{example(name, value, repr(value))} is not {what}; e.g. "
                                      f"{example(name, good)}")

    def _check_numbers(self) -> None:
        for name in ("n", "devices_per_process"):
            value = getattr(self, name)
            if value is not None and (not _whole(value) or value < 1):
                says = "must be at least 1" if _whole(value) else "takes a whole number"
                raise OptionError(f"{option(name)} {says}, got {value!r}; e.g. {example(name, 2)}")
        if self.spares is not None and (not _whole(self.spares) or self.spares < 0):
            raise OptionError(f"{option('spares')} must be a whole number >= 0, got {self.spares!r}; "
                              f"e.g. {example('spares', 0)} to keep none")
        for name in ("timeout", "init_timeout", "idle_timeout"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or value <= 0):
                raise OptionError(f"{option(name)} must be a positive number of seconds, got "
                                  f"{value!r}; e.g. {example(name, 30)}")

    @property
    def slurm(self) -> tuple[tuple[str, str], ...]:
        """The Slurm options given (``partition``, ``time_limit``, ``account``, ``sbatch`` lines)."""
        given = [("partition", self.partition), ("time_limit", self.time_limit),
                 ("account", self.account), ("sbatch", "\n".join(self.sbatch))]
        return tuple((k, v) for k, v in given if v)

    @property
    def is_local(self) -> bool:
        """True when every engine runs on this machine (no hosts, no hostfile still to read)."""
        return self.engines == "local" and not self.hosts and self.hostfile is None

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


def keyword_fields() -> tuple[dataclasses.Field, ...]:
    """The options a user gives (``JaxCluster``'s keywords), in declaration order."""
    return tuple(f for f in dataclasses.fields(ClusterOptions) if f.metadata.get("keyword"))


def start_flags() -> dict[str, Flag]:
    """``%jax_cluster start``'s flags: keyword -> how the flag takes it."""
    return {f.name: f.metadata["flag"] for f in keyword_fields() if f.metadata["flag"] is not None}


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
