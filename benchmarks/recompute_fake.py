"""torchtitan's own models, one training step under ``FakeTensorMode`` on this CPU, with each of its
recomputation modes applied by its own ``apply_ac``: the peak PyTorch's ``MemTracker`` measures
beside what the planner predicts for the same layout (``workbench.plan``: recomputation modes,
``workbench/plan/recompute.py``). Nothing is allocated: shapes only (docs: NOTES-style facts in
BENCHMARKS.md, "Recomputation modes").

    bash benchmarks/torchtitan_prepare.sh            # corpus/torchtitan (its v0.2.2 source), once
    PYTHONPATH=$PWD:$PWD/corpus/torchtitan python -m benchmarks.recompute_fake [CASE…]

A case is ``family:flavor:seq:batch[:layers]`` (``llama3:3B:8192:1`` …; the default list below):
the flavor's published shape, optionally fewer layers. One step: the model built under the fake mode
on the CPU (``torch.set_default_dtype`` fp32 weights), torchtitan's ``apply_ac`` with the mode, bf16
autocast, the loss (a float cross-entropy over the vocabulary, as torchtitan's), backward and AdamW,
tracked by ``torch.distributed._tools.mem_tracker.MemTracker`` from a second step (the optimizer's
states exist).

The CPU's own fused attention op (``_scaled_dot_product_flash_attention_for_cpu``) stands in for the
GPU's: it is added to torchtitan's save list, which names the CUDA kernels only (on the GPU those are
saved). The CPU has no cuBLAS workspace nor caching allocator: the peak is the allocated floor.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

CASES = ("llama3:3B:8192:1", "llama3:8B:8192:1:8", "qwen3:1.7B:4096:4", "qwen3:30B-A3B:4096:2:6",
         "deepseek_v3:16B:4096:2:6", "deepseek_v3:debugmodel:2048:8", "qwen3:debugmodel_moe:2048:8")
MODES = ("none", "op", "2", "full")
EXTRA_FLAVORS = {  # what benchmarks/torchtitan_prepare.sh adds to llama3 (Llama 3.2 3B)
    ("llama3", "3B"): dict(dim=3072, n_layers=28, n_heads=24, n_kv_heads=8, ffn_dim_multiplier=1.0, multiple_of=256,
                           rope_theta=500000),
}


def model_args(family: str, flavor: str, seq: int, layers: int | None):
    import importlib

    mod = importlib.import_module(f"torchtitan.models.{family}")
    table = next(v for k, v in vars(mod).items() if k.endswith("_args") and isinstance(v, dict))
    if (family, flavor) in EXTRA_FLAVORS and flavor not in table:
        base = next(iter(table.values()))
        args = type(base)(**EXTRA_FLAVORS[(family, flavor)])
    else:
        args = table[flavor]
    changes = {"max_seq_len": seq}
    if layers:
        changes["n_layers"] = layers
    for name in ("attn_type", "use_flex_attn"):  # SDPA, causal (flex attention compiles on first use)
        if hasattr(args, name):
            changes[name] = "sdpa" if name == "attn_type" else False
    if hasattr(args, "attn_mask_type"):
        changes["attn_mask_type"] = "causal"
    return dataclasses.replace(args, **{k: v for k, v in changes.items() if hasattr(args, k)}), mod


def measure(family: str, flavor: str, seq: int, batch: int, layers: int | None, mode: str) -> dict:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from torchtitan.config.job_config import ActivationCheckpoint
    from torchtitan.distributed.activation_checkpoint import apply_ac

    args, mod = model_args(family, flavor, seq, layers)
    parallelize = __import__(f"torchtitan.models.{family}.infra.parallelize", fromlist=["_op_sac_save_list"])
    save = set(getattr(parallelize, "_op_sac_save_list", set()))
    save.add(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default)
    model_cls = next(v for k, v in vars(mod).items() if isinstance(v, type) and issubclass(v, torch.nn.Module)
                     and k in ("Transformer", "Qwen3Model", "DeepSeekV3Model", "GptOssModel"))
    t0 = time.perf_counter()
    with FakeTensorMode():
        torch.set_default_dtype(torch.float32)
        model = model_cls(args)
        if mode != "none":
            ac = ActivationCheckpoint(mode="full" if mode == "full" else "selective",
                                      selective_ac_option=mode if mode not in ("full",) else "2")
            apply_ac(model, ac, op_sac_save_list=save)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        tokens = torch.randint(0, args.vocab_size, (batch, seq))
        labels = torch.randint(0, args.vocab_size, (batch, seq))

        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(tokens)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()  # the optimizer's states
        mt = MemTracker()
        mt.track_external(model, opt)
        with mt:
            step()
        peak = max(mt.get_tracker_snapshot("peak").get(torch.device("cpu"), {}).get("Total", 0), 0)
    n = sum(p.numel() for p in model.parameters())
    return {"peak_gib": peak / 2**30, "params": n, "seconds": time.perf_counter() - t0, "args": args}


def planned(family: str, args, seq: int, batch: int, mode: str) -> float:
    """The planner's peak for the same model and layout (one GPU, no DDP, autocast over fp32 weights, AdamW)."""
    from dataclasses import replace

    from workbench.plan.layout import Layout, torch_stack
    from workbench.plan.memory import memory
    from workbench.plan.model import parse_model

    a = args
    h, L, V, heads = a.dim, a.n_layers, a.vocab_size, a.n_heads
    keys = dict(L=L, h=h, a=heads, V=V, s=seq, gated=1, norm="rms", bias=0, pos=0)
    kv = getattr(a, "n_kv_heads", None)
    if kv:
        keys["kv"] = kv
    if getattr(a, "head_dim", None):
        keys["hd"] = a.head_dim
    if getattr(a, "qk_norm", False):
        keys["qknorm"] = 1
    if getattr(a, "enable_weight_tying", False):
        keys["tied"] = 1
    if family == "llama3":
        hidden = int(2 * 4 * h / 3)
        if a.ffn_dim_multiplier is not None:
            hidden = int(a.ffn_dim_multiplier * hidden)
        keys["ffn"] = a.multiple_of * ((hidden + a.multiple_of - 1) // a.multiple_of)
    elif getattr(a, "hidden_dim", None):
        keys["ffn"] = a.hidden_dim
    if family == "deepseek_v3":
        keys.update(ffn=a.inter_dim, kv_lora=a.kv_lora_rank, rope_hd=a.qk_rope_head_dim,
                    hd=a.qk_nope_head_dim + a.qk_rope_head_dim, vhd=a.v_head_dim, dense_layers=a.n_dense_layers)
        keys.pop("kv", None)
        if a.q_lora_rank:
            keys["q_lora"] = a.q_lora_rank
    moe = getattr(a, "moe_args", None)
    if moe is not None and (getattr(a, "moe_enabled", True)) and moe.num_experts > 1:
        keys.update(experts=moe.num_experts, top_k=moe.top_k, shared=moe.num_shared_experts,
                    moe_ffn=getattr(a, "moe_inter_dim", None) or getattr(a, "moe_hidden_dim", None) or keys.get("ffn"))
    m = parse_model(",".join(f"{k}={v}" for k, v in keys.items()))
    stack = replace(torch_stack("bf16"), ddp_bucket_copy=False)
    rc = {"2": "layer:2"}.get(mode, mode)
    return memory(m, Layout(mb=batch, recompute=rc), stack, batch, 1e15).total / 2**30


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: python -m benchmarks.recompute_fake llama3:3B:8192:1")
    ap.add_argument("cases", nargs="*", default=list(CASES))
    ap.add_argument("--modes", default=",".join(MODES), help="none,op,2,full (2: every second block)")
    a = ap.parse_args(argv)
    print("| model | seq x batch | mode | measured (fake, CPU) GiB | planner GiB | error |")
    print("|---|---|---|---:|---:|---:|")
    for case in a.cases:
        parts = case.split(":")
        family, flavor, seq, batch = parts[0], parts[1], int(parts[2]), int(parts[3])
        layers = int(parts[4]) if len(parts) > 4 else None
        for mode in a.modes.split(","):
            try:
                r = measure(family, flavor, seq, batch, layers, mode)
                p = planned(family, r["args"], seq, batch, mode)
            except Exception as e:  # a model whose code cannot run under the fake mode says so
                print(f"| {case} | {seq} x {batch} | {mode} | – | – | {type(e).__name__}: {str(e)[:80]} |", flush=True)
                continue
            print(f"| {family} {flavor}{f' x {layers} layers' if layers else ''} ({r['params'] / 1e9:.2f}B) | {seq} x {batch} | "
                  f"{mode} | {r['peak_gib']:.2f} | {p:.2f} | {100 * (p / r['peak_gib'] - 1):+.1f} % |", flush=True)
            print(f"  {case} {mode}: {r['seconds']:.1f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
