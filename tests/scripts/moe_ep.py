"""A mixture of experts with expert parallelism, written directly on torch.distributed (no
engine): each rank holds ``experts / world`` routed experts (3-D weights run by
``torch._grouped_mm``); a router (linear, softmax, ``topk``, ``histc``) picks ``top_k`` per token;
the token rows travel to their experts' rank and back by ``all_to_all_single`` (autograd's, so
backward sends the gradients back the same way). Prints its own truth, as benchmarks/hf_train.py:
the shape and the parameters total and active of the whole model (every rank's experts).

    workbench profile --nproc-per-node 2 --schedule 1,1,2 tests/scripts/moe_ep.py

Non-expert weights are replicated and not synchronised (their gradients would be all-reduced by
a real trainer: not what this run is for).
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def a2a(out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
    """all_to_all_single with autograd (backward sends the gradients back the way they came)."""
    import warnings

    from torch.distributed.nn.functional import all_to_all_single
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return all_to_all_single(out, inp, out_splits, in_splits)


class MoE(nn.Module):
    def __init__(self, d: int, ffn: int, experts: int, top_k: int, world: int) -> None:
        super().__init__()
        self.e, self.k, self.world, self.local = experts, top_k, world, experts // world
        self.router = nn.Linear(d, experts, bias=False)
        self.w13 = nn.Parameter(torch.randn(self.local, d, 2 * ffn) * d ** -0.5)
        self.w2 = nn.Parameter(torch.randn(self.local, ffn, d) * ffn ** -0.5)

    def forward(self, x):
        t, d = x.shape
        scores = F.softmax(self.router(x), dim=-1)
        w, idx = scores.topk(self.k, dim=-1)
        counts = torch.histc(idx.flatten().float(), bins=self.e, min=0, max=self.e - 1).long()
        order = idx.flatten().argsort()
        rows = x.repeat_interleave(self.k, dim=0)[order]  # sorted by expert: rank 0's experts first
        send = counts.view(self.world, self.local).sum(1)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)
        per_expert = torch.empty_like(counts)
        dist.all_to_all_single(per_expert, counts)  # [world × local]: rows each rank sends to each of my experts
        got = a2a(torch.empty(int(recv.sum()), d), rows, recv.tolist(), send.tolist())
        # rows arrive grouped by source rank, then by expert: regroup by expert for the grouped GEMM
        mine = per_expert.view(self.world, self.local)
        src_expert = torch.repeat_interleave(torch.arange(self.local).repeat(self.world), mine.flatten())
        back = src_expert.argsort(stable=True)
        offs = torch.cumsum(mine.sum(0), 0).to(torch.int32)
        h = torch._grouped_mm(got[back], self.w13, offs=offs)
        g, u = h.chunk(2, dim=-1)
        y = torch._grouped_mm(F.silu(g) * u, self.w2, offs=offs)
        y = y[back.argsort()]
        out = a2a(torch.empty(len(rows), d), y, send.tolist(), recv.tolist())
        combined = torch.zeros(t * self.k, d).index_copy(0, order, out) * w.flatten()[:, None]
        return combined.view(t, self.k, d).sum(1)


class Block(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int, experts: int, top_k: int, world: int) -> None:
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.n1, self.n2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.moe = MoE(d, ffn, experts, top_k, world)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(a)
        return x + self.moe(self.n2(x).view(b * s, d)).view(b, s, d)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--top-k", type=int, default=2)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    world = dist.get_world_size()
    torch.manual_seed(0)
    V, d, heads, ffn, L, B, S = 512, 64, 4, 96, 2, 2, 64
    emb, head = nn.Embedding(V, d), nn.Linear(d, V, bias=False)
    torch.manual_seed(1 + dist.get_rank())  # each rank its own experts
    blocks = nn.ModuleList(Block(d, heads, ffn, args.experts, args.top_k, world) for _ in range(L))
    params = [*emb.parameters(), *blocks.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3)
    for step in range(args.steps):
        x = torch.randint(0, V, (B, S))
        h = emb(x)
        for blk in blocks:
            h = blk(h)
        loss = F.cross_entropy(head(h).view(-1, V), x.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dist.get_rank() == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    local = sum(p.numel() for p in params)
    routed_local = sum(blk.moe.w13.numel() + blk.moe.w2.numel() for blk in blocks)
    total = local + routed_local * (world - 1)
    routed = routed_local * world
    if dist.get_rank() == 0:
        print("truth: " + json.dumps({"params_total": total, "params_active": total - routed + routed * args.top_k // args.experts,
                                      "experts": args.experts, "top_k": args.top_k, "moe_ffn": ffn, "layers": L, "hidden": d,
                                      "heads": heads, "ep": world}, sort_keys=True), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
