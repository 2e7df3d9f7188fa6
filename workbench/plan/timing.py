"""Step time of a layout: compute, tensor-parallel communication, pipeline bubble and p2p,
exposed data-parallel communication, the optimizer, the host.

One micro-batch on one pipeline stage costs, per block, its matmuls (forward, and twice that in
backward: input and weight gradients), attention's score matmuls, the memory-bound kernels
(norms, activations, residual adds, casts), recomputation, and the tensor-parallel collectives,
which sit on the critical path (Megatron-LM does not overlap them). The last stage adds the head
and the loss. The pipeline runs m micro-batches through p stages in ``(m + (p−1)/v)`` stage-times
(GPipe and 1F1B alike; v virtual stages divide the bubble, Narayanan et al. 2021, §2.2);
data-parallel reduction overlaps the last micro-batch's backward when the stack overlaps it
(DDP buckets, FSDP) and is exposed otherwise; then the optimizer streams its state once.

Each kind of kernel runs at a stated share of the device's datasheet peak (:class:`Efficiencies`)
until ``--calibrate`` replaces it by what a run measured.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field

from workbench.plan.comm import Collective, call_seconds, collectives
from workbench.hardware.systems import Cluster
from workbench.plan.layout import Layout, Stack, dtype_bytes
from workbench.plan.memory import sharded_params, stage_block_counts, stage_layers
from workbench.plan.model import ModelSpec

DEFAULT_GEMM = 0.80
"""Share of the dense peak large matmuls reach: a bf16 8192³ matmul ran at 787 TFLOP/s on the
H200 (docs/measured.md, "The H200": 0.80 of 989), and the engine's matmuls at 78 % in traces/case_gpu_2_preload_shm."""
DEFAULT_ATTENTION = 0.50
"""Fused attention (FlashAttention-2/3, cuDNN) forward + backward: half the peak, as
workbench's attention_math rule assumes."""
DEFAULT_MEMORY = 0.70
"""Share of HBM bandwidth memory-bound kernels (norms, activations, casts, the optimizer) reach."""
GEMM_RANGE_SLACK = 10 ** 0.25
"""A matmul counts as measured within one size bucket (a quarter decade, the calibration's own
resolution: :func:`workbench.calibration.calibrate.gemm_by_size`) beyond the smallest and largest call seen."""
FULL_RECOMPUTE_LAUNCHES = 1.33
"""Kernels a block launches with full recomputation, per kernel without it: the forward (a third
of the forward + backward launches) runs again."""
FSDP2_HOST_S_PER_BLOCK = 5.9e-3
"""Host time FSDP2 (the torch stack's ZeRO 2/3) spends per block and micro-batch, forward and
backward: its per-module pre/post hooks, all-gather and reduce-scatter bookkeeping and casts run
on the CPU whatever the GPU does. Measured on the H200 machine's host: the 370M engine GPT under
FSDP2 on one GPU (traces/plan_gpu_370m_b16_zero3) stepped in 142 ms for 24 blocks x 1 micro-batch
with its GPU 67 % busy (DDP: 120 ms, 91 % busy); the same config on a busier host took 209 ms
(traces/gpu_fsdp2_370m), so this is a floor, not a figure to trust to 10 %. Under the step: small
models become host-bound under FSDP2; an 8B block at s = 8192 (~34 ms of GPU work) hides it."""
OPTIMIZER_BYTES_PER_PARAM = {"torch": 40.0, "megatron": 42.0}
"""AdamW streams per parameter: fp32 weight, gradient, two moments read and written (28 B, torch's
fused kernel), the gradient-norm and clipping passes (12 B); Megatron-LM adds the bf16 copy."""


