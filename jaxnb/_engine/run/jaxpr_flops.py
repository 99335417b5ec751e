"""FLOPs of a traced program, counted from its jaxpr: the model's matrix products as written.

Every ``dot_general`` counts 2·batch·M·N·K and every convolution 2·(output size)·(kernel
size per output feature); a ``scan`` counts its body ``length`` times, a ``cond`` its
costliest branch, a ``while`` with a known trip count (``fori_loop``) its body that many times;
anything else that holds a program (``pjit``, ``custom_jvp``/``custom_vjp``, remat,
``shard_map``...) is counted as it runs, so remat's recomputation is counted. A ``while``
whose trip count is not known is counted once and flagged. Elementwise operations are not
counted (as in MFU's usual definition: GEMM FLOPs).

The jaxpr is the global program: :func:`per_device` divides by the devices the arguments
are placed on. Nothing is compiled.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any


@dataclass
class Count:
    """What :func:`count` found: FLOPs, and the ``while`` loops whose trip count was not known."""

    flops: float = 0.0
    unknown_loops: int = 0

    def add(self, other: Count, times: float = 1.0) -> None:
        self.flops += times * other.flops
        self.unknown_loops += other.unknown_loops


def count(jaxpr: Any) -> Count:
    """The FLOPs of one run of ``jaxpr`` (a ``Jaxpr`` or ``ClosedJaxpr``)."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    total = Count()
    for eqn in inner.eqns:
        total.add(_equation(eqn))
    return total


def _equation(eqn: Any) -> Count:
    name, params = eqn.primitive.name, eqn.params
    if name == "dot_general":
        return Count(_dot_flops(eqn))
    if name == "conv_general_dilated":
        return Count(_conv_flops(eqn))
    if name == "scan":
        found = Count()
        found.add(count(params["jaxpr"]), float(params["length"]))
        return found
    if name == "cond":
        branches = [count(b) for b in params["branches"]]
        return max(branches, key=lambda c: c.flops, default=Count())
    if name == "while":
        return _while(eqn)
    found = Count()
    for sub in _programs(params):
        found.add(count(sub))
    if name == "shard_map":  # its body is one device's program: the global count is × devices
        mesh = params.get("mesh")
        found.flops *= float(getattr(mesh, "size", 1) or 1)
    return found


def _programs(params: dict[str, Any]) -> list[Any]:
    """The programs an equation's parameters hold (a jaxpr, or a list of them)."""
    found = []
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if hasattr(item, "eqns") or hasattr(getattr(item, "jaxpr", None), "eqns"):
                found.append(item)
    return found


def _shape(var: Any) -> tuple[int, ...]:
    return tuple(getattr(var.aval, "shape", ()))


def _dot_flops(eqn: Any) -> float:
    """2 · (output size) · (size of the contracted dimensions)."""
    (contract_lhs, _), _ = eqn.params["dimension_numbers"]
    lhs = _shape(eqn.invars[0])
    k = math.prod(lhs[d] for d in contract_lhs)
    return 2.0 * math.prod(_shape(eqn.outvars[0])) * k


def _conv_flops(eqn: Any) -> float:
    """2 · (output size) · (kernel size that one output element reads)."""
    rhs = _shape(eqn.invars[1])
    numbers = eqn.params.get("dimension_numbers")
    out_feature = getattr(numbers, "rhs_spec", (0,))[0]
    per_output = math.prod(rhs) / max(rhs[out_feature], 1) if rhs else 0
    return 2.0 * math.prod(_shape(eqn.outvars[0])) * per_output


def _while(eqn: Any) -> Count:
    """A ``while``: its body × the trip count when the loop counts from one literal to another
    by one (``fori_loop`` with traced-free bounds); else counted once and flagged."""
    params = eqn.params
    body = count(params["body_jaxpr"])
    trips = _trip_count(eqn)
    if trips is None:
        body.unknown_loops += 1
        return body
    found = Count()
    found.add(body, float(trips))
    return found


def _trip_count(eqn: Any) -> int | None:
    """``upper - lower`` when the loop's test is ``i < n``, the body adds 1 to ``i``, and both
    come in as literals (a counter from a literal, a bound in the carry or in the test itself);
    else ``None``."""
    params = eqn.params
    cond = getattr(params["cond_jaxpr"], "jaxpr", params["cond_jaxpr"])
    if len(cond.eqns) != 1 or cond.eqns[0].primitive.name != "lt":
        return None
    cond_carry = list(cond.invars[params["cond_nconsts"]:])
    counter = cond.eqns[0].invars[0]
    if counter not in cond_carry or not _adds_one(params, cond_carry.index(counter)):
        return None
    carry = list(eqn.invars[params["cond_nconsts"] + params["body_nconsts"]:])

    def literal(var: Any) -> int:
        if var in cond_carry:
            var = carry[cond_carry.index(var)]
        return int(var.val)  # a Literal; a traced value has no ``val``

    try:
        lower, upper = (literal(v) for v in cond.eqns[0].invars)
    except (AttributeError, TypeError, ValueError):
        return None
    return max(0, upper - lower)


def _adds_one(params: dict[str, Any], position: int) -> bool:
    """Whether the loop's body makes carry ``position`` the same carry plus the literal 1."""
    body = getattr(params["body_jaxpr"], "jaxpr", params["body_jaxpr"])
    before, after = body.invars[params["body_nconsts"] + position], body.outvars[position]
    for inner in body.eqns:
        if inner.outvars and inner.outvars[0] is after:
            operands = list(inner.invars)
            others = [v for v in operands if v is not before]
            return (inner.primitive.name == "add" and len(operands) == 2 and len(others) == 1
                    and getattr(others[0], "val", None) == 1)
    return False


def devices_of(args: Any) -> int:
    """How many devices the arguments are spread over (the most of any argument; 1 if none)."""
    jax = sys.modules["jax"]
    most = 1
    for leaf in jax.tree_util.tree_leaves(args):
        sharding = getattr(leaf, "sharding", None)
        devices = getattr(sharding, "device_set", None)
        if devices:
            most = max(most, len(devices))
    return most


def traced_jaxpr(jitted: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The jaxpr of ``jitted`` called with ``args`` (shapes suffice): its public ``trace``,
    or ``jax.make_jaxpr`` where it has none. Nothing is compiled."""
    trace = getattr(jitted, "trace", None)
    if callable(trace):
        return trace(*args, **kwargs).jaxpr
    return sys.modules["jax"].make_jaxpr(jitted)(*args, **kwargs)


def per_device(jitted: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Count:
    """The FLOPs of one call of ``jitted`` on each device it runs on."""
    found = count(traced_jaxpr(jitted, args, kwargs))
    found.flops /= devices_of((args, kwargs))
    return found
