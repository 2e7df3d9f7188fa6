"""A readable GPT (nanoGPT's shape) with SDPA attention, from tiny (CPU tests) to ~370M (GPU).

q, k and v are separate Linear layers (not one fused ``c_attn``) so that a Megatron column split
gives every tensor-parallel rank whole heads of each; attention reshapes with ``-1`` heads, so
the same code runs on a full layer or on its local shard. Embeddings and head may be ``None``
on pipeline stages that do not own them (torchtitan's trick): ``forward`` skips what is absent.
With ``model.moe_experts`` > 0 the blocks after the first ``moe_dense_layers`` have a
mixture-of-experts MLP (``block.moe``, workbench.engine.moe) in place of the dense one (``block.mlp``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from workbench.engine.config import ModelConfig
from workbench.engine.moe import MoE


def _core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash / memory-efficient kernels on GPU


class Attention(nn.Module):
    recompute_core = False
    """Selective recomputation: run the attention core under checkpoint (set by engine.parallel.apply_ac)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.head_dim = cfg.d_model // cfg.n_head
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.k = nn.Linear(cfg.d_model, cfg.d_model)
        self.v = nn.Linear(cfg.d_model, cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        # -1 heads: all of them, or this tensor-parallel rank's share
        q, k, v = (lin(x).view(B, T, -1, self.head_dim).transpose(1, 2) for lin in (self.q, self.k, self.v))
        if self.recompute_core and torch.is_grad_enabled():
            y = checkpoint(_core, q, k, v, use_reentrant=False)
        else:
            y = _core(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, moe: bool = False) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        if moe:
            self.moe = MoE(cfg)
        else:
            self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + (self.moe if hasattr(self, "moe") else self.mlp)(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb: nn.Embedding | None = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos_emb: nn.Embedding | None = nn.Embedding(cfg.seq_len, cfg.d_model)
        # A ModuleDict keyed "0".."L-1" keeps parameter names stable when a pipeline stage drops
        # blocks, so DCP checkpoints of stages line up with the whole model's.
        self.blocks = nn.ModuleDict({str(i): Block(cfg, moe=bool(cfg.moe_experts) and i >= cfg.moe_dense_layers)
                                     for i in range(cfg.n_layer)})
        self.ln_f: nn.LayerNorm | None = nn.LayerNorm(cfg.d_model)
        self.head: nn.Linear | None = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok_emb.weight
        self.apply(self._init)
        # GPT-2: scale the residual projections by 1/sqrt(2L) so the residual stream stays O(1)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> logits (B, T, vocab); a middle pipeline stage maps hidden -> hidden."""
        if self.tok_emb is not None:
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.tok_emb(x) + self.pos_emb(pos)
        for block in self.blocks.values():
            x = block(x)
        if self.head is not None:
            x = self.head(self.ln_f(x))
        return x

    def num_params(self, non_embedding: bool = False, active: bool = False) -> int:
        """Parameters counted once (a tied head is not counted twice); optionally without the
        position embedding, as the PaLM FLOP count's N leaves it out; ``active``: the routed
        experts counted x moe_top_k / moe_experts (those one token uses, torchtitan's convention).
        Counted before expert parallelism shards the experts."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.pos_emb is not None:
            n -= self.pos_emb.weight.numel()
        if active and self.cfg.moe_experts:
            routed = sum(p.numel() for b in self.blocks.values() if hasattr(b, "moe") for p in b.moe.experts.parameters())
            n -= routed - routed * self.cfg.moe_top_k // self.cfg.moe_experts
        return n

    def flops_per_token(self) -> float:
        """Training FLOPs per token, PaLM appendix B: 6N + 12·L·H·Q·T (attention's score matmuls),
        with N the non-embedding parameters a token uses (MoE: active ones), L layers, H heads, Q head
        dim, T sequence length."""
        c = self.cfg
        n = self.num_params(non_embedding=True, active=True)
        return 6 * n + 12 * c.n_layer * c.n_head * (c.d_model // c.n_head) * c.seq_len


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy (fp32 logits for a stable softmax under bf16)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
