"""Time of a mixture of experts' routed part: the experts' grouped GEMMs and the expert-parallel
dispatch and combine, as the stack that runs them moves the tokens.

**Grouped GEMMs.** A rank runs its local experts' matmuls as one grouped GEMM per projection (or a
loop of per-expert matmuls), each expert a matmul of the rows routed to it. Per expert and call the
kernel pays a fixed cost (its tiles' fill and drain, the group's bookkeeping) besides the FLOPs at
a grouped kernel's ceiling: ``t = t0 + flops / (peak · ceiling)``, so narrow experts with few rows
(Qwen3-30B-A3B's 768 wide, 512 rows) run well below a wide one (DeepSeek-V3's 2048 × 7168 at
thousands of rows, near the ceiling). Both constants are fitted on the two grouped-GEMM rates this
repository measured (torchtitan v0.2.2, one H200, ``torch._grouped_mm`` in bf16; BENCHMARKS.md,
"MFU and tokens/s against the trainers' own prints"): 43 % of peak for Qwen3-30B-A3B's experts
(512 rows × 768 × 2048 per expert and call) and 51 % for DeepSeek 16B's (768 × 1408 × 2048).
A run's own measured rate (``--calibrate``: ``efficiencies.expert_gemm``) replaces the model.

**Dispatch and combine.** Every MoE block and micro-batch sends each rank's tokens to the ranks
holding their top_k experts and back (forward; again for the gradients in backward). How many
bytes cross which link depends on the dispatcher and on where the routing sends the tokens:

- ``alltoall`` (NCCL's all-to-all: Megatron-Core's "alltoall" dispatcher, torchtitan): a token is
  sent once per selected expert (top_k rows of h), to a rank on the same node over NVLink, to the
  others over the NIC, concurrently.
- ``deepep`` (DeepEP's normal kernels, github deepseek-ai/DeepEP, and NVIDIA's HybridEP): a token is
  sent once to each *rank* that holds any of its experts (``get_dispatch_layout``'s
  ``is_token_in_rank``) and, across nodes, once to each *node* over RDMA and forwarded inside it over
  NVLink (``num_tokens_per_rdma_rank``). The README's normal kernels reach 43–51 GB/s of a ~50 GB/s
  NIC and 153–158 of ~160 GB/s NVLink (H800): the link's bandwidth at the planner's stated efficiency.

Which experts a token picks decides how many ranks and nodes it reaches (:func:`groups_reached`):
``random`` (learned routing, approximated as uniform; Megatron-Core's
``--moe-router-force-load-balancing`` draws random logits) or ``contiguous`` (NeMo AutoModel's
``FakeBalancedGate``: token i takes experts i·top_k … i·top_k + top_k − 1, so its experts sit on
one or two ranks); DeepSeek-V3's node-limited routing caps the nodes at ``ep_node_limit``.
``ep_imbalance`` is the busiest ep rank's routed rows over the mean (1: balanced, as forced balance
makes it); the busiest rank sets the pace of its experts and of what it receives.
"""

from __future__ import annotations

import math

from workbench.hardware.systems import LINK_LATENCY_S, Cluster
from workbench.plan.comm import overlap_cost
from workbench.plan.layout import Layout, Stack, dtype_bytes
from workbench.plan.model import ModelSpec

GROUPED_GEMM_CEILING = 0.570
"""Share of the dense peak a grouped GEMM's FLOPs reach once an expert's matmul is large (fitted with
:data:`GROUPED_GEMM_OVERHEAD_S` on the two measured rates in the module's docstring)."""
GROUPED_GEMM_OVERHEAD_S = 0.93e-6
"""Fixed time per expert and grouped-GEMM call (seconds)."""

def grouped_gemm_seconds(rows: float, n: float, k: float, experts: float, peak: float) -> float:
    """``experts`` matmuls of ``rows × n × k`` each (one grouped GEMM over a rank's local experts)."""
    flops = 2.0 * rows * n * k
    return experts * (GROUPED_GEMM_OVERHEAD_S + flops / (peak * GROUPED_GEMM_CEILING))


