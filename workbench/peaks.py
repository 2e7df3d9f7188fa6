"""Dense bf16 peak FLOP/s per device, the denominator of MFU (PaLM, Chowdhery et al. 2022,
appendix B). Vendor datasheet figures without sparsity; torchtitan uses 989 TFLOP/s for H100/H200
SXM. Torch-free: the engine, the app and the benchmarks share it."""

from __future__ import annotations

PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


def peak_flops(device_name: str | None) -> float | None:
    """FLOP/s of the first (longest) table key found in ``device_name``; None when unknown or CPU."""
    if not device_name:
        return None
    key = next((k for k in sorted(PEAK_TFLOPS, key=len, reverse=True) if k in device_name), None)
    return PEAK_TFLOPS[key] * 1e12 if key else None


def mfu_pct(tokens_per_s_per_device: float, flops_per_token: float | None, device_name: str | None) -> float | None:
    """Model FLOPs utilisation in percent: achieved FLOP/s per device over the device's peak."""
    peak = peak_flops(device_name)
    if not flops_per_token or not peak:
        return None
    return 100.0 * tokens_per_s_per_device * float(flops_per_token) / peak
