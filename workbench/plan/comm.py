"""Collectives one GPU issues per step, and how long each takes.

The volume is what the trace's collective inventory records (``workbench analyze --json``'s
``collectives``): an all-gather's bytes are its (unsharded) output, a reduce-scatter's its input,
an all-reduce's and a broadcast's the tensor, a send/recv the message.

- tensor parallel (Shoeybi et al. 2019, §3): per block and micro-batch two all-reduces of the
  activations (s·b·h) forward and two backward (three for q, k, v as separate matmuls, + one for
  the MLP, when they are not fused); with sequence parallelism (Korthikanti et al. 2022, §4.2.2)
  each becomes an all-gather + reduce-scatter, and backward all-gathers the saved sharded inputs
  again; full recomputation repeats the forward ones. A Megatron-Core MoE block under sequence
  parallelism communicates over tp for attention and its shared experts only (:func:`moe_tp_pairs`).
- pipeline parallel: one activation forward and one gradient backward per micro-batch and stage
  boundary (× vpp with the interleaved schedule), split over the tp ranks by Megatron-LM's
  scatter/gather optimization (Narayanan et al. 2021, §4.1).
- data parallel (ZeRO, Rajbhandari et al. 2020): stage 0 all-reduces the gradients; 1 and 2
  reduce-scatter them and all-gather the parameters (ZeroRedundancyOptimizer: all-reduce +
  broadcast); 3 all-gathers the parameters in forward and again in backward per micro-batch.
  A mixture of experts' routed experts do the same over their own data-parallel group (``edp``:
  the dp · tp / ep ranks that hold the same experts), the rest of the model over dp.
- expert parallel (Lepikhin et al. 2020, GShard; Megatron-Core, torchtitan): per MoE block and
  micro-batch an all-to-all dispatches each rank's tokens × top_k rows of h to the ranks holding
  their experts and a second one combines them back, forward and again (for the gradients)
  backward; full recomputation repeats the forward pair. One call's message is the rank's routed
  rows, (mb · s / tp) · top_k · h · bytes; the ep ranks it spans are on NVLink when they fit in a node.

Time of one call on n ranks (the ring algorithms' bus traffic, NCCL's busbw convention):
all-reduce 2(n−1)/n·bytes/busbw, all-gather, reduce-scatter and all-to-all (n−1)/n·bytes/busbw,
broadcast and send bytes/bw, each plus a start-up latency. A call hidden behind compute is not free:
the compute beside it runs on the SMs it leaves (:func:`overlap_cost`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from workbench.hardware.systems import LINK_LATENCY_S, Cluster
from workbench.plan.layout import Layout, Stack, dtype_bytes
from workbench.plan.memory import _stage_params, stage_block_counts, stage_expert_params, stage_first_layer, stage_layers
from workbench.plan.recompute import stage_share
from workbench.plan.model import ModelSpec

DDP_BUCKET_BYTES = 25 * 2**20
"""DDP's default bucket_cap_mb (25 MiB): gradients are all-reduced in calls of at most this size."""
COMM_SMS = 20
"""SMs a communication kernel holds while it runs beside compute: what DeepSeek-V3's all-to-alls get
("only 20 SMs are sufficient to fully utilize the bandwidths of IB and NVLink", V3 report §3.2.2) and
Megatron-Core's ``moe_deepep_num_sms`` default. Compute beside it runs on the others."""
GPU_SMS = {"H100": 132, "H200": 132, "H800": 132, "A100": 108}
"""Streaming multiprocessors of the SXM parts (NVIDIA's H100 and A100 datasheets); others taken as 132."""


def overlap_cost(hidden_s: float, cluster: Cluster) -> float:
    """What communication hidden behind compute for ``hidden_s`` seconds still costs: that compute runs
    on the SMs the communication leaves it, ``COMM_SMS / (SMs − COMM_SMS)`` slower."""
    name = cluster.gpu.name.upper()
    sms = next((v for k, v in GPU_SMS.items() if k in name), 132)
    return hidden_s * COMM_SMS / (sms - COMM_SMS)


