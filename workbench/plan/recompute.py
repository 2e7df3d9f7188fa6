"""Recomputation (activation checkpointing) as the trainers do it: what each mode keeps for
backward, and which forward work it runs again.

``--layout …,recompute=MODE``:

- ``none``: every block keeps what its backward reads.
- ``full``: every block keeps only its input and runs its forward again in backward (torchtitan
  ``--activation_checkpoint.mode full``, Megatron-LM ``--recompute-granularity full``, the engine's
  ``train.recompute = "full"``).
- ``selective``: Korthikanti et al. 2022's selective recomputation, the attention core only
  (Megatron-LM ``--recompute-granularity selective``, the engine's ``train.recompute = "selective"``).
- ``op``: torchtitan's op-level selective recomputation (``--activation_checkpoint.mode selective
  --activation_checkpoint.selective_ac_option op``, its default selective option). Each block runs
  under ``torch.utils.checkpoint`` with a policy (``create_selective_checkpoint_contexts``) that
  saves the outputs of the ops in the model's ``_op_sac_save_list`` — ``aten.mm``, the SDPA kernels,
  ``reduce_scatter_tensor`` (and ``all_to_all_single`` for its MoE models) — except every second
  ``mm`` of the block (its policy counts them: the 1st, 3rd, 5th … are saved), and recomputes the
  rest: norms, activations, rotary embeddings, casts, the routed experts' ``_grouped_mm`` (not on
  the list) and the MoE router's gate (force-recomputed by its default
  ``per_op_sac_force_recompute_mm_shapes_by_fqns``, and not counted). torchtitan v0.2.2,
  ``torchtitan/distributed/activation_checkpoint.py`` and ``config/job_config.py``.
- ``layer:N``: torchtitan's layer-level selective option (``--activation_checkpoint.selective_ac_option
  N``): every N-th block (counted from 1: blocks N, 2N, …) is recomputed whole, the others keep
  everything. ``layer:1`` is ``full``.
- ``hf`` is a name for ``full``: the Hugging Face Trainer's ``--gradient_checkpointing`` (transformers
  5: ``torch.utils.checkpoint`` with ``use_reentrant=False`` around each decoder layer's forward) keeps
  each layer's input and recomputes its forward, which is full recomputation; its
  ``gradient_checkpointing_kwargs={"every_n_layers": N}`` is ``layer:N`` (it checkpoints layers 0, N,
  2N …, torchtitan N−1, 2N−1 …: the same count where N divides the layers).

The line that sets each mode in each trainer is the trainers' registry's
(``workbench.trainers.line(trainer, "recompute", mode)``).

:func:`share` says, for one block, what part of its forward each mode runs again; the activations
each keeps are counted tensor by tensor in :mod:`workbench.plan.activations`.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.format.errors import WorkbenchError

MODES = ("none", "selective", "op", "layer:N", "full")
"""The recomputation modes a layout may name (``layer:N`` with a whole N >= 2; ``hf`` is read as ``full``)."""

RECOMPUTE_LAUNCHES = 0.33
"""Kernels a block launches again per kernel it launches once when its whole forward is recomputed:
the forward is about a third of the forward + backward launches."""


def parse_recompute(text: str) -> str:
    """The canonical name of a recomputation mode (``layer:1`` and ``hf`` are ``full``); WorkbenchError otherwise."""
    t = text.strip().lower()
    if t in ("none", "selective", "op", "full"):
        return t
    if t == "hf":
        return "full"
    if t.startswith("layer:"):
        n = t.split(":", 1)[1]
        if n.isdigit() and 1 <= int(n) <= 100_000:
            return "full" if int(n) == 1 else f"layer:{int(n)}"
    raise WorkbenchError(f"layout: recompute must be one of none, selective, op, layer:N (N >= 1), full (hf: full); "
                         f"got {text!r}")


def layer_every(mode: str) -> int:
    """N of ``layer:N`` (0 for every other mode)."""
    return int(mode.split(":", 1)[1]) if mode.startswith("layer:") else 0


def checkpointed(mode: str, block: int) -> bool:
    """Whether block ``block`` (0-based, over the whole model) recomputes its forward whole: every
    block under ``full``; under ``layer:N`` the N-th, 2N-th … (torchtitan counts blocks from 1)."""
    if mode == "full":
        return True
    n = layer_every(mode)
    return bool(n) and (block + 1) % n == 0


def checkpointed_in(mode: str, first: int, count: int, moe_of=None) -> tuple[int, int]:
    """(dense, mixture-of-experts) blocks among ``first`` … ``first + count − 1`` that recompute whole;
    ``moe_of(i)``: whether block i is a mixture of experts (None: all dense)."""
    dense = moe = 0
    for i in range(first, first + count):
        if checkpointed(mode, i):
            if moe_of is not None and moe_of(i):
                moe += 1
            else:
                dense += 1
    return dense, moe


def block_matmuls(m, fused_qkv: bool, moe: bool) -> list[tuple[str, float, bool]]:
    """(name, output width per token, column-parallel) of every ``aten.mm`` torchtitan's op-level policy
    counts in one block, in the order the model runs them: the attention projections, then the MLP; a
    mixture of experts' shared experts (its router's gate is recomputed and not counted, by the policy's
    default ``per_op_sac_force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]``; its routed experts
    run as ``_grouped_mm``, which is no ``mm``). Column-parallel outputs split over tensor-parallel
    ranks, row-parallel ones do not."""
    h, a, d = m.hidden, m.heads, m.d_head
    if m.latent:
        rope = m.qk_rope_head_dim
        q = [("wq", a * d, True)] if not m.q_lora_rank else [("wq_a", m.q_lora_rank, False), ("wq_b", a * d, True)]
        attn = q + [("wkv_a", m.kv_lora_rank + rope, False), ("wkv_b", a * (d - rope + m.d_v), True)]
    elif fused_qkv:
        attn = [("wqkv", m.qkv_out, True)]
    else:
        attn = [("wq", a * d, True), ("wk", m.kv * d, True), ("wv", m.kv * m.d_v, True)]
    attn.append(("wo", h, False))

    def mlp(f: int) -> list[tuple[str, float, bool]]:
        up = [("w1", f, True), ("w3", f, True)] if m.gated else [("w1", f, True)]
        return up + [("w2", h, False)]
    if not moe:
        return attn + mlp(m.ffn_hidden)
    out = attn
    if m.shared_experts:
        out += mlp(m.shared_width)
    return out


def op_saved_matmuls(m, fused_qkv: bool, moe: bool) -> list[tuple[str, float, bool]]:
    """The matmuls whose outputs torchtitan's op-level policy saves: the 1st, 3rd, 5th … ``mm`` of the block."""
    return block_matmuls(m, fused_qkv, moe)[0::2]