@dataclass(kw_only=True, slots=True)
class Efficiencies:
    """Shares of the datasheet peaks each kind of kernel reaches: the defaults above, or measured."""

    gemm: float = DEFAULT_GEMM
    """Matmuls, share of the dtype's dense peak: every matmul when none was measured, else those
    larger than ``gemm_flops_range`` (a calibration says nothing about sizes it did not see: a tiny
    model's matmuls at 37 % of peak must not slow an 8B model's down). Smaller ones keep the
    smallest measured share (:meth:`below_measured`)."""
    gemm_by_size: tuple[tuple[float, float], ...] = ()
    """Measured (FLOPs per call, share of peak), sorted: interpolated in log(FLOPs)."""
    gemm_flops_range: tuple[float, float] | None = None
    """Smallest and largest FLOPs per call among the measured matmuls; None: all of them
    (``gemm_by_size`` without a range, as hand-made efficiencies give it)."""
    attention: float = DEFAULT_ATTENTION
    """Fused attention kernels, share of the peak."""
    memory_bound: float = DEFAULT_MEMORY
    """Memory-bound kernels (layers and loss), share of HBM bandwidth for the bytes this model counts."""
    optimizer: float = DEFAULT_MEMORY
    """The optimizer's kernels, same convention."""
    expert_gemm: float | None = None
    """Routed experts' (grouped) matmuls, share of the peak, as a run measured them; None: timed like
    any matmul of one expert's size (fewer rows per expert: a smaller share)."""
    host_s_per_kernel: float = 0.0
    """Host time per kernel launched (0: the host never sets the pace)."""
    kernels_per_layer: float = 0.0
    """Kernels one block launches per micro-batch (forward + backward), measured."""
    busbw: dict[str, float] = field(default_factory=dict)
    """Measured collective bus bandwidth by link (intra / inter), bytes/s."""
    source: str = "defaults"
    """defaults | calibrated."""
    runs: tuple[str, ...] = ()
    """Runs measured."""
    notes: tuple[str, ...] = ()
    """What was measured and what stayed a default, one line each."""

    def measured(self, flops: float) -> bool:
        """Whether a matmul of ``flops`` per call lies within the calibrated sizes."""
        if not self.gemm_by_size:
            return False
        if self.gemm_flops_range is None:
            return True
        lo, hi = self.gemm_flops_range
        return lo / GEMM_RANGE_SLACK <= flops <= hi * GEMM_RANGE_SLACK

    def below_measured(self, flops: float) -> bool:
        """A matmul smaller than any the calibration measured: it runs at most at the smallest
        measured size's share (a smaller matmul fills less of the device, and launches cost more
        of it), so that share holds — never the default, which would make it nearly free."""
        return bool(self.gemm_by_size) and self.gemm_flops_range is not None and not self.measured(flops) \
            and flops < self.gemm_flops_range[0]

    def gemm_share(self, flops: float) -> float:
        pts = self.gemm_by_size
        if pts and self.below_measured(flops):
            # smaller than any measured matmul: never faster than the smallest one ran (a matmul's
            # share of peak falls with its size; the default is a large GEMM's)
            return min(pts[0][1], self.gemm)
        if not pts or not self.measured(flops):
            return self.gemm
        xs = [math.log(p[0]) for p in pts]
        x = math.log(max(flops, 1.0))
        i = bisect.bisect_left(xs, x)
        if i == 0:
            return pts[0][1]
        if i == len(pts):
            return pts[-1][1]
        w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        return pts[i - 1][1] * (1 - w) + pts[i][1] * w

    def to_json(self) -> dict:
        d = asdict(self)
        d["gemm_by_size"] = [{"flops_per_call": f, "share_of_peak": round(e, 4)} for f, e in self.gemm_by_size]
        d["busbw_gb_s"] = {k: round(v / 1e9, 2) for k, v in d.pop("busbw").items()}
        d["gemm_flops_range"] = list(self.gemm_flops_range) if self.gemm_flops_range else None
        return d


