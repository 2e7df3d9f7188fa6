"""A small Hugging Face transformers MoE model trained on random tokens: a user script that knows
nothing of workbench, for checking that ``workbench profile`` records its expert load unmodified.

Needs transformers 5.x (its MoE routers return the top-k expert ids); the workbench package
itself never imports transformers. With a Python that has it (a virtual environment, say .venv-hf)::

    PYTHONPATH=$PWD .venv-hf/bin/python -m workbench profile --out traces/hf_qwen3_moe_cpu \\
        --stop-after-profile benchmarks/hf_moe_train.py --family qwen3_moe --steps 8

Families: qwen3_moe (Qwen3MoeTopKRouter, softmax top-k), mixtral, olmoe, deepseek_v3 (sigmoid,
group-limited top-k, a shared expert). The model is built from a config (no download) with the
eager attention and experts that run on any device; AdamW, a fixed seed.
"""

from __future__ import annotations

import argparse
import time

import torch

FAMILIES = {
    # (config class name, the family's own keys beside the common ones)
    "qwen3_moe": ("Qwen3MoeConfig", {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                                     "norm_topk_prob": True}),
    "mixtral": ("MixtralConfig", {"num_local_experts": 8, "num_experts_per_tok": 2}),
    "olmoe": ("OlmoeConfig", {"num_experts": 8, "num_experts_per_tok": 2}),
    "deepseek_v3": ("DeepseekV3Config", {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                                         "n_shared_experts": 1, "n_group": 2, "topk_group": 1,
                                         "first_k_dense_replace": 1, "q_lora_rank": 32, "kv_lora_rank": 32,
                                         "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16,
                                         "num_key_value_heads": 4}),
}


def build(family: str):
    import transformers

    cls_name, own = FAMILIES[family]
    common = {"vocab_size": 512, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
    cfg = getattr(transformers, cls_name)(**{**common, **own})
    cfg._attn_implementation = "eager"
    return transformers.AutoModelForCausalLM.from_config(cfg)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=sorted(FAMILIES), default="qwen3_moe")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    a = p.parse_args()
    torch.manual_seed(0)
    model = build(a.family)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for step in range(a.steps):
        t0 = time.perf_counter()
        ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), generator=g)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f} {1e3 * (time.perf_counter() - t0):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
