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

from dataclasses import asdict, dataclass

from workbench.plan.comm import Collective, call_seconds, collectives, overlap_cost
from workbench.hardware.systems import Cluster
from workbench.plan.efficiency import Efficiencies
from workbench.plan.fp8 import fp8_gemm_seconds, has_fp8
from workbench.plan.gemms import block_gemms, gemm_calls, gemm_seconds, outside_calibration_pct
from workbench.plan.layout import Layout, Stack, dtype_bytes
from workbench.plan.moe_time import (combined_1f1b_exposed, ep_call_seconds, ep_exposed_seconds, grouped_gemm_seconds,
                                     unpaired_share)
from workbench.plan.memory import sharded_params, stage_block_counts, stage_first_layer, stage_layers
from workbench.plan.recompute import RECOMPUTE_LAUNCHES, stage_share
from workbench.plan.model import ModelSpec



def launch_factor(m: ModelSpec, layout: Layout, stack: Stack, stage: int) -> float:
    """Kernels a stage's blocks launch per micro-batch under the layout's recomputation, per kernel
    they launch without it: 1.33 when every block recomputes its whole forward (a third of the
    forward + backward launches runs again), less for a mode that recomputes less."""
    L = stage_layers(m.layers, layout.pp, stage)
    d, e, fd, fe = stage_share(m, layout.recompute, stage_first_layer(m.layers, layout.pp, stage), L,
                               fused_qkv=stack.fused_qkv, flash_attention=stack.flash_attention)
    n_dense, n_moe = stage_block_counts(m, layout.pp, stage)
    again = (n_dense * fd * d.launches + n_moe * fe * e.launches) / max(1, L)
    return 1.0 + RECOMPUTE_LAUNCHES * again
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
        act = ((3 if m.gated else 2) * c * (m.top_k * m.expert_ffn + m.shared_width) / t
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
    # the stage's blocks by kind (dense, mixture of experts): matmuls, their FLOPs, memory-bound bytes,
    # and what the recomputation runs again of each (its share of a block, over the blocks it applies to)
    first = stage_first_layer(m.layers, layout.pp, stage)
    shares = stage_share(m, layout.recompute, first, L, fused_qkv=stack.fused_qkv, flash_attention=stack.flash_attention)
    G = F = MF = MB = 0.0
    imbalance = stack.ep_imbalance if layout.ep > 1 else 1.0
    fp8 = stack.fp8_matmuls and has_fp8(cluster)
    rec = rec_flops = rec_gemm = rec_mem = rec_blocks_attn = 0.0
    nodes = None
    for n_blocks, moe in zip(stage_block_counts(m, layout.pp, stage), (False, True)):
        if not n_blocks:
            continue
        gemm_d = gemm_r = flops_d = flops_r = pre_dispatch = 0.0
        pre_dispatch_done = False
        for rows, n, k, calls_per, routed in block_gemms(m, stack, layout, moe):
            f = 2.0 * rows * M * n * k * calls_per
            router = moe and not routed and n == m.experts and k == m.hidden  # block_gemms' router: kept in BF16
            if fp8 and not router:
                g = fp8_gemm_seconds(rows * M * (imbalance if routed else 1.0), n, k, calls_per, cluster, experts=routed)
            elif routed and eff.expert_gemm:
                g = f / (cluster.gpu.peak_flops(dtype) * eff.expert_gemm) * imbalance
            elif routed:  # the busiest ep rank's grouped GEMM: its experts' rows times the imbalance
                g = grouped_gemm_seconds(rows * M * imbalance, n, k, calls_per, cluster.gpu.peak_flops(dtype))
            else:
                g = gemm_seconds(rows * M, n, k, calls_per, dtype, cluster, eff)
            if routed:
                gemm_r, flops_r = gemm_r + g, flops_r + f
            else:
                gemm_d, flops_d = gemm_d + g, flops_d + f
            if moe and not routed and (router or not pre_dispatch_done):
                pre_dispatch += g  # attention's projections and the router: before the dispatch
            pre_dispatch_done = pre_dispatch_done or router
        mem_f, mem_b = (b * M / (hbm * eff.memory_bound) for b in _layer_memory_bytes(m, stack, layout, s, moe))
        if stack.autocast_weight_copies:  # bf16 copies of the fp32 weights, and the fp32 gradients back
            w = 12 * _block_weights(m, layout, moe) / (hbm * eff.memory_bound)
            mem_f, mem_b = mem_f + w / 2, mem_b + w / 2
        G, F = G + n_blocks * (gemm_d + gemm_r), F + n_blocks * (flops_d + flops_r)
        MF, MB = MF + n_blocks * mem_f, MB + n_blocks * mem_b
        if moe:  # a MoE block's compute before its dispatch and after it (experts, shared experts)
            nodes = (pre_dispatch, gemm_d + gemm_r - pre_dispatch, mem_f, mem_b)
        sh, frac = (shares[1], shares[3]) if moe else (shares[0], shares[2])
        again = n_blocks * frac
        rec_gemm += again * (sh.gemm * gemm_d + sh.routed * gemm_r)
        rec_mem += again * sh.memory * mem_f
        rec_flops += again * (sh.gemm * flops_d + sh.routed * flops_r)
        rec_blocks_attn += again * sh.attention
    if stack.flash_attention:
        attn_flops = m.attention_flops(s) / t * M * 0.5  # causal: flash kernels skip the masked half
        attn_f = attn_flops / (cluster.gpu.peak_flops("fp32" if dtype in ("fp32", "tf32") else dtype) * eff.attention)
        attn_b = 2.5 * attn_f  # backward: five matmuls to forward's two (FlashAttention-2, §3.1)
        attn_hw = 3.5 * attn_flops
    else:
        # unfused: the two batched matmuls QKᵀ and AV over the whole square
        hd, vd, heads = m.d_head, m.d_v, layout.mb * m.heads / t
        attn_f = gemm_seconds(s, s, hd, heads, dtype, cluster, eff) + gemm_seconds(s, vd, s, heads, dtype, cluster, eff)
        attn_b = 2 * attn_f
        attn_hw = 3 * m.attention_flops(s) / t * M
    fwd = G + L * attn_f + MF
    rec = rec_gemm + rec_mem + rec_blocks_attn * attn_f
    rec_flops += rec_blocks_attn * attn_hw / (3.5 if stack.flash_attention else 3)
    out.gemm = 3 * G + rec_gemm  # recompute's kernels are in the totals too (what the GPU runs)
    out.attention = L * (attn_f + attn_b) + rec_blocks_attn * attn_f
    out.memory = MF + MB + rec_mem
    out.recompute = rec
    out.forward = fwd
    out.backward = 2 * G + L * attn_b + MB + rec
    out.hw_flops = 3 * F + L * attn_hw + rec_flops
    c = dtype_bytes(stack.dtype)
    if stage == layout.pp - 1:  # the head and the loss
        V = m.vocab / (t if stack.vocab_parallel else 1)
        head = gemm_seconds(M, V, m.hidden, 1, dtype, cluster, eff)
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
    one = ep_call_seconds(m, layout, stack, cluster, eff.busbw)
    ep_calls = sum(x.calls for x in calls if x.group == "ep") / mbs
    # dispatch and combine wait for the tokens and the experts: on the critical path, unless the stack
    # overlaps them with another micro-batch's kernels: DualPipe hides them up to their time, Megatron-Core's
    # combined 1F1B behind the other micro-batch's node beside each (moe_time.combined_1f1b_exposed)
    if stack.ep_overlap and not stack.ep_overlap_dualpipe and nodes and ep_calls:
        pre, post, mf, mbw = nodes
        n_moe = stage_block_counts(m, layout.pp, stage)[1]
        out.ep = combined_1f1b_exposed(one, ep_calls, n_moe, (pre + attn_f + mf / 2, 2 * pre + attn_b + mbw / 2),
                                       (post + mf / 2, 2 * post + mbw / 2), unpaired_share(layout, stage, mbs), cluster)
    else:
        out.ep = ep_exposed_seconds(ep_calls * one, out.kernels, stack, cluster)
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
    runs = L * (mbs + (p - 1) / v) * launch_factor(m, layout, stack, stage)
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
    every backward when it reduces after each; ZeRO-3's gathers: forward and backward), the SMs the
    hidden part holds from that compute (:func:`workbench.plan.comm.overlap_cost`), plus the last
    call, which nothing follows."""
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
    hidden = min(secs["backward"], window_b) + min(secs["forward"], mb.forward * mbs)
    return exposed + overlap_cost(hidden, cluster) + (min(last, secs["backward"]) if secs["backward"] else 0.0)
