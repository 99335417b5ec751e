"""Recovery from a dead process: jaxnb's ``--max-failures`` against Ray Train's, in one run.

    python -m bench.recovery [--repeats 3] [--only local,lab,ray] [--ray-python PATH]

The loop (both sides): a Flax NNX MLP trained with Adam (``bench/_mlp.py``), a checkpoint every
5 steps, process 1 SIGKILLed at step 12, ``max_failures=1``; measured from the kill to the first
report after the resume, on the workers' clock (the loop writes both times).

Sections (``SECTIONS``; each prints its own lines, ``--only`` picks some):

- ``local``: 2 processes × 2 CPU devices on this machine, data-parallel over the 4 devices;
- ``lab``: one engine on each of two lab ssh hosts (network namespaces with real sshd, as in
  tests/lab; needs root: skipped, saying why, where the lab cannot be built);

each with warm spares and without (``spares=0``), the compilation cache on (the default),
in one loop per repeat: a ``restart()``, then a recovery split into jaxnb's own phases
(``Result.failures[0].phases``); then, with spares, **back to back**: one run that loses
process 1 ``KILLS`` (4) times, ``GAP_SECONDS`` (10 s) apart: each recovery after the first
finds only the spares refilled since the previous one (a ``no spare ready: …`` phase says
when they were not, and the seconds waited for them);

- ``ray``: Ray Train 2.60 (``JaxTrainer``, ``FailureConfig(max_failures=1)``, stock settings)
  on the same loop, run by the interpreter of a separate venv (Ray is never a dependency of
  jaxnb): ``--ray-python PATH`` or ``JAXNB_RAY_PYTHON``, else this interpreter if it has Ray.
  Make that venv once::

      python3 -m venv ~/venvs/ray
      ~/venvs/ray/bin/pip install "ray[train]==2.60.0" flax optax   # the same JAX as jaxnb's

  Its phases come from Ray Train's own controller log (``bench/_ray_recovery.py``), side by
  side with jaxnb's; then jaxnb (local, spares) ÷ Ray (goal ≤ 0.2, and ≤ 1.75 s); and the
  same back-to-back run under Ray (``FailureConfig(max_failures=KILLS)``);

and the resident memory (RSS) of each warm spare and of each group engine after it joined,
before the first restart.

Prints medians; writes them to ``bench/results/recovery.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from bench._mlp_cell import DEVICES, ROOT, SETUP_CELL
from bench._recovery_loop import GAP_SECONDS, KILL_AT, KILLS, STEPS, jaxnb_loop, read_times, run_config
from bench._results import Results

#: Row names of the side-by-side table: jaxnb's phase, and Ray's counterpart.
ROWS = [
    ("detect", "kill -> death seen (bench clock)", "kill -> FailurePolicy RETRY logged"),
    ("stop the old group", "stop the old group", "shut the worker group down"),
    ("start or swap", "start or swap", "placement group + worker actors created"),
    ("join jax.distributed", "join jax.distributed", "train context set up, function launched"),
    ("replay", "replay (imports, model code)", "imports, model code (in the loop)"),
    ("restore", "restore", "restore (in the loop)"),
    ("first step", "first step (compile included)", "first step (in the loop)"),
]


def _spares_ready(cluster, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    wanted = 0 if cluster.options.spares == 0 else cluster.num_processes
    while len(cluster.group.spare_pids) < wanted and time.monotonic() < deadline:
        time.sleep(0.05)  # new spares start a few seconds after a swap
    want = cluster.num_processes + len(cluster.group.spare_pids)
    while len(cluster.client.ids) < want and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the old engines' registrations are gone too; the spares' imports done


def resident_mb(pids) -> list[float]:
    """The resident memory (RSS, MB) of each of these processes that is a jaxnb engine running
    here (on ssh hosts a spare's pid is its ssh launcher's: left out)."""
    import psutil

    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            if "python" in process.name() and any("jaxnb._engine.boot" in part
                                                  for part in process.cmdline()):
                found.append(process.memory_info().rss / 1e6)
    return found


def measure(repeats: int, **cluster_options
            ) -> tuple[list[float], list[dict[str, float]], dict[str, list[float]]]:
    """One loop: per repeat, a restart's seconds, then one recovery split into phases; and the
    memory of the spares and of the group's engines, once, before the first restart."""
    from jaxnb import JaxCluster

    restarts, recoveries, memory = [], [], {}
    quiet = contextlib.ExitStack()
    quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
    quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))  # start notes, recovery lines
    with quiet, JaxCluster(**cluster_options) as cluster:
        cluster.run(SETUP_CELL)  # the setup a recovery replays
        for i in range(repeats):
            _spares_ready(cluster)
            if i == 0:
                memory = {"spare_mb": resident_mb(cluster.group.spare_pids),
                          "engine_mb": resident_mb(p.pid for p in cluster.processes)}
            t0 = time.perf_counter()
            cluster.restart(replay=True)
            restarts.append(time.perf_counter() - t0)
            _spares_ready(cluster)
            recoveries.append(_recovery(cluster, f"r{i}"))
    return restarts, recoveries, memory