@dataclass(kw_only=True, slots=True, frozen=True)
class Collective:
    op: str
    """all_reduce | all_gather | reduce_scatter | all_to_all | broadcast | send | recv."""
    group: str
    """tp | pp | dp | ep (expert dispatch and combine) | edp (the routed experts' data parallelism)."""
    bytes: float
    """Message size of one call, as the trace records it."""
    calls: float
    """Calls per step on this GPU."""
    ranks: int
    """Group size."""
    link: str
    """intra (NVLink) | inter (network)."""
    when: str
    """forward | backward | recompute | step: where it sits in the step (what it can overlap with)."""

    @property
    def bytes_per_step(self) -> float:
        return self.bytes * self.calls

    def to_json(self) -> dict:
        return {**asdict(self), "bytes_per_step": self.bytes_per_step}


def bus_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def call_seconds(c: Collective, cluster: Cluster, busbw: dict[str, float] | None = None) -> float:
    """One call's time: bus traffic over the link's bus bandwidth, plus latency (calibrated
    bandwidths, ``busbw`` by link, replace the stated ones)."""
    bw = (busbw or {}).get(c.link) or cluster.bus_bytes_per_s(c.link)
    return bus_factor(c.op, c.ranks) * c.bytes / bw + LINK_LATENCY_S[c.link]


def group_link(layout: Layout, group: str, cluster: Cluster) -> str:
    """Ranks ordered tp (fastest), dp, pp (Megatron-LM's order): a group stays on NVLink when the
    span of ranks it covers fits in a node. The ep group is the first ep of a stage's tp x dp ranks."""
    span = {"tp": layout.tp, "dp": layout.tp * layout.dp, "edp": layout.tp * layout.dp, "ep": layout.ep,
            "pp": layout.tp * layout.dp * layout.pp}[group]
    return "intra" if span <= cluster.gpus_per_node else "inter"


