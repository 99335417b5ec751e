"""Inside a train function: ``report``, ``get_checkpoint``, ``should_stop`` (Ray Train's words).

The notebook runs a training function in two requests on every engine:
:func:`prepare` (find the function, arm the stop signal) then :func:`execute`
(run it, with every report streamed back and the last batch flushed before
it returns, also when it raises). A run asked to stop ends at the same
``report()`` on every process (:mod:`~jaxnb._engine.run.stopping`), whether or
not the function calls ``should_stop()``: that report raises ``StopRun``, which
:func:`execute` catches.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from jaxnb._core.messages import article
from jaxnb._core.run_folder import Checkpoint
from jaxnb._core.spelling import Code, bare, example, spelled
from jaxnb._engine.checkpoint import crash_points
from jaxnb._engine.datasets import data_run
from jaxnb._engine.memory import oom_note
from jaxnb._engine.profile import recording
from jaxnb._engine.run import (
    cell_sources,
    monitoring,
    pacing,
    resizing,
    restore_clock,
    stopping,
    timing,
)
from jaxnb._engine.run.publisher import BatchPublisher, datapub_sender
from jaxnb._engine.run.values import user_namespace

#: Reports whose JAX values may still be computing; ``report()`` waits on the value
#: reported this many reports ago, so dispatch never runs unboundedly ahead.
MAX_IN_FLIGHT = 4
#: The same with several CPU devices per process, where overlapping steps can deadlock
#: gloo (README, "CPU collectives"): block on the previously reported value.
MAX_IN_FLIGHT_CPU_MULTI_DEVICE = 1
#: Checkpoints kept per run by ``report(checkpoint=pytree)``.
KEEP_CHECKPOINTS = 3

OUTSIDE_RUN = (
    "jaxnb.report() works only inside a function run by `%jax_train` or `JaxCluster.train`; "
    "run your function with one of those"
)


@dataclasses.dataclass
class _Run:
    """One training run on this process."""

    run_dir: str
    process: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    resume: Checkpoint | None
    stop: stopping.StopPoints
    run_id: str = ""
    publisher: BatchPublisher | None = None
    count: int = 0
    base_step: int = 0
    store: Any = None  # CheckpointStore, made at the first pytree checkpoint
    max_in_flight: int | None = None  # decided at the first JAX value reported
    in_flight: deque = dataclasses.field(default_factory=deque)
    #: Messages name the magics' flags (the run was started by ``%jax_train``), else keywords.
    as_flags: bool = False
    #: ``min_processes``: whether to end at a checkpoint for a size change.
    resize: resizing.Agreement | None = None
    #: The step of the last report.
    last_step: int | None = None
    #: The run was ended on request (at ``stop.end``; ``should_stop()`` may have said so).
    stopped: bool = False
    keep: int = KEEP_CHECKPOINTS  # the newest checkpoints Orbax keeps (--keep-checkpoints)


_run: _Run | None = None


# ---- the public, engine-side API ----------------------------------------------------


def report(metrics: dict[str, Any], checkpoint: Any = None, *, step_fn: Any = None) -> None:
    """Send ``metrics`` (Python or JAX scalars) to the notebook, like ``ray.train.report``.

    ``checkpoint`` is a pytree that all processes save together (Orbax, the
    last 3 kept under the run's ``checkpoints`` folder; host-local leaves equal
    on every process are written once, the others once per process), or the path of a
    directory you saved yourself (recorded as is; ``jaxnb.Checkpoint.from_directory``
    works too). The step is
    ``metrics["step"]`` when it is a Python int, else the number of reports
    so far (continuing from the resumed checkpoint's step). It does not wait on
    the device, except to keep at most ``MAX_IN_FLIGHT`` reported values
    computing (1 with several CPU devices per process).

    Once the run is asked to stop (Stop, an interrupt, a pruned trial), the
    report where every process agreed to end is sent, then ends the function
    (as Ray ends a stopped trial), unless ``should_stop()`` already said True.

    ``step_fn``: the compiled step (``jax.jit(step).lower(...).compile()``, or the jitted
    function itself), once: the dashboard's FLOP/s and MFU come from XLA's cost analysis of it.
    Without it, jaxnb takes the jitted function with the most FLOPs that the function calls. A
    ``batch_size`` (examples per step) or ``tokens`` (tokens per step) metric gives the
    throughput in those units.

    Args:
        metrics: names to numbers (Python or JAX scalars); ``step`` is the step when given.
        checkpoint: a pytree to save with Orbax from every process, or the path of a
            checkpoint directory you wrote; ``None`` saves nothing.
        step_fn: the compiled step, for FLOP/s and MFU (see above); once is enough.

    Raises:
        RuntimeError: called outside a function run by ``%jax_train`` / ``JaxCluster.train``.
        TypeError: ``metrics`` is not a dict.
        ValueError: a checkpoint leaf cannot be saved (a function, a file, a deleted buffer):
            the message names its path, on every process.

    Example:
        >>> jaxnb.report({"loss": loss}, checkpoint=state if step % 50 == 0 else None)  # doctest: +SKIP
    """
    run = _run
    if run is None or run.publisher is None:
        raise RuntimeError(OUTSIDE_RUN)
    if not isinstance(metrics, dict):
        raise TypeError(f"jaxnb.report() takes a dict of metrics, got {type(metrics).__name__}")
    run.count += 1
    step = metrics.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        step = _int_or_none(step)
    if step is None:
        step = run.base_step + run.count
    record = {
        "process": run.process,
        "seq": run.count - 1,
        "step": step,
        "time": time.time(),
        "metrics": dict(metrics),
        "checkpoint": None,
    }
    if run.count == 1:  # a recovery's restore phase
        record["restore_seconds"] = restore_clock.seconds
    positions = data_run.record(step, checkpoint is not None)
    monitoring.at_report(step_fn)
    saved = None
    if checkpoint is not None:
        crash_points.reached("saving", step)
        with timing.counting("checkpoint"):
            saved = _save(run, step, checkpoint, positions)
        crash_points.reached("committed", step)
        record["checkpoint"] = saved.path
        record["checkpoint_user"] = saved.user_managed
    run.publisher.add(record)
    run.last_step = step
    if checkpoint is not None:
        crash_points.reached("reported", step)
    _bound_in_flight(run, metrics)
    recording.step_reported(step)  # %jax_train --profile-steps: opens/closes the trace window
    if run.resize is not None and saved is not None and not saved.user_managed:
        run.resize.at_checkpoint(step)  # a size change waits for this checkpoint: end here
    pacing.wait_for_verdict(run.count - 2, stopping.requested)  # a search: the last one judged
    if not run.stopped and run.stop.reached():  # after should_stop() said True, reports go on
        run.stopped = True
        raise stopping.StopRun(f"the run was asked to stop; every process ends at step {step}")


def get_checkpoint() -> Any:
    """The checkpoint this run resumes from (``--resume``, or a recovery), or None.

    It has ``step``, ``path``, ``restore(target=None)`` and, as in Ray,
    ``as_directory()``. Outside a run it is None.

    Example::

        start = jaxnb.get_checkpoint()
        state = start.restore(state) if start else state    # laid out like ``state``
    """
    return _run.resume if _run is not None else None


def should_stop() -> bool:
    """True on every process at the same call once the run was asked to stop (then it stays True).

    A stop is asked by the dashboard's Stop button, ``Result.stop()``, a kernel interrupt or
    a search's pruner. Optional: without it the run ends at a ``report()``. With it, the
    function ends itself, and may still report and save (a last checkpoint) after the loop.
    Outside a run it is False. Every process must call it alike (SPMD).
    """
    run = _run
    if run is None:
        return False
    if not run.stopped and run.stop.reached():
        run.stopped = True
    return run.stopped


# ---- the two requests the notebook sends -------------------------------------------


def prepare(spec: dict[str, Any]) -> dict[str, Any]:
    """Set up a run on this process; ``{"error": message}`` when the function does not fit."""
    with spelled(bool(spec.get("as_flags"))):
        return _prepare(spec)


def _prepare(spec: dict[str, Any]) -> dict[str, Any]:
    global _run
    from jaxnb._engine.debug import kept
    from jaxnb._engine.group import context

    _run = None
    kept.drop()  # a new run: the last failure's frames are not debuggable any more
    try:
        fn, args = _function(spec)
    except (LookupError, TypeError) as exc:
        return {"error": str(exc)}
    process, n = context.process_index(), context.num_processes()
    resume = spec.get("resume")
    try:
        named = data_run.resolve(spec.get("datasets") or {}, user_namespace())
        data_run.start(named, spec["run_dir"], process, n, resume)
    except (LookupError, ValueError) as exc:
        return {"error": str(exc)}
    if process == 0:
        stopping.clear_keys()
        from jaxnb._engine.group import gather

        gather.clear_keys()
    stopping.arm()
    pacing.start(str(spec["run_id"]) if spec.get("paced") else None)
    elastic = bool(spec.get("elastic"))
    if elastic:
        resizing.arm()
    _run = _Run(
        run_dir=spec["run_dir"],
        process=process,
        fn=fn,
        args=args,
        resume=resume,
        stop=stopping.StopPoints(spec["run_id"], process, n),
        run_id=str(spec["run_id"]),
        base_step=resume.step if resume is not None else 0,
        as_flags=bool(spec.get("as_flags")),
        resize=resizing.Agreement(str(spec["run_id"]), process, n) if elastic else None,
        keep=int(spec.get("keep_checkpoints") or KEEP_CHECKPOINTS),
    )
    meshes = resizing.meshes(user_namespace()) if elastic and process == 0 else {}
    return {"error": None, "process": process, "meshes": meshes}


def execute() -> dict[str, Any]:
    """Run the prepared function; every report is published before this returns or raises."""
    global _run
    run = _run
    if run is None:
        raise RuntimeError("no jaxnb training run was prepared on this process")
    sampler = monitoring.start(run.fn)
    run.publisher = BatchPublisher(datapub_sender(), monitor=sampler,
                                   monitor_every=monitoring.SAMPLE_SECONDS)
    run.stop.start()
    restore_clock.reset()
    ok, resized_at = False, None
    try:
        with spelled(run.as_flags):
            run.fn(*run.args)
        ok = True
    except resizing.ResizeAtCheckpoint as end:  # every process ends here together
        ok, resized_at = True, end.step
    except stopping.StopRun:
        ok = True
    except BaseException as exc:
        from jaxnb._engine.debug import kept

        kept.keep(exc)  # for %jax_debug, until the next cell or run here
        oom_note.note_if_out_of_memory(exc, user_namespace())
        raise
    finally:
        monitoring.stop()
        _run = None
        run.stop.finish()
        data_run.end()
        run.publisher.close()
        if run.store is not None and ok:
            run.store.close()
    return {"reports": run.count, "batches": run.publisher.batches, "stopped": run.stopped,
            "stopped_at": run.last_step if run.stopped else None, "resized_at": resized_at}


# ---- helpers -------------------------------------------------------------------------


def _function(spec: dict[str, Any]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The function to run and its arguments: none, or the config."""
    import cloudpickle

    config = cloudpickle.loads(spec["config"]) if spec.get("config") is not None else None
    if spec.get("pickled") is not None:
        fn = cloudpickle.loads(spec["pickled"])
        _see_engine_namespace(fn)
        cell_sources.restore(fn, spec.get("sources"))
    else:
        fn = _lookup(spec["name"])
    label = str(spec.get("label") or getattr(fn, "__name__", "FUNC"))
    if not callable(fn):
        raise TypeError(f"{label} is {article(type(fn).__name__)}, not a function")
    takes = _takes_config(fn, label)
    if takes is None and config is not None:
        raise TypeError(
            f"{label}() takes no arguments but a config was given; give it a parameter "
            f"(`def {label}(config): ...`) or drop {bare('config')}"
        )
    if takes is None or (takes == "optional" and config is None):
        return fn, ()
    if config is not None:
        _check_config(fn, config, label)
    return fn, ({} if config is None else config,)


#: Configs that are a single value: taken only by a function whose parameter is annotated so.
_SCALARS = (str, bytes, int, float, complex, bool)


def _check_config(fn: Callable[..., Any], config: Any, label: str) -> None:
    """Refuse a config that is one number or string unless ``fn``'s parameter is annotated to take it."""
    if not isinstance(config, _SCALARS):
        return
    kind = type(config).__name__
    try:
        param = next(iter(inspect.signature(fn).parameters.values()))
    except (TypeError, ValueError, StopIteration):
        return
    note = param.annotation
    if note is not inspect.Parameter.empty:
        if isinstance(note, type) and isinstance(config, note):
            return
        if isinstance(note, str) and re.search(rf"\b{kind}\b|\bAny\b", note):
            return
        if not isinstance(note, (type, str)):  # a Union, Any, ...: trust it
            return
    raise TypeError(
        f"{bare('config')} {config!r:.40} is {article(kind)}, but {label}() takes a config "
        f"dict: pass e.g. {example('config', Code('dict(lr=0.1)'))} (or annotate "
        f"its parameter, `{param.name}: {kind}`)"
    )


def _takes_config(fn: Callable[..., Any], label: str) -> str | None:
    """None (no parameter), "optional" or "required"; raise if it needs more than one."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return "required"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    required_kw = [p for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if len(required) > 1 or required_kw:
        raise TypeError(
            f"{label}() must take no argument or one (the config); it needs "
            f"{', '.join(p.name for p in required + required_kw)}"
        )
    if required:
        return "required"
    if positional or any(p.kind == p.VAR_POSITIONAL for p in params):
        return "optional"
    return None


def _lookup(name: str) -> Any:
    """``name`` (dotted allowed) in this engine's namespace."""
    head, *rest = name.split(".")
    ns = user_namespace()
    if head not in ns:
        raise LookupError(
            f"{name!r} is defined neither in the notebook nor on the engines; define it in a "
            "notebook cell or in a %%jax_cluster cell first"
        )
    value = ns[head]
    for part in rest:
        value = getattr(value, part)
    return value


def _see_engine_namespace(fn: Any) -> None:
    """Let a function sent from the notebook also see names defined on the engines.

    Its own (notebook) globals come first; names it uses that the notebook
    does not define are looked up in the engine's namespace.
    """
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    g = getattr(fn, "__globals__", None)
    if g is None or (module is not None and g is vars(module)):
        return
    for key, value in user_namespace().items():
        g.setdefault(key, value)


def _int_or_none(value: Any) -> int | None:
    """An int for NumPy integer scalars; None for anything else (JAX values stay lazy)."""
    if value is None or isinstance(value, (bool, float)):
        return None
    try:
        import numpy as np
    except ImportError:
        return None
    return int(value) if isinstance(value, np.integer) else None


def _save(run: _Run, step: int, checkpoint: Any, positions: dict[str, Any] | None) -> Any:
    from jaxnb._engine.checkpoint.store import CheckpointStore

    if isinstance(checkpoint, Checkpoint):  # Ray style: Checkpoint.from_directory(path)
        checkpoint = checkpoint.path
    if isinstance(checkpoint, (str, os.PathLike)):
        return Checkpoint.from_directory(checkpoint, step)
    if run.store is None:
        run.store = CheckpointStore(run.run_dir, keep=run.keep, exchange_id=run.run_id)
    return run.store.save(step, checkpoint, positions)  # the positions commit with the step


def _max_in_flight(jax: Any) -> int:
    several_cpu = jax.default_backend() == "cpu" and jax.local_device_count() > 1
    return MAX_IN_FLIGHT_CPU_MULTI_DEVICE if several_cpu else MAX_IN_FLIGHT


def _bound_in_flight(run: _Run, metrics: dict[str, Any]) -> None:
    jax = sys.modules.get("jax")
    if jax is None:
        return
    arrays = [v for v in metrics.values() if isinstance(v, jax.Array)]
    if arrays and run.max_in_flight is None:
        run.max_in_flight = _max_in_flight(jax)  # a JAX value exists: the backend is up
    run.in_flight.append(arrays)
    if len(run.in_flight) > (run.max_in_flight or MAX_IN_FLIGHT):
        oldest = run.in_flight.popleft()
        if oldest:
            jax.block_until_ready(oldest)
