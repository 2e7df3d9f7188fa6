"""Memory per GPU: weights, gradients, optimizer state, activations, the loss, buffers.

Model states follow ZeRO (Rajbhandari et al. 2020): with Ψ parameters on a GPU (its tp shard
of its pipeline stage) and N_d data-parallel ranks, stage 1 shards the optimizer state (and
Megatron's fp32 master copies), stage 2 also the gradients, stage 3 also the weights.

Activations per layer and token follow Korthikanti et al. 2022 (§4.1, eq. 1-2): for Megatron-LM
with t-way tensor parallelism, dropout and unfused softmax attention, ``s·b·h·(10 + 24/t +
5·a·s/(h·t))`` bytes per layer, ``34/t`` everywhere with sequence parallelism; selective
recomputation drops the ``5as/h`` attention core, full recomputation keeps only each layer's input
(``2·s·b·h``). The same tensor-by-tensor count covers other stacks (:func:`layer_bytes_per_token`):
flash attention saves its output instead of the s × s scores, torch.autocast keeps the residual
stream fp32 and a bf16 copy of each matmul's input, a gated MLP saves both branches.

Pipeline stages hold several micro-batches' activations (Narayanan et al. 2021, §2.2): GPipe all
m of them, 1F1B p − k on stage k, interleaved 1F1B ``2(p−k−1) + (v−1)p + 1`` model chunks of
L/(pv) layers (Megatron-LM's warm-up count). The peak is the larger of two moments: the start of a
backward (all in-flight activations, the loss, the gradients accumulated so far) and the optimizer
step (gradients and state).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from workbench.plan.layout import Layout, Stack, dtype_bytes
from workbench.plan.model import ModelSpec

GB = 1e9


def _g(b: float) -> str:
    return f"{b / 2**30:.2f} GiB"


def stage_layers(layers: int, pp: int, stage: int) -> int:
    """Blocks of ``stage``: an even split, the first stages taking one more when it does not divide
    (the engine's rule; Megatron-LM requires L divisible by pp)."""
    base, extra = divmod(layers, pp)
    return base + (1 if stage < extra else 0)


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
    ``moe``: a mixture-of-experts block (its routed rows: tokens × top_k, split over tp with the tokens)."""
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
        shd += m.top_k * (2 * c + mlp(fe)) + mlp(m.shared_experts * fe)
    if stack.dropout:
        whole(1)
    return ActivationTerms(replicated=rep, sharded=shd, scores=scores, fixed=fixed)


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


@dataclass(kw_only=True, slots=True)
class MemoryBreakdown:
    """Predicted memory of the GPU whose peak is highest (bytes)."""

    weights: float
    """Stored parameters (tp shard of the stage; / dp under ZeRO-3)."""
    gradients: float
    """Gradients (/ dp under ZeRO-2/3)."""
    optimizer: float
    """Optimizer state and fp32 master weights (/ dp under ZeRO-1+)."""
    activations: float
    """Saved activations of the in-flight micro-batches (+ one layer's working set under full recompute)."""
    loss: float
    """Logits, the loss's fp32 tensors and their gradients on the last stage."""
    buffers: float
    """DDP gradient buckets, bf16 weight copies (autocast), parameters gathered by FSDP/ZeRO."""
    total: float
    """The peak: max(backward start, optimizer step)."""
    transient: float
    """What a step allocates on top of what lives between steps (total − persistent state)."""
    stage: int
    """Pipeline stage of this GPU (the one with the highest peak)."""
    phase: str
    """Which moment is the peak: backward or optimizer."""
    capacity: float
    """Device memory."""
    fits: bool
    """total ≤ FIT_FRACTION × capacity."""
    formulas: dict[str, str] = field(default_factory=dict)
    """Each component's formula with its numbers."""

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("weights", "gradients", "optimizer", "activations", "loss", "buffers", "total", "transient", "capacity"):
            d[f"{k}_gib"] = round(d.pop(k) / (1 << 30), 4)
        return d


def stage_first_layer(layers: int, pp: int, stage: int) -> int:
    """Index of the first block of ``stage`` (the split of :func:`stage_layers`)."""
    return sum(stage_layers(layers, pp, k) for k in range(stage))


def stage_block_counts(m: ModelSpec, pp: int, stage: int) -> tuple[int, int]:
    """(dense blocks, mixture-of-experts blocks) of ``stage``."""
    L = stage_layers(m.layers, pp, stage)
    n_moe = m.moe_layers_in(stage_first_layer(m.layers, pp, stage), L)
    return L - n_moe, n_moe


def stage_expert_params(m: ModelSpec, layout: Layout, stage: int) -> float:
    """Routed-expert parameters on one GPU of ``stage``: its MoE blocks' experts / ep, whole (not split by tp)."""
    if not m.moe:
        return 0.0
    return stage_block_counts(m, layout.pp, stage)[1] * m.routed_params() / layout.ep


def _stage_params(m: ModelSpec, layout: Layout, stack: Stack, stage: int) -> tuple[float, float]:
    """(parameters on one GPU of ``stage``, of which in blocks), routed experts included."""
    t, last = layout.tp, layout.pp - 1
    n_dense, n_moe = stage_block_counts(m, layout.pp, stage)
    whole = 2 * m.norm_params() + (2 * m.hidden if m.bias else 0)  # norms and row-parallel biases stay whole
    blocks = n_dense * ((m.block_params(False) - whole) / t + whole)
    if n_moe:
        whole_moe = 2 * m.norm_params() + m.hidden * m.experts  # the router is replicated over tp
        shared = m.attention_params() + m.moe_dense_params()
        blocks += n_moe * ((shared - whole_moe) / t + whole_moe) + stage_expert_params(m, layout, stage)
    vocab = m.vocab * m.hidden / (t if stack.vocab_parallel else 1)
    p = blocks
    if stage == 0:
        p += vocab + (m.seq * m.hidden if m.learned_pos else 0)
    if stage == last:
        p += m.norm_params() + (vocab if (not m.tied or layout.pp > 1) else 0)
    return p, blocks


def sharded_params(m: ModelSpec, layout: Layout, stack: Stack, stage: int, stage_of: int) -> float:
    """Parameters on one GPU of ``stage`` once ZeRO of ``stage_of`` (1: optimizer state, 2: gradients,
    3: weights) applies at the layout's stage: the dense ones / dp, the routed experts / (dp · tp / ep)."""
    psi, _ = _stage_params(m, layout, stack, stage)
    if layout.zero < stage_of:
        return psi
    experts = stage_expert_params(m, layout, stage)
    return (psi - experts) / layout.dp + experts / layout.edp


def memory(m: ModelSpec, layout: Layout, stack: Stack, global_batch: int, capacity: float,
           fit_fraction: float = 0.95) -> MemoryBreakdown:
    """The peak over the first and the last pipeline stage (the first holds the most activations,
    the last the head and the loss)."""
    stages = sorted({0, layout.pp - 1})
    best = None
    for stage in stages:
        b = memory_of_stage(m, layout, stack, global_batch, stage, capacity, fit_fraction)
        if best is None or b.total > best.total:
            best = b
    return best


def memory_of_stage(m: ModelSpec, layout: Layout, stack: Stack, global_batch: int, stage: int, capacity: float,
                    fit_fraction: float = 0.95) -> MemoryBreakdown:
    """The peak of one GPU of pipeline stage ``stage``."""
    dp, z, t = layout.dp, layout.zero, layout.tp
    c = dtype_bytes(stack.dtype)
    psi, psi_blocks = _stage_params(m, layout, stack, stage)
    experts = stage_expert_params(m, layout, stage)
    # ZeRO shards the dense parameters over dp, the routed experts over the ranks that hold them
    sharded = (psi - experts) / dp + experts / layout.edp
    weights = stack.weight_bytes * (sharded if z >= 3 else psi)
    optimizer = (stack.master_bytes + stack.optimizer_bytes) * (sharded if z >= 1 else psi)
    grads = stack.grad_bytes * (sharded if z >= 2 else psi)
    shard_w = z >= 3 or (z >= 2 and stack.name == "torch")  # FSDP2 shards parameters at ZeRO-2 too
    if shard_w and z == 2:
        weights = stack.weight_bytes * sharded
    div = f" / dp {dp}" + (f" (experts / {layout.edp})" if experts else "")
    f = {
        "weights": f"{stack.weight_bytes} B × Ψ" + (div if shard_w else "") + f" = {_g(weights)}",
        "optimizer": f"{stack.master_bytes + stack.optimizer_bytes} B × Ψ" + (div if z >= 1 else "")
                     + f" = {_g(optimizer)}",
        "gradients": f"{stack.grad_bytes} B × Ψ" + (div if z >= 2 else "") + f" = {_g(grads)}",
        "parameters": f"Ψ = {psi:,.0f} on this GPU (stage {stage}, / tp {t}"
                      + (f"; {experts:,.0f} of them routed experts / ep {layout.ep}" if experts else "") + ")",
    }
    # buffers: persistent DDP buckets; transient bf16 copies and gathered parameters at backward start
    persistent_buf, transient_buf, bf = 0.0, 0.0, []
    if stack.ddp_bucket_copy and dp > 1 or (stack.ddp_bucket_copy and stack.name == "torch"):
        persistent_buf += stack.grad_bytes * psi
        bf.append(f"DDP buckets {stack.grad_bytes} B × Ψ")
    if stack.autocast_weight_copies:
        transient_buf += c * psi
        bf.append(f"autocast copies {c} B × Ψ")
    if z == 2 and stack.name == "torch":
        transient_buf += c * psi  # the all-gather's output: a whole unsharded copy
        bf.append(f"gathered blocks {c} B × Ψ (FSDP2 reshard_after_forward=False)")
    elif z == 3:
        root = psi - psi_blocks if stack.fsdp_root_unsharded else 2 * psi_blocks / max(1, stage_layers(m.layers, layout.pp, stage))
        transient_buf += c * root
        bf.append(f"gathered {'root' if stack.fsdp_root_unsharded else 'two blocks'} {c} B × {root:.4g}")
    f["buffers"] = (" + ".join(bf) + f" = {_g(persistent_buf + transient_buf)}") if bf else "0"
    # activations
    mbs = layout.microbatches(global_batch)
    tokens = layout.mb * m.seq
    L = stage_layers(m.layers, layout.pp, stage)
    n_dense, n_moe = stage_block_counts(m, layout.pp, stage)
    kinds = [(n, moe, layer_terms(m, stack, layout, moe=moe)) for n, moe in ((n_dense, False), (n_moe, True)) if n]
    # the stage's blocks in proportion (a mixture of experts holds more per token than a dense block)
    per_layer = sum(n * terms.bytes_per_token(m, m.seq, t) for n, _, terms in kinds) / max(1, L) * tokens
    held = in_flight(layout, mbs, stage, L)
    acts = held * per_layer
    formula = " and ".join(terms.formula() + (f" ({n} {'MoE' if moe else 'dense'})" if m.moe else "")
                           for n, moe, terms in kinds)
    f["activations"] = (f"{formula} per layer (s {m.seq}, b {layout.mb}) × {held:g} layer-micro-batches in "
                        f"flight = {_g(acts)}")
    if layout.recompute == "full":
        full = max(layer_terms(m, stack, layout, recompute="none", moe=moe).bytes_per_token(m, m.seq, t)
                   for _, moe, _ in kinds) * tokens
        acts += full  # the layer being recomputed in backward
        f["activations"] += " + one recomputed layer"
    loss, kept = 0.0, 0.0
    last = stage == layout.pp - 1
    if last:
        vocab = m.vocab / (t if stack.vocab_parallel else 1)
        mbs_last = 1 if (layout.pp == 1 or layout.schedule == "1f1b") else mbs
        # final norm input and the head's input, per micro-batch held; the loss tensors of one
        # micro-batch at backward, the fp32 log-softmax of the others held (GPipe)
        acts += mbs_last * tokens * (stack.residual_bytes + c) * m.hidden / (t if layout.sp else 1)
        loss = tokens * vocab * (stack.loss_bytes_per_logit + 4 * (mbs_last - 1))
        f["loss"] = f"{stack.loss_bytes_per_logit} B × s·b·V{'/t' if stack.vocab_parallel and t > 1 else ''}"
        if stack.pp_keeps_outputs and layout.pp > 1:
            kept = mbs * tokens * vocab * c  # every micro-batch's logits, merged at the end of step
            f["loss"] += f" + {mbs} micro-batches' logits kept ({c} B × s·b·V)"
    # a block's backward works beside the saved activations: the gradient of its MLP hidden, the
    # weight gradient not yet accumulated, the incoming gradient (the loss tensors are freed by then)
    ffn_t = m.ffn_hidden / t * (2 if m.gated else 1)
    working = tokens * (ffn_t + m.hidden) * c + m.hidden * ffn_t * stack.grad_bytes
    if n_moe:  # the routed rows' hidden gradients; the local experts' weight gradients at once (grouped GEMM)
        rows = m.top_k * m.expert_ffn / t * (2 if m.gated else 1)
        working = max(working, tokens * (rows + m.hidden) * c + m.experts / layout.ep * m.expert_params() * stack.grad_bytes)
    # gradients of earlier micro-batches exist at a backward's start under 1F1B (its steady state
    # holds p − k micro-batches and the gradients so far) and under plain accumulation; GPipe's peak
    # is its first backward, before any
    accumulating = (layout.pp > 1 and layout.schedule == "1f1b") or (layout.pp == 1 and mbs > 1)
    held_grads = grads if (stack.persistent_grads or accumulating) else 0.0
    backward = weights + optimizer + persistent_buf + transient_buf + acts + kept + max(loss, working) + held_grads
    step = weights + optimizer + persistent_buf + grads
    total, phase = (backward, "backward") if backward >= step else (step, "optimizer")
    persistent = weights + optimizer + persistent_buf + (grads if stack.persistent_grads else 0.0)
    if working > loss:
        acts += working
        f["activations"] += f" + a block's backward working set {_g(working)}"
    loss = kept + (loss if loss >= working else 0.0)
    return MemoryBreakdown(weights=weights, gradients=grads, optimizer=optimizer, activations=acts, loss=loss,
                           buffers=persistent_buf + transient_buf, total=total, transient=total - persistent,
                           stage=stage, phase=phase, capacity=capacity, fits=total <= fit_fraction * capacity,
                           formulas=f)