def _recovery(cluster, name: str) -> dict[str, float]:
    """Kill → first report after the resume, and jaxnb's phases, for one run of the loop."""
    return _recoveries(cluster, name, 1)[0]


def _recoveries(cluster, name: str, kills: int, gap: float = GAP_SECONDS) -> list[dict[str, float]]:
    """One run of the loop that loses process 1 ``kills`` times, ``gap`` seconds apart
    (after the first, at step 12); per recovery: kill → first report after it, and its phases."""
    with tempfile.TemporaryDirectory() as folder:
        config = run_config(folder, kills, gap)  # back to back: stopped after its last recovery
        result = cluster.train(jaxnb_loop, config, name=name, storage=folder, max_failures=kills,
                               background=kills > 1)
        if kills > 1:
            _wait_deaths(result, folder, kills)
        assert result.error is None and len(result.failures) == kills, result
        rows = []
        for death, failure in enumerate(result.failures, 1):
            killed, resumed = read_times(config, death)
            (r0, r1), began = resumed["restore"], resumed["began"]
            setup, step = r0 - began, resumed["first_report"] - r1
            rows.append({**failure.phases, "detect": failure.time - killed,
                         "  of which launching": failure.phases["first step"] - setup - step,
                         "  of which model set-up": setup, "  of which the step": step,
                         "total": resumed["first_report"] - killed})
    return rows


def _wait_deaths(result, folder: str, kills: int) -> None:
    """Stop the back-to-back run once its last recovery reported (or it ended)."""
    last = os.path.join(folder, f"resumed-{kills}.json")
    deadline = time.monotonic() + kills * 120
    while result.running and not os.path.exists(last) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    result.stop()
    result.wait(120)


def back_to_back(where: str, found: dict, kills: int = KILLS, gap: float = GAP_SECONDS,
                 **cluster_options) -> None:
    """One run that loses a process ``kills`` times, ``gap`` seconds apart, with warm spares:
    every recovery, not only the first, should swap (spares refilled meanwhile)."""
    quiet = contextlib.ExitStack()
    quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
    quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))
    from jaxnb import JaxCluster

    with quiet, JaxCluster(**cluster_options) as cluster:
        cluster.run(SETUP_CELL)
        _spares_ready(cluster)
        rows = _recoveries(cluster, "b2b", kills, gap)
    totals = [round(r["total"], 3) for r in rows]
    waited = [round(sum(v for k, v in r.items() if k.startswith("no spare ready")), 3) for r in rows]
    found.setdefault(where, {})["back to back"] = {
        "kills": kills, "gap_s": gap, "totals": totals, "max": max(totals),
        "no_spare_notes": [[k for k in r if k.startswith("no spare ready")] for r in rows],
        "phases": [{k: round(v, 3) for k, v in r.items()} for r in rows]}
    print(f"jaxnb back to back, {where}: {kills} deaths {gap:g} s apart in one run, kill "
          f"-> first report after each: {', '.join(f'{t:.2f}' for t in totals)} s (max "
          f"{max(totals):.2f}; seconds waited for spares still starting: "
          f"{', '.join(f'{w:.2f}' for w in waited)})")


