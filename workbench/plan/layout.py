"""How it is split: the parallel layout, and the training stack that runs it.

A :class:`Layout` is one point of the search: tensor (tp), pipeline (pp, with ``vpp`` virtual
stages per GPU for the interleaved 1F1B schedule of Narayanan et al. 2021, §2.2.2) and data (dp)
parallel degrees, the ZeRO stage over dp (Rajbhandari et al. 2020), the micro-batch, activation
recomputation (Korthikanti et al. 2022, and the trainers' own modes: :mod:`workbench.plan.recompute`),
sequence parallelism and, for a mixture of experts, the expert-parallel degree ``ep``. ``--layout`` spells one:

    parse_layout("tp=8,pp=8,dp=1,zero=1,mb=1,recompute=selective,sp=1,vpp=3")
    parse_layout("tp=1,pp=1,dp=8,ep=8,zero=1")

Expert parallelism follows Megatron-Core's "MoE parallel folding" (Liu et al. 2025) and torchtitan
with expert tensor parallelism 1: the ep group is carved from the dp × tp ranks of a pipeline stage
(ep divides dp · tp; it adds no GPUs), each of its ranks holds experts / ep whole experts (not split
by tp), and the dp · tp / ep ranks that hold the same experts are their data-parallel group (expert
gradients reduced, and ZeRO-sharded, over them). The tokens a tp group shares are split over its
ranks before they are dispatched, as both do (Megatron-Core requires sequence parallelism with
tp > 1 for it; torchtitan splits them).

A :class:`Stack` is what implements it, as far as memory and time care: Megatron-LM (the
papers' runs: fused kernels, fp32 main gradients, no DP overlap in 2021) or torch (the engine,
and torchtitan-like code: DDP / FSDP2 / DTensor, autocast, flash SDPA).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from workbench.format.errors import WorkbenchError
from workbench.plan.recompute import parse_recompute

RECOMPUTE = ("none", "selective", "full")
"""The recomputation modes the search tries by default (Megatron-LM's and the engine's); every mode a
layout may name is in :mod:`workbench.plan.recompute`."""
SCHEDULES = ("1f1b", "gpipe")
EP_DISPATCHERS = ("alltoall", "deepep")
"""Expert dispatch: NCCL's all-to-all, or DeepEP's deduplicating kernels (:mod:`workbench.plan.moe_time`)."""
EP_ROUTINGS = ("random", "contiguous")
"""Which experts a token picks, as far as the ranks it reaches go (:mod:`workbench.plan.moe_time`)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Layout:
    tp: int = 1
    """Tensor-parallel degree (Megatron-LM column/row split of every block)."""
    pp: int = 1
    """Pipeline stages."""
    dp: int = 1
    """Data-parallel replicas (ZeRO shards over them)."""
    zero: int = 0
    """ZeRO stage over dp: 0 none, 1 optimizer state, 2 + gradients, 3 + parameters."""
    mb: int = 1
    """Micro-batch: sequences per forward/backward on one replica."""
    recompute: str = "none"
    """Activation recomputation: none | selective (attention core, Korthikanti et al.) | op (torchtitan's
    op-level policy) | layer:N (every N-th block whole) | full (every block; the Hugging Face Trainer's
    gradient checkpointing); see :mod:`workbench.plan.recompute`."""
    sp: bool = False
    """Sequence parallelism: norms and dropouts split over the tp ranks (needs tp > 1)."""
    vpp: int = 1
    """Virtual pipeline stages per GPU (interleaved 1F1B); 1 = not interleaved."""
    schedule: str = "1f1b"
    """Pipeline schedule: 1f1b | gpipe (vpp > 1 is always interleaved 1F1B)."""
    ep: int = 1
    """Expert-parallel degree (mixture of experts): carved from the dp x tp ranks, it adds no GPUs."""

    def __post_init__(self) -> None:
        if min(self.tp, self.pp, self.dp, self.mb, self.vpp, self.ep) < 1:
            raise WorkbenchError(f"layout {self.key()}: tp, pp, dp, mb, vpp and ep must be >= 1")
        if self.zero not in (0, 1, 2, 3):
            raise WorkbenchError(f"layout {self.key()}: zero must be 0, 1, 2 or 3")
        if parse_recompute(self.recompute) != self.recompute:
            raise WorkbenchError(f"layout: recompute {self.recompute!r} is spelled {parse_recompute(self.recompute)!r}")
        if self.schedule not in SCHEDULES:
            raise WorkbenchError(f"layout: schedule must be 1f1b or gpipe, got {self.schedule!r}")
        if self.sp and self.tp == 1:
            raise WorkbenchError("layout: sp=1 (sequence parallelism) needs tp > 1")
        if self.vpp > 1 and (self.pp == 1 or self.schedule != "1f1b"):
            raise WorkbenchError("layout: vpp > 1 (interleaved schedule) needs pp > 1 and schedule 1f1b")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def edp(self) -> int:
        """Ranks that hold the same experts (their data parallelism): dp · tp / ep."""
        return max(1, self.dp * self.tp // self.ep)

    def microbatches(self, global_batch: int) -> int:
        """Micro-batches per replica and step, m = B / (dp · mb)."""
        return global_batch // (self.dp * self.mb)

    def key(self) -> str:
        """The ``--layout`` spelling (round-trips through :func:`parse_layout`)."""
        s = f"tp={self.tp},pp={self.pp},dp={self.dp},zero={self.zero},mb={self.mb},recompute={self.recompute},sp={int(self.sp)}"
        if self.pp > 1:
            s += f",vpp={self.vpp}" if self.vpp > 1 else f",schedule={self.schedule}"
        if self.ep > 1:
            s += f",ep={self.ep}"
        return s

    def to_json(self) -> dict:
        return asdict(self)


_INT_KEYS = ("tp", "pp", "dp", "zero", "mb", "vpp", "ep")


def parse_layout(text: str) -> Layout:
    """``tp=8,pp=8,dp=1,zero=1,mb=1,recompute=selective,sp=1,vpp=3[,schedule=gpipe,ep=8]``; keys left
    out take their defaults (dp: whatever the GPU count leaves, see :func:`fill_dp`)."""
    from workbench.plan.validate import layout_key

    fields: dict[str, object] = {}
    for item in text.split(","):
        key, sep, value = (p.strip() for p in item.partition("="))
        if not sep:
            raise WorkbenchError(f"--layout: expected KEY=VALUE, got {item!r}")
        if key in fields:
            raise WorkbenchError(f"--layout: {key} is given twice")
        if key in _INT_KEYS:
            fields[key] = layout_key(key, value)
        elif key == "sp":
            low = value.lower()
            if low not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise WorkbenchError(f"--layout: sp must be 0 or 1, got {value!r}")
            fields["sp"] = low in ("1", "true", "yes", "on")
        elif key == "recompute":
            fields[key] = parse_recompute(value)
        elif key == "schedule":
            fields[key] = value.lower()
        else:
            raise WorkbenchError(f"--layout: unknown key {key!r} (tp, pp, dp, zero, mb, recompute, sp, vpp, schedule, ep)")
    fields.setdefault("dp", 0)
    dp = fields.pop("dp")
    layout = Layout(dp=1, **fields)
    return layout if not dp else Layout(**{**asdict(layout), "dp": dp})


def fill_dp(layout: Layout, gpus: int, explicit_dp: bool) -> Layout:
    """The layout with dp = gpus / (tp · pp) when dp was not given; checks the product."""
    if not explicit_dp:
        if gpus % (layout.tp * layout.pp):
            raise WorkbenchError(f"--layout: {gpus} GPUs are not divisible by tp x pp = {layout.tp * layout.pp}")
        layout = Layout(**{**asdict(layout), "dp": gpus // (layout.tp * layout.pp)})
    if layout.gpus != gpus:
        raise WorkbenchError(f"--layout: tp x pp x dp = {layout.gpus}, but --gpus is {gpus}")
    return layout


@dataclass(kw_only=True, slots=True, frozen=True)
class Stack:
    """What the code that runs a layout keeps in memory and how it communicates."""

    name: str
    """megatron | torch."""
    dtype: str = "bf16"
    """Compute dtype of matmuls and activations (bf16, fp16, fp32, tf32 = fp32 tensors, TF32 matmuls)."""
    flash_attention: bool = True
    """Fused attention (FlashAttention / SDPA): no s × s scores in memory or traffic."""
    fused_qkv: bool = True
    """q, k, v are one column-parallel matmul (one input-gradient all-reduce in backward, not three)."""
    dropout: bool = False
    """Dropout after attention and MLP (its masks are activations: Korthikanti's 34 sbh counts them)."""
    fused_kernels: bool = True
    """Fused norm / bias-GELU / bias-dropout-add kernels (Megatron-LM); False: eager PyTorch."""
    vocab_parallel: bool = True
    """Embedding and head split over tp (Megatron-LM); False: replicated (the engine)."""
    weight_bytes: int = 2
    """Bytes per parameter of the stored weights (Megatron-LM: bf16 = 2; torch: the fp32 parameters, 4;
    the bf16 copies autocast or FSDP2 make for the matmuls are counted as buffers)."""
    master_bytes: int = 4
    """fp32 master weights kept beside them (0 when the weights themselves are fp32)."""
    grad_bytes: int = 4
    """Bytes per gradient as kept and reduced (Megatron-LM: fp32 main_grad; torch: fp32 .grad)."""
    optimizer_bytes: int = 8
    """Optimizer state per parameter (AdamW's two fp32 moments; Lion / SGD momentum: 4)."""
    persistent_grads: bool = True
    """Gradients live between steps (Megatron-LM's contiguous buffer); False: freed by zero_grad(set_to_none)."""
    ddp_bucket_copy: bool = False
    """DDP keeps its gradient buckets beside .grad (gradient_as_bucket_view=False, torch's default)."""
    autocast_weight_copies: bool = False
    """torch.autocast casts fp32 weights to bf16 per step and autograd keeps the copies for backward."""
    residual_bytes: int = 2
    """Bytes per element of the residual stream (torch.autocast keeps it fp32: 4)."""
    cast_copies: int = 1
    """Copies of a norm's output saved by the matmuls that read it (autocast casts once per matmul: q, k, v = 3)."""
    attn_out_copy: bool = False
    """The attention output is copied before the output projection (the engine's transpose + reshape)."""
    loss_bytes_per_logit: int = 12
    """Peak bytes per (token, vocab) entry at the loss: fp32 log-softmax output, its gradient and the
    gradient of the logits (torch's cross_entropy on ``logits.float()``)."""
    pp_keeps_outputs: bool = False
    """The last stage keeps every micro-batch's output (torch.distributed.pipelining merges them)."""
    dp_overlap: bool = True
    """Gradient reduction overlaps backward (DDP buckets, FSDP); Megatron-LM 2021 reduced after it."""
    dp_reduce_each_microbatch: bool = False
    """Gradients are reduced after every micro-batch, not once per step (DDP/FSDP2 without no_sync)."""
    zero1_broadcast: bool = False
    """ZeRO-1 sends updated parameters by broadcast from each owner (ZeroRedundancyOptimizer), not all-gather."""
    fsdp_root_unsharded: bool = False
    """FSDP2's root (embeddings, final norm, head) stays gathered from forward to backward."""
    ep_overlap: bool = False
    """Expert-parallel dispatch and combine overlap another micro-batch's compute (DeepSeek's DualPipe,
    Megatron-Core's --overlap-moe-expert-parallel-comm); False: on the critical path (torchtitan, the default)."""
    ep_overlap_dualpipe: bool = False
    """The overlap is DualPipe's (DeepSeek-V3 §3.2.1: forward and backward chunks paired from both ends
    of the pipeline, warm-up included); False: Megatron-Core's combined 1F1B, whose warm-up and
    cool-down micro-batches run unpaired (:func:`workbench.plan.moe_time.unpaired_share`)."""
    ep_dispatcher: str = "alltoall"
    """How tokens reach their experts: alltoall (NCCL's all-to-all, a row per selected expert) | deepep
    (DeepEP / HybridEP: a token once per rank, across nodes once per node); :mod:`workbench.plan.moe_time`."""
    ep_routing: str = "random"
    """Which experts a token picks, for the ranks and nodes it reaches: random (learned or forced-balance
    routing) | contiguous (NeMo AutoModel's fake balanced gate: top_k consecutive experts)."""
    ep_imbalance: float = 1.0
    """The busiest expert-parallel rank's routed rows over the mean (1: balanced)."""
    ep_node_limit: int = 0
    """Node-limited routing: a token's experts lie on at most this many nodes (DeepSeek-V3: 4); 0: no limit."""
    fp8_matmuls: bool = False
    """The blocks' linear layers run their three GEMMs (forward, input and weight gradients) in FP8 with
    fine-grained scaling (DeepSeek-V3 §3.3.1; Transformer Engine's blockwise recipe); the embedding, the
    head, the router, norms and attention stay in ``dtype`` (:mod:`workbench.plan.fp8`)."""

    def __post_init__(self) -> None:
        if self.ep_dispatcher not in EP_DISPATCHERS or self.ep_routing not in EP_ROUTINGS:
            raise WorkbenchError(f"stack: ep_dispatcher must be one of {', '.join(EP_DISPATCHERS)} and ep_routing one "
                                 f"of {', '.join(EP_ROUTINGS)}, got {self.ep_dispatcher!r}, {self.ep_routing!r}")
        if not self.ep_imbalance >= 1.0:
            raise WorkbenchError(f"stack: ep_imbalance is the busiest rank's load over the mean (>= 1), got {self.ep_imbalance}")

    def to_json(self) -> dict:
        return asdict(self)


def dtype_bytes(dtype: str) -> int:
    return 4 if dtype in ("fp32", "tf32") else 2


def megatron_stack(dtype: str = "bf16", *, flash_attention: bool = False, dp_overlap: bool = False) -> Stack:
    """Megatron-LM as the 2021-22 papers ran it: fused kernels, dropout, unfused softmax attention
    (``flash_attention=True`` for newer runs), bf16/fp16 weights with fp32 main gradients and
    master copies (18 bytes per parameter with AdamW: 2 + 4 + 4 + 8)."""
    return Stack(name="megatron", dtype=dtype, flash_attention=flash_attention, dropout=True, dp_overlap=dp_overlap)


def deepspeed_stack(dtype: str = "fp16") -> Stack:
    """DeepSpeed ZeRO as the ZeRO paper counts it (16 bytes per parameter with Adam: fp16 weights
    and gradients, fp32 master and moments), Megatron-LM's kernels, communication overlapped."""
    return replace(megatron_stack(dtype, dp_overlap=True), name="deepspeed", grad_bytes=2)


def torch_stack(dtype: str = "bf16", *, zero: int = 0, autocast: bool | None = None, optimizer_bytes: int = 8,
                reduce_each_microbatch: bool = False, pipeline: bool = False) -> Stack:
    """Plain PyTorch as the engine runs it: fp32 parameters, .grad freed every step, flash SDPA,
    separate q/k/v projections, replicated embedding and head, eager kernels. ZeRO 0/1 is DDP
    (+ ZeroRedundancyOptimizer) under ``torch.autocast`` (fp32 residual stream, bf16 copies of
    weights and of each matmul's input); ZeRO 2/3 is FSDP2 with a bf16 MixedPrecisionPolicy
    (everything bf16 inside the blocks). fp32 (CPU, gloo) casts nothing."""
    low = dtype_bytes(dtype)
    autocast = (zero <= 1 and low == 2) if autocast is None else autocast
    return Stack(name="torch", dtype=dtype, flash_attention=True, fused_qkv=False, dropout=False, fused_kernels=False,
                 vocab_parallel=False, weight_bytes=4, master_bytes=0, grad_bytes=4, optimizer_bytes=optimizer_bytes,
                 persistent_grads=False, ddp_bucket_copy=zero <= 1 and not pipeline, autocast_weight_copies=autocast,
                 residual_bytes=4 if (autocast or low == 4) else 2, cast_copies=3 if autocast else 1,
                 attn_out_copy=True, loss_bytes_per_logit=12, pp_keeps_outputs=True, dp_overlap=True,
                 dp_reduce_each_microbatch=reduce_each_microbatch, zero1_broadcast=True, fsdp_root_unsharded=True)


STACKS = ("megatron", "deepspeed", "torch")


def stack_for(name: str, dtype: str, layout: Layout, *, flash_attention: bool | None = None,
              dp_overlap: bool | None = None, ep_overlap: bool | None = None, moe: dict | None = None) -> Stack:
    """The stack ``name`` as it runs ``layout`` (torch: DDP + autocast for ZeRO 0/1, FSDP2 for 2/3);
    ``ep_overlap``: expert-parallel all-to-alls hidden behind another micro-batch (DualPipe); ``moe``:
    the expert dispatch's fields that differ from the defaults (``ep_dispatcher``, ``ep_routing``,
    ``ep_imbalance``)."""
    if name == "megatron":
        stack = megatron_stack(dtype, flash_attention=bool(flash_attention), dp_overlap=bool(dp_overlap))
    elif name == "deepspeed":
        stack = deepspeed_stack(dtype)
    elif name == "torch":
        stack = torch_stack(dtype, zero=layout.zero, pipeline=layout.pp > 1)
    else:
        raise WorkbenchError(f"--stack must be one of {', '.join(STACKS)}, got {name!r}")
    if moe:
        stack = replace(stack, **moe)
    return replace(stack, ep_overlap=True) if ep_overlap else stack
