"""Efficiency rules: the GPU is busy, but is it doing useful work fast? One question each, all
read from analysis.kernel_classes.efficiency (kernel classes, FLOPs, MFU) of GPU traces.

Impact test, shared by every rule here: the estimated step time a fix saves,
as a share of the step, in ``IMPACT_BANDS``: info ≥ 5 %, warning ≥ 10 %, critical ≥ 20 % (the
bands of ``host_sync`` / ``dataloader_stall``, after xprof's "≥ 5 % moderately, ≥ 20 % highly
input-bound"). A problem that costs < 5 % of the step is not reported. Savings are roofline
estimates (upper bounds of what the one fix recovers):

``fp32_matmul``: GEMM/conv time on CUDA cores (``gemm_simt``) or in tf32 kernels. Saved =
simt_ms × (1 − fp32_peak/bf16_peak) + tf32_ms × (1 − tf32_peak/bf16_peak) (workbench.hardware.peaks: the
same share of a faster peak). Fix: bf16 autocast, or ``torch.set_float32_matmul_precision("high")``.
A GPU without bf16 tensor cores (V100, T4) is held to its fp16 peak, and the fix is fp16 autocast
with a GradScaler (a V100's fp16 tensor cores: 125 against 15.7 TFLOP/s fp32).

``unfused_elementwise``: memory-bound kernels (elementwise, casts, norms, reductions, plain
copies). Saved = their time × ``FUSION_SAVING`` = 0.45: torch.compile took the 370M GPT from 100
to 84 ms/step (the team NOTES.md beside the repo, H200) while these classes held ~36 % of its kernel time
(traces/case_gpu_2_preload_shm): 16 / 36 ≈ 0.45 of that time recovered.

``unfused_optimizer``: GPU work launched inside ``Optimizer.step`` that is not one fused kernel.
An unfused AdamW step makes ~``ADAMW_UNFUSED_PASSES`` = 21 passes over parameter-sized tensors
(13 reads + 8 writes in torch/optim/adamw.py ``_single_tensor_adamw``: mul_, lerp_, mul_,
addcmul_, sqrt, div, add_, addcdiv_), the fused kernel ``ADAMW_FUSED_PASSES`` = 7 (read param,
grad, m, v; write param, m, v). Saved = the step's GPU span of the optimizer (launch gaps
included) − its kernel time × 7/21.

``attention_math``: attention that ran unfused kernels (SDPA's math backend), or hand-written
attention (softmax kernels, not log-softmax, over materialised scores: saved ≥ their time, what
flash attention never runs). SDPA math: saved = math_ms −
its FLOPs at ``FLASH_FRACTION`` = 0.5 of the dtype's peak (FlashAttention-2, Dao 2023: 50–73 %
of A100 peak forward; FlashAttention-3 reports up to 75 % on H100).

``layout_conversion``: cuDNN's ``nchwToNhwc``/``nhwcToNchw`` kernels around convolutions with
NCHW tensors. Saved = all of their time (channels_last tensors need none).

``stale_gemm_kernels``: GEMM kernels built for an older architecture (``cutlass_75_*``,
``sm75``/``sm80`` in the name) on a newer GPU (compute capability from ``deviceProperties``).
Saved = their time × (1 − their TFLOP/s / the run's other tensor-core GEMMs' TFLOP/s).

``low_mfu`` (the headline): MFU against the ceiling this device reaches on the run's own shapes,
the achieved share of peak of its busiest GEMM class (``pct_of_peak``). MFU is held against the
GPU's busy share of the step (idle time is the utilisation rules' finding). Ratio MFU/busy/ceiling:
info < ``MFU_RATIO_INFO`` = 0.75, warning < ``MFU_RATIO_WARNING`` = 0.5, critical < 0.25. A
tuned GPT step keeps ~0.6–0.7 of its GEMMs' rate (NOTES: d 2048 GPT 53.7 % MFU, bf16 GEMMs ~78 %
of peak; Megatron-LM 47 % MFU on H100), so below 0.5 half the step is not model math. Saved =
busy_ms × (1 − ratio / ``MFU_RATIO_GOOD``) (the busy part at 0.7 of the ceiling).
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import partial

import numpy as np
import pandas as pd

from workbench.format import kineto
from workbench.analysis import frames
from workbench.analysis.flops import gpu_launches
from workbench.analysis.frames import Frame, RankFrames
from workbench.analysis.intervals import str_mask
from workbench.analysis.kernel_classes import Efficiency, compact
from workbench.diagnose.base import per_sample, Context, Diagnosis, gain, reads, severity_for
from workbench.hardware.peaks import device_peak

IMPACT_BANDS = ((5.0, "info"), (10.0, "warning"), (20.0, "critical"))
FUSION_SAVING = 0.45
MEMORY_BOUND = {"elementwise": None, "normalization": ("norm",), "reduction": None, "copy": ("copy",)}
ADAMW_UNFUSED_PASSES = 21
ADAMW_FUSED_PASSES = 7
FLASH_FRACTION = 0.5
LAYOUT_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw", re.IGNORECASE)
STALE_GEMM = re.compile(r"cutlass_(?:7[05]|80)_|_sm(?:7[05]|80)_|sm(?:7[05]|80)_xmma|turing|volta", re.IGNORECASE)
STALE_MIN_MAJOR = 9
MFU_RATIO_INFO, MFU_RATIO_WARNING, MFU_RATIO_CRITICAL, MFU_RATIO_GOOD = 0.75, 0.5, 0.25, 0.7


def _device(ctx: Context) -> tuple[str | None, int | None]:
    """Device name and compute capability major from the first rank's ``deviceProperties``."""
    for rf in ctx.ranks.values():
        return _own_device(rf)
    return None, None


