"""What is trained: a decoder-only transformer's shape, its parameter count and its FLOPs.

Dense, mixture-of-experts and latent-attention models. Presets (workbench.plan.presets: the
engine's sizes, the Megatron-LM papers' GPTs, GPT-3 175B of the seed article, Llama 3, Qwen3,
Mixtral, DeepSeek-V3) name the models the planner is checked on, and a key list spells any other:

    model_spec("gpt3-175b")
    model_spec("L=96,h=12288,a=96,V=51200,s=2048")            # the same GPT-3
    model_spec("L=126,h=16384,a=128,V=128256,s=8192,ffn=53248,kv=8,gated=1,norm=rms,bias=0")
    model_spec("L=36,h=2560,a=32,kv=8,hd=128,V=151936,s=4096,ffn=9728,gated=1,tied=1,norm=rms,bias=0,pos=0")
    model_spec("L=48,h=2048,a=32,kv=4,hd=128,V=151936,s=4096,experts=128,top_k=8,moe_ffn=768,gated=1,"
               "norm=rms,bias=0,pos=0")                       # Qwen3-30B-A3B

Shapes. ``head_dim`` is the query/key head width (0: hidden / heads), ``v_head_dim`` the value's
(0: head_dim); heads × head_dim need not be the hidden size. Latent attention (MLA, DeepSeek-V2/V3)
has ``kv_lora_rank`` > 0: k and v come from a compressed latent (h → kv_lora_rank + rope, then
kv_lora_rank → heads · (head_dim − rope + v_head_dim)), q directly (``q_lora_rank`` 0) or through its own
rank. A mixture-of-experts block has ``experts`` routed experts of width ``moe_ffn``, of which each
token uses ``top_k``, plus ``shared_experts`` that every token uses, and a router (h × experts); the
first ``dense_layers`` blocks, and those off the ``moe_every`` frequency, keep a dense MLP of ``ffn``.

Parameters: total (every expert, a tied table once) and active per token, torchtitan's
``get_nparams_and_flops`` convention: dense + router + shared + routed × top_k / experts.

FLOPs (one multiply-add = 2 FLOPs, PaLM appendix B) per token and layer, forward: 2 × the weights a
token multiplies (its attention projections; the dense MLP, or the router, the shared experts and
top_k routed experts) plus attention's two score matmuls 2·s·heads·(head_dim + v_head_dim) (4·s·h
when heads × head_dim = h; Narayanan et al. 2021, eq. 3 counts them so); the logits 2·h·V.
Backward costs twice the forward. The headline MFU's model FLOPs per token (torchtitan's and
nanoGPT's convention, what ``workbench analyze`` reports as ``model_flops_per_token``):
``6 · N_active_non_embedding + 6 · L · heads · (head_dim + v_head_dim) · s``, no causal halving,
no recomputation. With ``ffn = 4h``, MHA and no gating this is Narayanan et al.'s
``F = 72·B·s·l·h²·(1 + s/6h + V/16lh)`` per iteration.
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
    """Dense MLP hidden size; 0 = 4h."""
    kv_heads: int = 0
    """Key/value heads (grouped-query attention); 0 = ``heads`` (multi-head attention)."""
    head_dim: int = 0
    """Query/key width per head; 0 = hidden / heads. Latent attention: the no-position part plus the
    rotary part (DeepSeek-V3: 128 + 64)."""
    v_head_dim: int = 0
    """Value width per head (the attention output is heads × v_head_dim); 0 = head_dim."""
    gated: bool = False
    """Gated MLP (SwiGLU: three matrices) instead of GELU (two); experts alike."""
    tied: bool = False
    """The output head shares the token embedding's weight (counted once)."""
    learned_pos: bool = True
    """A learned position embedding of s × h (GPT); False for rotary embeddings (Llama)."""
    bias: bool = True
    """Linear layers and norms carry biases (GPT); Llama has none."""
    norm: str = "layernorm"
    """layernorm (weight and bias) | rms (weight only)."""
    qk_norm: bool = False
    """A norm over each head's query and key (Qwen3): 2 × head_dim weights per block."""
    experts: int = 0
    """Routed experts per mixture-of-experts block; 0 = a dense model."""
    top_k: int = 0
    """Routed experts each token uses."""
    shared_experts: int = 0
    """Experts every token uses (DeepSeek), each of width ``shared_ffn``."""
    shared_ffn: int = 0
    """One shared expert's width; 0 = ``moe_ffn`` (DeepSeek's; Qwen2-MoE's one shared expert is 4 × an
    expert's width)."""
    moe_ffn: int = 0
    """One expert's hidden size; 0 = ``ffn``."""
    dense_layers: int = 0
    """The first blocks keep a dense MLP (DeepSeek-V3: 3)."""
    moe_every: int = 1
    """After those, every k-th block is a mixture of experts (block i when (i + 1) % k == 0)."""
    q_lora_rank: int = 0
    """Latent attention: the query's low-rank projection (0: q projected directly)."""
    kv_lora_rank: int = 0
    """Latent attention's compressed key/value width; 0 = not latent attention."""
    qk_rope_head_dim: int = 0
    """Latent attention: the rotary part of head_dim, shared by the heads through the latent projection."""

    def __post_init__(self) -> None:
        from workbench.plan.validate import model_fields, model_spec_checks

        model_fields(self.name, {f: getattr(self, f) for f in _CHECKED})
        model_spec_checks(self)

    # ---- shape --------------------------------------------------------------------------------
    @property
    def ffn_hidden(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        """Query/key width per head."""
        return self.head_dim or self.hidden // self.heads

    @property
    def d_v(self) -> int:
        """Value width per head."""
        return self.v_head_dim or self.d_head

    @property
    def latent(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn or self.ffn_hidden

    @property
    def shared_width(self) -> int:
        """The shared experts' width together (DeepSeek fuses them into one MLP of this width)."""
        return self.shared_experts * (self.shared_ffn or self.expert_ffn)

    @property
    def attn_out(self) -> int:
        """Width of the attention output the output projection reads: heads × v_head_dim."""
        return self.heads * self.d_v

    @property
    def qkv_out(self) -> int:
        """Widths of q, k and v together as attention reads them (latent attention: expanded per head)."""
        if self.latent:
            return self.heads * (2 * self.d_head + self.d_v)
        return self.heads * self.d_head + self.kv * (self.d_head + self.d_v)

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated else 2

    def is_moe_layer(self, i: int) -> bool:
        return self.moe and i >= self.dense_layers and (i + 1) % self.moe_every == 0

    def moe_layers_in(self, first: int, count: int) -> int:
        """Mixture-of-experts blocks among blocks first … first + count − 1."""
        return sum(1 for i in range(first, first + count) if self.is_moe_layer(i))

    @property
    def moe_layers(self) -> int:
        return self.moe_layers_in(0, self.layers)

    # ---- parameters ---------------------------------------------------------------------------
    def norm_params(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    def attention_matrix_params(self) -> int:
        """q, k, v and the output projection (latent attention: its down/up projections)."""
        h, a, d = self.hidden, self.heads, self.d_head
        if self.latent:
            rope = self.qk_rope_head_dim
            q = h * a * d if not self.q_lora_rank else h * self.q_lora_rank + self.q_lora_rank * a * d
            kv = h * (self.kv_lora_rank + rope) + self.kv_lora_rank * a * (d - rope + self.d_v)
            return q + kv + self.attn_out * h
        return h * self.qkv_out + self.attn_out * h

    def attention_params(self) -> int:
        """The attention block's weights, biases, norms (its input norm, latent and q/k norms)."""
        extra = self.norm_params()
        if self.latent:
            extra += self.kv_lora_rank + self.q_lora_rank  # the latent norms (RMSNorm)
        if self.qk_norm:
            extra += 2 * self.d_head
        if self.bias:
            extra += (self.qkv_out if not self.latent else 0) + self.hidden
        return self.attention_matrix_params() + extra

    def dense_mlp_params(self) -> int:
        """A dense block's MLP with its norm and biases."""
        biases = ((self.mlp_matrices - 1) * self.ffn_hidden + self.hidden) if self.bias else 0
        return self.mlp_matrices * self.hidden * self.ffn_hidden + biases + self.norm_params()

    def expert_params(self) -> int:
        """One routed expert's weights."""
        return self.mlp_matrices * self.hidden * self.expert_ffn

    def routed_params(self) -> int:
        """A mixture-of-experts block's routed experts (what expert parallelism splits)."""
        return self.experts * self.expert_params()

    def moe_dense_params(self) -> int:
        """A mixture-of-experts block's parts every token uses: router, shared experts, its norm."""
        return self.hidden * self.experts + self.mlp_matrices * self.hidden * self.shared_width + self.norm_params()

    def block_params(self, moe: bool) -> int:
        """One block: attention, and its dense MLP or its experts (all of them)."""
        mlp = self.moe_dense_params() + self.routed_params() if moe else self.dense_mlp_params()
        return self.attention_params() + mlp

    def layer_params(self) -> int:
        """A block's parameters, averaged over the blocks (all of them the same in a dense model)."""
        return round(self.blocks_params() / self.layers)

    def blocks_params(self) -> int:
        n_moe = self.moe_layers
        return (self.layers - n_moe) * self.block_params(False) + n_moe * self.block_params(True)

    def embedding_params(self) -> int:
        """Token embedding (+ position embedding)."""
        return self.vocab * self.hidden + (self.seq * self.hidden if self.learned_pos else 0)

    def head_params(self) -> int:
        """Final norm and the output head (0 for a tied head: it is the embedding's weight)."""
        return self.norm_params() + (0 if self.tied else self.vocab * self.hidden)

    def params(self) -> int:
        """All parameters, every expert, a tied weight counted once."""
        return self.blocks_params() + self.embedding_params() + self.head_params()

    def params_active(self) -> int:
        """Parameters one token uses: the dense ones + router + shared + routed × top_k / experts
        (torchtitan's convention); = params() for a dense model."""
        if not self.moe:
            return self.params()
        return round(self.params() - self.moe_layers * self.routed_params() * (1 - self.top_k / self.experts))

    def params_active_non_embedding(self) -> int:
        """Active parameters less the input tables (a tied table counts once, as the output head)."""
        pos = self.seq * self.hidden if self.learned_pos else 0
        return self.params_active() - pos - (0 if self.tied else self.vocab * self.hidden)

    # ---- FLOPs --------------------------------------------------------------------------------
    def attention_gemm_flops(self) -> float:
        """Forward FLOPs of one block's attention projections per token."""
        return 2.0 * self.attention_matrix_params()

    def mlp_gemm_flops(self, moe: bool) -> float:
        """Forward FLOPs of one block's MLP per token: dense, or router + shared + top_k routed experts."""
        if not moe:
            return 2.0 * self.mlp_matrices * self.hidden * self.ffn_hidden
        return 2.0 * (self.hidden * self.experts + self.top_k * self.expert_params()
                      + self.mlp_matrices * self.hidden * self.shared_width)

    def layer_gemm_flops(self, moe: bool | None = None) -> float:
        """Forward FLOPs of one block's matmuls per token (2 per multiply-add); ``moe`` None: the
        average over the blocks."""
        if moe is None:
            n_moe = self.moe_layers
            return self.attention_gemm_flops() + (
                (self.layers - n_moe) * self.mlp_gemm_flops(False) + n_moe * self.mlp_gemm_flops(True)) / self.layers
        return self.attention_gemm_flops() + self.mlp_gemm_flops(moe)

    def attention_flops(self, seq: int) -> float:
        """Forward FLOPs of QKᵀ and AV per token and layer, the whole s × s square:
        2·s·heads·(head_dim + v_head_dim) (= 4·s·h when heads × head_dim = h)."""
        return 2.0 * seq * self.heads * (self.d_head + self.d_v)

    def logits_flops(self) -> float:
        return 2.0 * self.hidden * self.vocab

    def model_flops_per_token(self, seq: int | None = None) -> float:
        """Training FLOPs per token for MFU: 6 · N_active_non_embedding + 6 · L · heads · (head_dim +
        v_head_dim) · s (torchtitan's and nanoGPT's convention; PaLM's 6N + 12·L·h·s for a dense model
        whose heads × head_dim = h), N the weights a token multiplies (every block's matrices, norms and
        the head; not the embedding lookups). What the engine's manifests write as ``flops_per_token``;
        recomputation is not counted."""
        s = seq or self.seq
        return 6.0 * self.params_active_non_embedding() + 6.0 * self.layers * self.heads * (self.d_head + self.d_v) * s

    def with_seq(self, seq: int | None) -> ModelSpec:
        return self if not seq or seq == self.seq else replace(self, seq=seq)


_CHECKED = ("layers", "hidden", "heads", "vocab", "seq", "ffn", "kv_heads", "head_dim", "v_head_dim", "experts",
            "top_k", "shared_experts", "shared_ffn", "moe_ffn", "dense_layers", "moe_every", "q_lora_rank", "kv_lora_rank",
            "qk_rope_head_dim")
"""The numeric fields :func:`workbench.plan.validate.model_fields` checks."""


KEYS = {"L": "layers", "h": "hidden", "a": "heads", "V": "vocab", "s": "seq", "ffn": "ffn", "kv": "kv_heads",
        "hd": "head_dim", "vhd": "v_head_dim", "gated": "gated", "tied": "tied", "pos": "learned_pos", "bias": "bias",
        "norm": "norm", "qknorm": "qk_norm", "experts": "experts", "top_k": "top_k", "shared": "shared_experts", "shared_ffn": "shared_ffn",
        "moe_ffn": "moe_ffn", "dense_layers": "dense_layers", "moe_every": "moe_every", "q_lora": "q_lora_rank",
        "kv_lora": "kv_lora_rank", "rope_hd": "qk_rope_head_dim"}
"""Key-list names → ModelSpec fields (``gated``, ``tied``, ``pos``, ``bias``, ``qknorm`` take 0/1)."""
_BOOLS = {"gated", "tied", "learned_pos", "bias", "qk_norm"}


def parse_model(text: str) -> ModelSpec:
    """``L=96,h=12288,a=96,V=51200,s=2048[,ffn=…,kv=…,hd=…,vhd=…,gated=1,tied=1,pos=0,bias=0,norm=rms,qknorm=1,
    experts=…,top_k=…,shared=…,shared_ffn=…,moe_ffn=…,dense_layers=…,moe_every=…,q_lora=…,kv_lora=…,rope_hd=…]``."""
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