@dataclass(kw_only=True, slots=True)
class StepTime:
    """Predicted time of one optimizer step (seconds) and where it goes."""

    step_s: float
    """The step."""
    compute_s: float
    """Kernels of the slowest stage's micro-batches: matmuls, attention, memory-bound, recompute."""
    recompute_s: float
    """The part of compute_s that recomputes activations."""
    tp_comm_s: float
    """Tensor-parallel collectives (on the critical path)."""
    ep_comm_s: float
    """Expert-parallel dispatch and combine on the critical path (what overlap leaves exposed)."""
    bubble_s: float
    """Pipeline fill and drain: (p − 1)/v stage-times."""
    pp_comm_s: float
    """Pipeline sends and receives."""
    dp_comm_s: float
    """Data-parallel (ZeRO) communication, all of it."""
    dp_exposed_s: float
    """The part of dp_comm_s not hidden behind compute."""
    optimizer_s: float
    """The optimizer step."""
    host_s: float
    """Time the GPU waits on the host beyond the rest (launch-bound steps)."""
    gemm_s: float
    """Matmul time within compute_s (incl. the head)."""
    attention_s: float
    """Attention kernels within compute_s."""
    memory_bound_s: float
    """Memory-bound kernels within compute_s (incl. the loss)."""
    tokens_per_s: float
    """Global batch tokens / step."""
    mfu: float
    """Model FLOPs (6N + 12·L·h·s per token, PaLM) / (step · GPUs · bf16 dense peak)."""
    hfu: float
    """FLOPs the GPUs ran (recomputation included) over the same peak."""
    stage: int
    """The slowest pipeline stage."""
    gemm_outside_calibration_pct: float | None = None
    """Share of the slowest stage's matmul FLOPs whose size per call lies outside the calibrated
    range (timed with the default share instead); None when nothing was calibrated."""

    def to_json(self) -> dict:
        out = {}
        for k, v in asdict(self).items():
            if k.endswith("_s") and k != "tokens_per_s":
                out[k[:-2] + "_ms"] = round(v * 1e3, 4)
            else:
                out[k] = round(v, 4) if isinstance(v, float) else v
        return out


@dataclass(kw_only=True, slots=True)
class _MicroBatch:
    """One micro-batch on one stage (seconds)."""

    gemm: float = 0.0
    attention: float = 0.0
    memory: float = 0.0
    recompute: float = 0.0
    tp: float = 0.0
    ep: float = 0.0
    """Expert-parallel all-to-alls on the critical path."""
    backward: float = 0.0
    """Backward kernels (the window data-parallel reduction can hide behind)."""
    forward: float = 0.0
    hw_flops: float = 0.0

    @property
    def kernels(self) -> float:
        return self.gemm + self.attention + self.memory

    @property
    def total(self) -> float:
        return self.kernels + self.tp + self.ep


def _gemm_s(M: float, N: float, K: float, batch: float, dtype: str, cluster: Cluster, eff: Efficiencies) -> float:
    """One matmul: FLOPs at the measured share for its size, or the roofline with the default."""
    flops = 2.0 * M * N * K * batch
    peak = cluster.gpu.peak_flops(dtype)
    if eff.measured(flops / batch) or eff.below_measured(flops / batch):
        return flops / (peak * eff.gemm_share(flops / batch))
    c = dtype_bytes(dtype)
    moved = c * (M * K + K * N + M * N) * batch
    return max(flops / (peak * eff.gemm), moved / (cluster.gpu.hbm_tb_s * 1e12 * eff.memory_bound))


