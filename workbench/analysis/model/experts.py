"""A mixture of experts: routed experts, top-k, shared experts, the expert width, which blocks.

Evidence (docs/model.md):

- the router's ``aten::topk``: input ``[tokens, experts]``, k in ``Concrete Inputs`` (argument 1).
  Group-limited routers (DeepSeek-V3) call it more than once per layer (the groups' best two, the
  chosen groups, then the experts): the call over the widest input is the experts'.
- ``aten::histc``: tokens per expert, ``bins`` = experts (Concrete Inputs argument 1).
- ``aten::_grouped_mm``: ``[[M, D], [E, D, H], [E]]``, E this rank's experts, M the routed rows
  (tokens × top_k); up-projections from the hidden size (gate and up fused: H = 2 × the expert
  width), the down projection back to it (D = the expert width). Their offsets' values are not
  recorded: how many tokens each expert got is not in a trace.
- a per-expert loop (transformers' ``experts_implementation="eager"``, 4.x modules): dense GEMMs
  inside a block with a router that saw fewer rows than the block's tokens (:mod:`.projections`).
- shared experts: a dense MLP in the same block that saw every token; its width over the expert
  width is their number (DeepSeek fuses its shared experts into one MLP of that width).
- the routed experts' parameters: gradients of 3-D ``[E, …]`` tensors (transformers 5.x,
  torchtitan), else the expert GEMMs' weights × experts.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from workbench.analysis.model.context import Candidates, Context, field, median
from workbench.analysis.model.projections import routers


def _int(text: str) -> int | None:
    try:
        return int(float(text))
    except (TypeError, ValueError):
        return None


def experts(ctx: Context, f: Candidates) -> Candidates:
    """``experts``, ``top_k``, ``moe_ffn``, ``moe_layers``, ``dense_layers``, ``shared_experts``;
    evidence ``routed_params`` (this rank's routed experts' parameters), ``router_topk_per_layer``,
    ``expert_load`` (why per-expert counts are not in the trace)."""
    out: Candidates = {}
    p = ctx.proj
    segs = p.segments if p else []
    moe = [s for s in segs if s.moe]
    topk = routers(ctx, p.head_w if p else None)
    histc = ctx.first_pass_args(("aten::histc",))
    if not moe and topk.empty:
        return out
    evid = ctx.evidence
    hidden = p.hidden if p else None
    per_pass = len(moe) / ctx.passes_before if moe else None
    # the router: the topk over the widest input
    e_router = k = None
    if not topk.empty:
        width = [(a.dims[0][-1] if a.dims and a.dims[0] else 0) for a in topk["args"]]
        widest = max(width)
        calls = [a for a, w in zip(topk["args"], width) if w == widest]
        ks = Counter(_int(a.concrete[1]) if len(a.concrete) > 1 else None for a in calls)
        k = ks.most_common(1)[0][0]
        e_router = int(widest)
        if per_pass:
            evid["router_topk_per_layer"] = round(len(topk) / ctx.passes_before / per_pass, 2)
        elif not segs:  # no attention op to cut the pass into blocks: one router (its widest topk) per block
            per_pass = len(calls) / ctx.passes_before
    bins = Counter(_int(a.concrete[1]) for a in histc["args"] if len(a.concrete) > 1)
    grouped = [g for s in moe for g in s.grouped]
    e_local = Counter(int(d[0]) for d in _grouped_weights(ctx)).most_common(1)
    e_local = e_local[0][0] if e_local else None
    if e_router:
        src = f"the router's aten::topk over [tokens, {e_router}]"
        if bins and bins.most_common(1)[0][0] == e_router:
            src += f"; aten::histc with {e_router} bins"
        out["experts"] = field(e_router, src)
    elif bins:
        out["experts"] = field(int(bins.most_common(1)[0][0]), "aten::histc bins (tokens per expert)", "medium")
    elif e_local:
        out["experts"] = field(e_local, "aten::_grouped_mm weights [E, D, H]", "medium")
    if e_local and "experts" in out and e_local < out["experts"]["value"]:
        evid["experts_per_rank"] = e_local  # expert parallelism: this rank holds a share
    if k:
        out["top_k"] = field(int(k), f"aten::topk k = {k} over the router's [tokens, {e_router}]"
                             + (f" ({evid['router_topk_per_layer']:g} topk calls per layer: group-limited routing)"
                                if evid.get("router_topk_per_layer", 1) > 1 else ""))
    elif grouped and moe[0].tokens:
        m = grouped[0][0] / moe[0].tokens
        if m.is_integer():
            out["top_k"] = field(int(m), f"grouped GEMM rows {grouped[0][0]} / {moe[0].tokens} tokens", "medium")
    # the expert width: the grouped down projection's input, else the per-expert down projections'
    # (a segment's last grouped GEMM back to hidden: gate and up fused may be as wide as hidden)
    downs = Counter(next(i for m, i, o in reversed(s.grouped) if o == hidden) for s in moe
                    if any(o == hidden for m, i, o in s.grouped))
    downs += Counter(i for s in moe for i in s.expert_downs)
    if downs:
        moe_ffn = downs.most_common(1)[0][0]
        how = "aten::_grouped_mm" if any(s.grouped for s in moe) else "per-expert GEMMs (a loop over experts)"
        out["moe_ffn"] = field(int(moe_ffn), f"input width of the experts' down projections back to hidden {hidden} ({how})")
    if per_pass and not moe:
        out["moe_layers"] = field(int(round(per_pass)), f"{per_pass:g} routers (aten::topk over [tokens, experts]) per "
                                                        "forward pass", "medium")
    elif per_pass:
        out["moe_layers"] = field(int(round(per_pass)), f"{per_pass:g} blocks with a router or expert GEMMs per forward pass")
        dense = sum(1 for s in segs if not s.moe and s.dense_ffn) / ctx.passes_before
        out["dense_layers"] = field(int(round(dense)), f"{dense:g} blocks with a dense MLP beside the {per_pass:g} mixtures of experts")
    if "moe_ffn" in out:
        out.update(_shared(moe, out["moe_ffn"]["value"]))
    routed = _routed_params(ctx, out, moe)
    if routed:
        evid["routed_params"] = routed
        gating = _expert_gating(routed, evid.get("experts_per_rank") or out.get("experts", {}).get("value"),
                                out.get("moe_layers", {}).get("value"), hidden, out.get("moe_ffn", {}).get("value"))
        if gating and "gated" not in f:  # no dense MLP said it: the experts' matrices do
            out["gated"] = gating
    if any(s.grouped for s in moe):
        evid["expert_load"] = ("not in the trace: aten::_grouped_mm's offsets (tokens per expert) are not recorded; "
                               "per-expert counts need a capture of the router's output")
    elif moe:
        n_gemm = median([len(s.expert_downs) for s in moe])
        evid["expert_load"] = (f"a per-expert loop: {n_gemm:g} experts ran a GEMM per block (an expert that got no token "
                               "runs none); their rows are the tokens each got")
    return out


def _shared(moe, mf: int) -> Candidates:
    """``shared_experts`` and ``shared_ffn`` (one shared expert's width): a dense MLP that saw every
    token in the blocks with experts. Behind a gate of its own (a projection from hidden to one value
    per token, whose sigmoid scales it: Qwen2-MoE, Qwen3-Next) it is one expert of its width; without
    one, its width over the expert width is the number of shared experts fused into it (DeepSeek's
    ``n_shared_experts``)."""
    shared = Counter(w for s in moe for w in s.dense_ffn)
    if not shared:
        return {"shared_experts": field(0, "no dense MLP saw every token in the blocks with experts")}
    w = shared.most_common(1)[0][0]
    gated = sum(1 for s in moe if any(o == 1 for _, o in s.ups))
    if gated >= len(moe) / 2:
        src = (f"a dense MLP of width {w} that saw every token in each expert block, behind a gate of its own "
               f"(a projection to one value per token in {gated} of {len(moe)} expert blocks): one shared expert")
        return {"shared_experts": field(1, src), "shared_ffn": field(int(w), src)}
    n = w / mf
    if n.is_integer():
        src = f"a dense MLP of width {w} that saw every token in each expert block = {n:g} × the expert width {mf}"
        return {"shared_experts": field(int(n), src), "shared_ffn": field(int(mf), src)}
    src = f"a dense MLP of width {w} that saw every token in each expert block (not a multiple of the expert width {mf})"
    return {"shared_experts": field(1, src, "medium"), "shared_ffn": field(int(w), src, "medium")}


def _expert_gating(routed: int, experts: int | None, layers: int | None, hidden: int | None, width: int | None) -> dict | None:
    """``gated`` of the experts' MLPs: this rank's routed parameters over experts × MoE layers ×
    hidden × expert width are the matrices of one expert, 3 for SwiGLU (gate, up, down), 2 for a
    plain MLP. For a model whose every block is a mixture, where no dense MLP shows it."""
    if not (experts and layers and hidden and width):
        return None
    mats = routed / (experts * layers * hidden * width)
    if abs(mats - round(mats)) > 0.02 or round(mats) not in (2, 3):
        return None
    return field(round(mats) == 3, f"the routed experts' {routed:,} parameters = {round(mats)} matrices of {hidden}×{width} "
                                   f"per expert ({experts} experts × {layers} layers)")


def _grouped_weights(ctx: Context) -> list[list[int]]:
    """The 3-D weights ``[E, D, H]`` of the first forward passes' grouped GEMMs."""
    fwd = ctx.forward_first()
    g = fwd[fwd["name"].isin(["aten::_grouped_mm", "aten::_scaled_grouped_mm"]) & (fwd["ts_us"] < ctx.b0)]
    return [d[1] for d in g["dims"] if d and len(d) > 1 and len(d[1]) == 3]


def _routed_params(ctx: Context, out: Candidates, moe) -> int | None:
    """This rank's routed experts' parameters: its 3-D expert gradients ``[E, …]``, else the
    forward's expert weights (a grouped GEMM's ``E·D·H``; a per-expert loop's weights per expert
    × the experts)."""
    e = out.get("experts", {}).get("value")
    e_local = ctx.evidence.get("experts_per_rank", e)
    grads = ctx.grads
    if grads is not None and len(grads) and e_local:
        shapes = [tuple(x.dims[0]) for x in grads["args"] if x.dims and x.dims[0]]
        three = [sh for sh in shapes if len(sh) == 3 and sh[0] == e_local]
        if three:
            return int(sum(np.prod(sh) for sh in three))
    gw = _grouped_weights(ctx)
    if gw:
        return int(sum(np.prod(d) for d in gw) / ctx.passes_before)
    hidden = ctx.proj.hidden if ctx.proj else None
    if e and moe and hidden:
        # a loop: each block ran some experts; one expert's weights are its GEMMs' / the experts that ran
        total = 0.0
        for s in moe:
            if s.expert_downs:
                ran = sum(i * o for i, o in s.expert_weights) + sum(i * hidden for i in s.expert_downs)
                total += ran / len(s.expert_downs) * e
        return int(round(total / ctx.passes_before)) if total else None
    return None
