"""Expert parallelism: each rank of an ep group keeps moe_experts / ep of every MoE block's routed
experts; tokens travel to their experts' rank and back with ``all_to_all_single``.

The ranks are laid out as an (edp, ep) mesh over the data-parallel ranks, ep innermost (one node's
NVLink on GPUs, as torchtitan places it): rank ``i·ep + j`` holds experts ``j·E/ep … (j+1)·E/ep − 1``,
and the edp ranks that hold the same experts see different data (expert data parallelism).

One MoE forward on a rank (workbench.engine.moe sorts the token copies by expert first):

1. exchange the per-expert counts (an all-to-all of E integers): how many rows each rank sends to
   each of my experts;
2. dispatch: all-to-all of the rows (uneven splits: rows for rank j's experts go to rank j), then
   regroup the received rows by my expert (they arrive grouped by source rank);
3. my experts run on them (one grouped GEMM per weight);
4. combine: the inverse regrouping and the reverse all-to-all bring every output row back to the
   token's rank, in the order it was sent.

The split sizes are read on the host (``.tolist()``: a sync, as in torchtitan's dispatch). The
all-to-all is an autograd function: backward sends the gradients the reverse way.

Gradients: DDP leaves the experts alone (they differ per rank); after backward each expert's
gradient holds the sum over the ep group's tokens, so :func:`sync_expert_grads` all-reduces it over
the edp ranks and divides by dp, which is DDP's mean over all data-parallel ranks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class _AllToAll(torch.autograd.Function):
    """Rows ``x`` split by ``in_splits`` to the group's ranks; ``out_splits`` rows arrive from each."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
        ctx.splits, ctx.group = (out_splits, in_splits), group
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        return back, None, None, None


def _expert_major(counts: torch.Tensor, total: int) -> torch.Tensor:
    """``counts`` (source rank, local expert) of rows laid out source-major → the row order that
    groups them expert-major (expert 0 from every source, then expert 1 …)."""
    flat = counts.reshape(-1)
    starts = (torch.cumsum(flat, 0) - flat).reshape(counts.shape)  # where each (source, expert) block begins
    lengths, begins = counts.t().reshape(-1), starts.t().reshape(-1)  # the blocks in expert-major order
    shift = begins - (torch.cumsum(lengths, 0) - lengths)  # block start in the old order − in the new
    return torch.arange(total, device=counts.device) + torch.repeat_interleave(shift, lengths, output_size=total)


class ExpertParallel:
    """Dispatch → local experts → combine over ``group``."""

    def __init__(self, group: dist.ProcessGroup, experts_total: int) -> None:
        self.group, self.ep = group, dist.get_world_size(group)
        self.local = experts_total // self.ep

    def __call__(self, run_local, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        ep, local = self.ep, self.local
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.group)  # rank j's block: its counts for my experts
        recv_counts = recv_counts.reshape(ep, local)
        send = counts.reshape(ep, local).sum(1).tolist()  # note: a host sync (the split sizes)
        recv = recv_counts.sum(1).tolist()
        rows = _AllToAll.apply(x, recv, send, self.group)
        order = _expert_major(recv_counts, sum(recv))
        out = torch.empty_like(rows)
        # (index_copy's backward is a gather: the gradients travel the same regrouping back)
        out = out.index_copy(0, order, run_local(rows[order], recv_counts.sum(0)).to(rows.dtype))
        return _AllToAll.apply(out, send, recv, self.group)


def apply_ep(model: nn.Module, group: dist.ProcessGroup) -> list[nn.Parameter]:
    """Keep this rank's slice of every MoE block's routed experts and route over ``group``; returns
    the expert parameters (tagged ``expert_group``, which grad norms sum over)."""
    ep, rank = dist.get_world_size(group), dist.get_rank(group)
    params = []
    for block in model.blocks.values():
        moe = getattr(block, "moe", None)
        if moe is None:
            continue
        experts = moe.experts
        local = experts.local_experts // ep
        for name in ("w_gate", "w_up", "w_down"):
            full = getattr(experts, name)
            shard = nn.Parameter(full.detach()[rank * local:(rank + 1) * local].clone())
            shard.expert_group = group
            setattr(experts, name, shard)
            params.append(shard)
        experts.parallel = ExpertParallel(group, moe.experts_total)
    return params


def sync_expert_grads(params: list[nn.Parameter], edp_group: dist.ProcessGroup | None, dp: int) -> None:
    """Expert gradients as DDP would leave them: summed over the ranks holding the same experts
    (``edp_group``; None when there is one) and divided by the data-parallel degree."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])  # one collective, not one per tensor
    if edp_group is not None:
        dist.all_reduce(flat, group=edp_group)
    flat /= dp
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
