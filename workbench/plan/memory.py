"""Memory per GPU: weights, gradients, optimizer state, activations, the loss, buffers.

Model states follow ZeRO (Rajbhandari et al. 2020): with Ψ parameters on a GPU (its tp shard
of its pipeline stage) and N_d data-parallel ranks, stage 1 shards the optimizer state (and
Megatron's fp32 master copies), stage 2 also the gradients, stage 3 also the weights.

Activations: what each block keeps for its backward under the layout's recomputation, tensor by
tensor (:mod:`workbench.plan.activations`: Korthikanti et al. 2022's count for Megatron-LM, the
same count for other stacks, torchtitan's op-level policy), times the blocks' worth a pipeline
stage holds in flight (Narayanan et al. 2021, §2.2). The peak is the larger of two moments: the start of a
backward (all in-flight activations, the loss, the gradients accumulated so far) and the optimizer
step (gradients and state).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from workbench.plan.activations import in_flight, recompute_working_set, stage_terms
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
    kinds = stage_terms(m, stack, layout, stage_first_layer(m.layers, layout.pp, stage), L, n_dense, n_moe)
    # the stage's blocks in proportion (a mixture of experts holds more per token than a dense block)
    per_layer = sum(n * terms.bytes_per_token(m, m.seq, t) for n, _, _, terms in kinds) / max(1, L) * tokens
    held = in_flight(layout, mbs, stage, L)
    acts = held * per_layer
    split = m.moe or layout.recompute.startswith("layer:")
    formula = " and ".join(terms.formula() + (f" ({n} {'MoE' if moe else 'dense'}{', recomputed' if rc == 'full' and layout.recompute != 'full' else ''})" if split else "")
                           for n, moe, rc, terms in kinds)
    f["activations"] = (f"{formula} per layer (s {m.seq}, b {layout.mb}) × {held:g} layer-micro-batches in "
                        f"flight = {_g(acts)}")
    redo = recompute_working_set(m, stack, layout, kinds) * tokens
    if redo:
        acts += redo  # the block being recomputed in backward: what its mode did not keep, made again
        f["activations"] += f" + one recomputed layer {_g(redo)}"
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
