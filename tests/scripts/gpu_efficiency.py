"""One-GPU training step with switchable efficiency problems, each with its fixed twin, to make
real traces for the efficiency rules (workbench/diagnose/rules/, group "efficiency").

    python -m workbench profile --stop-after-profile --no-analyze --out runs/eff_fp32 \
        tests/scripts/gpu_efficiency.py --model gpt --dtype fp32 --tf32 off

Flags (each problem is a habit seen in user code; the other value is its fix):
- ``--model gpt|conv``            a small GPT (d 1024, 8 layers, seq 1024) or a small conv net.
- ``--dtype fp32|bf16``           fp32 weights and activations, or bf16 autocast.
- ``--tf32 on|off``               ``allow_tf32`` for cuBLAS and cuDNN (off: fp32 GEMMs on CUDA cores).
- ``--optimizer forloop|foreach|fused``  AdamW per-parameter loop, multi-tensor, or fused kernel.
- ``--attention sdpa|math|eager`` SDPA (flash/efficient), SDPA forced to its math backend, or
                                  hand-written softmax(QKᵀ)V.
- ``--layout nchw|channels_last`` memory format of the conv net and its input.
- ``--manual-ops``                hand-written LayerNorm and tanh-GELU (many small elementwise
                                  kernels); ``--compile`` fuses them (the twin).
- ``--vocab N``                   an odd vocabulary (50257, GPT-2's) vs a padded one (50304).
- ``--fragment``                  each step allocates many 24 MiB buffers, keeps one in four, then
                                  asks for 40 MiB ones that cannot reuse the holes (as gpu_faults.py).
- ``--hold-gib G``                hold G GiB for the whole run (a dataset cached on the device):
                                  with ``--fragment``, fragmentation near capacity (the twin of the
                                  harmless fragmentation far from it).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class ManualLayerNorm(nn.Module):
    """LayerNorm written out as users do in from-scratch models: ~6 elementwise/reduction kernels."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * self.weight + self.bias


def manual_gelu(x: torch.Tensor) -> torch.Tensor:
    """The tanh GELU of GPT-2's reference code: ~8 elementwise kernels in eager mode."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, attention: str, manual: bool) -> None:
        super().__init__()
        self.heads, self.attention, self.manual = heads, attention, manual
        self.ln1 = ManualLayerNorm(d) if manual else nn.LayerNorm(d)
        self.ln2 = ManualLayerNorm(d) if manual else nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.attention == "eager":
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        elif self.attention == "math":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.MATH):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attend(self.ln1(x))
        h = self.fc(self.ln2(x))
        h = manual_gelu(h) if self.manual else F.gelu(h, approximate="tanh")
        return x + self.out(h)


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int, attention: str, manual: bool) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, attention, manual) for _ in range(layers))
        self.ln = ManualLayerNorm(d) if manual else nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def conv_net() -> nn.Module:
    """A ResNet-stem-like stack of 3×3 conv + BatchNorm + ReLU: cuDNN's NHWC tensor-core kernels
    need layout conversions around every conv when the tensors are NCHW."""
    chans = [3, 64, 64, 128, 128, 256, 256]
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(chans, chans[1:])):
        layers += [nn.Conv2d(a, b, 3, stride=2 if i % 2 == 0 else 1, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1000))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["gpt", "conv"], default="gpt")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--tf32", choices=["on", "off"], default="on")
    p.add_argument("--optimizer", choices=["forloop", "foreach", "fused"], default="fused")
    p.add_argument("--attention", choices=["sdpa", "math", "eager"], default="sdpa")
    p.add_argument("--layout", choices=["nchw", "channels_last"], default="channels_last")
    p.add_argument("--manual-ops", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--fragment", action="store_true")
    p.add_argument("--hold-gib", type=float, default=0.0)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke test of the script itself")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_efficiency.py: needs a CUDA GPU (torch.cuda.is_available() is False)")
    dev = torch.device(args.device)
    torch.manual_seed(0)
    tf32 = args.tf32 == "on"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    seq = args.seq
    if args.model == "gpt":
        model: nn.Module = GPT(args.vocab, args.width, args.layers, 16, seq, args.attention, args.manual_ops).to(dev)
        batch = lambda: torch.randint(0, args.vocab, (args.batch, seq), device=dev)  # noqa: E731
    else:
        model = conv_net().to(dev)
        fmt = torch.channels_last if args.layout == "channels_last" else torch.contiguous_format
        model = model.to(memory_format=fmt)
        batch = lambda: torch.randn(args.batch * 8, 3, 224, 224, device=dev).contiguous(memory_format=fmt)  # noqa: E731
    opt_kw = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[args.optimizer]
    if args.device == "cpu" and args.optimizer != "forloop":
        opt_kw = {}  # CPU smoke test only
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **opt_kw)
    fwd = torch.compile(model) if args.compile else model
    held = torch.empty(int(args.hold_gib * (1 << 30)), dtype=torch.uint8, device=dev) if args.hold_gib else None
    kept: list[torch.Tensor] = []
    t0 = time.perf_counter()
    for step in range(args.steps):
        x = batch()
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            out = fwd(x)
            if args.model == "gpt":
                loss = F.cross_entropy(out.float().view(-1, out.size(-1)), x.view(-1))
            else:
                loss = F.cross_entropy(out.float(), torch.randint(0, 1000, (out.size(0),), device=dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.fragment:
            bufs = [torch.empty(6 << 20, device=dev) for _ in range(128)]  # 128 × 24 MiB
            kept.extend(bufs[::4])
            del bufs
            big = [torch.empty(10 << 20, device=dev) for _ in range(32)]  # 32 × 40 MiB
            del big
            kept = kept[-64:]
        opt.step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    del held
    print(f"gpu_efficiency {vars(args)}: {args.steps} steps in {time.perf_counter() - t0:.1f} s, loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
