"""FLOPs per step, from XLA's cost analysis of the compiled step (engine side).

``jaxnb.report(..., step_fn=compiled)`` names the step: a ``jax.stages.Compiled``
(``jax.jit(step).lower(*args).compile()``), a ``Lowered``, the jitted function itself (read
from its call) or a number of FLOPs. Without it,
jaxnb notes every jitted function the train function calls as XLA compiles it (with the
shapes, dtypes and shardings of that call) and, at the next report, takes the one with the
most FLOPs as the step. Cost analysis gives the FLOPs of one device's program.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

#: ``step_fn=`` given something jaxnb cannot read FLOPs from.
NOT_COMPILED = ("jaxnb.report(step_fn=...) takes the compiled step, e.g. "
                "`jax.jit(step).lower(state, batch).compile()`, or its FLOPs as a number; got {kind}")


class StepCost:
    """One run's FLOPs per step on this process: given, or found among the jitted calls."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.flops: float | None = None
        self.source = ""  # "step_fn", or the name of the jitted function found
        self.error = ""
        self.given: Any = None
        #: The jitted calls compiled so far (function, abstract args and kwargs), and those not
        #: looked at yet.
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
        self.pending: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def give(self, step_fn: Any) -> None:
        """``report(step_fn=...)``: read its FLOPs (once per object); a jitted function's are
        read from its call (the shapes it was called with)."""
        if step_fn is self.given:
            return
        self.given, self.error = step_fn, ""
        if _jitted(step_fn):
            self.flops, self.source = None, ""
            self.pending = [call for call in self.calls if call[0] is step_fn]
            return
        self.pending = []
        try:
            self.flops, self.source = flops_of(step_fn), "step_fn"
        except Exception as exc:
            self.flops, self.error = None, f"{type(exc).__name__}: {exc}".splitlines()[0]

    def found(self, jitted: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """XLA compiles a call of ``jitted`` (the step, perhaps): look at it at the next report."""
        if any(call[0] is jitted for call in self.calls):
            return
        call = (jitted, abstract(args), abstract(kwargs))
        self.calls.append(call)
        if self.given is None or self.given is jitted:
            self.pending.append(call)

    def settle(self) -> None:
        """At a report: the FLOPs of the jitted calls compiled since; keep the largest."""
        pending, self.pending = self.pending, []
        for jitted, args, kwargs in pending:
            try:
                flops = flops_of(jitted.lower(*args, **kwargs).compile())
            except Exception as exc:
                self.error = self.error or f"{type(exc).__name__}: {exc}".splitlines()[0]
                continue
            if flops and (self.flops is None or flops > self.flops or jitted is self.given):
                self.flops, self.source = flops, getattr(jitted, "__name__", "jit")


def _jitted(step: Any) -> bool:
    """A function made by ``jax.jit`` (not yet lowered or compiled)."""
    return hasattr(step, "lower") and not hasattr(step, "cost_analysis")


def flops_of(step: Any) -> float:
    """The FLOPs of one call of ``step`` (a Compiled, a Lowered, or a number)."""
    if isinstance(step, (int, float)) and not isinstance(step, bool):
        return float(step)
    if _jitted(step):
        raise TypeError(NOT_COMPILED.format(kind="a jitted function not called yet"))
    if hasattr(step, "cost_analysis") and not hasattr(step, "compile"):
        analysis = step.cost_analysis()
    elif hasattr(step, "compile"):
        analysis = step.compile().cost_analysis()
    else:
        raise TypeError(NOT_COMPILED.format(kind=type(step).__name__))
    if isinstance(analysis, (list, tuple)):  # older JAX: one dict per program
        analysis = analysis[0] if analysis else {}
    flops = (analysis or {}).get("flops")
    if flops is None:
        raise ValueError("XLA's cost analysis has no FLOP count for this program")
    return float(flops)


def abstract(tree: Any) -> Any:
    """``tree`` with each array replaced by its shape, dtype and sharding (no data kept)."""
    jax = sys.modules["jax"]

    def shape_of(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding, weak_type=x.weak_type)
        return x

    return jax.tree_util.tree_map(shape_of, tree)


_cost: StepCost | None = None
_listening = False


def start() -> StepCost:
    """A new run on the calling thread: its FLOPs per step are not known yet."""
    global _cost
    _listen()
    _cost = StepCost()
    return _cost


def current() -> StepCost | None:
    """The FLOPs per step of the run under way (or just ended), or ``None``."""
    return _cost


def _listen() -> None:
    global _listening
    if _listening:
        return
    import jax

    from jaxnb._engine import jax_internals

    def began(event: str, value: float, **kwargs: str | int) -> None:
        cost = _cost
        if (event != jax_internals.BACKEND_COMPILE_EVENT or cost is None
                or cost.thread != threading.get_ident()):
            return
        try:
            call = jax_internals.jit_call_compiling()
            if call is not None:
                cost.found(*call)
        except Exception:  # finding the step is a nicety: never disturb the compile
            pass

    jax.monitoring.register_scalar_listener(began)
    _listening = True