def groups_reached(experts: int, groups: int, top_k: int, routing: str = "random") -> float:
    """Expected number of ``groups`` (ranks or nodes, each holding experts / groups consecutive experts)
    that hold at least one of a token's ``top_k`` experts: random routing, ``groups · (1 − C(E − E/G, k)
    / C(E, k))``; contiguous (expert i·k + j for token i), counted over the starts."""
    if groups <= 1 or experts <= 0 or top_k <= 0:
        return 1.0
    size = experts / groups
    if routing == "contiguous":
        starts = experts // math.gcd(experts, top_k)
        spans = [len({int(((j * top_k + i) % experts) // size) for i in range(top_k)}) for j in range(starts)]
        return sum(spans) / len(spans)
    miss = 1.0
    for i in range(top_k):
        miss *= max(0.0, (experts - size - i) / (experts - i))
    return groups * (1.0 - miss)


def ep_nodes(layout: Layout, cluster: Cluster) -> tuple[int, int]:
    """(ep ranks per node, nodes the ep group spans): its ranks are consecutive (tp fastest)."""
    per_node = max(1, min(layout.ep, cluster.gpus_per_node))
    return per_node, max(1, math.ceil(layout.ep / per_node))


def ep_call_bytes(m: ModelSpec, layout: Layout, stack: Stack, cluster: Cluster) -> tuple[float, float]:
    """(NVLink, network) bytes one rank sends in one dispatch (a combine returns the same) on the
    busiest rank: its tokens (micro-batch × sequence / tp) routed as the stack's dispatcher sends them."""
    tokens = layout.mb * m.seq / layout.tp
    row = m.hidden * dtype_bytes(stack.dtype)
    ep, per_node = layout.ep, ep_nodes(layout, cluster)[0]
    nodes = ep_nodes(layout, cluster)[1]
    routing = stack.ep_routing
    if stack.ep_dispatcher == "deepep":
        # once per node over RDMA (the remote ones), once per rank inside the own node over NVLink
        reached = groups_reached(m.experts, nodes, m.top_k, routing)
        if stack.ep_node_limit:
            reached = min(reached, stack.ep_node_limit)
        remote_nodes = reached * (nodes - 1) / nodes if nodes > 1 else 0.0
        local_ranks = groups_reached(m.experts, ep, m.top_k, routing) * (per_node - 1) / ep
        intra, inter = tokens * row * local_ranks, tokens * row * remote_nodes
    else:
        rows = tokens * m.top_k * row
        intra, inter = rows * (per_node - 1) / ep, rows * (ep - per_node) / ep
    return intra * stack.ep_imbalance, inter * stack.ep_imbalance


def ep_call_seconds(m: ModelSpec, layout: Layout, stack: Stack, cluster: Cluster,
                    busbw: dict[str, float] | None = None) -> float:
    """One dispatch or combine on one rank: its NVLink and network parts at once, the slower sets it."""
    intra, inter = ep_call_bytes(m, layout, stack, cluster)
    bw = {w: (busbw or {}).get(w) or cluster.bus_bytes_per_s(w) for w in ("intra", "inter")}
    link = "inter" if inter else "intra"
    return max(intra / bw["intra"], inter / bw["inter"]) + LINK_LATENCY_S[link]


def unpaired_share(layout: Layout, stage: int, microbatches: int) -> float:
    """Share of a stage's micro-batch chunks that Megatron-Core's combined 1F1B (``--overlap-moe-expert-
    parallel-comm``) runs alone, with no other micro-batch's kernels to hide their dispatch and combine:
    the warm-up forwards and the cool-down backwards. ``schedules.py`` (``get_pp_warmup`` path of the
    interleaved schedule) warms up ``(p − rank − 1)·2 + (v − 1)·p + 1`` of the ``m·v`` chunks (the +1 the
    combined schedule adds so that every 1F1B step pairs independent micro-batches); without a pipeline
    (``combined_1f1b_schedule_for_no_pipelining``) the first forward and the last backward run alone."""
    total = max(1, microbatches * layout.vpp)
    if layout.pp <= 1:
        return min(1.0, 1.0 / total)
    warm = (layout.pp - stage - 1) * 2 + (layout.vpp - 1) * layout.pp + 1
    return min(1.0, warm / total)


def combined_1f1b_exposed(call: float, calls: float, blocks: int, pre: tuple[float, float], post: tuple[float, float],
                          unpaired: float, cluster: Cluster) -> float:
    """Dispatch and combine (``calls`` of ``call`` seconds per micro-batch) left on the critical path by
    Megatron-Core's combined 1F1B, over a stage's ``blocks`` MoE blocks. Its per-layer plan
    (``model_chunk_schedule_plan.py``, ``TransformerLayerSchedulePlan.run``) pairs one micro-batch's
    forward of a layer with another's backward in three windows, communication beside computation:
    the backward's combine beside the forward's pre-dispatch nodes (attention, norm, router: ``pre``
    forward, backward); the forward's dispatch and the backward's dispatch beside the backward's and
    the forward's MLP (``post``: the experts); the forward's combine beside the backward's pre-dispatch.
    A window lasts the longer of the two: what a call's time exceeds of its partner's stays exposed,
    the rest is hidden at :func:`workbench.plan.comm.overlap_cost`. The ``unpaired`` share of micro-
    batches (:func:`unpaired_share`) and calls beyond the four per block (recomputation's) are exposed."""
    windows = ((call, pre[0]), (2 * call, post[1] + post[0]), (call, pre[1]))
    exposed = sum(max(0.0, c - w) for c, w in windows)
    hidden = 4 * call - exposed
    paired = blocks * (1.0 - unpaired)
    rest = max(0.0, calls * call - 4 * call * paired)
    return rest + paired * exposed + overlap_cost(paired * hidden, cluster)


def ep_exposed_seconds(ep: float, kernels: float, stack: Stack, cluster: Cluster, unpaired: float = 0.0) -> float:
    """What a micro-batch's dispatch and combine (``ep`` seconds) add to its ``kernels``: all of it on
    the critical path; with overlap (DualPipe, Megatron-Core's 1F1B A2A overlap) what the other
    micro-batch's kernels do not hide, plus their slowdown on the SMs the communication holds;
    ``unpaired``: the share of micro-batches the schedule runs with no partner (:func:`unpaired_share`;
    0 for DualPipe, whose bidirectional schedule overlaps its warm-up too: V3 report §3.2.1)."""
    if not stack.ep_overlap:
        return ep
    paired = ep * (1.0 - unpaired)
    hidden = min(paired, kernels)
    return ep - hidden + overlap_cost(hidden, cluster)

