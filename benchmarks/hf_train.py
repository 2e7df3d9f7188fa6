"""A small training loop over a Hugging Face transformers model built from a config (no download),
that prints its own truth: the model's shape, its parameters total and active counted from the
model object by torchtitan's rule, the model FLOPs per token by the convention, and tokens/s by
its own timer. The held-out truth for the model workbench infers from a trace
(``python -m benchmarks.model_inference``); nothing of workbench is imported here.

Families (``--family``), each a small config of a public model family:

- ``qwen3_moe``: routed experts only (8, top-2), GQA, decoupled head_dim; ``--experts-impl eager``
  runs the experts as a loop of per-expert ``linear`` calls instead of ``_grouped_mm``
- ``mixtral``: top-2 of 8 experts, expert width = intermediate_size
- ``deepseek_v3``: latent attention (MLA, q and kv LoRA ranks, v_head_dim ≠ qk head dim), one
  shared expert, a dense first layer (``first_k_dense_replace``), group-limited routing
- ``olmoe``: top-2 of 8, no shared experts, full-width q/k norms
- ``gpt_oss``: top-2 of 8 experts with biases, eager matmul attention with sinks (transformers has
  no SDPA path for it), sliding-window layers alternating with full ones
- ``qwen3``: dense, heads × head_dim ≠ hidden, tied embeddings, SwiGLU width 3.8 × hidden (as
  Qwen3-4B's 9728 / 2560)
- ``qwen2_moe``: one shared expert 4 × an expert's width behind its own sigmoid gate (Qwen1.5-MoE-A2.7B's
  5632 / 1408), q/k/v with biases, 16 heads and 8 KV heads

Active parameters (torchtitan's ``get_moe_model_nparams_and_flops``): dense + router + shared
experts + routed experts × top_k // experts. FLOPs per token (the convention workbench's headline
MFU uses): 6 · (active − input embedding tables; a tied table counts once, as the output head)
+ 6 · L · heads · (qk head dim + v head dim) · seq. Needs transformers (5.x):

    workbench profile --schedule 1,1,2 benchmarks/hf_train.py --family qwen3_moe --steps 8

On a GPU (``bash benchmarks/gpu_moe.sh OUT``): ``--device cuda --bf16 --width 8 --layers 8 --vocab
32000 --seq 1024 --batch 4 --peak-tflops 989`` scales every width by 8 and prints its own MFU per
step (the FLOPs per token above × its tokens/s / the peak), as torchtitan does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

BASE = dict(vocab_size=2048, hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
            max_position_embeddings=512, tie_word_embeddings=False)
WIDTHS = ("hidden_size", "intermediate_size", "moe_intermediate_size", "head_dim", "q_lora_rank", "kv_lora_rank",
          "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
"""Config keys ``--width`` multiplies (heads and experts stay)."""


def config(family: str, width: int = 1, layers: int | None = None, vocab: int | None = None, seq: int = 128):
    cfg = _config(family)
    for k in WIDTHS:
        if getattr(cfg, k, None):
            setattr(cfg, k, getattr(cfg, k) * width)
    if layers:
        cfg.num_hidden_layers = layers
    if vocab:
        cfg.vocab_size = vocab
    cfg.max_position_embeddings = max(cfg.max_position_embeddings, seq)
    return cfg


def _config(family: str):
    from transformers import AutoConfig

    if family == "qwen3_moe":
        return AutoConfig.for_model("qwen3_moe", intermediate_size=512, num_experts=8, num_experts_per_tok=2,
                                    moe_intermediate_size=128, head_dim=64, decoder_sparse_step=1, mlp_only_layers=[],
                                    **BASE)
    if family == "mixtral":
        return AutoConfig.for_model("mixtral", intermediate_size=384, num_local_experts=8, num_experts_per_tok=2, **BASE)
    if family == "deepseek_v3":
        return AutoConfig.for_model("deepseek_v3", intermediate_size=512, n_routed_experts=8, num_experts_per_tok=3,
                                    n_shared_experts=1, moe_intermediate_size=128, first_k_dense_replace=1,
                                    q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32,
                                    v_head_dim=24, n_group=2, topk_group=1, **{**BASE, "num_key_value_heads": 8})
    if family == "olmoe":
        return AutoConfig.for_model("olmoe", intermediate_size=160, num_experts=8, num_experts_per_tok=2, **BASE)
    if family == "gpt_oss":
        return AutoConfig.for_model("gpt_oss", intermediate_size=128, num_local_experts=8, num_experts_per_tok=2,
                                    head_dim=64, sliding_window=64, **BASE)
    if family == "qwen2_moe":
        return AutoConfig.for_model("qwen2_moe", intermediate_size=512, num_experts=8, num_experts_per_tok=2,
                                    moe_intermediate_size=128, shared_expert_intermediate_size=512, decoder_sparse_step=1,
                                    mlp_only_layers=[], **{**BASE, "num_attention_heads": 16, "num_key_value_heads": 8})
    if family == "qwen3":
        return AutoConfig.for_model("qwen3", intermediate_size=1216, head_dim=64,
                                    **{**BASE, "hidden_size": 320, "tie_word_embeddings": True})
    raise SystemExit(f"unknown family {family!r}")


def truth(model, cfg, seq: int, batch: int) -> dict:
    """The model's fields and counts, from the model object and its config."""
    params = {id(p): p for p in model.parameters()}
    total = sum(p.numel() for p in params.values())
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    tied = emb is head
    routed = shared = router = 0
    seen = set()
    for name, mod in model.named_modules():
        kind = ("routed" if type(mod).__name__.endswith("Experts") else
                "shared" if name.rsplit(".", 1)[-1].startswith("shared_expert") else
                "router" if name.endswith("mlp.gate") and "Router" in type(mod).__name__ else None)
        if kind is None:
            continue
        n = sum(p.numel() for p in mod.parameters() if id(p) not in seen)
        seen.update(id(p) for p in mod.parameters())
        if kind == "routed":
            routed += n
        elif kind == "shared":
            shared += n
        else:
            router += n
    experts = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None) or getattr(cfg, "n_routed_experts", None)
    top_k = getattr(cfg, "num_experts_per_tok", None)
    active = total - routed + (routed * top_k // experts if routed else 0)
    emb_params = 0 if tied else emb.numel()  # a tied table counts once, as the output head
    L, heads = cfg.num_hidden_layers, cfg.num_attention_heads
    qk = getattr(cfg, "qk_nope_head_dim", 0) + getattr(cfg, "qk_rope_head_dim", 0) if hasattr(cfg, "kv_lora_rank") else None
    head_dim = qk or getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    v_head_dim = getattr(cfg, "v_head_dim", None) or head_dim
    out = {"params_total": total, "params_active": active, "params_embedding": emb_params,
           "model_flops_per_token": 6 * (active - emb_params) + 6 * L * heads * (head_dim + v_head_dim) * seq,
           "layers": L, "hidden": cfg.hidden_size, "heads": heads, "kv_heads": cfg.num_key_value_heads,
           "head_dim": head_dim, "vocab": cfg.vocab_size, "tied": tied, "seq": seq, "micro_batch": batch,
           "attention": "MLA" if qk else "MHA" if cfg.num_key_value_heads == heads else
           "MQA" if cfg.num_key_value_heads == 1 else "GQA"}
    if qk:
        out.update(v_head_dim=v_head_dim, kv_lora_rank=cfg.kv_lora_rank, kv_heads=heads)
        if cfg.q_lora_rank:
            out["q_lora_rank"] = cfg.q_lora_rank
    if routed:
        moe_ffn = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
        dense = getattr(cfg, "first_k_dense_replace", 0) or 0
        # DeepSeek: n_shared_experts of the expert width (fused into one MLP); Qwen2-MoE: one shared expert of
        # its own width (shared_expert_intermediate_size), behind a sigmoid gate
        shared_w = getattr(cfg, "shared_expert_intermediate_size", None)
        n_shared = getattr(cfg, "n_shared_experts", None) or (1 if shared_w else 0)
        out.update(experts=experts, top_k=top_k, shared_experts=n_shared, moe_ffn=moe_ffn, moe_layers=L - dense,
                   dense_layers=dense)
        if n_shared:
            out["shared_ffn"] = shared_w or moe_ffn
        if dense:
            out["ffn"] = cfg.intermediate_size
    else:
        out["ffn"] = cfg.intermediate_size
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="qwen3_moe")
    ap.add_argument("--experts-impl", default=None, help="transformers' experts_implementation (eager: per-expert loop)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--width", type=int, default=1, help="multiply every width of the config (GPU runs)")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (fp32 weights and AdamW states)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="print MFU per step against this peak")
    ap.add_argument("--attention-mask", action="store_true", help="pass an attention mask of ones, as a Trainer's "
                                                                   "collator does (SDPA then repeats K/V to every head)")
    ap.add_argument("--top5", action="store_true", help="also print each step's top-5 next-token accuracy (a topk "
                                                        "over the logits before backward, as training loops do)")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = config(args.family, args.width, args.layers, args.vocab, args.seq)
    kw = {"experts_implementation": args.experts_impl} if args.experts_impl else {}
    attn = "eager" if args.family == "gpt_oss" else "sdpa"  # gpt-oss's sinks: transformers' eager attention only
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, **kw).to(args.device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.device != "cpu")
    t = truth(model, cfg, args.seq, args.batch)
    times = []
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    for step in range(args.steps):
        t0 = time.perf_counter()
        x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=args.device)
        with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.bf16):
            mask = torch.ones_like(x) if args.attention_mask else None
            out = model(input_ids=x, labels=x, attention_mask=mask)
        loss = out.loss
        top5 = ""
        if args.top5:
            hit = (out.logits[:, :-1].topk(5, dim=-1).indices == x[:, 1:, None]).any(-1).float().mean()
            top5 = f", top-5 {hit.item():.3f}"
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()  # a CPU-GPU sync point: the step's time on the GPU's clock, as trainers time it
        ms = 1e3 * (time.perf_counter() - t0)
        times.append(ms)
        tps = args.batch * args.seq / (ms / 1e3)
        mfu = f", mfu {100 * t['model_flops_per_token'] * tps / (args.peak_tflops * 1e12):.2f}%" if args.peak_tflops else ""
        print(f"step {step}: loss {loss.item():.4f}{top5}, time {ms:.1f} ms, tokens/s {tps:,.0f}{mfu}", flush=True)
    steady = statistics.median(times[2:]) if len(times) > 2 else statistics.median(times)
    t["tokens_per_s"] = round(args.batch * args.seq / (steady / 1e3), 1)
    print("truth: " + json.dumps(t, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
