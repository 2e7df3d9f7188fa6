"""``fp32_matmul``: GEMM/conv time on CUDA cores (``gemm_simt``) or in tf32 kernels. Saved =
simt_ms × (1 − fp32_peak/bf16_peak) + tf32_ms × (1 − tf32_peak/bf16_peak) (workbench.hardware.peaks: the
same share of a faster peak). Fix: bf16 autocast, or ``torch.set_float32_matmul_precision("high")``.
A GPU without bf16 tensor cores (V100, T4) is held to its fp16 peak, and the fix is fp16 autocast
with a GradScaler (a V100's fp16 tensor cores: 125 against 15.7 TFLOP/s fp32).

The impact test and the savings' common parts: workbench.diagnose.efficiency.
"""

from __future__ import annotations

from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.efficiency import (EFFICIENCY_READS, IMPACT_LEVELS, FLASH_FRACTION, device, own_device, per_step_ms,
                                           saved_frame, saving_diagnosis)
from workbench.diagnose.registry import rule
from workbench.hardware.peaks import device_peak


def _fp32_saved(e, steps, step_ms, rf):
    peak = device_peak(own_device(rf)[0])
    half = next((d for d in ("bf16", "fp16") if peak and d in peak.tflops), None)
    if peak is None or half is None or "fp32" not in peak.tflops:
        return None
    bf16 = peak.tflops[half]  # the fastest 16-bit peak: fp16 where the GPU has no bf16 (V100, T4)
    k = e.kernels
    simt = per_step_ms(k[k["class"] == "gemm_simt"], steps)
    tf32 = per_step_ms(k[(k["class"] == "gemm_tensor_core") & (k["dtype"] == "tf32")], steps)
    gemm_saved = simt * (1 - peak.tflops["fp32"] / bf16) + tf32 * (1 - peak.tflops.get("tf32", bf16) / bf16)
    # the switch changes attention too (fp32 runs SDPA's memory-efficient kernels; bf16
    # reaches flash/cuDNN kernels): the attention subclasses that ran fp32 kernels, against their
    # FLOPs at FLASH_FRACTION of the 16-bit peak (nanoGPT fp32 → bf16 on an H200: 128 → 13 ms).
    att = k[k["class"] == "attention"]
    fp32_subs = set(att.loc[att["dtype"] == "fp32", "subclass"])
    fa = att[att["subclass"].isin(fp32_subs)]
    att_ms = per_step_ms(fa, steps)
    att_ideal = float(fa["flops"].sum()) / steps / (bf16 * 1e12 * FLASH_FRACTION) * 1e3 if len(fa) else 0.0
    att_saved = max(att_ms - att_ideal, 0.0)
    saved = gemm_saved + att_saved
    if saved <= 0 or gemm_saved <= 0:
        return None
    return {"simt_gemm_ms_per_step": round(simt, 3), "tf32_gemm_ms_per_step": round(tf32, 3),
            "simt_gemm_pct_of_step": round(100 * simt / step_ms, 2), "tf32_gemm_pct_of_step": round(100 * tf32 / step_ms, 2),
            "fp32_attention_ms_per_step": round(att_ms, 3), "fp32_attention_pct_of_step": round(100 * att_ms / step_ms, 2),
            "attention_at_16bit_ms_per_step": round(att_ideal, 3),
            "gemm_saved_ms_per_step": round(gemm_saved, 3), "attention_saved_ms_per_step": round(att_saved, 3),
            "peak_tflops": {d: peak.tflops.get(d) for d in ("fp32", "tf32", half)},
            "source": "kernel classes gemm_simt / gemm_tensor_core tf32 / attention subclasses with fp32 kernels "
                      "(analysis.kernel_classes)"}, saved


SAVED_FP32 = saved_frame("fp32_matmul", _fp32_saved)


@rule("fp32_matmul", reads=(*EFFICIENCY_READS, SAVED_FP32), group="efficiency",
      summary="GEMM/conv time in fp32 SIMT or tf32 kernels (and attention in fp32 kernels)",
      threshold=IMPACT_LEVELS, source="datasheet peaks per dtype")
def fp32_matmul(ctx: Context) -> Diagnosis | None:
    peak = device_peak(device(ctx)[0])
    half = next((d for d in ("bf16", "fp16") if peak and d in peak.tflops), None)
    if peak is None or half is None or "fp32" not in peak.tflops:
        return None
    return saving_diagnosis(
        ctx, SAVED_FP32,
        lambda ev, pct: (f"matmuls{' and attention' if ev['fp32_attention_ms_per_step'] else ''} run in fp32: "
                         f"{ev['simt_gemm_pct_of_step'] + ev['tf32_gemm_pct_of_step'] + ev['fp32_attention_pct_of_step']:.0f}% "
                         f"of the step in fp32/tf32 GEMM{' and attention' if ev['fp32_attention_ms_per_step'] else ''} "
                         f"kernels; {half} would save ~{pct:.0f}%"),
        "run matmuls in bf16: torch.autocast('cuda', dtype=torch.bfloat16) around forward and loss; at least "
        "torch.set_float32_matmul_precision('high') (TF32 tensor cores) for fp32 models" if half == "bf16" else
        "run matmuls in fp16 (this GPU has no bf16 tensor cores): torch.autocast('cuda', dtype=torch.float16) "
        "around forward and loss, with torch.amp.GradScaler('cuda') scaling the loss",
        f"saved = simt_ms*(1 - fp32_peak/{half}_peak) + tf32_ms*(1 - tf32_peak/{half}_peak) + fp32_attention_ms - "
        f"attention_flops/({FLASH_FRACTION}*{half}_peak); memory-bound kernels counted unchanged (16-bit activations halve "
        f"their bytes, autocast adds casts: 20 → 35 ms on nanoGPT, H200); assumes the host keeps pace",
        ["parallel.mixed_precision"])
