"""FLOPs per step, counted from the traced step's program (engine side).

``jaxnb.report(..., step_fn=step)`` names the step: the jitted function itself (read from its
calls), a ``jax.stages.Traced`` (``step.trace(*args)``), a number of FLOPs (an analytic
formula), or a ``Lowered``/``Compiled`` (then XLA's estimate is used, labelled as such). Without
it, jaxnb looks at the jitted functions the train function calls and takes the one with the
most FLOPs as the step.

A jitted step's FLOPs are its matrix products and convolutions counted in its jaxpr
(:mod:`.jaxpr_flops`): every iteration of a loop, remat as run, per device. Tracing compiles
nothing: there is no second compile on the training thread. XLA's cost analysis of the
compiled program is not used for jitted steps: it misses GEMMs that became library calls on
GPU and counts a loop's body once.

To know how a jitted function is called, this process notes every call that misses jit's
cache (the first call of a function, or one with new shapes: :func:`watch_jit_calls`): the
function and the shapes, dtypes and shardings of its arguments (no data kept). A run's
candidates are the noted calls of the jitted functions its train function names, and the
calls first made while it runs.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

#: ``step_fn=`` given something jaxnb cannot read FLOPs from.
NOT_COMPILED = ("jaxnb.report(step_fn=...) takes the jitted step (`jax.jit(step)`, once called), "
                "its `step.trace(state, batch)`, or its FLOPs as a number; got {kind}")
#: How each kind of figure is named on the dashboard (``flops_source``'s second part).
COUNTED = "matrix FLOPs of the traced {name}"
GIVEN = "given as a number"
XLA = "XLA's estimate for {name} (misses library calls and loops)"
#: How many jitted calls this process remembers (the latest).
MAX_CALLS = 64

Call = tuple[Any, tuple[Any, ...], dict[str, Any]]  # jitted function, abstract args and kwargs

_calls: OrderedDict[int, Call] = OrderedDict()  # id(jitted) -> its latest call
_watching = False


class StepCost:
    """One run's FLOPs per step on this process: given, or found among the jitted calls."""

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        self.thread = threading.get_ident()
        self.flops: float | None = None
        self.source = ""  # what the figure is, named for the dashboard (COUNTED, GIVEN or XLA)
        self.error = ""
        self.given: Any = None
        named = _named_by(fn)
        #: The calls not looked at yet: those of the functions the train function names.
        self.pending: list[Call] = [call for call in _calls.values() if id(call[0]) in named]

    def give(self, step_fn: Any) -> None:
        """``report(step_fn=...)``: read its FLOPs (once per object); a jitted function's are
        read from its call (the shapes it was called with)."""
        if step_fn is self.given:
            return
        self.given, self.error = step_fn, ""
        if _jitted(step_fn) and not _traced(step_fn):
            self.flops, self.source = None, ""
            call = _calls.get(id(step_fn))
            self.pending = [call] if call is not None and call[0] is step_fn else []
            return
        self.pending = []
        try:
            self.flops, self.source = flops_of(step_fn), source_of(step_fn)
        except Exception as exc:
            self.flops, self.error = None, f"{type(exc).__name__}: {exc}".splitlines()[0]

    def called(self, call: Call) -> None:
        """A jitted call first made during the run (the step, perhaps): look at it next report."""
        if self.given is None or self.given is call[0]:
            self.pending = [c for c in self.pending if c[0] is not call[0]] + [call]

    def settle(self) -> None:
        """At a report: the FLOPs of the calls not looked at yet (traced, not compiled); keep the
        largest."""
        from jaxnb._engine.run import jaxpr_flops

        pending, self.pending = self.pending, []
        for jitted, args, kwargs in pending:
            try:
                found = jaxpr_flops.per_device(jitted, args, kwargs)
            except Exception as exc:
                self.error = self.error or f"{type(exc).__name__}: {exc}".splitlines()[0]
                continue
            flops = found.flops
            if flops and (self.flops is None or flops > self.flops or jitted is self.given):
                name = "step_fn" if jitted is self.given else getattr(jitted, "__name__", "step")
                loops = found.unknown_loops
                self.flops, self.source = flops, COUNTED.format(name=name) + (
                    f"; {loops} while loop(s) of unknown trip count counted once" if loops else "")