def block_gemms(m: ModelSpec, stack: Stack, layout: Layout, moe: bool = False) -> list[tuple[float, float, float, float, bool]]:
    """(rows per token, N, K, calls, routed) of one block's matmuls on one GPU: a matmul of ``rows ×
    tokens`` by N by K, ``calls`` times; routed: a routed expert's. Attention and dense MLPs split over tp; a mixture of experts' router
    reads each rank's share of the tokens, its shared experts split like a dense MLP, and its routed
    experts run whole on their ep rank: experts / ep calls (one per local expert; a grouped GEMM is
    these together) of tokens × top_k / (tp · experts / ep) rows each, the load balanced."""
    h, a, d, t = m.hidden, m.heads, m.d_head, layout.tp
    if m.latent:
        rope = m.qk_rope_head_dim
        q = [(a * d / t, h)] if not m.q_lora_rank else [(m.q_lora_rank, h), (a * d / t, m.q_lora_rank)]
        attn = q + [(m.kv_lora_rank + rope, h), (a * (d - rope + m.d_v) / t, m.kv_lora_rank)]
    elif stack.fused_qkv:
        attn = [(m.qkv_out / t, h)]
    else:
        attn = [(a * d / t, h), (m.kv * d / t, h), (m.kv * m.d_v / t, h)]
    out = [(1.0, n, k, 1.0, False) for n, k in attn + [(h, m.attn_out / t)]]

    def mlp(f: float, split: float, rows: float = 1.0, calls: float = 1.0, routed: bool = False) -> list:
        up = [(2 * f / split, h)] if (m.gated and stack.fused_kernels) else [(f / split, h)] * (2 if m.gated else 1)
        return [(rows, n, k, calls, routed) for n, k in up + [(h, f / split)]]
    if not moe:
        return out + mlp(m.ffn_hidden, t)
    out.append((1.0 / t, m.experts, h, 1.0, False))  # the router
    if m.shared_experts:
        out += mlp(m.shared_experts * m.expert_ffn, t)
    local = m.experts / layout.ep
    return out + mlp(m.expert_ffn, 1, rows=m.top_k / (t * local), calls=local, routed=True)


def routed_gemm_flops(m: ModelSpec, stack: Stack, layout: Layout, global_batch: int) -> float:
    """The routed experts' matmul FLOPs of one optimizer step on one GPU of the first stage, as the
    timing counts them (:func:`block_gemms`' routed rows): forward and the backward's two, a
    fully recomputing run's second forward: what a run's measured expert-GEMM time calibrates."""
    if not m.experts:
        return 0.0
    n_moe = stage_block_counts(m, layout.pp, 0)[1]
    M = layout.mb * m.seq
    fwd = sum(2.0 * rows * M * n * k * calls for rows, n, k, calls, routed in block_gemms(m, stack, layout, True) if routed)
    passes = 3 + (1 if layout.recompute == "full" else 0)
    return fwd * n_moe * layout.microbatches(global_batch) * passes


def gemm_calls(m: ModelSpec, layout: Layout, stack: Stack, stage: int) -> list[tuple[float, float]]:
    """(FLOPs per call, FLOPs per micro-batch) of every matmul one micro-batch runs forward on
    ``stage`` — the sizes a GEMM calibration has to cover (backward's are the same shapes)."""
    t, s, M = layout.tp, m.seq, layout.mb * m.seq
    out = []
    for n_blocks, moe in zip(stage_block_counts(m, layout.pp, stage), (False, True)):
        if n_blocks:
            out += [(2.0 * rows * M * n * k, 2.0 * rows * M * n * k * calls * n_blocks)
                    for rows, n, k, calls, _ in block_gemms(m, stack, layout, moe)]
    L = stage_layers(m.layers, layout.pp, stage)
    if not stack.flash_attention:
        heads = layout.mb * m.heads / t
        one = 2.0 * s * s * m.d_head
        out += [(one, 2 * one * heads * L)]
    if stage == layout.pp - 1:
        V = m.vocab / (t if stack.vocab_parallel else 1)
        out.append((2.0 * M * V * m.hidden,) * 2)
    return out


def outside_calibration_pct(calls: list[tuple[float, float]], eff: Efficiencies) -> float | None:
    """Percent of ``calls``' FLOPs at sizes ``eff`` did not measure; None without a calibration."""
    if not eff.gemm_by_size:
        return None
    total = sum(f for _, f in calls)
    return 100.0 * sum(f for one, f in calls if not eff.measured(one)) / total if total else 0.0


