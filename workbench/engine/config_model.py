"""The engine's model config (``[model]``): the GPT's size, a dense or mixture-of-experts MLP.

Imports no torch (see :mod:`workbench.engine.config`); :meth:`ModelConfig.num_params` counts the
parameters without building the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.format.errors import WorkbenchError
from workbench.format.presets import ENGINE_PRESETS

PRESETS = ENGINE_PRESETS
"""GPT sizes: (n_layer, n_head, d_model, seq_len, vocab), workbench.format.presets."""
MOE_SCORES = ("softmax", "sigmoid")


def _fail(msg: str) -> None:
    raise WorkbenchError(msg)


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    preset: str = "tiny"
    """Named size: tiny | small | 125m | 370m; the fields below override it."""
    n_layer: int | None = None
    """Transformer blocks."""
    n_head: int | None = None
    """Attention heads (tensor parallel splits them across ranks)."""
    d_model: int | None = None
    """Hidden size."""
    seq_len: int | None = None
    """Tokens per sample (context length)."""
    vocab: int | None = None
    """Vocabulary size (50304 = GPT-2's 50257 padded to a multiple of 64)."""
    tie_embeddings: bool = True
    """Share the token embedding with the output head (nanoGPT); pipeline stages cannot."""
    moe_experts: int = 0
    """Routed experts per mixture-of-experts block (0 = a dense model: every block has the GELU MLP)."""
    moe_top_k: int = 2
    """Routed experts each token is sent to (the router's top-k)."""
    moe_shared_experts: int = 0
    """Shared experts every token also goes through (one SwiGLU MLP moe_shared_experts x moe_ffn wide)."""
    moe_ffn: int | None = None
    """One expert's hidden width (SwiGLU); default 4 x d_model / moe_top_k, so a token's routed
    experts hold as many hidden units as the dense MLP."""
    moe_dense_layers: int = 0
    """The first blocks keep the dense MLP, the rest are MoE (DeepSeek-V3's first_k_dense_replace)."""
    moe_score: str = "softmax"
    """Router scores: softmax (Mixtral, Qwen3-MoE: the top-k probabilities weight the experts) |
    sigmoid (DeepSeek-V3: the top-k scores renormalised to sum to 1)."""
    moe_balance_coeff: float = 0.0
    """Auxiliary-loss-free load balancing (Wang et al. 2024, DeepSeek-V3's bias update speed): after
    every optimizer step each MoE block's per-expert routing bias moves by this much, up for the
    experts below the mean load and down for those above (the step's load summed over
    data-parallel ranks); the bias only steers which experts are picked. 0 = off."""
    moe_grouped_mm: bool = True
    """Run the experts through torch._grouped_mm where it runs for the device and dtype (one GEMM
    for all experts); false, or where it does not run, a loop over experts (one GEMM each, and a
    host sync for their token counts)."""

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            _fail(f"model.preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        for name, default in zip(("n_layer", "n_head", "d_model", "seq_len", "vocab"), PRESETS[self.preset]):
            if getattr(self, name) is None:
                setattr(self, name, default)
            if getattr(self, name) < 1:
                _fail(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            _fail(f"model.d_model ({self.d_model}) must be divisible by model.n_head ({self.n_head})")
        if self.moe_ffn is None:
            self.moe_ffn = max(1, 4 * self.d_model // max(1, self.moe_top_k))
        if self.moe_experts < 0 or self.moe_shared_experts < 0 or self.moe_dense_layers < 0 or self.moe_ffn < 1:
            _fail("model.moe_experts, model.moe_shared_experts and model.moe_dense_layers must be >= 0, model.moe_ffn >= 1")
        if self.moe_balance_coeff < 0:
            _fail(f"model.moe_balance_coeff must be >= 0, got {self.moe_balance_coeff}")
        if self.moe_score not in MOE_SCORES:
            _fail(f"model.moe_score must be softmax or sigmoid, got {self.moe_score!r}")
        if self.moe_experts:
            if not 1 <= self.moe_top_k <= self.moe_experts:
                _fail(f"model.moe_top_k ({self.moe_top_k}) must be between 1 and model.moe_experts ({self.moe_experts})")
            if self.moe_dense_layers >= self.n_layer:
                _fail(f"model.moe_dense_layers ({self.moe_dense_layers}) leaves no MoE block of model.n_layer ({self.n_layer})")

    @property
    def moe_layers(self) -> int:
        """Blocks with a mixture-of-experts MLP."""
        return self.n_layer - self.moe_dense_layers if self.moe_experts else 0

    def num_params(self, active: bool = False) -> int:
        """Parameters of model.GPT with this config, without building it (for config checks);
        ``active``: those one token uses (the routed experts x moe_top_k / moe_experts, the
        torchtitan convention)."""
        d, L, V = self.d_model, self.n_layer, self.vocab
        attn = 4 * d * d + 4 * d + 2 * 2 * d  # q, k, v, proj with biases; two LayerNorms
        dense = 8 * d * d + 5 * d  # fc (d -> 4d) and proj with biases
        head = 0 if self.tie_embeddings else V * d
        routed = self.moe_experts * 3 * d * self.moe_ffn  # SwiGLU: gate, up, down, no bias
        if active and self.moe_experts:
            routed = routed * self.moe_top_k // self.moe_experts
        moe = d * self.moe_experts + routed + self.moe_shared_experts * 3 * d * self.moe_ffn  # router + experts
        blocks = L * attn + (L - self.moe_layers) * dense + self.moe_layers * moe
        return V * d + self.seq_len * d + blocks + 2 * d + head

