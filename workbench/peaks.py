"""Dense peak FLOP/s per device and dtype, and HBM bandwidth: the denominators of MFU (PaLM,
Chowdhery et al. 2022, appendix B) and of the kernel-class roofline. Vendor datasheet figures
without sparsity (NVIDIA quotes tensor-core figures "with sparsity": the dense figure is half).
bf16/fp16 on H100/H200 SXM stay at 989 TFLOP/s, the figure torchtitan uses (datasheet 1,979
sparse). ``fp32`` is the SIMT (CUDA-core) peak, ``tf32`` the tensor-core one for fp32 inputs.
Torch-free: the engine, the app, the analysis and the benchmarks share it."""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("fp8", "bf16", "fp16", "tf32", "fp32")


@dataclass(frozen=True, slots=True)
class DevicePeak:
    tflops: dict[str, float]
    """dtype (one of DTYPES) → dense TFLOP/s; a dtype the device lacks (fp8 before Hopper/Ada) is absent."""
    hbm_tb_s: float
    """Memory bandwidth, TB/s (10^12 bytes/s)."""
    source: str


_H100_SXM = {"fp8": 1979.0, "bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0}
_A100 = {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}
DEVICES: dict[str, DevicePeak] = {
    "H200": DevicePeak(_H100_SXM, 4.8, "NVIDIA H200 Tensor Core GPU datasheet (SXM; same compute as H100 SXM)"),
    "H100": DevicePeak(_H100_SXM, 3.35, "NVIDIA H100 Tensor Core GPU datasheet (SXM5)"),
    "H100 PCIe": DevicePeak({"fp8": 1513.0, "bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}, 2.0,
                            "NVIDIA H100 Tensor Core GPU datasheet (PCIe)"),
    "A100": DevicePeak(_A100, 1.555, "NVIDIA A100 Tensor Core GPU datasheet (40GB; the 80GB parts below)"),
    "A100-SXM4-80GB": DevicePeak(_A100, 2.039, "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)"),
    "A100 80GB PCIe": DevicePeak(_A100, 1.935, "NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe)"),
    "L40S": DevicePeak({"fp8": 733.0, "bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6}, 0.864,
                       "NVIDIA L40S datasheet"),
    "L4": DevicePeak({"fp8": 242.5, "bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}, 0.3, "NVIDIA L4 datasheet"),
    "A10": DevicePeak({"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}, 0.6, "NVIDIA A10 datasheet"),
}
PEAK_TFLOPS = {k: v.tflops["bf16"] for k, v in DEVICES.items()}
"""Dense bf16 TFLOP/s per device (the table before dtypes; kept for its callers)."""


def device_peak(device_name: str | None) -> DevicePeak | None:
    """The entry of the longest table key found in ``device_name`` ("NVIDIA H100 PCIe" → "H100
    PCIe", "NVIDIA H100 80GB HBM3" → "H100"); None when unknown or CPU."""
    if not device_name:
        return None
    key = next((k for k in sorted(DEVICES, key=len, reverse=True) if k in device_name), None)
    return DEVICES[key] if key else None


def hbm_bytes_per_s(device_name: str | None) -> float | None:
    peak = device_peak(device_name)
    return peak.hbm_tb_s * 1e12 if peak else None


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