def compare(where: str, repeats: int, found: dict, **cluster_options) -> None:
    """Restart and recovery with warm spares and without, on one kind of cluster; prints them
    and records the medians in ``found[where]``."""
    warm_restarts, warm, memory = measure(repeats, spares=None, **cluster_options)
    cold_restarts, cold, _ = measure(repeats, spares=0, **cluster_options)
    spare, engine = memory.get("spare_mb") or [0.0], memory.get("engine_mb") or [0.0]
    for label, times in (("with warm spares (a join)", warm_restarts),
                         ("without spares (stop, start, join)", cold_restarts)):
        print(f"jaxnb restart --replay {label}, {where}: median {statistics.median(times):.2f} s "
              f"({', '.join(f'{t:.2f}' for t in times)})")
    found[where] = {"restart": {"spares": statistics.median(warm_restarts),
                                "no spares": statistics.median(cold_restarts)},
                    "spares": _medians(warm), "no spares": _medians(cold),
                    "totals": {"spares": [r["total"] for r in warm],
                               "no spares": [r["total"] for r in cold]},
                    "memory_mb": {"spare": statistics.median(spare),
                                  "engine": statistics.median(engine),
                                  "spares_measured": memory.get("spare_mb", []),
                                  "engines_measured": memory.get("engine_mb", [])}}
    print(f"jaxnb recovery, {where}, kill -> first report after the resume (median of {repeats}):")
    print(f"  {'phase':<32} {'spares':>7} {'none':>7}")
    inside = [(k, k, "") for k in ("  of which launching", "  of which model set-up",
                                    "  of which the step")]
    for key, label, _ in [*ROWS, *inside, ("total", "total", "")]:
        print(f"  {label:<32} {found[where]['spares'][key]:6.2f}s {found[where]['no spares'][key]:6.2f}s")
    spare_said = (f"{statistics.median(spare):.0f} MB resident" if memory.get("spare_mb") else
                  "not measured (its pid here is its ssh launcher's)")
    print(f"jaxnb memory, {where}: a warm spare {spare_said}, a group engine after joining "
          f"{statistics.median(engine):.0f} MB (medians of {len(memory.get('spare_mb', []))} "
          f"spares, {len(memory.get('engine_mb', []))} engines)")


def _medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r.get(k, 0.0) for r in rows), 3) for k in rows[0]}


def local_section(args: argparse.Namespace, found: dict) -> None:
    """2 processes × 2 CPU devices on this machine: fresh recoveries, then back to back."""
    compare("2 local processes", args.repeats, found, n=2, devices_per_process=DEVICES)
    back_to_back("2 local processes", found, args.kills, args.gap, n=2, devices_per_process=DEVICES)


def lab_section(args: argparse.Namespace, found: dict) -> None:
    """One engine on each of two lab ssh hosts (root only: it builds the lab of tests/lab)."""
    from tests.lab.lab import Lab, missing

    why = missing()
    if why:
        print(f"jaxnb on two lab ssh hosts: not measured ({why})")
        return
    with Lab(2).running() as lab:
        compare("2 lab ssh hosts", args.repeats, found, hosts=lab.addresses,
                devices_per_process=DEVICES)
        back_to_back("2 lab ssh hosts", found, args.kills, args.gap, hosts=lab.addresses,
                     devices_per_process=DEVICES)


def ray_python(given: str | None) -> str | None:
    """The interpreter that has Ray: ``--ray-python``, ``JAXNB_RAY_PYTHON``, or this one."""
    chosen = given or os.environ.get("JAXNB_RAY_PYTHON")
    if chosen:
        return chosen
    probe = subprocess.run([sys.executable, "-c", "import ray.train"], capture_output=True)
    return sys.executable if probe.returncode == 0 else None


