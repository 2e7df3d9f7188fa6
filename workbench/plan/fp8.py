"""Matmuls in FP8: what a stack that runs its linear layers' GEMMs in FP8 gains over BF16.

DeepSeek-V3 (report §3.3.1) runs the forward, input-gradient and weight-gradient GEMMs of every linear
layer of its blocks in FP8 (e4m3, 1×128 activation and 128×128 weight tiles scaled apart, promoted to
FP32 every 128 elements of K on the CUDA cores) and keeps the embedding, the output head, the MoE
router, the norms and attention in BF16/FP32. Transformer Engine's blockwise recipe does the same for
Megatron-Core. Fine-grained scaling costs the FP8 tensor cores part of their 2× over BF16: DeepGEMM's
README (github deepseek-ai/DeepGEMM, "Performance", 2025-03-25, H800 SXM5) gives its training-sized
GEMMs (M = 4096 dense and the contiguous grouped layout of MoE, DeepSeek-V3's shapes) together with its
speed-up over "our internally and carefully optimized implementation based on CUTLASS 3.6", the kernels
V3 was trained with: 1009/1.1, 1125/1.1, 751/1.1, 1426/1.3, 1265/1.2, 1168/1.2 TFLOP/s dense and
1346/1.3, 1214/1.3, 1346/1.3, 1214/1.2 grouped, a median of 1017.5 TFLOP/s: 0.514 of the H800's (the
H100's) 1,979 dense FP8 TFLOP/s, dense and grouped alike. The quantization of each GEMM's inputs is
fused into the kernels before it (the report's §3.3.2–3.3.3) and not counted apart.
"""

from __future__ import annotations

from workbench.hardware.systems import Cluster
from workbench.plan.moe_time import GROUPED_GEMM_OVERHEAD_S

FP8_GEMM_SHARE = 0.514
"""Share of the dense FP8 peak an FP8 GEMM with fine-grained scaling reaches at training sizes (the
median of the DeepGEMM README's M = 4096 shapes over their speed-up on V3's CUTLASS kernels)."""


def has_fp8(cluster: Cluster) -> bool:
    """Whether the GPU has FP8 tensor cores (Hopper, Ada and later): elsewhere FP8 matmuls are not run."""
    return bool(cluster.gpu.tflops.get("fp8"))


def fp8_gemm_seconds(M: float, N: float, K: float, calls: float, cluster: Cluster, experts: bool = False) -> float:
    """``calls`` matmuls of ``M × N × K`` in FP8; ``experts``: one grouped GEMM's groups (each with the
    grouped kernel's fixed cost per expert and call, as :func:`workbench.plan.moe_time.grouped_gemm_seconds`)."""
    flops = 2.0 * M * N * K
    peak = cluster.gpu.peak_flops("fp8")
    return calls * ((GROUPED_GEMM_OVERHEAD_S if experts else 0.0) + flops / (peak * FP8_GEMM_SHARE))