@dataclass(frozen=True, slots=True)
class Share:
    """What part of one block's forward a mode runs again in backward."""

    gemm: float
    """Of the matmuls every token runs (projections, dense MLP, router, shared experts), by FLOPs."""
    routed: float
    """Of the routed experts' matmuls."""
    attention: float
    """Of the attention kernel."""
    memory: float
    """Of the memory-bound kernels (norms, activations, residual adds, casts)."""
    comm: float
    """Of the block's tensor- and expert-parallel collectives."""
    launches: float
    """Of the block's forward kernel launches."""


NONE = Share(gemm=0.0, routed=0.0, attention=0.0, memory=0.0, comm=0.0, launches=0.0)
WHOLE = Share(gemm=1.0, routed=1.0, attention=1.0, memory=1.0, comm=1.0, launches=1.0)


def share(m, mode: str, moe: bool, *, fused_qkv: bool = False, flash_attention: bool = True) -> Share:
    """What part of a block's forward ``mode`` runs again (``layer:N``: of a block it checkpoints;
    :func:`checkpointed` says which)."""
    if mode == "none":
        return NONE
    if mode == "full" or mode.startswith("layer:"):
        return WHOLE
    if mode == "selective":
        # the attention core: with flash attention its kernel; unfused, also the softmax (and dropout)
        return Share(gemm=0.0, routed=0.0, attention=1.0, memory=0.0 if flash_attention else 0.5, comm=0.0,
                     launches=0.0)
    if mode == "op":
        mms = block_matmuls(m, fused_qkv, moe)
        k = {name: i for i, (name, _, _) in enumerate(mms)}
        flops = {name: width * _in_width(m, name) for name, width, _ in mms}
        router = m.hidden * m.experts if moe else 0.0  # recomputed, outside the count
        total = sum(flops.values()) + router
        again = sum(f for name, f in flops.items() if k[name] % 2 == 1) + router
        # every kernel but the saved matmuls and attention runs again (norms, activations, rotary, casts)
        return Share(gemm=again / total if total else 0.0, routed=1.0, attention=0.0, memory=1.0, comm=0.0,
                     launches=0.8)
    raise WorkbenchError(f"unknown recomputation mode {mode!r}")


def _in_width(m, name: str) -> float:
    """The input width of a block's matmul ``name`` (its output width times this is its FLOPs per token / 2)."""
    if name in ("wo",):
        return m.attn_out
    if name == "w2":
        return m.ffn_hidden
    if name == "wq_b":
        return m.q_lora_rank
    if name == "wkv_b":
        return m.kv_lora_rank
    return m.hidden


def stage_share(m, mode: str, first: int, count: int, *, fused_qkv: bool = False,
                flash_attention: bool = True) -> tuple[Share, Share, float, float]:
    """(dense block's share, MoE block's share, fraction of the dense blocks, fraction of the MoE
    blocks it applies to) over blocks ``first`` … ``first + count − 1``: 1.0 for every mode but
    ``layer:N``, whose checkpointed blocks recompute whole and the rest nothing."""
    d = share(m, mode, False, fused_qkv=fused_qkv, flash_attention=flash_attention)
    e = share(m, mode, True, fused_qkv=fused_qkv, flash_attention=flash_attention) if m.moe else NONE
    if not mode.startswith("layer:"):
        return d, e, 1.0, 1.0
    n_moe = m.moe_layers_in(first, count)
    n_dense = count - n_moe
    cd, ce = checkpointed_in(mode, first, count, m.is_moe_layer if m.moe else None)
    return d, e, (cd / n_dense if n_dense else 0.0), (ce / n_moe if n_moe else 0.0)


CANDIDATES = ("none", "selective", "op", "layer:2", "full")
"""The modes a plan tries where the trainer offers them (``layer:N`` at N = 2)."""
DEFAULT_MODES = ("none", "selective", "full")
"""Where the trainer is not known: Megatron-LM's and the engine's modes."""


def modes_for(trainer: str | None, run_mode: str | None = None) -> tuple[str, ...]:
    """The recomputation modes a plan tries for a job of ``trainer`` (a :mod:`workbench.trainers`
    name): those it has a line for; not known, :data:`DEFAULT_MODES` — or torchtitan's where the
    run's own mode is one only torchtitan offers (``op``, ``layer:N``). The run's own mode is always
    among them."""
    from workbench.trainers import get

    t = get(trainer) if trainer else None
    if t is None and run_mode is not None and (run_mode == "op" or run_mode.startswith("layer:")):
        t = get("torchtitan")
    modes = [m for m in CANDIDATES if t.render("recompute", m)] if t is not None else list(DEFAULT_MODES)
    if run_mode and run_mode not in modes:
        modes.append(run_mode)
    return tuple(modes)
