"""The model directories the Hugging Face Trainer rows of the corpus load (``--model_name``), and
the truth beside each: built from a config, saved, nothing downloaded.

Each model is a public family's proportions at a tiny width (CPU rows) or 4× that (GPU twins):

- ``qwen2``: the Trainer script's own default family (a tiny Qwen2)
- ``qwen3-moe``: Qwen3-30B-A3B's — routed experts only (16, top-4), GQA, heads × head_dim = 2 × hidden,
  expert width 0.375 × hidden
- ``deepseek-v3``: DeepSeek-V3's — latent attention (q and kv LoRA ranks, rotary 16 + non-rotary 32 of
  each query/key head, value head 32), one shared expert, a dense first layer, group-limited routing
  (4 groups, 2 chosen), 16 experts top-4
- ``olmoe``: OLMoE-1B-7B's — 64 experts top-8, MHA, q/k norms, expert width hidden / 2
- ``qwen3``: Qwen3-0.6B's, dense — heads × head_dim = 2 × hidden, kv heads = heads / 2, SwiGLU width
  3 × hidden, tied embeddings

``truth.json`` (written into the model directory, copied into each run directory by ``corpus run``)
is what the model directory holds, counted from the model object that was saved: its config, the
parameters total, active by torchtitan's rule (dense + router + shared experts + routed experts ×
top_k // experts) and in the input embedding, the model FLOPs per token by the convention
(benchmarks/hf_train.py's ``truth``). Nothing of workbench is read. Needs transformers (5.x), never
imported by the project itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SEQ = 128
"""The Trainer script pads and truncates every sample to 128 tokens (``max_length=128``)."""

_COMMON = dict(max_position_embeddings=256, pad_token_id=1, eos_token_id=2, bos_token_id=2)
_MOE_COMMON = dict(vocab_size=512, hidden_size=128, tie_word_embeddings=False)

MODELS: dict[str, tuple[str, dict]] = {
    # (transformers model_type, config at the CPU size); vocab_size None: the tokenizer's
    "qwen2": ("qwen2", dict(vocab_size=None, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2)),
    "qwen3-moe": ("qwen3_moe", dict(**_MOE_COMMON, num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2,
                                    head_dim=32, num_experts=16, num_experts_per_tok=4, moe_intermediate_size=48,
                                    intermediate_size=384, decoder_sparse_step=1, mlp_only_layers=[],
                                    norm_topk_prob=True)),
    "deepseek-v3": ("deepseek_v3", dict(**_MOE_COMMON, num_hidden_layers=3, num_attention_heads=4,
                                        num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16,
                                        qk_nope_head_dim=32, v_head_dim=32, n_routed_experts=16,
                                        num_experts_per_tok=4, n_shared_experts=1, moe_intermediate_size=48,
                                        intermediate_size=320, first_k_dense_replace=1, n_group=4, topk_group=2)),
    "olmoe": ("olmoe", dict(**_MOE_COMMON, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                            num_experts=64, num_experts_per_tok=8, intermediate_size=64)),
    "qwen3": ("qwen3", dict(vocab_size=512, hidden_size=128, num_hidden_layers=4, num_attention_heads=8,
                            num_key_value_heads=4, head_dim=32, intermediate_size=384, tie_word_embeddings=True)),
}
_QWEN2_SMALL = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8,
                    num_key_value_heads=8)
"""qwen2-small (the GPU rows since they were first made): not a 4× of qwen2-tiny."""
WIDTHS = ("hidden_size", "intermediate_size", "moe_intermediate_size", "head_dim", "q_lora_rank", "kv_lora_rank",
          "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
"""Config keys 4× wider in a GPU twin (``-small``): heads, experts and layers stay."""


def family_of(model_dir: str) -> tuple[str, str]:
    """``qwen3-moe-small`` → (``qwen3-moe``, ``small``)."""
    found = re.fullmatch(r"(.+)-(tiny|small)", Path(model_dir).name)
    if not found or found.group(1) not in MODELS:
        raise ValueError(f"{model_dir}: not <family>-tiny|small with a family of {sorted(MODELS)}")
    return found.group(1), found.group(2)


def config_kwargs(family: str, size: str, vocab: int) -> tuple[str, dict]:
    """The family's model_type and config arguments at ``size`` (tiny: CPU; small: GPU)."""
    model_type, kw = MODELS[family]
    kw = {**kw, "vocab_size": kw["vocab_size"] or vocab}
    if size == "small":
        kw = {**kw, **_QWEN2_SMALL} if family == "qwen2" else {k: v * 4 if k in WIDTHS else v for k, v in kw.items()}
    return model_type, {**_COMMON, **kw}


def _tokenizer():
    """A word-level tokenizer over the Trainer script's own sentences."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ("The quick brown fox jumps over the lazy dog . A journey of a thousand miles begins with single step "
             "To be or not to , that is question All glitters gold wanders lost").split()
    vocab = {w: i for i, w in enumerate(["<unk>", "<pad>", "<eos>", *dict.fromkeys(words)])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>")


def hf_model(path: Path) -> None:
    """Make the model directory ``path`` (named ``<family>-<tiny|small>``): a tokenizer, a model of
    the family built from its config (seed 0) and ``truth.json``."""
    if (path / "config.json").exists() and (path / "truth.json").exists():
        return
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from benchmarks.hf_train import truth

    family, size = family_of(path.name)
    fast = _tokenizer()
    model_type, kw = config_kwargs(family, size, len(fast))
    cfg = AutoConfig.for_model(model_type, **kw)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    fields = truth(model, model.config, SEQ, None)
    if "num_experts_per_tok" in kw and "experts" not in fields:  # hf_train.truth names experts modules *Experts
        raise SystemExit(f"{path.name}: no routed experts found in {type(model).__name__}: its truth would count "
                         "every expert active")
    fields.pop("micro_batch")  # the run's, not the model's: ``corpus run`` adds it
    # SwiGLU: a gate beside the up projection (dense MLPs' gate_proj, experts' fused gate_up_proj)
    fields["gated"] = any(hasattr(m, "gate_proj") or hasattr(m, "gate_up_proj") for m in model.modules())
    if getattr(model.config, "qk_rope_head_dim", None):
        fields["qk_rope_head_dim"] = model.config.qk_rope_head_dim
    doc = {"made_by": "benchmarks/corpus_hf.py: counted from the model object that was saved (hf_train.truth)",
           "family": family, "size": size, "fields": fields, "config": json.loads(model.config.to_json_string())}
    (path / "truth.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def run_truth(model_dir: Path, batch: int, micro_batches: int = 1, checkpointing: bool = False) -> dict:
    """The model's truth for one run: its fields with the run's micro-batch, micro-batches per
    optimizer step, tokens per step and recomputation (the Trainer's gradient checkpointing re-runs
    every decoder layer's forward in backward: ``full``)."""
    doc = json.loads((model_dir / "truth.json").read_text())
    doc["fields"].update(micro_batch=batch, micro_batches=micro_batches,
                         tokens_per_step=batch * doc["fields"]["seq"] * micro_batches,
                         recompute="full" if checkpointing else "none")
    return doc