def ray_section(args: argparse.Namespace, found: dict) -> None:
    """Ray Train's recovery of the same loop, in Ray's venv, and jaxnb's local one against it."""
    if args.no_ray:
        return
    python = ray_python(args.ray_python)
    if python is None:
        print("Ray Train: not measured: no interpreter with Ray; make a venv with "
              "`pip install \"ray[train]==2.60.0\" flax optax` and pass --ray-python PATH "
              "(or JAXNB_RAY_PYTHON)")
        return
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        run = subprocess.run([python, "-m", "bench._ray_recovery", "--repeats", str(args.repeats),
                              "--steps", str(STEPS), "--kill-at", str(KILL_AT), "--devices",
                              str(DEVICES), "--kills", str(args.kills), "--gap", str(args.gap),
                              "--json", out.name], cwd=ROOT, capture_output=True,
                             text=True, timeout=3600)
        if run.returncode != 0:
            tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"Ray Train: not measured: {python} failed ({tail})")
            return
        with open(out.name) as f:
            ray = json.load(f)
    if ray.get("not_measured"):
        print(f"Ray Train: not measured: {ray['not_measured']}")
        return
    found["ray"] = ray
    print(f"Ray Train {ray['version']} recovery ({ray['trainer']}, FailureConfig(max_failures=1), "
          f"stock health checks), kill -> first report after the restore: median "
          f"{ray['medians']['total']:.2f} s ({', '.join(f'{t:.2f}' for t in ray['totals'])})")
    mine = found.get("2 local processes")
    print(f"side by side, medians of {args.repeats} (Ray's phases from its controller log):")
    print(f"  {'jaxnb phase':<32} {'jaxnb':>7}   {'Ray Train phase':<42} {'Ray':>7}")
    for key, label, ray_label in ROWS:
        ours = f"{mine['spares'][key]:6.2f}s" if mine else "      -"
        print(f"  {label:<32} {ours}   {ray_label:<42} {ray['medians'].get(key, 0.0):6.2f}s")
    print(f"  {'(between the phases)':<32} {'':>7}   {'':<42} {ray['medians']['other']:6.2f}s")
    ours = f"{mine['spares']['total']:6.2f}s" if mine else "      -"
    print(f"  {'total':<32} {ours}   {'total':<42} {ray['medians']['total']:6.2f}s")
    theirs, ours_b2b = ray.get("back to back"), (mine or {}).get("back to back")
    if theirs:
        print(f"Ray Train back to back: {args.kills} deaths {args.gap:g} s apart in one run: "
              f"{', '.join(f'{t:.2f}' for t in theirs['totals'])} s")
    if theirs and ours_b2b:
        found["ratio back to back"] = round(ours_b2b["max"] / max(theirs["totals"]), 3)
        print(f"jaxnb back to back, worst / Ray's worst = {found['ratio back to back']:.2f}; jaxnb's "
              f"worst {ours_b2b['max']:.2f} s (goal <= 1.75 s)")
    if mine:
        ratio = mine["spares"]["total"] / ray["medians"]["total"]
        found["ratio"] = round(ratio, 3)
        print(f"jaxnb (local, spares) / Ray = {ratio:.2f} (goal <= 0.2); jaxnb "
              f"{mine['spares']['total']:.2f} s (goal <= 1.75 s)")


Section = Callable[[argparse.Namespace, dict], None]
#: What ``main`` runs, in order; each section prints its own lines and leaves its figures in
#: the shared dict (``found["2 local processes"]``: jaxnb's local recovery, for Ray's section).
SECTIONS: dict[str, Section] = {"local": local_section, "lab": lab_section, "ray": ray_section}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"sections to run, comma-separated (default: {','.join(SECTIONS)})")
    parser.add_argument("--ray-python", default=None, metavar="PATH",
                        help="the interpreter of a venv with Ray Train (default: JAXNB_RAY_PYTHON, "
                             "else this one if it has Ray)")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--kills", type=int, default=KILLS,
                        help=f"deaths in the back-to-back run (default {KILLS}; at least 2)")
    parser.add_argument("--gap", type=float, default=GAP_SECONDS,
                        help=f"seconds between them (default {GAP_SECONDS:g})")
    args = parser.parse_args()
    if args.kills < 2:
        sys.exit(f"--kills {args.kills}: a back-to-back run needs at least 2 deaths; give 2 or more")
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        sys.exit(f"unknown section {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    results, found = Results("recovery"), {}
    print(f"load average at the start: {results.load_at_start}")
    for name in chosen:
        SECTIONS[name](args, found)
    results.add(**found)
    results.write()


if __name__ == "__main__":
    main()