def _own_device(rf: RankFrames) -> tuple[str | None, int | None]:
    for d in rf.devices:
        return d.get("name"), d.get("computeMajor")
    return None, None


def _in_steps(e: Efficiency, w: pd.DataFrame) -> Efficiency:
    """Only the profiled steps' kernel time: a host that ran ahead leaves earlier steps' kernels
    running at the start of the trace (114 ms of them on an fp32 run: its GEMMs filled "104 %")."""
    if w is None or not len(w):
        return e
    lo, hi = float(w["start_us"].min()), float(w["end_us"].max())
    k = e.kernels
    start, end = k["ts_us"].clip(lo, hi), (k["ts_us"] + k["dur_us"]).clip(lo, hi)
    keep = end > start
    return replace(e, kernels=k[keep].assign(dur_us=(end - start)[keep]))


def _efficiency_in_steps(rf: RankFrames) -> Efficiency:
    return _in_steps(rf[frames.EFFICIENCY], rf[frames.WINDOWS])


EFFICIENCY_IN_STEPS = Frame("efficiency_in_steps", _efficiency_in_steps, returns=Efficiency, compact=compact)
EFFICIENCY_READS = (frames.EFFICIENCY, EFFICIENCY_IN_STEPS, frames.WINDOWS)


def _frames(ctx: Context) -> dict[int, tuple[Efficiency, int, float]]:
    """rank → (efficiency frames, profiled steps, mean step ms) for ranks that ran GPU kernels."""
    out = {}
    for r in ctx.ranks:
        if not ctx.rank_has_gpu(r):
            continue
        e = ctx.frame(frames.EFFICIENCY, r)
        steps = len(ctx.windows(r)) or 1
        b = ctx.breakdown[ctx.breakdown["rank"] == r]
        if e.kernels.empty or b.empty:
            continue
        out[r] = (ctx.frame(EFFICIENCY_IN_STEPS, r), steps, float(b["step_ms"].mean()))
    return out


def _per_step_ms(k: pd.DataFrame, steps: int) -> float:
    return float(k["dur_us"].sum()) / 1e3 / steps


def _saving(saved_of, rf: RankFrames):
    """``saved_of(efficiency in steps, steps, step ms, rf)`` of a rank that ran GPU kernels in its
    steps, else None: (evidence, saved ms per step) or None. Next to the trace (workbench.pipeline.reduce),
    where the kernel rows are."""
    if not rf.has_gpu:
        return None
    e, b = rf[frames.EFFICIENCY], rf[frames.BREAKDOWN]
    if e.kernels.empty or b.empty:
        return None
    return saved_of(rf[EFFICIENCY_IN_STEPS], len(rf[frames.WINDOWS]) or 1, float(b["step_ms"].mean()), rf)


def _saved_frame(rid: str, saved_of) -> Frame:
    return Frame(f"saved:{rid}", partial(_saving, saved_of), returns=(tuple, list, type(None)))


