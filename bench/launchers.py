"""Start to first psum with Slurm and with MPI against ``--hosts`` over ssh, on the same lab, same run;
and ``--workdir``'s copy of a 10 MB folder to hosts that lack it (first start, second start).

    sudo python -m bench.launchers [--repeats 3]   (root: it builds the lab of tests/lab, with Slurm)

Start = ``JaxCluster(...).start()`` and one cross-process all-gather (the first psum), 2 engines
on 2 lab hosts each time: ``--hosts`` (jaxnb's ssh launcher), ``--engines mpi --hosts``
(OpenMPI's mpiexec over the lab's ssh), ``--engines slurm -n 2`` (sbatch + srun on the lab's
slurmctld/slurmd), and a local 2-process start for scale. Ratios are against ``--hosts``.
Also written to ``bench/results/launchers.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

from bench._results import Results  # noqa: E402
from bench.hosts import start_stop  # noqa: E402 - bench/hosts.py: start, first psum, stop


def workdir_copy(lab, private: str) -> list[tuple[str, float, str]]:
    """(which start, seconds for the whole --workdir step, what it printed) for a 10 MB folder."""
    from jaxnb._hosts import ssh_connections, workdir

    project = os.path.join(private, "proj10mb")
    os.makedirs(project)
    for i in range(10):
        with open(os.path.join(project, f"blob{i}.bin"), "wb") as f:
            f.write(os.urandom(1_000_000))
    with open(os.path.join(project, "mymodel.py"), "w") as f:
        f.write("VALUE = 1\n")
    control = ssh_connections.new_control_dir()
    args = ssh_connections.ssh_options(control)
    rows = []
    try:
        for which in ("first start", "second start (nothing changed)", "after editing mymodel.py"):
            if which.startswith("after"):
                with open(os.path.join(project, "mymodel.py"), "w") as f:
                    f.write("VALUE = 2\n")
            t0 = time.perf_counter()
            placed = workdir.place(lab.addresses, project, (), sys.executable, args)
            rows.append((which, time.perf_counter() - t0, "; ".join(workdir.summary(project, placed))))
        return rows
    finally:
        for p in placed:
            if p.folder != project:
                shutil.rmtree(p.folder, ignore_errors=True)
        ssh_connections.close_connections(control, lab.addresses)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from tests.lab import slurm
    from tests.lab.lab import Lab, missing

    why = missing() or slurm.missing() or (None if shutil.which("mpiexec") else "no mpiexec")
    if why:
        sys.exit(f"bench/launchers.py needs the lab with Slurm and MPI: {why}")
    results = Results("launchers")
    private = tempfile.mkdtemp(prefix="jaxnb-bench-private-")
    with Lab(2, with_slurm=True, private=(private,)).running() as lab:
        kinds = {
            "local 2 processes": dict(n=2),
            "--hosts (ssh)": dict(hosts=lab.addresses),
            "--engines mpi --hosts": dict(engines="mpi", hosts=lab.addresses),
            "--engines slurm -n 2": dict(n=2, engines="slurm", address=lab.bridge_address),
        }
        starts: dict[str, list[float]] = {k: [] for k in kinds}
        stops: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.repeats):
            for name, kwargs in kinds.items():
                started, stopped = start_stop(**kwargs)
                starts[name].append(started)
                stops[name].append(stopped)
        med = statistics.median
        base = med(starts["--hosts (ssh)"])
        for name in kinds:
            runs = ", ".join(f"{v:.2f}" for v in starts[name])
            print(f"{name:24s} start to first psum {med(starts[name]):6.2f} s ({runs}); "
                  f"x{med(starts[name]) / base:.2f} of ssh; stop {med(stops[name]):.2f} s", flush=True)
        results.add(repeats=args.repeats, launchers={
            name: {"start_to_first_psum_s": med(starts[name]), "start_runs_s": starts[name],
                   "ratio_vs_ssh": med(starts[name]) / base, "stop_s": med(stops[name])}
            for name in kinds})
        copies = {}
        for which, seconds, said in workdir_copy(lab, private):
            print(f"--workdir 10 MB, {which}: {seconds:.2f} s  [{said}]", flush=True)
            copies[which] = {"seconds": seconds, "printed": said}
        results.add(workdir_10_mb=copies)
    results.write()


if __name__ == "__main__":
    main()
