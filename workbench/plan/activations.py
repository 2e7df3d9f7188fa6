"""Activations a block keeps for its backward, tensor by tensor, under each recomputation mode, and
how many blocks' worth a pipeline stage holds.

Korthikanti et al. 2022 (§4.1, eq. 1-2) count Megatron-LM's (t-way tensor parallelism, dropout,
unfused softmax attention): ``s·b·h·(10 + 24/t + 5·a·s/(h·t))`` bytes per layer, ``34/t``
everywhere with sequence parallelism; their selective recomputation drops the ``5as/h`` attention
core, full recomputation keeps only each layer's input (``2·s·b·h``). The same count covers other
stacks (:func:`layer_terms`): flash attention saves its output instead of the s × s scores,
torch.autocast keeps the residual stream fp32 and a bf16 copy of each matmul's input, a gated MLP
saves both branches. torchtitan's op-level policy keeps the block's input, every other matmul's
output and the attention kernel's output (:mod:`workbench.plan.recompute`).

Pipeline stages hold several micro-batches' activations (Narayanan et al. 2021, §2.2): GPipe all
m of them, 1F1B p − k on stage k, interleaved 1F1B ``2(p−k−1) + (v−1)p + 1`` model chunks of
L/(pv) layers (Megatron-LM's warm-up count).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.plan.layout import Layout, Stack, dtype_bytes
from workbench.plan.model import ModelSpec
from workbench.plan.recompute import checkpointed_in, op_saved_matmuls


@dataclass(kw_only=True, slots=True)
class ActivationTerms:
    """Bytes per token and layer = ``replicated·h + sharded·h/t + scores·a·s/t + fixed``."""

    replicated: float
    """Coefficient of h: tensors every tensor-parallel rank holds whole (norm inputs, dropout masks)."""
    sharded: float
    """Coefficient of h/t: tensors split over the tp ranks (q, k, v, MLP hidden, …)."""
    scores: float
    """Coefficient of a·s/t: the attention scores and their dropout (0 with flash attention)."""
    fixed: float
    """Bytes per token independent of h (norm statistics, flash attention's log-sum-exp per head)."""

    def bytes_per_token(self, m: ModelSpec, seq: int, tp: int) -> float:
        return (self.replicated * m.hidden + self.sharded * m.hidden / tp + self.scores * m.heads * seq / tp
                + self.fixed)

    def formula(self) -> str:
        parts = [f"{self.replicated:g}" if self.replicated else "", f"{self.sharded:g}/t" if self.sharded else "",
                 f"{self.scores:g}·a·s/(h·t)" if self.scores else ""]
        return "s·b·h·(" + " + ".join(p for p in parts if p) + ")"


def layer_terms(m: ModelSpec, stack: Stack, layout: Layout, recompute: str | None = None,
                moe: bool = False) -> ActivationTerms:
    """The tensors one block saves for its backward, counted one by one (see the module docstring);
    ``moe``: a mixture-of-experts block (its routed rows: tokens × top_k, split over tp with the tokens).
    ``recompute``: the block's mode (``layer:N`` is not one: a block of it is ``full`` or ``none``)."""
    recompute = layout.recompute if recompute is None else recompute
    c, r = dtype_bytes(stack.dtype), stack.residual_bytes
    sp = layout.sp
    rep, shd, scores, fixed = 0.0, 0.0, 0.0, 0.0

    def whole(coef: float) -> None:  # held whole by every tp rank, split with sequence parallelism
        nonlocal rep, shd
        if sp:
            shd += coef
        else:
            rep += coef

    stats = 8.0 if m.norm == "layernorm" else 4.0  # fp32 mean + rstd (RMSNorm: rstd) per token
    if recompute == "full":
        whole(r)  # only the block's input is kept; the rest is recomputed in backward
        return ActivationTerms(replicated=rep, sharded=shd, scores=0.0, fixed=0.0)
    if recompute == "op":
        return _op_terms(m, stack, layout, moe)
    # attention block
    whole(r)                                    # norm 1 input (the residual stream)
    fixed += stats * (1 / layout.tp if sp else 1)
    whole(stack.cast_copies * c)                # q/k/v input: the norm's output as the matmuls saved it
    shd += c * m.qkv_out / m.hidden             # q, k, v (kept by the attention kernel)
    if m.qk_norm:  # a norm over each head's q and k (Qwen3): fp32 under autocast, its input and output saved
        shd += 8.0 * (m.heads + m.kv) * m.d_head / m.hidden
    if stack.flash_attention:
        if recompute != "selective":
            shd += c * m.attn_out / m.hidden    # attention output O, heads x v_head_dim (+ log-sum-exp per head)
            fixed += 4.0 * m.heads / layout.tp
    elif recompute != "selective":
        scores += c + ((1 + c) if stack.dropout else 0)   # softmax output, dropout mask and output
    if stack.attn_out_copy or not stack.flash_attention:
        shd += c * m.attn_out / m.hidden        # the output projection's input
    if stack.dropout:
        whole(1)                                # dropout mask after the projection
    # MLP block
    whole(r)                                    # norm 2 input
    fixed += stats * (1 / layout.tp if sp else 1)
    whole(c)                                    # fc (router, shared experts) input

    def mlp(f: float) -> float:                 # an MLP of width f·h, per token
        return (c * f * (2 if m.gated else 1)   # fc output(s): GELU's input, or SwiGLU's two branches
                + c * f * (1 if (not m.gated or stack.fused_kernels) else 2))  # fc2 input (+ eager SiLU output)
    if not moe:
        shd += mlp(m.ffn_hidden / m.hidden)
    else:
        fe = m.expert_ffn / m.hidden
        fixed += 8.0 * m.experts / layout.tp    # the router's fp32 logits and scores
        # each routed row: the dispatched input, the expert's MLP, its output before the combine
        shd += m.top_k * (2 * c + mlp(fe)) + mlp(m.shared_width / m.hidden)
    if stack.dropout:
        whole(1)
    return ActivationTerms(replicated=rep, sharded=shd, scores=scores, fixed=fixed)


def _op_terms(m: ModelSpec, stack: Stack, layout: Layout, moe: bool) -> ActivationTerms:
    """torchtitan's op-level policy: the block's input (the residual stream, kept by the checkpoint),
    the outputs of every other matmul (column-parallel ones split over tp, row-parallel ones whole:
    the partial sums before their reduction), the attention kernel's output and log-sum-exp, and with
    expert parallelism the dispatch and combine all-to-alls' outputs (on its MoE models' save list)."""
    c, r, h = dtype_bytes(stack.dtype), stack.residual_bytes, m.hidden
    rep = r / layout.tp if layout.sp else r
    shd = 0.0
    for _, width, column in op_saved_matmuls(m, stack.fused_qkv, moe):
        if column:
            shd += c * width / h
        else:
            rep += c * width / h
    shd += c * m.attn_out / h                   # the attention kernel's output
    fixed = 4.0 * m.heads / layout.tp           # and its log-sum-exp (fp32 per head and token)
    if moe and layout.ep > 1:
        shd += 2 * m.top_k * c                  # the routed rows as dispatched and as combined back
    return ActivationTerms(replicated=rep, sharded=shd, scores=0.0, fixed=fixed)


def stage_terms(m: ModelSpec, stack: Stack, layout: Layout, first: int, count: int,
                n_dense: int, n_moe: int) -> list[tuple[int, bool, str, ActivationTerms]]:
    """(blocks, MoE, their mode, what each keeps) for the blocks ``first`` … ``first + count − 1`` of
    a stage (``n_dense`` + ``n_moe`` of them): one entry per kind, or under ``layer:N`` two (the
    blocks it recomputes whole keep their input, the others everything)."""
    mode = layout.recompute
    if not mode.startswith("layer:"):
        return [(n, moe, mode, layer_terms(m, stack, layout, moe=moe))
                for n, moe in ((n_dense, False), (n_moe, True)) if n]
    cd, ce = checkpointed_in(mode, first, count, m.is_moe_layer if m.moe else None)
    out = []
    for n, k, moe in ((n_dense, cd, False), (n_moe, ce, True)):
        if n - k:
            out.append((n - k, moe, "none", layer_terms(m, stack, layout, recompute="none", moe=moe)))
        if k:
            out.append((k, moe, "full", layer_terms(m, stack, layout, recompute="full", moe=moe)))
    return out


def recompute_working_set(m: ModelSpec, stack: Stack, layout: Layout,
                          kinds: list[tuple[int, bool, str, ActivationTerms]]) -> float:
    """Bytes per token a block's recomputation adds while its backward runs: what the block keeps
    without recomputation, less what its mode kept (full, a block of layer:N: all of it; op: the
    tensors it did not save); 0 without recomputation and under Korthikanti's selective (its attention
    core is small beside the block)."""
    best = 0.0
    for _, moe, mode, terms in kinds:
        if mode in ("none", "selective"):
            continue
        none = layer_terms(m, stack, layout, recompute="none", moe=moe).bytes_per_token(m, m.seq, layout.tp)
        kept = terms.bytes_per_token(m, m.seq, layout.tp) if mode == "op" else 0.0
        best = max(best, none - kept)
    return best


def in_flight(layout: Layout, microbatches: int, stage: int, stage_layer_count: int) -> float:
    """Layer-micro-batches of activations stage ``stage`` holds at the start of its first backward."""
    p, v, m = layout.pp, layout.vpp, microbatches
    if p == 1:
        return float(stage_layer_count)
    if layout.schedule == "gpipe":
        return float(m * stage_layer_count)
    if v == 1:
        return float(min(m, p - stage) * stage_layer_count)
    chunks = min(m * v, 2 * (p - stage - 1) + (v - 1) * p + 1)
    return chunks * stage_layer_count / v


def kept_per_token(m: ModelSpec, stack: Stack, layout: Layout, mode: str) -> float:
    """Bytes per token and block, averaged over the model's blocks, that ``mode`` keeps for backward:
    the order in which modes recompute more (less kept) for this model."""
    from dataclasses import replace

    lay = replace(layout, recompute=mode)
    n_moe = m.moe_layers
    kinds = stage_terms(m, stack, lay, 0, m.layers, m.layers - n_moe, n_moe)
    return sum(n * terms.bytes_per_token(m, m.seq, layout.tp) for n, _, _, terms in kinds) / max(1, m.layers)