def _layer_memory_bytes(m: ModelSpec, stack: Stack, layout: Layout, seq: int, moe: bool = False) -> tuple[float, float]:
    """(forward, backward) bytes the memory-bound kernels of one block move per token."""
    c, r, h, t = dtype_bytes(stack.dtype), stack.residual_bytes, m.hidden, layout.tp
    sh = 1 / t if layout.sp else 1.0
    if not moe:
        act = (3 if m.gated else 2) * c * m.ffn_hidden / t
    else:
        # the activation over the routed rows (tokens x top_k, split over tp) and the shared experts;
        # permuting the rows to their experts, back, and the weighted combine; the router's softmax
        # and top-k over fp32 scores
        act = ((3 if m.gated else 2) * c * (m.top_k + m.shared_experts) * m.expert_ffn / t
               + 5 * m.top_k * c * h / t + 12.0 * m.experts / t)
    if stack.fused_kernels:
        # fused norm (read + write), bias-dropout-add (2 reads, a write, the mask) twice, bias-activation
        fwd = (2 * 2 * c + 2 * (3 * c + (1 if stack.dropout else 0))) * h * sh + act
    else:
        casts = (stack.cast_copies + 1) * (r + c) * h if stack.autocast_weight_copies else 0.0
        # two norms (r in, r out), two residual adds (r + c in, r out), the attention output copy, GELU
        fwd = 2 * 2 * r * h + 2 * (2 * r + c) * h + 2 * c * m.attn_out / t + act + casts
    bwd = 2 * fwd
    if not stack.flash_attention:
        scores = m.heads * seq / t
        fwd += (4 * c + (1 if stack.dropout else 0)) * scores   # softmax (+ dropout) over the s x s scores
        bwd += (5 * c + (1 if stack.dropout else 0)) * scores
    return fwd, bwd


def _block_weights(m: ModelSpec, layout: Layout, moe: bool) -> float:
    """Parameters of one block on one GPU (tp shard; a MoE block's local experts whole)."""
    if not moe:
        return m.block_params(False) / layout.tp
    return (m.attention_params() + m.moe_dense_params()) / layout.tp + m.routed_params() / layout.ep


