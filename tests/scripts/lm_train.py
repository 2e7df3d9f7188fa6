"""A small torchtitan-shaped language model trained on the CPU (tests/capture/test_launch_record.py,
test_fake_step.py, test_launch_live.py): blocks in a ModuleDict, RMSNorm, grouped-query attention
through SDPA, a SwiGLU MLP, an optional tied head, activation checkpointing as torchtitan applies it
(checkpoint_wrapper: full, or op-level with its policy: every other mm and the attention outputs
saved), the loss computed outside the model in float32 as torchtitan does.

Run as a script it trains (python lm_train.py --help); imported, :func:`build` makes the model.

--ac none|full|op      recomputation, as torchtitan's --activation_checkpoint.mode
--tied                 the output head is the token table
--fail-first-forward   the first forward raises a CUDA out-of-memory error (PyTorch 2.x's text, an
                       80 GB H100's figures) from inside the last block, before any optimizer step
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn

OOM_TEXT = ("CUDA out of memory. Tried to allocate 4.64 GiB. GPU 0 has a total capacity of 79.18 GiB of which 2.11 GiB "
            "is free. Including non-PyTorch memory, this process has 77.06 GiB memory in use. Of the allocated memory "
            "76.24 GiB is allocated by PyTorch, and 309.12 MiB is reserved by PyTorch but unallocated. If reserved but "
            "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.wo(a.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, ffn: int) -> None:
        super().__init__()
        self.w1, self.w3 = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attention = Attention(dim, heads, kv_heads)
        self.feed_forward = FeedForward(dim, ffn)
        self.fail = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        h = self.ffn_norm(x)
        if self.fail and type(h).__name__ != "FakeTensor":  # an allocation that fails: a fake tensor allocates nothing
            raise torch.OutOfMemoryError(OOM_TEXT)
        return x + self.feed_forward(h)


class LM(nn.Module):
    def __init__(self, vocab: int = 2048, dim: int = 128, layers: int = 3, heads: int = 4, kv_heads: int = 2,
                 ffn: int = 384, tied: bool = False) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleDict({str(i): Block(dim, heads, kv_heads, ffn) for i in range(layers)})
        self.norm = nn.RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        if tied:
            self.output.weight = self.tok_embeddings.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h))


SAVE = {torch.ops.aten.mm.default, torch.ops.aten.max.default}
for _name in ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_cudnn_attention"):
    if hasattr(torch.ops.aten, _name):
        SAVE.add(getattr(torch.ops.aten, _name).default)


def apply_ac(model: LM, mode: str) -> None:
    """torchtitan's apply_ac (v0.2.2), for ``full`` and op-level ``selective``."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def _get_custom_policy(meta):
        def _custom_policy(ctx, func, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            key = f"{mode}_mm_count"
            if func == torch.ops.aten.mm.default:
                meta[key] += 1
            to_save = func in SAVE and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE
        return _custom_policy

    def selective_checkpointing_context_fn():
        return create_selective_checkpoint_contexts(_get_custom_policy(defaultdict(int)))

    for key, block in list(model.layers.named_children()):
        if mode == "full":
            block = checkpoint_wrapper(block, preserve_rng_state=False)
        elif mode == "op":
            block = checkpoint_wrapper(block, context_fn=selective_checkpointing_context_fn, preserve_rng_state=False)
        model.layers.register_module(key, block)


def build(ac: str = "none", tied: bool = False, **kw) -> LM:
    torch.manual_seed(0)
    model = LM(tied=tied, **kw)
    if ac != "none":
        apply_ac(model, ac)
    return model


def loss_fn(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """torchtitan's cross_entropy_loss: float32 logits."""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ac", choices=["none", "full", "op"], default="none")
    p.add_argument("--tied", action="store_true")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--fail-first-forward", action="store_true")
    args = p.parse_args()
    model = build(args.ac, args.tied)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=False)
    if args.fail_first_forward:
        last = list(model.layers.values())[-1]
        getattr(last, "_checkpoint_wrapped_module", last).fail = True
    for step in range(args.steps):
        tokens = torch.randint(0, 2048, (args.batch, args.seq + 1))
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        opt.zero_grad()
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        opt.step()
        print(f"step {step + 1} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
