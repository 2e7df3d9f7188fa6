"""Model FLOPs per token by a named convention: what MFU divides by.

Trainers print MFU against model FLOPs, not the FLOPs a trace executed (HFU: recomputation
included, causal attention halved by flash kernels). They differ in what they count (docs/model.md):

- ``nanogpt`` (the headline): ``6·N + 6·L·heads·(head_dim + v_head_dim)·seq`` — N the parameters
  active per token (dense + shared experts + routed experts × top_k / experts) without the input
  embedding tables (a tied table counts once, as the output head: nanoGPT's ``estimate_mfu`` keeps
  ``wte`` in N), attention in full (no causal halving), no recomputation. With ``v_head_dim =
  head_dim`` the attention term is nanoGPT's and PaLM's 12·L·H·Q·T; for a model whose output head is
  its own tensor it is torchtitan's to the FLOP.
- ``torchtitan``: torchtitan's ``get_nparams_and_flops`` (models/utils.py, per model family) to the
  letter: as the headline, except that a tied table is left out of N altogether (torchtitan drops
  every parameter named ``embedding``, and the one shared tensor carries the embedding's name), so
  its MFU is lower than the headline's by the head's share for a tied model (Qwen3-0.6B: 15 %).
- ``megatron``: Megatron-LM's ``num_floating_point_operations`` (training.py): the same matmul
  parameters (the logits' h·V is the output head, in N) but causal attention halved:
  ``6·N + 3·L·heads·(head_dim + v_head_dim)·seq``. Its norms and biases are not counted (a
  fraction of a per cent here).
- ``palm``: PaLM appendix B, ``6·N + 12·L·H·Q·T``, Q the query/key head dim (the value's taken
  equal to it), N as above.

A model the trace shows no heads for falls back on the hidden size for heads × head_dim (medium
confidence).
"""

from __future__ import annotations

from workbench.analysis.model.context import field, least

CONVENTION = ("nanogpt: 6·N_active + 6·L·heads·(head_dim + v_head_dim)·seq FLOPs per token (N_active: the "
              "parameters active per token without the input embedding tables, a tied table counted once as the "
              "output head; attention in full, no causal halving, no recomputation; torchtitan's for an untied head)")
"""What ``model_flops_per_token`` counts, as ``workbench analyze --json`` names it (``model.convention``)."""

CONVENTIONS = {
    "nanogpt": CONVENTION,
    "torchtitan": "torchtitan (get_nparams_and_flops): 6·N_active + 6·L·heads·(head_dim + v_head_dim)·seq, a tied table "
                  "left out of N (it carries the embedding's name)",
    "megatron": "Megatron-LM: 6·N_active + 3·L·heads·(head_dim + v_head_dim)·seq (causal attention halved; the logits' "
                "6·h·V is the output head's share of N)",
    "palm": "PaLM appendix B: 6·N_active + 12·L·heads·head_dim·seq (the query/key head dim for both attention matmuls)",
}
"""Each convention's formula, by name; ``nanogpt`` is the headline MFU's."""

_ATTENTION_FACTOR = {"nanogpt": (6, "sum"), "torchtitan": (6, "sum"), "megatron": (3, "sum"), "palm": (12, "q")}


def _tied_table(f: dict) -> int | None:
    """The tied token table's parameters (vocab × hidden); 0 untied; None when tied but unsized."""
    if not f.get("tied", {}).get("value"):
        return 0
    v, h = f.get("vocab", {}).get("value"), f.get("hidden", {}).get("value")
    return v * h if v and h else None


def n_active(f: dict) -> dict | None:
    """N: params_active (params_total for a model with no experts) − params_embedding."""
    act = f.get("params_active") or (f.get("params_total") if "experts" not in f else None)
    emb = f.get("params_embedding")
    if not act or not emb:
        return None
    n = act["value"] - emb["value"]
    return {"value": n, "confidence": least(act["confidence"], emb["confidence"]),
            "what": "params_active − params_embedding" if "params_active" in f else "params_non_embedding"}


def flops_per_token(f: dict, convention: str = "nanogpt") -> dict | None:
    """The convention's model FLOPs per token from the fields, or None when a term is missing."""
    n = n_active(f)
    if n is None or any(f.get(k, {}).get("value") is None for k in ("layers", "seq")):
        return None
    L, s, N = f["layers"]["value"], f["seq"]["value"], n["value"]
    if convention == "torchtitan":
        tied = _tied_table(f)
        if tied is None:
            return None
        N -= tied
    conf = least(n["confidence"], f["layers"]["confidence"], f["seq"]["confidence"])
    c, how = _ATTENTION_FACTOR[convention]
    if f.get("heads", {}).get("value") and f.get("head_dim", {}).get("value"):
        h, q = f["heads"]["value"], f["head_dim"]["value"]
        v = f.get("v_head_dim", {}).get("value") or q
        conf = least(conf, f["heads"]["confidence"], f["head_dim"]["confidence"])
        if how == "sum":
            return field(int(6 * N + c * L * h * (q + v) * s), f"6 × {N:,} + {c} × {L} × {h} × ({q} + {v}) × {s}", conf)
        return field(int(6 * N + c * L * h * q * s), f"6 × {N:,} + {c} × {L} × {h} × {q} × {s}", conf)
    if f.get("hidden", {}).get("value"):  # heads × head_dim stands in as the query's width: the hidden size
        hid = f["hidden"]["value"]
        k = c * 2 if how == "sum" else c
        return field(int(6 * N + k * L * hid * s), f"6 × {N:,} + {k} × {L} × {hid} (hidden, for heads × head_dim) × {s}",
                     least(conf, "medium"))
    return None