def _micro_batch(m: ModelSpec, layout: Layout, stack: Stack, cluster: Cluster, eff: Efficiencies, stage: int,
                 calls: list[Collective], mbs: int) -> _MicroBatch:
    L = stage_layers(m.layers, layout.pp, stage)
    t, s, M = layout.tp, m.seq, layout.mb * m.seq
    dtype = "tf32" if stack.dtype == "tf32" else stack.dtype
    hbm = cluster.gpu.hbm_tb_s * 1e12
    out = _MicroBatch()
    # the stage's blocks by kind (dense, mixture of experts): matmuls, their FLOPs, memory-bound bytes
    G = F = MF = MB = 0.0
    for n_blocks, moe in zip(stage_block_counts(m, layout.pp, stage), (False, True)):
        if not n_blocks:
            continue
        gemm_f = flops = 0.0
        for rows, n, k, calls_per, routed in block_gemms(m, stack, layout, moe):
            if routed and eff.expert_gemm:
                gemm_f += 2.0 * rows * M * n * k * calls_per / (cluster.gpu.peak_flops(dtype) * eff.expert_gemm)
            else:
                gemm_f += _gemm_s(rows * M, n, k, calls_per, dtype, cluster, eff)
            flops += 2.0 * rows * M * n * k * calls_per
        mem_f, mem_b = (b * M / (hbm * eff.memory_bound) for b in _layer_memory_bytes(m, stack, layout, s, moe))
        if stack.autocast_weight_copies:  # bf16 copies of the fp32 weights, and the fp32 gradients back
            w = 12 * _block_weights(m, layout, moe) / (hbm * eff.memory_bound)
            mem_f, mem_b = mem_f + w / 2, mem_b + w / 2
        G, F, MF, MB = G + n_blocks * gemm_f, F + n_blocks * flops, MF + n_blocks * mem_f, MB + n_blocks * mem_b
    if stack.flash_attention:
        attn_flops = m.attention_flops(s) / t * M * 0.5  # causal: flash kernels skip the masked half
        attn_f = attn_flops / (cluster.gpu.peak_flops("fp32" if dtype in ("fp32", "tf32") else dtype) * eff.attention)
        attn_b = 2.5 * attn_f  # backward: five matmuls to forward's two (FlashAttention-2, §3.1)
        attn_hw = 3.5 * attn_flops
    else:
        # unfused: the two batched matmuls QKᵀ and AV over the whole square
        hd, vd, heads = m.d_head, m.d_v, layout.mb * m.heads / t
        attn_f = _gemm_s(s, s, hd, heads, dtype, cluster, eff) + _gemm_s(s, vd, s, heads, dtype, cluster, eff)
        attn_b = 2 * attn_f
        attn_hw = 3 * m.attention_flops(s) / t * M
    fwd = G + L * attn_f + MF
    rec = {"none": 0.0, "selective": L * attn_f + (0 if stack.flash_attention else MF * 0.5), "full": fwd}[layout.recompute]
    rec_flops = {"none": 0.0, "selective": L * attn_hw / (3.5 if stack.flash_attention else 3),
                 "full": F + L * attn_hw / (3.5 if stack.flash_attention else 3)}[layout.recompute]
    out.gemm = 3 * G
    out.attention = L * (attn_f + attn_b)
    out.memory = MF + MB
    out.recompute = rec
    out.forward = fwd
    out.backward = 2 * G + L * attn_b + MB + rec
    out.hw_flops = 3 * F + L * attn_hw + rec_flops
    # recompute's kernels are in the totals too (what the GPU runs)
    out.gemm += G if layout.recompute == "full" else 0.0
    out.attention += L * attn_f if layout.recompute != "none" else 0.0
    out.memory += MF if layout.recompute == "full" else 0.0
    c = dtype_bytes(stack.dtype)
    if stage == layout.pp - 1:  # the head and the loss
        V = m.vocab / (t if stack.vocab_parallel else 1)
        head = _gemm_s(M, V, m.hidden, 1, dtype, cluster, eff)
        per_logit = 24.0 if stack.fused_kernels else 2 * c + 36.0  # fp32 log-softmax, its backward, the casts
        loss = per_logit * M * V / (hbm * eff.memory_bound)
        out.gemm += 3 * head
        out.memory += loss
        out.forward += head + loss / 3
        out.backward += 2 * head + loss * 2 / 3
        out.hw_flops += 3 * 2 * M * V * m.hidden
    if stage == 0:  # embedding lookup and its gradient (fp32 scatter-add)
        emb = (c + 8) * M * m.hidden / (hbm * eff.memory_bound)
        out.memory += emb
        out.backward += emb / 2
    out.tp = sum(call_seconds(x, cluster, eff.busbw) * x.calls for x in calls if x.group == "tp") / mbs
    ep = sum(call_seconds(x, cluster, eff.busbw) * x.calls for x in calls if x.group == "ep") / mbs
    # dispatch and combine wait for the tokens and the experts: on the critical path, unless the stack
    # overlaps them with another micro-batch's kernels (DualPipe), which then hide them up to their time
    out.ep = max(0.0, ep - out.kernels) if stack.ep_overlap else ep
    return out


