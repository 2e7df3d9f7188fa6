"""torchtitan's own gpt-oss model (v0.2.2, ``torchtitan/models/gpt_oss``: attention sinks, sliding-window
layers, 8 KV heads, heads × head_dim ≠ dim, routed experts as grouped GEMMs) trained a few steps on this
CPU, printing torchtitan's own count of its parameters and FLOPs per token (``get_nparams_and_flops``,
what its trainer's MFU divides by) as a ``truth:`` line. Nothing of workbench is imported here.

torchtitan runs gpt-oss's attention as FlexAttention under ``torch.compile``, which has no backward on
the CPU; here the same attention (scaled scores, the causal or sliding-window mask, its log-sum-exp for
the sinks) is written in torch and compiled the same way, so that — as on the GPU — the attention runs
inside a compiled region and no aten attention op shows in the trace; the router's ``histc`` over int64
indices (refused by the CPU's kernel) gets floats, and the experts' token padding runs torchtitan's own
CPU version of its triton kernel. The rest is torchtitan's code.

    bash benchmarks/torchtitan_prepare.sh      # corpus/torchtitan (its v0.2.2 source), once
    PYTHONPATH=$PWD:$PWD/corpus/torchtitan python -m workbench profile --out traces/titan_gpt_oss_cpu --schedule 1,1,2 \
        benchmarks/titan_gpt_oss_cpu.py --steps 5 --seq 128 --vocab 2048 --moe-inter-dim 256

(the debug flavor's 201,088-token vocabulary and 2,880-wide experts made smaller so that a shared
2-core CPU runs it in minutes; heads, head width, KV heads, sinks and windows are the flavor's).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import torch


class _without_triton:
    """torchtitan's MoE module imports triton for a GPU kernel it does not run here; a CPU machine may not
    have triton (and torch.compile's CPU backend must not find one): a stand-in for the import only."""

    def __enter__(self):
        import sys
        import types

        if "triton" in sys.modules or __import__("importlib").util.find_spec("triton"):
            self.names = []
            return self
        import torch._dynamo  # noqa: F401  (torch looks for triton once, at its import: before the stand-in)
        import torch._inductor.compile_fx  # noqa: F401
        import torch.utils._triton  # noqa: F401

        lang = types.ModuleType("triton.language")
        lang.constexpr = int
        tri = types.ModuleType("triton")
        tri.jit = lambda f=None, **k: f if f is not None else (lambda g: g)
        tri.language = lang
        sys.modules.update({"triton": tri, "triton.language": lang})
        self.names = ["triton", "triton.language"]
        return self

    def __exit__(self, *exc):
        import sys

        for n in self.names:
            sys.modules.pop(n, None)


def compiled_attention():
    """q, k, v ``[b, heads, s, d]`` → (output, lse) with GQA, scale and a mask of (q_idx, kv_idx)."""

    def attend(q, k, v, scale, window):
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = q.shape[2]
        i = torch.arange(s, device=q.device)
        mask = i[None, :] <= i[:, None]
        if window:
            mask = mask & (i[:, None] - i[None, :] < window)
        scores = (q.float() @ k.float().transpose(-1, -2)) * scale
        scores = scores.masked_fill(~mask, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        out = torch.softmax(scores, dim=-1).to(v.dtype) @ v
        return out, lse

    return torch.compile(attend, dynamic=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--flavor", default="debugmodel")
    ap.add_argument("--vocab", type=int, default=None, help="the flavor's vocabulary replaced (debugmodel: 201,088)")
    ap.add_argument("--moe-inter-dim", type=int, default=None, help="the flavor's expert width replaced (debugmodel: 2,880)")
    args = ap.parse_args()
    with _without_triton():
        from torchtitan.models import attention as tt_attention
        from torchtitan.models.gpt_oss import gptoss_configs
        from torchtitan.models.gpt_oss.model.model import GptOssModel

    torch.manual_seed(0)
    margs = dataclasses.replace(gptoss_configs[args.flavor], max_seq_len=args.seq)
    if args.vocab:
        margs = dataclasses.replace(margs, vocab_size=args.vocab)
    if args.moe_inter_dim:
        margs = dataclasses.replace(margs, moe_inter_dim=args.moe_inter_dim)
    attend = compiled_attention()
    model = GptOssModel(margs)
    with torch.no_grad():
        model.init_weights()
    model.train()
    # torchtitan's own masks (causal; and causal within the window for every other layer), made once
    masks = model.get_attention_masks(torch.zeros(args.batch, args.seq, dtype=torch.long), None)
    sliding = masks["sliding_window_mask"]

    def forward(self, q, k, v, *, score_mod=None, block_mask=None, scale=None, return_lse=False, enable_gqa=False):
        window = margs.sliding_window_size if block_mask is sliding else 0
        out, lse = attend(q, k, v, scale if scale is not None else q.shape[-1] ** -0.5, window)
        return (out, lse) if return_lse else out

    tt_attention.FlexAttentionWrapper.forward = forward
    # the experts' token padding for the grouped GEMM: torchtitan's own CPU implementation of its triton kernel
    import functools

    from torchtitan.models.moe import utils as moe_utils

    moe_utils.generate_permute_indices = functools.partial(moe_utils.generate_permute_indices, use_cpu=True)
    # the router counts tokens per expert with histc over int64 indices, which the CPU's histc refuses
    histc = torch.histc
    torch.histc = lambda x, *a, **k: histc(x, *a, **k) if x.is_floating_point() else histc(x.float(), *a, **k).to(x.dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    nparams, flops = margs.get_nparams_and_flops(model, args.seq)
    print(f"torchtitan's count: {nparams:,} parameters, {flops:,.0f} FLOPs per token", flush=True)
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        x = torch.randint(0, margs.vocab_size, (args.batch, args.seq))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x, attention_masks=masks)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), x.flatten(0, 1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ms = 1e3 * (time.perf_counter() - t0)
        times.append(ms)
        print(f"step {step + 1}: loss {loss.item():.4f}, time {ms:.1f} ms, tps {args.batch * args.seq / (ms / 1e3):,.0f}",
              flush=True)
    steady = statistics.median(times[2:]) if len(times) > 2 else statistics.median(times)
    truth = {"params_total": sum(p.numel() for p in model.parameters()), "torchtitan_params": nparams,
             "torchtitan_flops_per_token": flops, "layers": margs.n_layers, "hidden": margs.dim,
             "heads": margs.n_heads, "kv_heads": margs.n_kv_heads, "head_dim": margs.head_dim,
             "experts": margs.moe_args.num_experts, "top_k": margs.moe_args.top_k, "moe_ffn": margs.moe_inter_dim,
             "vocab": margs.vocab_size, "seq": args.seq, "micro_batch": args.batch,
             "tokens_per_s": round(args.batch * args.seq / (steady / 1e3), 1)}
    print("truth: " + json.dumps(truth, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
