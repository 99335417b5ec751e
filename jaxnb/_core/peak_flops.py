"""The peak dense FLOP/s of known accelerators: MFU's denominator, shown with it.

Keyed by JAX's ``device.device_kind``; bf16 (fp16 where the chip has no bf16) dense matrix
FLOP/s of one JAX device, from the vendors' data sheets. CPUs are not listed: on a CPU the
dashboard shows FLOP/s only.
"""

from __future__ import annotations

#: (part of ``device_kind``, lower case; what the denominator is called; FLOP/s). The first
#: match wins: more specific names first.
PEAKS: tuple[tuple[str, str, float], ...] = (
    ("h100 nvl", "H100 NVL bf16 dense", 835e12),
    ("h100 pcie", "H100 PCIe bf16 dense", 756e12),
    ("h100", "H100 SXM bf16 dense", 989e12),
    ("h200", "H200 bf16 dense", 989e12),
    ("gb200", "GB200 bf16 dense", 2500e12),
    ("b200", "B200 bf16 dense", 2250e12),
    ("a100", "A100 bf16 dense", 312e12),
    ("l40s", "L40S bf16 dense", 362e12),
    ("l4", "L4 bf16 dense", 121e12),
    ("v100", "V100 fp16 dense", 125e12),
    ("tpu v2", "TPU v2 core bf16", 22.5e12),
    ("tpu v3", "TPU v3 core bf16", 61.5e12),
    ("tpu v4", "TPU v4 bf16", 275e12),
    ("tpu v5 lite", "TPU v5e bf16", 197e12),
    ("tpu v5e", "TPU v5e bf16", 197e12),
    ("tpu v5", "TPU v5p bf16", 459e12),
    ("tpu v6", "TPU v6e bf16", 918e12),
    ("tpu7", "TPU7x bf16", 2307e12),
)


def peak_of(device_kind: str | None) -> tuple[float, str] | None:
    """``(FLOP/s, "H100 SXM bf16 dense 989 TFLOP/s")`` of one device, or ``None`` if not known."""
    kind = (device_kind or "").lower()
    for part, name, flops in PEAKS:
        if part in kind:
            return flops, f"{name} {flops_text(flops)}"
    return None


def flops_text(rate: float | None) -> str:
    """``1.23 TFLOP/s``, ``45.6 GFLOP/s``; ``—`` when not known."""
    if not rate:
        return "—"
    for unit, size in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6)):
        if rate >= size:
            return f"{rate / size:.3g} {unit}"
    return f"{rate:.3g} FLOP/s"
