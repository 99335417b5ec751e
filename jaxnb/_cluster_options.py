"""The options of a cluster from ``JaxCluster``'s arguments (and ``%jax_cluster start``'s flags):
hosts from a hostfile, a TPU VM slice's workers, Slurm's pass-through lines, and a one-line
``OptionError`` for a platform this machine does not have."""

from __future__ import annotations

from jaxnb._core.host_entries import HostError, read_hostfile
from jaxnb._core.options import ClusterOptions, OptionError


def cluster_options(
    *,
    n: int | None = None,
    devices_per_process: int | None = None,
    platform: str = "cpu",
    engines: str = "local",
    hosts: list[str] | tuple[str, ...] | None = None,
    hostfile: str | None = None,
    python: str | None = None,
    address: str | None = None,
    init: bool = True,
    timeout: float | None = None,
    init_timeout: float = 60.0,
    collective_timeout: int | None = None,
    env: dict[str, str] | None = None,
    workdir: str | None = None,
    workdir_exclude: list[str] | tuple[str, ...] = (),
    partition: str | None = None,
    time_limit: str | None = None,
    account: str | None = None,
    sbatch: list[str] | tuple[str, ...] = (),
    spares: int | None = None,
) -> ClusterOptions:
    """The checked options (``OptionError``: one line saying what to pass)."""
    extra = {} if collective_timeout is None else {"collective_timeout": collective_timeout}
    if hostfile is not None:  # one [user@]host[:count] per line, after any --hosts
        try:
            hosts = [*(hosts or ()), *(str(e) for e in read_hostfile(hostfile))]
        except HostError as exc:
            raise OptionError(str(exc)) from None
    local_host = None
    if platform == "tpu" and not hosts and engines == "local":
        hosts, local_host = _tpu_workers()  # a TPU VM slice: one engine per worker
    options = ClusterOptions(
        n=n,
        devices_per_process=devices_per_process,
        platform=platform,  # type: ignore[arg-type]
        engines=engines,
        hosts=tuple(hosts or ()),
        init=init,
        timeout=timeout,
        init_timeout=init_timeout,
        env=tuple(sorted((env or {}).items())),
        python=python,
        address=address,
        local_host=local_host,
        workdir=workdir,
        workdir_exclude=tuple(workdir_exclude),
        slurm=tuple((k, v) for k, v in [
            ("partition", partition), ("time_limit", time_limit), ("account", account),
            ("sbatch", "\n".join(sbatch)),
        ] if v),
        spares=spares,
        **extra,
    )
    if options.is_local and options.platform != "cpu":
        from jaxnb._core.options import local_gpu_count
        from jaxnb._hosts.platforms import check_local

        gpus = local_gpu_count() if options.platform == "gpu" else None
        problem = check_local(options.platform, gpus)
        if problem:
            raise OptionError(problem)
    return options


def _tpu_workers() -> tuple[list[str], str | None]:
    """On a TPU VM slice: its workers (in worker order) and this worker; else none."""
    from jaxnb._hosts.tpu import SliceError, discover

    try:
        found = discover()
    except SliceError as exc:
        raise OptionError(str(exc)) from None
    if found is None:
        return [], None
    return list(found.workers), found.workers[found.this]
