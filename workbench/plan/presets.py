"""The models the planner knows by name: one registry (``PRESETS``) that the CLI, the app and the
docs read. Each family's numbers are its published configuration, cited beside it:

- GPTs of the Megatron-LM papers and GPT-3 175B (the seed article), Llama 3 (Dubey et al. 2024);
- the bundled engine's sizes (``workbench.format.presets``);
- Qwen3 dense (Hugging Face ``Qwen/Qwen3-{0.6B,4B,8B}`` config.json): heads × head_dim ≠ hidden,
  q/k norms, the small ones tied;
- mixture-of-experts: Mixtral 8x7B (``mistralai/Mixtral-8x7B-v0.1`` config.json), Qwen3-30B-A3B and
  Qwen3-235B-A22B (``Qwen/Qwen3-*`` config.json), gpt-oss 20B and 120B (``openai/gpt-oss-*``
  config.json), Kimi K2 (``moonshotai/Kimi-K2-Base`` config.json), DeepSeek-V3 16B, DeepSeek-V2 236B and DeepSeek-V3 671B as
  torchtitan's ``deepseek_v3`` model flavors define them (``torchtitan/models/deepseek_v3/__init__.py``:
  ``_16b``, ``_236b``, ``_671b``; the 671B is ``deepseek-ai/DeepSeek-V3``'s config.json without its
  multi-token-prediction layer).

Sequence lengths are what the family trains at by default (its pre-training stage or its
trainer's config); ``--seq`` changes them.
"""

from __future__ import annotations

from workbench.format.errors import WorkbenchError
from workbench.plan.model import ModelSpec, parse_model


def _gpt(name: str, L: int, h: int, a: int, V: int = 51200, s: int = 2048) -> ModelSpec:
    # Megatron-LM ties the output layer to the word embedding (a copy lives on the last stage)
    return ModelSpec(name=name, layers=L, hidden=h, heads=a, vocab=V, seq=s, tied=True)


def _llama(name: str, L: int, h: int, a: int, ffn: int) -> ModelSpec:
    return ModelSpec(name=name, layers=L, hidden=h, heads=a, kv_heads=8, ffn=ffn, vocab=128256, seq=8192,
                     gated=True, learned_pos=False, bias=False, norm="rms")


def _engine(name: str, L: int, a: int, h: int, s: int, V: int) -> ModelSpec:
    return ModelSpec(name=name, layers=L, hidden=h, heads=a, vocab=V, seq=s, tied=True)


def _engine_presets() -> dict[str, ModelSpec]:
    from workbench.format.presets import ENGINE_PRESETS as ENGINE  # (n_layer, n_head, d_model, seq_len, vocab)

    out = {f"engine-{k}": _engine(f"engine-{k}", *v) for k, v in ENGINE.items()}
    # the ~1.3B shape of case_studies/mfu_34_to_50 (rung 3: d 2048 x 24 layers, 16 heads)
    out["engine-1.3b"] = _engine("engine-1.3b", 24, 16, 2048, 1024, 50304)
    return out


_MODERN = dict(gated=True, learned_pos=False, bias=False, norm="rms")
"""SwiGLU, rotary positions, no biases, RMSNorm: every family below."""


def _qwen3(name: str, L: int, h: int, a: int, ffn: int, tied: bool) -> ModelSpec:
    # Qwen3 dense: 8 kv heads of 128, q/k RMSNorm per head, V 151,936; pre-trained at 4,096 tokens first
    return ModelSpec(name=name, layers=L, hidden=h, heads=a, kv_heads=8, head_dim=128, ffn=ffn, vocab=151936,
                     seq=4096, tied=tied, qk_norm=True, **_MODERN)


def _deepseek_v3(name: str, L: int, h: int, a: int, V: int, ffn: int, experts: int, top_k: int, shared: int,
                 moe_ffn: int, dense: int, q_lora: int) -> ModelSpec:
    # torchtitan deepseek_v3: MLA with kv_lora_rank 512, qk_nope 128 + qk_rope 64 (head_dim 192),
    # v_head_dim 128; untied head; seq_len 4096 in its train configs
    return ModelSpec(name=name, layers=L, hidden=h, heads=a, vocab=V, seq=4096, ffn=ffn, head_dim=192, v_head_dim=128,
                     kv_lora_rank=512, q_lora_rank=q_lora, qk_rope_head_dim=64, experts=experts, top_k=top_k,
                     shared_experts=shared, moe_ffn=moe_ffn, dense_layers=dense, **_MODERN)


