"""What is trained: a decoder-only transformer's shape, its parameter count and its FLOPs.

Presets are the models the planner is checked on (the engine's sizes, the Megatron-LM papers'
GPTs, GPT-3 175B of the seed article, Llama 3) and a key list spells any other:

    model_spec("gpt3-175b")
    model_spec("L=96,h=12288,a=96,V=51200,s=2048")            # the same GPT-3
    model_spec("L=126,h=16384,a=128,V=128256,s=8192,ffn=53248,kv=8,gated=1,norm=rms,bias=0")

FLOPs (one multiply-add = 2 FLOPs, as MFU counts them, PaLM appendix B) per token and layer,
forward: the four projections 2·h·(h + 2·kv·d_head) + 2·h² and the MLP 2·k·h·ffn (k = 2, or 3
for a gated MLP), plus attention's two score matmuls 4·s·h (Narayanan et al. 2021, eq. 3 counts
them so); the logits 2·h·V per token. Backward costs twice the forward. With ``ffn = 4h``, MHA and
no gating this is Narayanan et al.'s ``F = 72·B·s·l·h²·(1 + s/6h + V/16lh)`` per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from workbench.format.errors import WorkbenchError


@dataclass(kw_only=True, slots=True, frozen=True)
class ModelSpec:
    name: str
    """Preset name or the key list it was parsed from."""
    layers: int
    """Transformer blocks (L)."""
    hidden: int
    """Hidden size (h)."""
    heads: int
    """Attention heads (a); tensor parallelism splits them."""
    vocab: int
    """Vocabulary size (V)."""
    seq: int
    """Sequence length (s) the model is trained at (``--seq`` overrides it)."""
    ffn: int = 0
    """MLP hidden size; 0 = 4h."""
    kv_heads: int = 0
    """Key/value heads (grouped-query attention); 0 = ``heads`` (multi-head attention)."""
    gated: bool = False
    """Gated MLP (SwiGLU: three matrices) instead of GELU (two)."""
    tied: bool = False
    """The output head shares the token embedding's weight."""
    learned_pos: bool = True
    """A learned position embedding of s × h (GPT); False for rotary embeddings (Llama)."""
    bias: bool = True
    """Linear layers and norms carry biases (GPT); Llama has none."""
    norm: str = "layernorm"
    """layernorm (weight and bias) | rms (weight only)."""

    def __post_init__(self) -> None:
        from workbench.plan.validate import MODEL_LIMITS, model_fields

        model_fields(self.name, {f: getattr(self, f) for f in MODEL_LIMITS})
        if self.hidden % self.heads:
            raise WorkbenchError(f"model {self.name}: hidden size {self.hidden} is not divisible by {self.heads} heads")
        if self.heads % self.kv:
            raise WorkbenchError(f"model {self.name}: {self.heads} heads are not divisible by {self.kv} kv heads")
        if self.norm not in ("layernorm", "rms"):
            raise WorkbenchError(f"model {self.name}: norm must be layernorm or rms, got {self.norm!r}")

    # ---- shape --------------------------------------------------------------------------------
    @property
    def ffn_hidden(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def qkv_out(self) -> int:
        """Output features of the q, k and v projections together: h + 2·kv·d_head."""
        return self.hidden + 2 * self.kv * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated else 2

    # ---- parameters ---------------------------------------------------------------------------
    def norm_params(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    def layer_matrix_params(self) -> int:
        """Weights of one block's matrices: q, k, v, the output projection and the MLP."""
        h = self.hidden
        return h * self.qkv_out + h * h + self.mlp_matrices * h * self.ffn_hidden

    def layer_params(self) -> int:
        """One block: matrices, their biases, two norms."""
        biases = (self.qkv_out + self.hidden + (self.mlp_matrices - 1) * self.ffn_hidden + self.hidden) if self.bias else 0
        return self.layer_matrix_params() + biases + 2 * self.norm_params()

    def embedding_params(self) -> int:
        """Token embedding (+ position embedding)."""
        return self.vocab * self.hidden + (self.seq * self.hidden if self.learned_pos else 0)

    def head_params(self) -> int:
        """Final norm and the output head (0 for a tied head: it is the embedding's weight)."""
        return self.norm_params() + (0 if self.tied else self.vocab * self.hidden)

    def params(self) -> int:
        """All parameters, a tied weight counted once."""
        return self.layers * self.layer_params() + self.embedding_params() + self.head_params()

    # ---- FLOPs --------------------------------------------------------------------------------
    def layer_gemm_flops(self) -> float:
        """Forward FLOPs of one block's matmuls per token (2 per multiply-add)."""
        return 2.0 * self.layer_matrix_params()

    def attention_flops(self, seq: int) -> float:
        """Forward FLOPs of QKᵀ and AV per token and layer, the whole s × s square: 4·s·h."""
        return 4.0 * seq * self.hidden

    def logits_flops(self) -> float:
        return 2.0 * self.hidden * self.vocab

    def model_flops_per_token(self, seq: int | None = None) -> float:
        """Training FLOPs per token for MFU, PaLM appendix B: 6·N + 12·L·h·s, with N the weights
        that multiply (every block's matrices and the head; not the embedding lookups). This is
        what the engine's manifests write as ``flops_per_token``; recomputation is not counted."""
        s = seq or self.seq
        n = self.layers * self.layer_params() + self.head_params() + (self.vocab * self.hidden if self.tied else 0)
        return 6.0 * n + 12.0 * self.layers * self.hidden * s

    def with_seq(self, seq: int | None) -> ModelSpec:
        return self if not seq or seq == self.seq else replace(self, seq=seq)


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
}
PRESETS.update(_engine_presets())

KEYS = {"L": "layers", "h": "hidden", "a": "heads", "V": "vocab", "s": "seq", "ffn": "ffn", "kv": "kv_heads",
        "gated": "gated", "tied": "tied", "pos": "learned_pos", "bias": "bias", "norm": "norm"}
"""Key-list names → ModelSpec fields (``gated``, ``tied``, ``pos``, ``bias`` take 0/1)."""
_BOOLS = {"gated", "tied", "learned_pos", "bias"}


def parse_model(text: str) -> ModelSpec:
    """``L=96,h=12288,a=96,V=51200,s=2048[,ffn=…,kv=…,gated=1,tied=1,pos=0,bias=0,norm=rms]``."""
    from workbench.plan.validate import model_key, switch

    fields: dict[str, object] = {}
    for item in text.split(","):
        key, sep, value = (p.strip() for p in item.partition("="))
        if not sep or key not in KEYS:
            raise WorkbenchError(f"model key list: expected KEY=VALUE with KEY one of {', '.join(KEYS)}, got {item!r}")
        name = KEYS[key]
        if name in fields:
            raise WorkbenchError(f"model key list: {key} is given twice")
        if name == "norm":
            fields[name] = {"rms": "rms", "rmsnorm": "rms", "layernorm": "layernorm", "ln": "layernorm"}.get(value, value)
        elif name in _BOOLS:
            fields[name] = switch(key, value)
        else:
            fields[name] = model_key(key, name, value)
    missing = [k for k in ("L", "h", "a", "V", "s") if KEYS[k] not in fields]
    if missing:
        raise WorkbenchError(f"model key list {text!r} lacks {', '.join(missing)} (needs L, h, a, V, s)")
    return ModelSpec(name=text, **fields)


def model_spec(name_or_keys: str) -> ModelSpec:
    """A preset by name (case-insensitive), else a key list."""
    key = name_or_keys.strip().lower()
    if key in PRESETS:
        return PRESETS[key]
    if "=" in name_or_keys:
        return parse_model(name_or_keys)
    raise WorkbenchError(f"unknown model {name_or_keys!r}: a preset ({', '.join(PRESETS)}) or a key list "
                         "L=96,h=12288,a=96,V=51200,s=2048[,ffn=…,kv=…]")
