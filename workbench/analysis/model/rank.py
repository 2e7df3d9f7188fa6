"""One rank's model: every kind of evidence, reconciled.

The modules run from the most direct evidence to what builds on it — passes, embedding tables,
attention kernels, the forward GEMMs' projections, attention heads (they need the projections),
experts, parameters — each returning candidate fields; :func:`reconcile` keeps the surer one
(at equal confidence the later evidence, which corrects the earlier).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from workbench.analysis.model.attention import attention_heads, attention_kernels, per_head_views
from workbench.analysis.model.context import Candidates, build, field, reconcile
from workbench.analysis.model.embedding import embedding
from workbench.analysis.model.experts import experts
from workbench.analysis.model.layout import layout_evidence
from workbench.analysis.model.optimizer import optimizer
from workbench.analysis.model.parameters import active, parameters
from workbench.analysis.model.passes import passes, tokens
from workbench.analysis.model.projections import projections
from workbench.analysis.model.recompute import recompute
from workbench.load.trace import Trace

FIELDS = ("params_total", "params_active", "params_embedding", "params_non_embedding", "layers", "hidden", "heads",
          "kv_heads", "head_dim", "v_head_dim", "attention", "qk_norm", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "ffn",
          "gated", "experts",
          "top_k", "shared_experts", "shared_ffn", "moe_ffn", "moe_layers", "dense_layers", "vocab", "tied", "seq", "micro_batch",
          "micro_batches", "tokens_per_step", "global_tokens_per_step", "dtype", "recompute", "recompute_fraction",
          "recompute_mode", "layout", "optimizer", "model_flops_per_token")
"""The names of the ``model.fields`` block, in the order the JSON lists them."""
TRANSFORMER_FIELDS = frozenset({"layers", "hidden", "heads", "kv_heads", "head_dim", "v_head_dim", "attention", "qk_norm",
                                "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "ffn", "gated", "experts", "top_k", "shared_experts", "shared_ffn",
                                "moe_ffn", "moe_layers", "dense_layers", "vocab", "tied", "seq", "params_embedding",
                                "params_non_embedding", "model_flops_per_token", "tokens_per_step",
                                "global_tokens_per_step"})


def rank_model(trace: Trace, windows: pd.DataFrame, ops: pd.DataFrame) -> dict[str, Any]:
    """One rank's model: ``{"kind", "fields": {NAME: field}, "evidence": {...}}``.

    ``windows``: analysis.steps.step_windows; ``ops``: the counted ops that ran (the efficiency
    frame's ``ops``: analysis.flops.op_flops, on GPU traces only those that launched kernels).
    Fields are this rank's: local shards under tensor parallelism, this stage's layers under
    pipelining; :func:`workbench.analysis.model_run.run_model` makes them the model's. Empty
    fields when the trace has no shapes or no step."""
    out: dict[str, Any] = {"kind": None, "fields": {}, "evidence": {}}
    ctx = build(trace, windows, ops)
    if ctx is None:
        return out
    f: Candidates = {}
    reconcile(f, passes(ctx))
    reconcile(f, embedding(ctx))
    reconcile(f, attention_kernels(ctx, f))
    reconcile(f, projections(ctx, f))
    reconcile(f, per_head_views(ctx, f))
    reconcile(f, attention_heads(ctx, f))
    reconcile(f, experts(ctx, f))
    reconcile(f, parameters(ctx, f))
    act = active(f.get("params_total"), ctx.evidence.get("routed_params"), f)
    if act:
        f["params_active"] = act
    reconcile(f, tokens(ctx, f))
    reconcile(f, _dtype(ctx.ops))
    reconcile(f, recompute(ctx.ops, ctx.steps, ctx.evidence.get("token_table")))
    opt = optimizer(ctx.ev, ctx.names)
    if opt:
        f["optimizer"] = opt
    evid = ctx.evidence
    causal = _causal_pct(ctx.ops)
    if causal is not None:
        evid["causal_attention_pct"] = causal
    evid["layout"] = layout_evidence(ctx)
    out["evidence"] = evid
    out["kind"] = _kind(ctx, f)
    out["fields"] = f
    return out


def _dtype(ops: pd.DataFrame) -> Candidates:
    """``dtype``: the GEMMs' (and attention's) FLOPs by the dtype that ran."""
    comp = ops[ops["kind"].isin(["gemm", "attention", "conv"])] if "kind" in ops else ops.iloc[0:0]
    if comp.empty or comp["flops"].sum() <= 0:
        return {}
    by = comp.groupby("dtype")["flops"].sum()
    top = str(by.idxmax())
    return {"dtype": field(top, f"{100 * by.max() / by.sum():.0f}% of the GEMM/attention FLOPs ran in {top}")}


def _causal_pct(ops: pd.DataFrame) -> float | None:
    """The executed count halves causal attention (analysis.flops); the convention does not."""
    att = ops[ops["kind"] == "attention"] if "kind" in ops else ops.iloc[0:0]
    if att.empty or att["flops"].sum() <= 0 or "causal" not in att:
        return None
    return round(100.0 * float(att.loc[att["causal"].astype(bool), "flops"].sum()) / float(att["flops"].sum()), 1)


def _kind(ctx, f: Candidates) -> str | None:
    """transformer, convnet or other; a field that does not fit the kind is dropped."""
    ops = ctx.ops
    has_conv = (ops["kind"] == "conv").any() if "kind" in ops else False
    if "heads" in f or ctx.evidence.get("attention_op") or ("vocab" in f and "layers" in f):
        kind = "transformer"
    elif has_conv:
        kind = "convnet"
        # a convnet has no tokens; its first convolution's input is the batch
        conv = ops[(ops["kind"] == "conv") & ~ops["in_bwd"] & (ops["step"] == ctx.first)]
        d = conv["dims"].iloc[0] if not conv.empty else None
        if d and len(d[0]) >= 3:
            f["micro_batch"] = field(int(d[0][0]), f"the first convolution's input {list(d[0])}")
        for k in list(f):
            if k in TRANSFORMER_FIELDS:
                f.pop(k)
    elif not ops.empty:
        kind = "other"
        # without attention, an embedding's [a, b] input may be [seq, batch] (an RNN's layout)
        for k in list(f):
            if k in TRANSFORMER_FIELDS or k == "micro_batch":
                f.pop(k)
    else:
        kind = None
    if kind != "transformer" and "recompute" in f and f["recompute"]["value"] != "none":
        for k in ("recompute", "recompute_fraction"):  # no attention layers to count it per layer by
            f[k]["confidence"] = "medium"
        f.pop("recompute_mode", None)  # which policy ran is read off attention layers
    return kind