def collectives(m: ModelSpec, layout: Layout, stack: Stack, global_batch: int, cluster: Cluster,
                stage: int = 0) -> list[Collective]:
    """Every collective one GPU of pipeline stage ``stage`` issues in one step."""
    out: list[Collective] = []
    c = dtype_bytes(stack.dtype)
    mbs = layout.microbatches(global_batch)
    L = stage_layers(m.layers, layout.pp, stage)
    act = layout.mb * m.seq * m.hidden * c  # one micro-batch's activations, whole
    t = layout.tp
    if t > 1:
        link = group_link(layout, "tp", cluster)
        per_fwd, per_bwd = 2, (2 if stack.fused_qkv else 4)
        n = L * mbs * tp_block_share(m, layout, stack, stage)
        if layout.sp:
            out += [Collective(op="all_gather", group="tp", bytes=act, calls=2 * n, ranks=t, link=link, when="forward"),
                    Collective(op="reduce_scatter", group="tp", bytes=act, calls=2 * n, ranks=t, link=link, when="forward"),
                    Collective(op="all_gather", group="tp", bytes=act, calls=(per_bwd + 2) * n, ranks=t, link=link,
                               when="backward"),
                    Collective(op="reduce_scatter", group="tp", bytes=act, calls=2 * n, ranks=t, link=link, when="backward")]
        else:
            out += [Collective(op="all_reduce", group="tp", bytes=act, calls=per_fwd * n, ranks=t, link=link, when="forward"),
                    Collective(op="all_reduce", group="tp", bytes=act, calls=per_bwd * n, ranks=t, link=link,
                               when="backward")]
        again = _recomputed_blocks(m, layout, stack, stage)
        if again:  # the forward's collectives of the blocks recomputed whole run again
            op = "all_gather" if layout.sp else "all_reduce"
            out.append(Collective(op=op, group="tp", bytes=act, calls=per_fwd * again * mbs, ranks=t, link=link,
                                  when="recompute"))
        if stack.vocab_parallel and stage == 0:
            out.append(Collective(op="all_reduce", group="tp", bytes=act, calls=mbs, ranks=t, link=link, when="forward"))
    if layout.pp > 1:
        link = group_link(layout, "pp", cluster)
        msg = act / (t if stack.vocab_parallel else 1)  # Megatron-LM scatters the message over the tp ranks
        # stage boundaries this GPU sends across per micro-batch and direction: one per model chunk
        # (the first chunk of stage 0 receives nothing, the last chunk of the last stage sends nothing)
        chunks = layout.vpp
        sends_fwd = chunks - (1 if stage == layout.pp - 1 else 0)
        recvs_fwd = chunks - (1 if stage == 0 else 0)
        for op, n_f, n_b in (("send", sends_fwd, recvs_fwd), ("recv", recvs_fwd, sends_fwd)):
            if n_f:
                out.append(Collective(op=op, group="pp", bytes=msg, calls=n_f * mbs, ranks=2, link=link, when="forward"))
            if n_b:
                out.append(Collective(op=op, group="pp", bytes=msg, calls=n_b * mbs, ranks=2, link=link, when="backward"))
    n_moe = stage_block_counts(m, layout.pp, stage)[1]
    if n_moe and layout.ep > 1:
        _, e, _, frac = stage_share(m, layout.recompute, stage_first_layer(m.layers, layout.pp, stage), L,
                                    fused_qkv=stack.fused_qkv, flash_attention=stack.flash_attention)
        out += ep_collectives(m, layout, stack, cluster, n_moe * mbs, again=e.comm * frac)
    psi, psi_blocks = _stage_params(m, layout, stack, stage)
    experts = stage_expert_params(m, layout, stage)
    if layout.dp > 1 or (stack.name == "torch" and stack.ddp_bucket_copy):
        # DDP all-reduces its buckets even at world size 1 (a copy, no traffic: bus factor 0)
        out += _dp_collectives(m, layout, stack, mbs, cluster, stage, psi - experts, psi_blocks - experts, "dp",
                               layout.dp)
    if experts and layout.edp > 1:
        out += _dp_collectives(m, layout, stack, mbs, cluster, stage, experts, experts, "edp", layout.edp)
    return out


def moe_tp_pairs(m: ModelSpec, layout: Layout, stack: Stack) -> float:
    """Tensor-parallel collective pairs of one MoE block per dense block's two (attention, MLP).
    Megatron-Core with sequence parallelism keeps an MoE block's tokens sequence-sharded from its norm
    through router, dispatch, experts and combine: its routed experts are not split over tp
    (``expert_tensor_parallel_size`` 1, the ModelZoo's setting; ``moe_layer.py`` gathers nothing, the
    token dispatcher gathers over the *expert* tp group only), so only attention and the shared experts
    (a tp-split MLP with its own gather and reduce-scatter) communicate over tp."""
    if stack.name != "megatron" or not layout.sp:
        return 2.0
    return 1.0 + (1.0 if m.shared_experts else 0.0)


def tp_block_share(m: ModelSpec, layout: Layout, stack: Stack, stage: int) -> float:
    """The stage's tensor-parallel collectives per block, as a share of a dense block's."""
    n_dense, n_moe = stage_block_counts(m, layout.pp, stage)
    if not n_moe:
        return 1.0
    return (2.0 * n_dense + moe_tp_pairs(m, layout, stack) * n_moe) / (2.0 * (n_dense + n_moe))


