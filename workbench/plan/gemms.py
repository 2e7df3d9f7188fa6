"""The matmuls of a block on one GPU: their shapes under a layout, their FLOPs per call (what a GEMM
calibration has to cover) and one matmul's time at the share of peak its size reaches."""

from __future__ import annotations

from workbench.hardware.systems import Cluster
from workbench.plan.efficiency import Efficiencies
from workbench.plan.layout import Layout, Stack, dtype_bytes
from workbench.plan.memory import stage_block_counts, stage_layers
from workbench.plan.model import ModelSpec
from workbench.plan.recompute import stage_share


def gemm_seconds(M: float, N: float, K: float, batch: float, dtype: str, cluster: Cluster, eff: Efficiencies) -> float:
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
        out += mlp(m.shared_width, t)
    local = m.experts / layout.ep
    return out + mlp(m.expert_ffn, 1, rows=m.top_k / (t * local), calls=local, routed=True)


def routed_gemm_flops(m: ModelSpec, stack: Stack, layout: Layout, global_batch: int) -> float:
    """The routed experts' matmul FLOPs of one optimizer step on one GPU of the first stage, as the
    timing counts them (:func:`block_gemms`' routed rows): forward and the backward's two, and the
    forward again where the run recomputes it: what a run's measured expert-GEMM time calibrates."""
    if not m.experts:
        return 0.0
    n_moe = stage_block_counts(m, layout.pp, 0)[1]
    M = layout.mb * m.seq
    fwd = sum(2.0 * rows * M * n * k * calls for rows, n, k, calls, routed in block_gemms(m, stack, layout, True) if routed)
    _, e, _, frac = stage_share(m, layout.recompute, 0, stage_layers(m.layers, layout.pp, 0), fused_qkv=stack.fused_qkv,
                                flash_attention=stack.flash_attention)
    passes = 3 + e.routed * frac  # forward, backward's two, and what the recomputation runs again
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
