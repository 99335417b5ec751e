"""What the training dashboard says of the hardware: FLOP/s and MFU, throughput in the user's
units, where the wall time went (goodput), and each process's memory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxnb._core.goodput import ProcessSamples, goodput_text, split
from jaxnb._core.memory_text import memory_cell
from jaxnb._core.messages import label
from jaxnb._core.peak_flops import flops_text, peak_of

#: Metrics that give the throughput in the user's units: per step (times steps/s).
UNITS = {"batch_size": "examples/s", "tokens": "tokens/s"}
#: Said while no FLOP count is known.
NO_FLOPS = "not known yet (pass `jaxnb.report(..., step_fn=step)`, the jitted step)"


def flops_items(samples: Mapping[int, ProcessSamples], steps_per_s: float) -> list[tuple[str, str]]:
    """``FLOP/s`` (per device, with the FLOPs per step and what they are) and ``MFU`` where the
    device is known, naming its denominator; ``steps_per_s`` is the rate over the steps only."""
    latest = [s.latest for _, s in sorted(samples.items()) if s.latest]
    if not latest:
        return []
    lead = next((s for s in latest if s.get("flops_per_step")), latest[0])
    flops = lead.get("flops_per_step")
    if not flops:
        error = next((s["flops_error"] for s in latest if s.get("flops_error")), "")
        return [("FLOP/s", NO_FLOPS + (f"; {error}" if error else ""))]
    achieved = flops * steps_per_s
    items = [("FLOP/s", f"{flops_text(achieved)} per device ({flops:.4g} FLOPs per step, "
                        f"{lead.get('flops_source') or 'of the step'})")]
    peak = peak_of(lead.get("device_kind"))
    if peak is not None and achieved:
        items.append(("MFU", f"{100 * achieved / peak[0]:.1f}% of {peak[1]} (the device's peak; "
                             "FLOP/s over the steps only)"))
    return items


def throughput_items(metrics: Mapping[str, Any], steps_per_s: float) -> list[tuple[str, str]]:
    """``examples/s`` and ``tokens/s`` from the last ``batch_size`` and ``tokens`` reported."""
    items = []
    for key, unit in UNITS.items():
        value = metrics.get(key)
        if isinstance(value, (int, float)) and value > 0 and steps_per_s > 0:
            rate = value * steps_per_s
            items.append((unit, f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"))
    return items


def memory_text(samples: Mapping[int, ProcessSamples], limit: int = 8) -> str:
    """``p0: 1.2 GB (peak 3.4 GB) of 80 GB · p1: …``."""
    cells = [f"{label(p)} {memory_cell(s.memory())}" for p, s in sorted(samples.items())[:limit]]
    cells += [f"… {len(samples) - limit} more"] if len(samples) > limit else []
    return " · ".join(cells)


def hardware_items(samples: Mapping[int, ProcessSamples], steps_per_s: float,
                   metrics: Mapping[str, Any], wall: float, recovery: float) -> list[tuple[str, str]]:
    """Every hardware line of the summary, in order (none before the first sample)."""
    if not samples:
        return []
    return [*flops_items(samples, steps_per_s), *throughput_items(metrics, steps_per_s),
            ("time", goodput_text(split(wall, samples, recovery))), ("memory", memory_text(samples))]