def _recomputed_blocks(m: ModelSpec, layout: Layout, stack: Stack, stage: int) -> float:
    """Blocks of ``stage`` whose forward collectives run again under the layout's recomputation (in
    dense blocks' worth of tensor-parallel collectives)."""
    L = stage_layers(m.layers, layout.pp, stage)
    d, e, fd, fe = stage_share(m, layout.recompute, stage_first_layer(m.layers, layout.pp, stage), L,
                               fused_qkv=stack.fused_qkv, flash_attention=stack.flash_attention)
    n_dense, n_moe = stage_block_counts(m, layout.pp, stage)
    return n_dense * fd * d.comm + n_moe * fe * e.comm * moe_tp_pairs(m, layout, stack) / 2.0


def ep_collectives(m: ModelSpec, layout: Layout, stack: Stack, cluster: Cluster, runs: int,
                   again: float = 0.0) -> list[Collective]:
    """The dispatch and combine all-to-alls of ``runs`` MoE block-micro-batches on one GPU; ``again``:
    the share of them the recomputation runs again (full: all; torchtitan's op-level policy saves
    their outputs: none)."""
    link = group_link(layout, "ep", cluster)
    rows = layout.mb * m.seq / layout.tp * m.top_k  # this rank's routed rows (tokens split over tp)
    msg = rows * m.hidden * dtype_bytes(stack.dtype)
    out = [Collective(op="all_to_all", group="ep", bytes=msg, calls=2 * runs, ranks=layout.ep, link=link, when=w)
           for w in ("forward", "backward")]
    if again:
        out.append(Collective(op="all_to_all", group="ep", bytes=msg, calls=2 * runs * again, ranks=layout.ep, link=link,
                              when="recompute"))
    return out


def _dp_collectives(m: ModelSpec, layout: Layout, stack: Stack, mbs: int, cluster: Cluster, stage: int,
                    psi: float, psi_blocks: float, group: str, n: int) -> list[Collective]:
    """Data-parallel collectives of ``psi`` parameters (``psi_blocks`` of them in blocks) over ``n``
    ranks of ``group`` (dp: the dense parameters; edp: the routed experts)."""
    link, z = group_link(layout, group, cluster), layout.zero
    c = dtype_bytes(stack.dtype)
    reduces = mbs if stack.dp_reduce_each_microbatch else 1
    grads = stack.grad_bytes * psi
    out: list[Collective] = []

    def one(op: str, total: float, calls_per: float, when: str, pieces: int = 1) -> None:
        out.append(Collective(op=op, group=group, bytes=total / pieces, calls=calls_per * pieces, ranks=n, link=link,
                              when=when))

    # reductions that overlap backward go in pieces as gradients become ready (DDP's buckets, a
    # layer at a time elsewhere); without overlap, one call over the whole buffer after backward
    L = max(1, stage_layers(m.layers, layout.pp, stage))
    if not stack.dp_overlap:
        pieces = 1
    elif stack.name == "torch":
        pieces = max(1, math.ceil(grads / DDP_BUCKET_BYTES))
    else:
        pieces = L
    if z == 0 or (z == 1 and stack.zero1_broadcast):
        one("all_reduce", grads, reduces, "backward", pieces)
        if z == 1:
            one("broadcast", stack.weight_bytes * psi, 1, "step")
        return out
    one("reduce_scatter", grads, reduces, "backward", pieces)
    if z in (1, 2):
        # parameters gathered once a step: after the update (ZeRO-1/2), or at the first forward (FSDP2)
        torch = stack.name == "torch"
        one("all_gather", (c if torch else stack.weight_bytes) * psi, mbs if torch else 1, "forward" if torch else "step")
        return out
    # ZeRO-3: every block gathered in forward and again in backward, per micro-batch; FSDP2's root
    # (embeddings, final norm, head) once per step
    root = psi - psi_blocks if stack.fsdp_root_unsharded else 0.0
    blocks = psi - root
    one("all_gather", c * blocks, mbs, "forward", L)
    one("all_gather", c * blocks, mbs, "backward", L)
    if root:
        one("all_gather", c * root, 1, "forward")
    return out