def _named_by(fn: Callable[..., Any] | None) -> set[int]:
    """The ids of the objects ``fn`` names: its globals (in it and its nested functions) and
    the values it closes over."""
    if fn is None:
        return set()
    code, scope = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    names: set[str] = set()
    codes = [code] if code is not None else []
    while codes:
        current = codes.pop()
        names.update(current.co_names)
        codes.extend(c for c in current.co_consts if hasattr(c, "co_names"))
    found = {id(scope[n]) for n in names if n in scope}
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            found.add(id(cell.cell_contents))
        except ValueError:  # an empty cell
            continue
    return found


def _jitted(step: Any) -> bool:
    """A function made by ``jax.jit`` (not yet lowered or compiled), or its ``Traced``."""
    return hasattr(step, "lower") and not hasattr(step, "cost_analysis")


def _traced(step: Any) -> bool:
    """A ``jax.stages.Traced``: its program is there to count."""
    return _jitted(step) and hasattr(step, "jaxpr") and not hasattr(step, "trace")


def source_of(step: Any) -> str:
    """How the dashboard names the figure ``flops_of(step)`` gives."""
    if _traced(step):
        return COUNTED.format(name="step_fn")
    if isinstance(step, (int, float)):
        return GIVEN
    return XLA.format(name="step_fn")


def flops_of(step: Any) -> float:
    """The FLOPs per device of one call of ``step``: a ``Traced`` (its jaxpr counted), a number,
    or a ``Lowered``/``Compiled`` (XLA's estimate; a ``Lowered`` is not compiled for it)."""
    from jaxnb._engine.run import jaxpr_flops

    if isinstance(step, (int, float)) and not isinstance(step, bool):
        return float(step)
    if _traced(step):
        return jaxpr_flops.count(step.jaxpr).flops / jaxpr_flops.devices_of(step.out_info)
    if _jitted(step):
        raise TypeError(NOT_COMPILED.format(kind="a jitted function not called yet"))
    if not hasattr(step, "cost_analysis"):
        raise TypeError(NOT_COMPILED.format(kind=type(step).__name__))
    analysis = step.cost_analysis()  # a Lowered's is global (before partitioning), a Compiled's per device
    if isinstance(analysis, (list, tuple)):  # older JAX: one dict per program
        analysis = analysis[0] if analysis else {}
    flops = (analysis or {}).get("flops")
    if flops is None:
        raise ValueError("XLA's cost analysis has no FLOP count for this program")
    lowered = hasattr(step, "compile")
    return float(flops) / (jaxpr_flops.devices_of(getattr(step, "out_info", None)) if lowered else 1)


def abstract(tree: Any) -> Any:
    """``tree`` with each array replaced by its shape, dtype and sharding (no data kept)."""
    jax = sys.modules["jax"]

    def shape_of(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding, weak_type=x.weak_type)
        return x

    return jax.tree_util.tree_map(shape_of, tree)


_cost: StepCost | None = None


def start(fn: Callable[..., Any] | None = None) -> StepCost:
    """A new run of ``fn`` on the calling thread: its FLOPs per step are not known yet."""
    global _cost
    watch_jit_calls()
    _cost = StepCost(fn)
    return _cost


def current() -> StepCost | None:
    """The FLOPs per step of the run under way (or just ended), or ``None``."""
    return _cost


def watch_jit_calls() -> None:
    """Note every jitted call that misses jit's cache in this process (once per process)."""
    global _watching
    if _watching:
        return
    from jaxnb._engine import jax_internals

    def missed() -> None:
        try:
            found = jax_internals.jit_call_in_progress()
            if found is None:
                return
            jitted, args, kwargs = found
            call = (jitted, abstract(args), abstract(kwargs))
        except Exception:  # finding the step is a nicety: never disturb the call
            return
        _calls[id(jitted)] = call
        _calls.move_to_end(id(jitted))
        while len(_calls) > MAX_CALLS:
            _calls.popitem(last=False)
        cost = _cost
        if cost is not None and cost.thread == threading.get_ident():
            cost.called(call)

    jax_internals.on_jit_cache_miss(missed)
    _watching = True
