"""Every GPU kernel in one class, and each class against the device's roofline.

A kernel's class comes from its name (one regex pass per distinct name), refined by the operator
that launched it (:func:`workbench.analysis.flops.gpu_launches`): a kernel launched inside an
attention op is attention even when it is a plain GEMM (math SDPA) or a helper (cuDNN's
``compute_dot_do_o``); a GEMM kernel whose name states no dtype (cuBLASLt's ``nvjet_*``) takes its
op's. Names that match nothing land in ``other`` and are listed, never guessed.

Classes (``CLASSES``), with the subclass that ``class_breakdown`` splits them by:

- ``gemm_tensor_core`` — GEMM/conv on tensor cores; subclass the dtype (bf16, fp16, fp8, tf32;
  an fp32 op on tensor cores ran tf32)
- ``gemm_simt`` — GEMM/conv on CUDA cores (fp32 ``ffma``/``simt``/``sgemm``, gemv), and AMD's fp32/fp64
  GEMMs and convolutions (held to the MFMA fp32 figure); subclass fp32/fp64
- ``attention`` — fused attention kernels and all kernels of an attention op; subclass flash,
  mem_efficient, cudnn, or math (an SDPA op that ran unfused kernels)
- ``elementwise`` — pointwise kernels; subclass cast (dtype conversions), mixed_dtype (an op that
  casts its inputs), elementwise
- ``normalization`` — layer/batch/group/RMS norm forward and backward; subclass norm or softmax
- ``reduction`` — sums, means, norms, losses
- ``optimizer`` — ``multi_tensor_apply`` (foreach and fused optimizers, foreach grad clipping)
- ``indexing`` — embedding, gather/scatter, index, sort/scan/unique
- ``copy`` — memcpy/memset and copy kernels; subclass memcpy_htod, memcpy_dtoh, memcpy_dtod,
  memset, copy, layout (NCHW↔NHWC, transposes)
- ``communication`` — NCCL and other collective kernels
- ``other`` — anything else, by name

ROCm's libraries (Tensile/hipBLASLt ``Cijk_*``, MIOpen, CK/aotriton attention, rocPRIM, the HIP
runtime's copy kernels) are named in :mod:`workbench.analysis.rocm_kernels`, asked first.

A mixture of experts' work is a role, not a class: a grouped GEMM's kernels are GEMMs (held to
the GEMM roofline like any other), a router's top-k and histogram kernels are indexing — and the
same kernels serve an accuracy metric's top-k or an embedding backward's sort in a dense model,
so a name cannot say "routing". Expert GEMMs, routing and token dispatch/combine are told apart by
the ops that launched the kernels, in the blocks with experts: :mod:`workbench.analysis.moe_time`
(``efficiency.moe``: each role's share of the step).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from workbench.analysis.flops import gpu_launches, op_flops, step_flops
from workbench.analysis.rocm_kernels import classify_rocm
from workbench.analysis.steps import step_windows
from workbench.format.kineto import COMM_KERNEL
from workbench.load.trace import Trace
from workbench.hardware.peaks import device_peak

CLASSES = ("gemm_tensor_core", "gemm_simt", "attention", "elementwise", "normalization", "reduction", "optimizer",
           "indexing", "copy", "communication", "other")
COMPUTE_CLASSES = ("gemm_tensor_core", "gemm_simt", "attention")
KERNEL_COLUMNS = ["row", "name", "ts_us", "dur_us", "class", "subclass", "dtype", "op", "op_name", "op_kind", "flops", "bytes"]
CLASS_COLUMNS = ["class", "subclass", "kernels", "time_ms", "time_pct", "flops", "tflops_per_s", "bytes", "gb_per_s",
                 "bound", "pct_of_peak"]

_I = re.IGNORECASE
# cuDNN SDPA's backward helpers (dot(dO, O), the dQ accumulator cast) are named by what they compute
ATTENTION = re.compile(r"flash|fmha|sdpa|attention|attn|PyTorchMemEffAttention|sage_(?:fwd|bwd)"
                       r"|cudnn::fusion::(?:compute_dot_do_o|convert_dq_to)", _I)
LAYOUT = re.compile(r"nchwToNhwc|nhwcToNchw|transpose|permute|tensorTransform", _I)
GEMM = re.compile(r"gemm|nvjet|cutlass|cublas|xmma|wgmma|hmma|gemv|splitKreduce|triton_tem|matmul|^bmm_", _I)
CONV = re.compile(r"conv(?!ert)|fprop|dgrad|wgrad|winograd|im2col|col2im|fft[12]d|scudnn|flip_filter"
                  r"|pointwise_mult_and_sum_complex|computeB?OffsetsKernel", _I)
# fp32 on CUDA cores; also Volta/Turing cuDNN's fp32 kernels: volta_scudnn_*, the templated
# dgrad/wgrad engines on float, the FFT convolution's complex GEMMs (cgemm)
SIMT = re.compile(r"simt|ffma|sgemm|dgemm|gemv|gemmSN|gemmk1|dot_kernel|scudnn|[cz]gemm|_engine<float|fft[12]d|flip_filter"
                  r"|pointwise_mult_and_sum_complex", _I)
TENSOR_CORE = re.compile(r"tensorop|wgmma|hmma|imma|gmma|nvjet|tf32|bf16|f16|e4m3|e5m2|fp8|[hs]1688|[hs]16816", _I)
NAME_DTYPES = ((re.compile(r"e4m3|e5m2|fp8", _I), "fp8"), (re.compile(r"bf16|bfloat16", _I), "bf16"),
               (re.compile(r"tf32", _I), "tf32"), (re.compile(r"f16|fp16|half|h1688|h16816|hgemm", _I), "fp16"),
               # CUTLASS names the accumulator first: s1688 with no input type after it is fp32 inputs on
               # tensor cores, i.e. TF32 (sm80+); "_f16"/"bf16" inputs matched above
               (re.compile(r"tensorop_s(?:1688|16816)", _I), "tf32"),
               (re.compile(r"dgemm|f64|double", _I), "fp64"))
NORMALIZATION = re.compile(r"layer_?norm|GammaBetaBackward|rms_?norm|group_?norm|batch_?norm|bn_(fw|bw)|cudnn::bn_"
                           r"|RowwiseMoments|ComputeFusedParams|instance_?norm|welford"
                           r"|ComputeInternalGradients|ComputeBackwardFusedParams|cuComputePartGradGammaBeta"
                           r"|cuComputeGradGammaBeta|cuComputeGradInput|cuApplyLayerNorm|MIOpenLRN", _I)
POOLING = re.compile(r"max_?pool|avg_?pool|adaptive_?(?:avg|max|average)|pooling_(?:fw|bw)|MaxPool|AvgPool", _I)
SOFTMAX = re.compile(r"softmax", _I)
OPTIMIZER = re.compile(r"multi_tensor_apply|fused_?adam|FusedSgd|adam_|lamb_", _I)
REDUCTION = re.compile(r"reduce|nll_loss|ClassNLLCriterion|cross_entropy|lpnorm|norm_kernel|argmax|argmin|triton_red|triton_per", _I)
INDEXING = re.compile(r"gather|scatter|(?<!with_)index|embedding|radix_?sort|DeviceScan|DeviceSelect|unique|segment"
                      r"|compute_grad_weight|nonzero|topk|masked_|DeviceCompact|bounds_check|searchsorted"
                      r"|to_dense_representation|compute_cuda_kernel|repeat_interleave|moe\W.*routing|routingIndices"
                      r"|kernelHistogram", _I)
CAST = re.compile(r"bfloat16_copy_kernel|float8_copy|_to_copy|fp8_quant|quant_kernel", _I)
COPY = re.compile(r"copy|CatArray|chunk_cat|cat_|split_with_sizes|stack|kv_?cache", _I)
ELEMENTWISE = re.compile(r"elementwise|Functor|triton_poi|gelu|silu|relu|threshold|fill|dropout|clamp|pow_|sqrt"
                         r"|where|mse|arange|philox|bernoulli|distribution|scalePackedTensor"
                         # Inductor before torch 2.1 named its fused pointwise/reduction kernels triton__<signature>
                         r"|^triton__\d", _I)


@lru_cache(maxsize=65536)
def classify(name: str, cat: str = "kernel") -> tuple[str, str, str]:
    """(class, subclass, dtype stated by the name or "") of one GPU event, from its name and category."""
    rocm = classify_rocm(name)
    if rocm is not None:
        return rocm
    if cat in ("gpu_memset", "Memset") or name.startswith("Memset"):
        return "copy", "memset", ""
    if cat in ("gpu_memcpy", "Memcpy") or name.startswith("Memcpy"):
        kind = re.search(r"(HtoD|DtoH|DtoD|HtoH|PtoP)", name)
        return "copy", f"memcpy_{kind.group(1).lower()}" if kind else "memcpy", ""
    if COMM_KERNEL.search(name):
        return "communication", "nccl" if "nccl" in name.lower() else "collective", ""
    if ATTENTION.search(name):
        low = name.lower()
        sub = ("cudnn" if "cudnn" in low else "mem_efficient" if ("memeff" in low or "efficient" in low or "cutlassf" in low
               or "cutlassb" in low) else "flash")
        return "attention", sub, _name_dtype(name)
    if LAYOUT.search(name):
        return "copy", "layout", ""
    if GEMM.search(name) or CONV.search(name):
        dtype = _name_dtype(name)
        if SIMT.search(name) and not re.search(r"tensorop", name, _I):
            return "gemm_simt", dtype or "fp32", dtype or "fp32"
        if TENSOR_CORE.search(name) or dtype in ("bf16", "fp16", "fp8", "tf32"):
            return "gemm_tensor_core", dtype or "unknown", dtype
        return "gemm_tensor_core", "unknown", ""  # the launching op decides (see kernel_table)
    if SOFTMAX.search(name):
        return "normalization", "softmax", ""
    if POOLING.search(name):
        return "reduction", "pooling", ""
    if NORMALIZATION.search(name):
        return "normalization", "norm", ""
    if OPTIMIZER.search(name):
        return "optimizer", "fused" if re.search(r"fused", name, _I) else "foreach", ""
    if CAST.search(name) or ("direct_copy" in name and "WithCast" in name):
        return "elementwise", "cast", ""
    if "direct_copy" in name:
        return "copy", "copy", ""
    if REDUCTION.search(name):
        return "reduction", "reduction", ""
    if INDEXING.search(name):
        return "indexing", "indexing", ""
    if COPY.search(name):
        return "copy", "copy", ""
    if ELEMENTWISE.search(name):
        return "elementwise", "mixed_dtype" if "WithCast" in name else "elementwise", ""
    return "other", name[:80], ""


def _name_dtype(name: str) -> str:
    return next((d for rx, d in NAME_DTYPES if rx.search(name)), "")


def kernel_table(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU event (kernels, memcpy, memset): KERNEL_COLUMNS.

    dtype: the dtype the kernel computed in (from its name, else its op; "" when neither says);
    op / op_name / op_kind: the counted op that launched it (-1 / "" when none); flops: the op's
    FLOPs shared among its compute-class kernels by duration (among all its kernels when it ran
    none), so each op's FLOPs are counted once; bytes: memcpy/memset bytes (0 elsewhere).
    """
    k = gpu_launches(trace, ops)
    if k.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    # classify each distinct (name, category) once: a trace has ~100s of names, ~100k kernels
    name_c, cat_c = k["name"].astype("category"), k["cat"].astype("category")
    names, cats = name_c.cat.categories, cat_c.cat.categories
    base = len(cats) + 1  # codes shifted by one: a missing value's −1 stays apart
    pair = (name_c.cat.codes.to_numpy().astype(np.int64) + 1) * base + cat_c.cat.codes.to_numpy() + 1
    uniq, codes = np.unique(pair, return_inverse=True)
    per_pair = [classify(str(names[u // base - 1]), str(cats[u % base - 1])) for u in uniq.tolist()]
    cls = np.array([lab[0] for lab in per_pair], dtype=object)[codes]
    sub = np.array([lab[1] for lab in per_pair], dtype=object)[codes]
    dtype = np.array([lab[2] for lab in per_pair], dtype=object)[codes]
    op = k["op"].to_numpy()
    has_op = op >= 0
    op_kind = np.full(len(k), "", dtype=object)
    op_name = np.full(len(k), "", dtype=object)
    op_dtype = np.full(len(k), "", dtype=object)
    if has_op.any():
        o = ops.loc[op[has_op]]
        op_kind[has_op], op_name[has_op], op_dtype[has_op] = o["kind"].to_numpy(), o["name"].to_numpy(), o["dtype"].to_numpy()
    # every kernel of an attention op is attention (not its memcpy/memset); the unfused ones take
    # the subclass of the op's fused kernel, or "math" when it ran none (math SDPA)
    att = (op_kind == "attention") & ~np.isin(sub, ("memset", "memcpy_htod", "memcpy_dtoh", "memcpy_dtod"))
    if att.any():
        fused = att & (cls == "attention")
        op_sub = pd.Series(sub[fused], index=op[fused])
        op_sub = op_sub[~op_sub.index.duplicated(keep="first")]
        rest = att & ~fused
        sub[rest] = op_sub.reindex(op[rest]).fillna("math").to_numpy()
        cls[att] = "attention"
    # a GEMM helper that names no dtype (split-K reduce, gemv) follows its op's main GEMM kernel
    known = has_op & ((cls == "gemm_simt") | ((cls == "gemm_tensor_core") & (dtype != "")))
    vague = has_op & (cls == "gemm_tensor_core") & (dtype == "")
    if vague.any() and known.any():
        main = pd.DataFrame({"cls": cls[known], "dtype": dtype[known]}, index=op[known])
        main = main[~main.index.duplicated(keep="first")].reindex(op[vague])
        hit = main["cls"].notna().to_numpy()
        idx = np.flatnonzero(vague)[hit]
        cls[idx], dtype[idx] = main["cls"].to_numpy()[hit], main["dtype"].to_numpy()[hit]
    # the name did not say the dtype: take the op's (an fp32 op on tensor cores ran tf32; on AMD's
    # matrix cores, subclass "mfma", it ran fp32: the fp32 path)
    fill = (dtype == "") & has_op & np.isin(cls, COMPUTE_CLASSES)
    tc = cls == "gemm_tensor_core"
    dtype[fill] = op_dtype[fill]
    mfma_fp32 = fill & tc & (sub == "mfma") & np.isin(dtype, ("fp32", "fp64"))
    dtype[fill & tc & (dtype == "fp32") & ~mfma_fp32] = "tf32"
    cls[mfma_fp32] = "gemm_simt"
    tc = cls == "gemm_tensor_core"
    sub[tc] = np.where(dtype[tc] == "", "unknown", dtype[tc])
    simt = cls == "gemm_simt"
    sub[simt] = np.where(np.isin(dtype[simt], ("fp64",)), "fp64", "fp32")
    out = pd.DataFrame({"row": k["row"], "name": k["name"], "ts_us": k["ts_us"], "dur_us": k["dur_us"], "class": cls,
                        "subclass": sub, "dtype": dtype, "op": op, "op_name": op_name, "op_kind": op_kind,
                        "flops": 0.0, "bytes": k["bytes"].to_numpy()})
    if has_op.any():
        out["flops"] = _share_flops(out, ops)
    return out[KERNEL_COLUMNS]


def _share_flops(k: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Each op's FLOPs over its kernels by duration: its compute-class kernels if it has any."""
    mine = k[k["op"] >= 0]
    compute = np.isin(mine["class"].to_numpy(), COMPUTE_CLASSES)
    has_compute = pd.Series(compute).groupby(mine["op"].to_numpy()).transform("any").to_numpy()
    take = compute | ~has_compute
    # a zero-length kernel still gets its share when all of its op's kernels are zero-length
    w = np.where(take, np.maximum(mine["dur_us"].to_numpy(), 1e-9), 0.0)
    total = pd.Series(w).groupby(mine["op"].to_numpy()).transform("sum").to_numpy()
    flops = np.zeros(len(k))
    flops[np.flatnonzero(k["op"].to_numpy() >= 0)] = ops.loc[mine["op"].to_numpy(), "flops"].to_numpy() * w / total
    return flops


def ran_dtypes(ops: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with dtype ``tf32`` where an fp32 op ran tensor-core kernels (TF32 allowed)."""
    tc = kernels[(kernels["class"] == "gemm_tensor_core") & (kernels["dtype"] == "tf32") & (kernels["op"] >= 0)]
    out = ops.copy()
    hit = out.index.isin(tc["op"].unique()) & (out["dtype"] == "fp32").to_numpy()
    out.loc[hit, "dtype"] = "tf32"
    return out


def class_breakdown(kernels: pd.DataFrame, device_name: str | None) -> pd.DataFrame:
    """One row per (class, subclass), largest time first: CLASS_COLUMNS.

    time_pct: share of all GPU event time (kernels, copies); tflops_per_s: attributed FLOPs over
    the class's kernel time (compute classes); gb_per_s: bytes over time where the trace gives
    bytes (memcpy/memset); bound: "compute" or "memory" (the roofline the class is held to);
    pct_of_peak: compute classes: the time their FLOPs need at each kernel dtype's dense peak
    over their time; device-to-device copies and memsets: bytes moved (a copy reads and writes)
    over HBM bandwidth. None where the trace gives no FLOPs or bytes, or the device is unknown.
    """
    if kernels.empty:
        return pd.DataFrame(columns=CLASS_COLUMNS)
    peak = device_peak(device_name)
    k = kernels.assign(secs=kernels["dur_us"] / 1e6)
    if peak:
        dt = k["dtype"].to_numpy()
        pk = np.full(len(k), np.nan)
        for d in pd.unique(dt):
            pk[dt == d] = peak.tflops.get(d or "", np.nan) * 1e12
        pk[(k["class"] == "gemm_simt").to_numpy()] = peak.tflops.get("fp32", np.nan) * 1e12
        k["ideal_s"] = k["flops"].to_numpy() / pk
    else:
        k["ideal_s"] = np.nan
    total = k["secs"].sum()
    rows = []
    for (c, s), g in k.groupby(["class", "subclass"], sort=False):
        secs, flops, nbytes = g["secs"].sum(), g["flops"].sum(), float(g["bytes"].sum())
        bound = "compute" if c in COMPUTE_CLASSES else ("memory" if s in ("memcpy_dtod", "memset") else None)
        pct = None
        if bound == "compute" and flops > 0 and peak and g.loc[g["flops"] > 0, "ideal_s"].notna().all():
            pct = 100.0 * g["ideal_s"].sum() / secs
        elif bound == "memory" and nbytes > 0 and peak and peak.hbm_tb_s:
            traffic = nbytes * (2 if s == "memcpy_dtod" else 1)
            pct = 100.0 * traffic / secs / (peak.hbm_tb_s * 1e12)
        rows.append({"class": c, "subclass": s, "kernels": calls(g), "time_ms": secs * 1e3,
                     "time_pct": 100.0 * secs / total if total > 0 else 0.0, "flops": flops,
                     "tflops_per_s": flops / secs / 1e12 if flops > 0 and secs > 0 else None, "bytes": nbytes,
                     "gb_per_s": nbytes / secs / 1e9 if nbytes > 0 and secs > 0 else None, "bound": bound,
                     "pct_of_peak": pct})
    return pd.DataFrame(rows, columns=CLASS_COLUMNS).sort_values("time_ms", ascending=False, ignore_index=True)


def calls(kernels: pd.DataFrame) -> int:
    """How many kernels the rows stand for: one each, or their ``calls`` in a :func:`compact` table."""
    return int(kernels["calls"].sum()) if "calls" in kernels else len(kernels)


def unclassified(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernels in ``other``: name, calls, time_ms; largest first."""
    o = kernels[kernels["class"] == "other"]
    o = o.assign(calls=o["calls"] if "calls" in o else 1)
    g = o.groupby("name", observed=True)
    return pd.DataFrame({"calls": g["calls"].sum(), "time_ms": g["dur_us"].sum() / 1e3}).reset_index().sort_values(
        "time_ms", ascending=False, ignore_index=True)


@dataclass(slots=True)
class Efficiency:
    """One rank's efficiency frames: ``ops`` (flops.op_flops, dtype as it ran), ``kernels``
    (kernel_table), ``per_step`` (flops.step_flops), ``classes`` (class_breakdown)."""

    ops: pd.DataFrame
    kernels: pd.DataFrame
    per_step: pd.DataFrame
    classes: pd.DataFrame


def efficiency(trace: Trace, device_name: str | None, windows: pd.DataFrame | None = None) -> Efficiency:
    """FLOPs, MFU per step and the class breakdown of one rank (windows: steps.step_windows).
    On GPU traces only ops that launched GPU work count; on CPU traces every counted op does."""
    windows = step_windows(trace) if windows is None else windows
    ops = op_flops(trace, windows)
    kernels = kernel_table(trace, ops)
    if not kernels.empty:
        # on a GPU trace an op that launched nothing ran on the CPU (a DataLoader transform's
        # matmuls with num_workers=0): not the model's FLOPs on the device
        ops = ops[ops.index.isin(kernels["op"])]
    ops = ran_dtypes(ops, kernels)
    peak = device_peak(device_name) if not kernels.empty else None  # a CPU trace's FLOPs are not the GPU's
    peaks = {d: v * 1e12 for d, v in peak.tflops.items()} if peak else None
    return Efficiency(ops=ops, kernels=kernels, per_step=step_flops(ops, windows, peaks),
                      classes=class_breakdown(kernels, device_name))


COMPACT_KEYS = ["class", "subclass", "dtype", "name"]


def compact(e: Efficiency) -> Efficiency:
    """``e`` with one kernel row per (class, subclass, dtype, name) (summed ``dur_us``, ``flops``,
    ``bytes`` and their ``calls``) and one op row per dtype (summed ``flops``): what the run-level
    reads (class_breakdown, unclassified, top kernels, where_time_goes, FLOPs by dtype) need, in
    hundreds of rows instead of one per kernel. Per-kernel questions (times, launching ops) are
    answered next to the trace before compaction (see workbench.pipeline.reduce)."""
    k = e.kernels
    if not k.empty:
        k = (k.assign(calls=1)
             .groupby(COMPACT_KEYS, sort=False, observed=True, dropna=False)
             .agg(dur_us=("dur_us", "sum"), flops=("flops", "sum"), bytes=("bytes", "sum"), calls=("calls", "sum"))
             .reset_index())
        k["name"] = k["name"].astype(str)
    ops = e.ops
    if not ops.empty and "dtype" in ops:
        ops = ops.groupby("dtype", sort=False, observed=True)["flops"].sum().reset_index()
    return Efficiency(ops=ops, kernels=k, per_step=e.per_step, classes=e.classes)