def _worst(ctx: Context, saved: Frame) -> tuple[int, dict, float, float] | None:
    """The rank with the largest saving: (rank, evidence, saved ms per step, step ms)."""
    best = None
    for r, (e, steps, step_ms) in _frames(ctx).items():
        found = ctx.frame(saved, r)
        if found is None:
            continue
        evidence, saved_ms = found
        if best is None or saved_ms / step_ms > best[2] / best[3]:
            best = (r, evidence, saved_ms, step_ms)
    return best


def _diagnosis(ctx, saved: Frame, title, recommendation, formula, fix) -> Diagnosis | None:
    rid = saved.name.removeprefix("saved:")
    w = _worst(ctx, saved)
    if w is None:
        return None
    r, evidence, saved_ms, step_ms = w
    pct = 100.0 * saved_ms / step_ms if step_ms > 0 else 0.0
    severity = severity_for(pct, IMPACT_BANDS)
    if severity is None:
        return None
    # shares the worker computed against the recorded step, as shares of the job's
    scale = ctx.to_job(r)
    evidence = {k: (round(v * scale, 2) if k.endswith("pct_of_step") and isinstance(v, (int, float)) else v)
                for k, v in evidence.items()}
    evidence = {**evidence, "saved_ms_per_step": round(saved_ms, 3), "step_ms": round(step_ms, 3), "rank": int(r)}
    return Diagnosis(id=rid, severity=severity, title=title(evidence, pct), evidence=evidence,
                     recommendation=recommendation, estimated_gain=gain(step_ms, saved_ms, formula), fix=fix, ranks=[int(r)])


def _fp32_saved(e, steps, step_ms, rf):
    peak = device_peak(_own_device(rf)[0])
    half = next((d for d in ("bf16", "fp16") if peak and d in peak.tflops), None)
    if peak is None or half is None or "fp32" not in peak.tflops:
        return None
    bf16 = peak.tflops[half]  # the fastest 16-bit peak: fp16 where the GPU has no bf16 (V100, T4)
    k = e.kernels
    simt = _per_step_ms(k[k["class"] == "gemm_simt"], steps)
    tf32 = _per_step_ms(k[(k["class"] == "gemm_tensor_core") & (k["dtype"] == "tf32")], steps)
    gemm_saved = simt * (1 - peak.tflops["fp32"] / bf16) + tf32 * (1 - peak.tflops.get("tf32", bf16) / bf16)
    # the switch changes attention too (fp32 runs SDPA's memory-efficient kernels; bf16
    # reaches flash/cuDNN kernels): the attention subclasses that ran fp32 kernels, against their
    # FLOPs at FLASH_FRACTION of the 16-bit peak (nanoGPT fp32 → bf16 on an H200: 128 → 13 ms).
    att = k[k["class"] == "attention"]
    fp32_subs = set(att.loc[att["dtype"] == "fp32", "subclass"])
    fa = att[att["subclass"].isin(fp32_subs)]
    att_ms = _per_step_ms(fa, steps)
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


SAVED_FP32 = _saved_frame("fp32_matmul", _fp32_saved)


