"""Hugging Face's ``Trainer`` on a Qwen3-1.7B-shaped model built from its config (no download): the
held-out job of another trainer for the out-of-memory check (benchmarks/gpu_oom_fit.sh). Nothing of
workbench is imported here.

On one 80 GB H100, batch 4 × 4096 tokens, bf16 autocast over fp32 weights, the Trainer's fused AdamW:
without gradient checkpointing the first forward runs out of memory (the float32 logits of a
151,936-token vocabulary on top of the activations); ``--gradient-checkpointing`` fits.

    workbench profile benchmarks/hf_trainer_oom.py [--gradient-checkpointing] [--steps 12]
"""

from __future__ import annotations

import argparse

import torch


class Tokens(torch.utils.data.Dataset):
    """Random token ids, each sample its own labels (the model shifts them)."""

    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    from transformers import AutoModelForCausalLM, Qwen3Config, Trainer, TrainingArguments

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--out", default="/tmp/hf_trainer_oom")
    p.add_argument("--tiny", action="store_true", help="a CPU-sized model of the same family (a smoke run)")
    args = p.parse_args()
    # Qwen/Qwen3-1.7B's config.json: 28 layers, hidden 2048, 16 heads / 8 kv of 128, SwiGLU 6144, tied
    cfg = Qwen3Config(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=args.layers,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                      max_position_embeddings=max(40960, args.seq), rope_theta=1000000, use_cache=False)
    if args.tiny:
        cfg.update(dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    n = sum(q.numel() for q in model.parameters())
    print(f"truth: parameters {n} (the tied table once), layers {cfg.num_hidden_layers}, heads {cfg.num_attention_heads}, "
          f"kv_heads {cfg.num_key_value_heads}, "
          f"seq {args.seq}, micro_batch {args.batch}", flush=True)
    targs = TrainingArguments(output_dir=args.out, per_device_train_batch_size=args.batch, max_steps=args.steps,
                              bf16=True, gradient_checkpointing=args.gradient_checkpointing, logging_steps=1,
                              report_to=[], save_strategy="no", dataloader_num_workers=0, learning_rate=1e-4,
                              optim="adamw_torch_fused" if torch.cuda.is_available() else "adamw_torch",
                              use_cpu=not torch.cuda.is_available())
    Trainer(model=model, args=targs, train_dataset=Tokens(args.batch * args.steps, args.seq, cfg.vocab_size)).train()


if __name__ == "__main__":
    main()