def step_time(m: ModelSpec, layout: Layout, stack: Stack, global_batch: int, cluster: Cluster,
              eff: Efficiencies) -> StepTime:
    mbs = layout.microbatches(global_batch)
    p, v = layout.pp, layout.vpp
    per_stage = {}
    for stage in sorted({0, p - 1}):
        calls = collectives(m, layout, stack, global_batch, cluster, stage)
        mb = _micro_batch(m, layout, stack, cluster, eff, stage, calls, mbs)
        per_stage[stage] = (mb, calls)
    stage = max(per_stage, key=lambda k: per_stage[k][0].total)
    mb, calls = per_stage[stage]
    pipe = (mbs + (p - 1) / v) * mb.total
    bubble = (p - 1) / v * mb.total
    p2p = sum(call_seconds(x, cluster, eff.busbw) * x.calls for x in calls if x.group == "pp")
    dp_calls = [x for x in calls if x.group in ("dp", "edp")]
    dp_total = sum(call_seconds(x, cluster, eff.busbw) * x.calls for x in dp_calls)
    dp_exposed = _dp_exposed(dp_calls, cluster, eff, stack, mb, mbs)
    psi = sharded_params(m, layout, stack, stage, 1)
    optimizer = OPTIMIZER_BYTES_PER_PARAM.get(stack.name, 40.0) * psi / (cluster.gpu.hbm_tb_s * 1e12 * eff.optimizer)
    gpu = pipe + p2p + dp_exposed + optimizer
    host = 0.0
    # a stage's host launches its micro-batches as the pipeline passes them: like the kernels, the
    # fill and drain add (p - 1)/v micro-batch times to the m (one micro-batch: the stages in turn)
    L = stage_layers(m.layers, p, stage)
    runs = L * (mbs + (p - 1) / v) * (FULL_RECOMPUTE_LAUNCHES if layout.recompute == "full" else 1.0)
    if eff.host_s_per_kernel and eff.kernels_per_layer:
        host = max(0.0, eff.kernels_per_layer * runs * eff.host_s_per_kernel - gpu)
    if stack.name == "torch" and layout.zero >= 2:
        host = max(host, FSDP2_HOST_S_PER_BLOCK * runs - gpu)
    step = gpu + host
    tokens = global_batch * m.seq
    peak = cluster.gpu.peak_flops("bf16")
    model_flops = m.model_flops_per_token() * tokens
    hw = mb.hw_flops * mbs * layout.dp * layout.pp * layout.tp  # every GPU runs its stage's share
    return StepTime(step_s=step, compute_s=mbs * mb.kernels, recompute_s=mbs * mb.recompute, tp_comm_s=mbs * mb.tp,
                    ep_comm_s=mbs * mb.ep, bubble_s=bubble, pp_comm_s=p2p, dp_comm_s=dp_total, dp_exposed_s=dp_exposed, optimizer_s=optimizer,
                    host_s=host, gemm_s=mbs * mb.gemm, attention_s=mbs * mb.attention, memory_bound_s=mbs * mb.memory,
                    tokens_per_s=tokens / step, mfu=model_flops / (step * cluster.gpus * peak),
                    hfu=hw / (step * cluster.gpus * peak) if hw else 0.0, stage=stage,
                    gemm_outside_calibration_pct=outside_calibration_pct(gemm_calls(m, layout, stack, stage), eff))


def _dp_exposed(dp_calls: list[Collective], cluster: Cluster, eff: Efficiencies, stack: Stack, mb: _MicroBatch,
                mbs: int) -> float:
    """Data-parallel time not hidden: everything when the stack does not overlap it; else what
    exceeds the compute it runs beside (gradient reduction: the last micro-batch's backward, or
    every backward when it reduces after each; ZeRO-3's gathers: forward and backward), plus the
    last call, which nothing follows."""
    secs = {w: 0.0 for w in ("forward", "backward", "step")}
    last = 0.0
    for x in dp_calls:
        one = call_seconds(x, cluster, eff.busbw)
        secs[x.when] += one * x.calls
        last = max(last, one)
    if not stack.dp_overlap:
        return sum(secs.values())
    window_b = mb.backward * (mbs if stack.dp_reduce_each_microbatch else 1)
    if any(x.op == "all_gather" and x.when == "backward" for x in dp_calls):
        window_b = mb.backward * mbs
    exposed = max(0.0, secs["backward"] - window_b) + max(0.0, secs["forward"] - mb.forward * mbs) + secs["step"]
    return exposed + (min(last, secs["backward"]) if secs["backward"] else 0.0)
