"""A small GPT-style model trained by DeepSpeed ZeRO (the config from the command line), for
`workbench profile`: one GPU (or CPU with gloo), torch's AdamW passed in (DeepSpeed's own fused and
CPU Adam compile at run time: ``zero_allow_untested_optimizer``), a synthetic token stream.

    workbench profile --nproc-per-node 1 benchmarks/trainers/ds_zero.py --stage 3 --offload-optimizer
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--stage", type=int, default=3)
    p.add_argument("--offload-optimizer", action="store_true")
    p.add_argument("--offload-param", action="store_true")
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=4096)
    a = p.parse_args()
    import deepspeed

    cuda = torch.cuda.is_available()
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    zero: dict = {"stage": a.stage}
    if a.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": cuda}
    if a.offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": cuda}
    config = {"train_micro_batch_size_per_gpu": a.micro_batch, "gradient_accumulation_steps": a.accum,
              "zero_optimization": zero, "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
              "bf16": {"enabled": a.bf16}, "steps_per_print": 1000}
    torch.manual_seed(0)
    model = GPT(a.vocab, a.d, a.layers, a.heads)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    dev = engine.device
    g = torch.Generator().manual_seed(1)
    for step in range(a.steps):
        for _ in range(a.accum):
            idx = torch.randint(0, a.vocab, (a.micro_batch, a.seq + 1), generator=g).to(dev)
            logits = engine(idx[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), idx[:, 1:].flatten())
            engine.backward(loss)
            engine.step()
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
