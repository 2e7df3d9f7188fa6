"""A Llama-shaped trainer that times itself and prints its own MFU, as torchtitan does: the
held-out shape for the model the workbench infers from a trace (GQA, SwiGLU, RMSNorm, an untied
head, FSDP2, activation checkpointing), with nothing of the workbench in it.

Two model sources: ``--impl hf`` builds Hugging Face's ``LlamaForCausalLM`` from a config (its
own ``gradient_checkpointing_enable()`` for ``--ac full``); ``--impl titan`` a torchtitan-style
Llama written here (SDPA with ``enable_gqa``, ``torch.utils.checkpoint`` non-reentrant per block:
``--ac full`` every block, ``--ac selective`` every second one, torchtitan's ``layer`` policy),
``--fsdp`` wraps each block and the root with FSDP2's ``fully_shard`` (bf16 parameters, fp32
reduction), as torchtitan does on any number of GPUs. Prints per optimizer step::

    step 12: loss 10.43, time 812.31 ms, tokens/s 40,338, mfu 41.27%

MFU as torchtitan computes it: 6·(parameters − the token embedding) + 12·L·H·Q·T FLOPs per token
(PaLM appendix B), over the device's bf16 peak (``--peak-tflops``, default the H100/H200 SXM's 989).

    workbench profile --schedule 4,2,2 tests/scripts/llama_trainer.py --impl titan --fsdp --ac full
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-5)


class Block(nn.Module):
    def __init__(self, d: int, heads: int, kv: int, ffn: int) -> None:
        super().__init__()
        self.h, self.kv, self.hd = heads, kv, d // heads
        self.wq = nn.Linear(d, heads * self.hd, bias=False)
        self.wk = nn.Linear(d, kv * self.hd, bias=False)
        self.wv = nn.Linear(d, kv * self.hd, bias=False)
        self.wo = nn.Linear(heads * self.hd, d, bias=False)
        self.w1 = nn.Linear(d, ffn, bias=False)
        self.w3 = nn.Linear(d, ffn, bias=False)
        self.w2 = nn.Linear(ffn, d, bias=False)
        self.attention_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)

    def forward(self, x):
        B, T, _ = x.shape
        h = self.attention_norm(x)
        q = self.wq(h).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, -1))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, kv: int, ffn: int, ac: str) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, heads, kv, ffn) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.output = nn.Linear(d, vocab, bias=False)
        self.ac = ac

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for i, layer in enumerate(self.layers):
            if self.ac == "full" or (self.ac == "selective" and i % 2 == 0):
                x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return self.output(self.norm(x))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=("titan", "hf"), default="titan")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=5632)
    p.add_argument("--ac", choices=("none", "selective", "full"), default="none")
    p.add_argument("--fsdp", action="store_true")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--device", default="cuda", help="cuda, or cpu (fp32, gloo: the shapes without a GPU)")
    a = p.parse_args()
    dev = torch.device(a.device)
    gpu = dev.type == "cuda"
    torch.manual_seed(0)
    if a.impl == "hf":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.dim, num_hidden_layers=a.layers, num_attention_heads=a.heads,
                          num_key_value_heads=a.kv_heads, intermediate_size=a.ffn, max_position_embeddings=a.seq,
                          tie_word_embeddings=False, attn_implementation="sdpa")
        model = LlamaForCausalLM(cfg).to(dev)
        if a.ac == "full":
            model.gradient_checkpointing_enable()
        emb = model.model.embed_tokens.weight.numel()
    else:
        model = Llama(a.vocab, a.dim, a.layers, a.heads, a.kv_heads, a.ffn, a.ac).to(dev)
        emb = model.tok_embeddings.weight.numel()
    n_params = sum(p.numel() for p in model.parameters())
    if a.fsdp:
        import torch.distributed as dist
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if not dist.is_initialized():
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29533")
            dist.init_process_group("nccl" if gpu else "gloo", rank=int(os.environ.get("RANK", 0)),
                                    world_size=int(os.environ.get("WORLD_SIZE", 1)))
        # bf16 parameters on the GPU (torchtitan's default); fp32 on the CPU
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if gpu else None, reduce_dtype=torch.float32)
        for layer in model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=gpu, foreach=None if gpu else True)
    L, H, Q, T = a.layers, a.heads, a.dim // a.heads, a.seq
    flops_per_token = 6 * (n_params - emb) + 12 * L * H * Q * T  # torchtitan's get_nparams_and_flops
    tokens = a.batch * a.seq * a.accum
    print(f"model: {n_params:,} parameters ({n_params - emb:,} without the token embedding), "
          f"{flops_per_token:,} FLOPs per token, {tokens:,} tokens per step", flush=True)
    last = None
    for step in range(a.steps):
        for _ in range(a.accum):
            x = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev)
            with torch.autocast("cuda", torch.bfloat16, enabled=gpu and not a.fsdp):
                logits = model(x[:, :-1])
                if a.impl == "hf":
                    logits = logits.logits
                loss = F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten()) / a.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        v = loss.item()  # a sync: the host's clock is the GPU's
        now = time.perf_counter()
        if last is not None:
            dt = now - last
            mfu = 100 * tokens / dt * flops_per_token / (a.peak_tflops * 1e12)
            print(f"step {step}: loss {v * a.accum:.4f}, time {dt * 1e3:.2f} ms, tokens/s {tokens / dt:,.0f}, mfu {mfu:.2f}%",
                  flush=True)
        last = now


if __name__ == "__main__":
    main()
