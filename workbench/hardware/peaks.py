"""Dense peak FLOP/s per device and dtype, and HBM bandwidth: the denominators of MFU (PaLM,
Chowdhery et al. 2022, appendix B) and of the kernel-class roofline. The table, its datasheet
sources and how a trace's device is resolved live in :mod:`workbench.hardware.devices`; this module is what
the analysis, the engine and the app call with a device name. ``fp32`` is the SIMT (CUDA-core)
peak on NVIDIA (the MFMA fp32 figure on AMD), ``tf32`` the tensor-core one for fp32 inputs.
Torch-free: the engine, the app, the analysis and the benchmarks share it."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.hardware import devices

DTYPES = devices.DTYPES


@dataclass(frozen=True, slots=True)
class DevicePeak:
    tflops: dict[str, float]
    """dtype (one of DTYPES) → dense TFLOP/s; a dtype the device lacks (fp8 before Hopper/Ada) is absent."""
    hbm_tb_s: float | None
    """Memory bandwidth, TB/s (10^12 bytes/s); None for a peak the user gave (``--peak-tflops``)."""
    source: str
    """The table row and its datasheet (workbench.hardware.devices.GPUS), or the user's option."""


def _peak(g: devices.Gpu) -> DevicePeak:
    return DevicePeak(dict(g.tflops), g.hbm_tb_s, f"{g.key}: {g.source}")


DEVICES: dict[str, DevicePeak] = {g.key: _peak(g) for g in devices.GPUS}
PEAK_TFLOPS = {k: v.tflops["bf16"] for k, v in DEVICES.items() if "bf16" in v.tflops}
"""Dense bf16 TFLOP/s per device (the table before dtypes; kept for its callers)."""


def device_peak(device_name: str | None) -> DevicePeak | None:
    """The peaks of the device ``device_name`` names (a name torch reports, an alias traces carry,
    or a row of workbench.hardware.devices; see :func:`workbench.hardware.devices.label`), with a user's peak
    (``--peak-tflops X --peak-dtype D``) carried on the name applied: it replaces the table's D
    figure, and on a device the table lacks it is the figure for every dtype (one number, as
    nanoGPT's MFU takes one); None when unknown or CPU."""
    if not device_name:
        return None
    found = devices.resolve(device_name)
    given = devices.user_peak(device_name)
    if given is None:
        return _peak(found.gpu) if found else None
    tflops, dtype = given
    if found is None:
        return DevicePeak(dict.fromkeys(DTYPES, tflops), None,
                          f"--peak-tflops {tflops:g} (given for {dtype}; used for every dtype: the device has no table row)")
    base = _peak(found.gpu)
    return DevicePeak({**base.tflops, dtype: tflops}, base.hbm_tb_s,
                      f"--peak-tflops {tflops:g} {dtype} (given); other figures {base.source}")


def hbm_bytes_per_s(device_name: str | None) -> float | None:
    peak = device_peak(device_name)
    return peak.hbm_tb_s * 1e12 if peak and peak.hbm_tb_s else None


def peak_flops(device_name: str | None, dtype: str = "bf16") -> float | None:
    """Dense FLOP/s of ``device_name`` for ``dtype`` (see :func:`device_peak`); None when the
    device or the dtype is unknown (fp8 on an A100)."""
    peak = device_peak(device_name)
    tflops = peak.tflops.get(dtype) if peak else None
    return tflops * 1e12 if tflops else None


def mfu_pct(tokens_per_s_per_device: float, flops_per_token: float | None, device_name: str | None) -> float | None:
    """Model FLOPs utilisation in percent: achieved FLOP/s per device over the device's peak."""
    peak = peak_flops(device_name)
    if not flops_per_token or not peak:
        return None
    return 100.0 * tokens_per_s_per_device * float(flops_per_token) / peak