PRESETS: dict[str, ModelSpec] = {
    # GPT-3 (Brown et al. 2020, Table 2.1) with Megatron's padded vocabulary: the seed's 175B
    "gpt3-175b": _gpt("gpt3-175b", 96, 12288, 96),
    # Narayanan et al. 2021, Table 1 (V = 51,200, s = 2,048)
    "megatron-1.7b": _gpt("megatron-1.7b", 24, 2304, 24),
    "megatron-3.6b": _gpt("megatron-3.6b", 30, 3072, 32),
    "megatron-7.5b": _gpt("megatron-7.5b", 36, 4096, 32),
    "megatron-18b": _gpt("megatron-18b", 40, 6144, 48),
    "megatron-39b": _gpt("megatron-39b", 48, 8192, 64),
    "megatron-76b": _gpt("megatron-76b", 60, 10240, 80),
    "megatron-145b": _gpt("megatron-145b", 80, 12288, 96),
    "megatron-310b": _gpt("megatron-310b", 96, 16384, 128),
    "megatron-530b": _gpt("megatron-530b", 105, 20480, 128),
    "megatron-1t": _gpt("megatron-1t", 128, 25600, 160),
    # Korthikanti et al. 2022, Table 3 (the 175B, 530B and 1T are the shapes above)
    "megatron-22b": _gpt("megatron-22b", 48, 6144, 64),
    # Llama 3 (Dubey et al. 2024, Table 3): GQA with 8 kv heads, SwiGLU, RMSNorm, RoPE, V = 128,256
    "llama3-8b": _llama("llama3-8b", 32, 4096, 32, 14336),
    "llama3-70b": _llama("llama3-70b", 80, 8192, 64, 28672),
    "llama3-405b": _llama("llama3-405b", 126, 16384, 128, 53248),
    # Qwen3 dense (config.json): 32 heads of 128 whatever the hidden size; 0.6B and 4B tie their head
    "qwen3-0.6b": _qwen3("qwen3-0.6b", 28, 1024, 16, 3072, tied=True),
    "qwen3-4b": _qwen3("qwen3-4b", 36, 2560, 32, 9728, tied=True),
    "qwen3-8b": _qwen3("qwen3-8b", 36, 4096, 32, 12288, tied=False),
    # Mixtral 8x7B (config.json): 32 blocks, each 8 experts of 14,336, top-2, GQA 8 kv heads, V 32,000
    "mixtral-8x7b": ModelSpec(name="mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, vocab=32000, seq=4096,
                              experts=8, top_k=2, moe_ffn=14336, **_MODERN),
    # Qwen3-30B-A3B (config.json): 48 blocks, each 128 experts of 768, top-8, no shared; 32 heads of 128, 4 kv
    "qwen3-30b-a3b": ModelSpec(name="qwen3-30b-a3b", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128,
                               vocab=151936, seq=4096, experts=128, top_k=8, moe_ffn=768, qk_norm=True, **_MODERN),
    # torchtitan deepseek_v3 "16B" (DeepSeek-V2-Lite / Moonlight shape): 27 blocks, the first dense
    # (10,944), then 64 experts of 1,408, top-6, 2 shared; 16 heads; V 102,400; q projected directly
    "deepseek-v3-16b": _deepseek_v3("deepseek-v3-16b", 27, 2048, 16, 102400, 10944, 64, 6, 2, 1408, 1, 0),
    # torchtitan deepseek_v3 "236B" (DeepSeek-V2): 60 blocks, the first dense (12,288), then 160 experts of
    # 1,536, top-6, 2 shared; 128 heads, q_lora_rank 1,536; V 102,400
    "deepseek-v2-236b": _deepseek_v3("deepseek-v2-236b", 60, 5120, 128, 102400, 12288, 160, 6, 2, 1536, 1, 1536),
    # DeepSeek-V3 671B: 61 blocks, the first 3 dense (18,432), then 256 experts of 2,048, top-8,
    # 1 shared; 128 heads, q_lora_rank 1,536; V 129,280
    "deepseek-v3-671b": _deepseek_v3("deepseek-v3-671b", 61, 7168, 128, 129280, 18432, 256, 8, 1, 2048, 3, 1536),
    # Kimi K2 (moonshotai/Kimi-K2-Base config.json): DeepSeek-V3's shape with 384 experts of 2,048, top-8,
    # 1 shared, the first block dense, 64 heads; V 163,840
    "kimi-k2": _deepseek_v3("kimi-k2", 61, 7168, 64, 163840, 18432, 384, 8, 1, 2048, 1, 1536),
    # Qwen3-235B-A22B (config.json): 94 blocks, each 128 experts of 1,536, top-8, no shared; 64 heads of 128, 4 kv
    "qwen3-235b-a22b": ModelSpec(name="qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128,
                                 vocab=151936, seq=4096, experts=128, top_k=8, moe_ffn=1536, qk_norm=True, **_MODERN),
    # gpt-oss (openai/gpt-oss-{20b,120b} config.json): 64 heads of 64 (8 kv) on h 2,880, biases on the
    # attention and the experts, experts of 2,880, top-4; V 201,088; every other block a 128-token window
    "gpt-oss-20b": ModelSpec(name="gpt-oss-20b", layers=24, hidden=2880, heads=64, kv_heads=8, head_dim=64, vocab=201088,
                             seq=4096, experts=32, top_k=4, moe_ffn=2880, gated=True, learned_pos=False, bias=True,
                             norm="rms"),
    "gpt-oss-120b": ModelSpec(name="gpt-oss-120b", layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64,
                              vocab=201088, seq=4096, experts=128, top_k=4, moe_ffn=2880, gated=True, learned_pos=False,
                              bias=True, norm="rms"),
}
PRESETS.update(_engine_presets())


def model_spec(name_or_keys: str) -> ModelSpec:
    """A preset by name (case-insensitive), else a key list (:func:`workbench.plan.model.parse_model`)."""
    key = name_or_keys.strip().lower()
    if key in PRESETS:
        return PRESETS[key]
    if "=" in name_or_keys:
        return parse_model(name_or_keys)
    raise WorkbenchError(f"unknown model {name_or_keys!r}: a preset ({', '.join(PRESETS)}) or a key list "
                         "L=96,h=12288,a=96,V=51200,s=2048[,ffn=…,kv=…,hd=…,experts=…,top_k=…]")