@reads(*EFFICIENCY_READS, SAVED_FP32)
def fp32_matmul(ctx: Context) -> Diagnosis | None:
    peak = device_peak(_device(ctx)[0])
    half = next((d for d in ("bf16", "fp16") if peak and d in peak.tflops), None)
    if peak is None or half is None or "fp32" not in peak.tflops:
        return None
    return _diagnosis(
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


def _elementwise_saved(e, steps, step_ms, rf):
    k = e.kernels
    mask = np.zeros(len(k), dtype=bool)
    for c, subs in MEMORY_BOUND.items():
        m = (k["class"] == c).to_numpy()
        mask |= m & (k["subclass"].isin(subs).to_numpy() if subs else True)
    if not mask.any():
        return None
    mb = k[mask]
    ms = _per_step_ms(mb, steps)
    by = (mb.groupby(["class", "subclass"])["dur_us"].sum() / 1e3 / steps).sort_values(ascending=False)
    return {"memory_bound_ms_per_step": round(ms, 3), "memory_bound_pct_of_step": round(100 * ms / step_ms, 2),
            "memory_bound_kernels_per_step": round(len(mb) / steps, 1),
            "by_class_ms_per_step": {f"{c}/{s}": round(v, 3) for (c, s), v in by.items()},
            "source": "kernel classes elementwise, normalization/norm, reduction, copy/copy"}, ms * FUSION_SAVING


SAVED_ELEMENTWISE = _saved_frame("unfused_elementwise", _elementwise_saved)


@reads(*EFFICIENCY_READS, SAVED_ELEMENTWISE)
def unfused_elementwise(ctx: Context) -> Diagnosis | None:
    return _diagnosis(
        ctx, SAVED_ELEMENTWISE,
        lambda ev, pct: (f"{ev['memory_bound_pct_of_step']:.0f}% of the step in memory-bound elementwise/norm/cast kernels "
                         f"({ev['memory_bound_kernels_per_step']:.0f} per step); fusing them would save ~{pct:.0f}%"),
        "fuse elementwise work: torch.compile the model (or its blocks); use fused norms/activations; "
        "avoid dtype round trips (casts) between ops",
        f"saved = memory_bound_ms * {FUSION_SAVING} (torch.compile on the 370M GPT, NOTES.md)", ["train.compile"])


def _optimizer_kernels(trace, kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` rows launched inside an ``Optimizer.step#…`` range, with that range's index as ``opt``."""
    ev = trace.events
    m = str_mask(ev["name"], lambda c: c.str.startswith(kineto.OPTIMIZER_STEP)) & ~ev["is_gpu"].to_numpy()
    if not m.any():
        return kernels.iloc[:0].assign(opt=pd.Series(dtype=np.int64))
    spans = pd.DataFrame({"tid": ev["tid"].to_numpy()[m], "ts_us": ev["ts_us"].to_numpy()[m],
                          "dur_us": ev["dur_us"].to_numpy()[m]})
    launches = gpu_launches(trace, spans)
    opt = pd.Series(launches["op"].to_numpy(), index=launches["row"].to_numpy())
    k = kernels.assign(opt=opt.reindex(kernels["row"].to_numpy()).fillna(-1).astype(np.int64).to_numpy())
    return k[k["opt"] >= 0]


def _optimizer_saved(e, steps, step_ms, rf):
    k = _optimizer_kernels(rf.trace, e.kernels)
    if k.empty:
        return None
    fused = (k["class"] == "optimizer") & (k["subclass"] == "fused")
    if fused.all():
        return None
    busy = _per_step_ms(k, steps)
    g = k.assign(end_us=k["ts_us"] + k["dur_us"]).groupby("opt")
    span = float((g["end_us"].max() - g["ts_us"].min()).sum()) / 1e3 / steps
    saved = span - busy * ADAMW_FUSED_PASSES / ADAMW_UNFUSED_PASSES
    kind = "foreach" if ((k["class"] == "optimizer") & ~fused).any() else "per-parameter"
    return {"optimizer_kind": kind, "optimizer_kernels_per_step": round(len(k) / steps, 1),
            "optimizer_busy_ms_per_step": round(busy, 3), "optimizer_span_ms_per_step": round(span, 3),
            "optimizer_pct_of_step": round(100 * span / step_ms, 2),
            "source": "GPU work launched inside Optimizer.step# ranges (correlation ids)"}, saved


SAVED_OPTIMIZER = _saved_frame("unfused_optimizer", _optimizer_saved)


@reads(*EFFICIENCY_READS, SAVED_OPTIMIZER)
def unfused_optimizer(ctx: Context) -> Diagnosis | None:
    return _diagnosis(
        ctx, SAVED_OPTIMIZER,
        lambda ev, pct: (f"optimizer step {ev['optimizer_kind']}: {ev['optimizer_kernels_per_step']:.0f} kernels, "
                         f"{ev['optimizer_span_ms_per_step']:.1f} ms per step; a fused step would save ~{pct:.0f}%"),
        "use the fused optimizer: torch.optim.AdamW(params, fused=True) (or foreach=True where fused is not available)",
        f"saved = optimizer GPU span - optimizer kernel time * {ADAMW_FUSED_PASSES}/{ADAMW_UNFUSED_PASSES} (AdamW passes)",
        ["train.optimizer"])


def _attention_saved(e, steps, step_ms, rf):
    peak = device_peak(_own_device(rf)[0])
    k = e.kernels
    m = k[(k["class"] == "attention") & (k["subclass"] == "math")]
    if m.empty:
        return _eager(k, steps, step_ms)
    ms = _per_step_ms(m, steps)
    dt = m["dtype"].replace("", "bf16").mode().iloc[0] if len(m) else "bf16"
    pk = (peak.tflops.get(dt) or peak.tflops["bf16"]) * 1e12 if peak else None
    ideal = float(m["flops"].sum()) / steps / (pk * FLASH_FRACTION) * 1e3 if pk else 0.0
    return {"math_attention_ms_per_step": round(ms, 3), "math_attention_pct_of_step": round(100 * ms / step_ms, 2),
            "flash_estimate_ms_per_step": round(ideal, 3),
            "source": "kernels of SDPA/attention ops that ran no fused attention kernel"}, max(ms - ideal, 0.0)


SAVED_ATTENTION = _saved_frame("attention_math", _attention_saved)


@reads(*EFFICIENCY_READS, SAVED_ATTENTION)
def attention_math(ctx: Context) -> Diagnosis | None:
    return _diagnosis(
        ctx, SAVED_ATTENTION,
        lambda ev, pct: (f"attention runs unfused ({'eager softmax over the scores' if 'eager_softmax_ms_per_step' in ev else 'math'}): "
                         f"{ev['math_attention_pct_of_step']:.0f}% of the step; flash attention would save ~{pct:.0f}%"),
        "use F.scaled_dot_product_attention with a flash/efficient backend: bf16/fp16 inputs, no explicit attn_mask "
        "(is_causal=True), no sdpa_kernel(SDPBackend.MATH)",
        f"saved = math_ms - attention_flops / ({FLASH_FRACTION} * peak)", [])


# Softmax kernels (not log-softmax: that is the loss) over materialised scores: hand-written
# attention (q @ k.T, softmax, @ v). softmax_warp_*<in, out, acc, log2_elements, is_log_softmax, …>
# names the log flag; cunn_SoftMax* names LogSoftMax in its epilogue.
SOFTMAX_KERNEL = re.compile(r"softmax_warp_(?:forward|backward)<[^,<>]+, [^,<>]+, [^,<>]+, \d+, false|cunn_SoftMax(?:Forward|Backward)(?!.*LogSoftMax)")


def _eager(k: pd.DataFrame, steps: int, step_ms: float):
    """Eager attention: its softmax over the score matrix (what flash attention never writes).
    Saved ≥ the softmax kernels' time (flash also drops the masking and the scores' HBM traffic)."""
    m = k[str_mask(k["name"], lambda c: c.str.contains(SOFTMAX_KERNEL))]
    if m.empty:
        return None
    ms = _per_step_ms(m, steps)
    return {"eager_softmax_ms_per_step": round(ms, 3), "math_attention_pct_of_step": round(100 * ms / step_ms, 2),
            "kernels": m.groupby("name")["dur_us"].sum().sort_values(ascending=False).head(2).index.astype(str).tolist(),
            "source": "softmax kernels (not log-softmax) outside any SDPA op: scores materialised by eager attention"}, ms


def _layout_saved(e, steps, step_ms, rf):
    k = e.kernels
    m = k[str_mask(k["name"], lambda c: c.str.contains(LAYOUT_KERNEL))]
    if m.empty:
        return None
    ms = _per_step_ms(m, steps)
    return {"layout_ms_per_step": round(ms, 3), "layout_pct_of_step": round(100 * ms / step_ms, 2),
            "layout_kernels_per_step": round(len(m) / steps, 1),
            "source": "nchwToNhwc / nhwcToNchw kernels"}, ms


SAVED_LAYOUT = _saved_frame("layout_conversion", _layout_saved)


@reads(*EFFICIENCY_READS, SAVED_LAYOUT)
def layout_conversion(ctx: Context) -> Diagnosis | None:
    return _diagnosis(
        ctx, SAVED_LAYOUT,
        lambda ev, pct: (f"NCHW↔NHWC conversions: {ev['layout_kernels_per_step']:.0f} kernels, "
                         f"{ev['layout_pct_of_step']:.0f}% of the step"),
        "keep conv tensors channels_last: model.to(memory_format=torch.channels_last) and the same for each input batch",
        "saved = layout conversion kernel time", [])


def _stale_saved(e, steps, step_ms, rf):
    _, major = _own_device(rf)
    if major is None or int(major) < STALE_MIN_MAJOR:
        return None
    k = e.kernels
    gemm = k[k["class"] == "gemm_tensor_core"]
    stale = str_mask(gemm["name"], lambda c: c.str.contains(STALE_GEMM))
    if not stale.any():
        return None
    s, rest = gemm[stale], gemm[~stale]
    rate = lambda g: float(g["flops"].sum()) / (float(g["dur_us"].sum()) / 1e6) / 1e12 if g["dur_us"].sum() > 0 else 0.0  # noqa: E731
    own, other = rate(s), rate(rest)
    ms = _per_step_ms(s, steps)
    saved = ms * (1 - own / other) if other > own > 0 else 0.0
    return {"stale_gemm_ms_per_step": round(ms, 3), "stale_gemm_pct_of_step": round(100 * ms / step_ms, 2),
            "stale_tflops_per_s": round(own, 1), "other_gemm_tflops_per_s": round(other, 1),
            "compute_capability_major": int(major),
            "kernels": s.groupby("name")["dur_us"].sum().sort_values(ascending=False).head(3).index.astype(str).tolist(),
            "source": "tensor-core GEMM kernels named for sm70/75/80 (cutlass_75_*, sm80_xmma …)"}, saved


SAVED_STALE_GEMM = _saved_frame("stale_gemm_kernels", _stale_saved)


@reads(*EFFICIENCY_READS, SAVED_STALE_GEMM)
def stale_gemm_kernels(ctx: Context) -> Diagnosis | None:
    _, major = _device(ctx)
    if major is None or int(major) < STALE_MIN_MAJOR:
        return None
    return _diagnosis(
        ctx, SAVED_STALE_GEMM,
        lambda ev, pct: (f"GEMMs in kernels built for an older GPU: {ev['stale_gemm_pct_of_step']:.0f}% of the step at "
                         f"{ev['stale_tflops_per_s']:.0f} TFLOP/s vs {ev['other_gemm_tflops_per_s']:.0f} elsewhere"),
        "pad GEMM dimensions to multiples of 64 (vocabulary 50257 → 50304), keep tensors contiguous, and use a "
        "torch/cuBLAS build with kernels for this GPU",
        "saved = stale_ms * (1 - stale_tflops / other_gemm_tflops)", ["model.vocab"])


def recompute_cost(model: dict, e: Efficiency, steps: int) -> dict | None:
    """What activation recomputation costs per step, from the model inferred from the trace: a
    share f of the forward's FLOPs re-run inside backward adds about f/(3 + f) to the forward and
    backward kernels (forward 1, backward 2, recomputation f; the elementwise work between the
    matmuls re-runs with them), at the rate the run's own kernels ran; the optimizer and the
    collectives are not re-run. Measured against the same run without recomputation: torchtitan's
    Llama 3B shape on an H200, full: 115 ms estimated, 114 ms measured; the engine's 1.3B GPT,
    full: 56 against 61 ms. A selective policy re-runs more elementwise work than its FLOP share
    says (torchtitan's per-op policy: 36 against 84 ms): a lower bound there. None when the run
    recomputes nothing (or the trace cannot say)."""
    from workbench.analysis.model import value

    rc, f = value(model, "recompute"), value(model, "recompute_fraction")
    if rc not in ("selective", "full") or not f or e.kernels.empty or steps < 1:
        return None
    k = e.kernels
    work_ms = float(k.loc[~k["class"].isin(NOT_RECOMPUTED), "dur_us"].sum()) / 1e3 / steps
    return {"recompute": rc, "recompute_fraction": round(float(f), 3), "recompute_ms": round(work_ms * f / (3 + f), 2)}


NOT_RECOMPUTED = ("optimizer", "communication", "copy")
"""Kernel classes that activation recomputation never re-runs."""


@reads(*EFFICIENCY_READS, frames.MODEL)
def low_mfu(ctx: Context) -> Diagnosis | None:
    best = None
    for r, (e, steps, step_ms) in _frames(ctx).items():
        ps, classes = e.per_step, e.classes
        if ps.empty or not ps["mfu_pct"].notna().any() or classes.empty:
            continue
        gemm = classes[classes["class"].isin(("gemm_tensor_core", "gemm_simt")) & classes["pct_of_peak"].notna()]
        if gemm.empty:
            continue
        top = gemm.sort_values("time_ms", ascending=False).iloc[0]
        # The trace's executed FLOPs (HFU: recomputation counted, causal attention halved) over
        # the job's step, not the model-FLOPs MFU of --json: the ceiling it is held to is the rate
        # the GEMMs executed at, so both sides must count the same (executed) work; a recomputing
        # job's GEMMs are not slower for doing more of them.
        mfu, ceiling = float(ps["mfu_pct"].mean()) * ctx.to_job(r), float(top["pct_of_peak"])
        b = ctx.breakdown[ctx.breakdown["rank"] == r]
        busy = 1 - float((b["host_ms"] + b["idle_ms"] + b["dataloader_ms"]).mean()) / step_ms if step_ms > 0 else 1.0
        if ceiling <= 0 or busy <= 0:
            continue
        # idle GPU time is the utilisation rules' finding (dataloader_stall, host_sync …): held
        # against the busy part only, MFU asks what the kernels themselves waste
        ratio = min(mfu / busy / ceiling, 1.0)
        if best is None or ratio < best[1]:
            best = (r, ratio, mfu, ceiling, top, e, steps, step_ms, busy)
    if best is None:
        return None
    r, ratio, mfu, ceiling, top, e, steps, step_ms, busy = best
    severity = ("critical" if ratio < MFU_RATIO_CRITICAL else "warning" if ratio < MFU_RATIO_WARNING
                else "info" if ratio < MFU_RATIO_INFO else None)
    if severity is None:
        return None
    where = where_time_goes(e, steps, ctx.breakdown[ctx.breakdown["rank"] == r])
    saved = step_ms * busy * max(0.0, 1 - ratio / MFU_RATIO_GOOD)
    top3 = ", ".join(f"{k} {v:.0f}%" for k, v in list(where.items())[:3])
    model = ctx.model()
    rec = recompute_cost(model, e, steps)
    advice = "act on the largest non-GEMM share above (the other efficiency findings name the fix for each)"
    if rec:
        pct = 100 * rec["recompute_ms"] / step_ms if step_ms > 0 else 0.0
        advice = (f"{rec['recompute']} recomputation re-runs {rec['recompute_fraction']:.0%} of the forward: "
                  f"~{rec['recompute_ms']:,.0f} ms ({pct:.0f}%) of each step; recompute less where memory allows "
                  f"(the planner's alternatives below), then " + advice)
    return Diagnosis(
        id="low_mfu", severity=severity,
        title=f"HFU {mfu:.0f}% (executed FLOPs) where this GPU runs the step's GEMMs at {ceiling:.0f}% of peak; "
              f"the step goes to {top3}",
        evidence={"mfu_pct": round(mfu, 2), "mfu_bf16_pct": round(float(e.per_step["mfu_bf16_pct"].mean()) * ctx.to_job(r), 2)
                  if e.per_step["mfu_bf16_pct"].notna().any() else None,
                  "ceiling_pct": round(ceiling, 2), "ceiling_class": f"{top['class']}/{top['subclass']}",
                  "ceiling_tflops_per_s": round(float(top["tflops_per_s"] or 0), 1), "mfu_over_ceiling": round(ratio, 3),
                  "gpu_busy_share": round(busy, 3),
                  "step_pct": where, "step_ms": round(step_ms, 3), "rank": int(r),
                  **(rec or {}),
                  "source": "analysis.flops executed FLOPs per step (HFU); kernel classes pct_of_peak (the run's own GEMMs)"},
        recommendation=advice,
        estimated_gain={**gain(step_ms, saved, f"saved = busy_ms * (1 - (MFU/busy/ceiling) / {MFU_RATIO_GOOD})"),
                        **per_sample(step_ms, step_ms * busy)},
        fix=["train.compile", "data.batch_size"], ranks=[int(r)])


def where_time_goes(e: Efficiency, steps: int, breakdown: pd.DataFrame) -> dict[str, float]:
    """Share of the step (%) per kernel class, plus ``gpu_idle`` (host + idle + dataloader of the
    breakdown), largest first. Kernel classes can overlap each other (streams), so shares are of
    kernel time scaled to the busy part of the step."""
    step_ms = float(breakdown["step_ms"].mean()) if len(breakdown) else 0.0
    if step_ms <= 0:
        return {}
    idle = float((breakdown["host_ms"] + breakdown["idle_ms"] + breakdown["dataloader_ms"]).mean())
    by = e.kernels.groupby("class")["dur_us"].sum() / 1e3 / steps
    busy = max(step_ms - idle, 0.0)
    scale = busy / by.sum() if by.sum() > 0 else 0.0
    out = {str(c): round(100 * v * scale / step_ms, 1) for c, v in by.items()}
    out["gpu_idle"] = round(100 * idle / step_ms, 1)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


RULES = (low_mfu, fp32_matmul, unfused_elementwise, unfused_optimizer, attention_math, layout_conversion, stale_gemm_kernels)
