"""The forward GEMMs' weights: the MLP's width and gating, the output head, each block's parts.

A forward GEMM multiplies by ``W.t()``: its weight is ``[in, out]`` (``aten::mm`` ``[[M, in], [in,
out]]``, ``aten::addmm`` ``[[out], [M, in], [in, out]]``; M the rows, the tokens it saw). The
attention kernels cut a forward pass into segments: segment k runs from attention k to attention
k + 1 and holds, in order, attention k's output projection (its first GEMM back to ``hidden``:
``heads·head_dim → hidden``, *not* an MLP, although its input width is neither the hidden size nor
the MLP's in models such as Qwen3), block k's MLP or mixture of experts, and block k + 1's Q/K/V
projections. The MLP's down projections are the later GEMMs back to ``hidden``; their input width
is the MLP's (``ffn``), the up-projections from ``hidden`` to that width (two, or one of twice the
width, mean a gated MLP).

A segment that runs a router (``aten::topk``) or expert GEMMs (``aten::_grouped_mm``) is a mixture
of experts: there a dense MLP that saw every token (M = the output projection's M) is a shared
expert, and dense GEMMs that saw fewer are per-expert (a loop over experts, Hugging Face's
``experts_implementation="eager"`` or transformers 4.x). The output head is the pass's last GEMM,
from ``hidden`` to something wider. Without attention kernels (a fused kernel of another library)
the down projections are the GEMMs back to ``hidden`` from a wider input, as before.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field as dc_field

import numpy as np
import pandas as pd

from workbench.analysis.model.context import GROUPED_MM, Candidates, Context, field
from workbench.format import kineto

ROUTER_OPS = ("aten::topk",)


@dataclass
class Segment:
    """One attention's output projection and what follows it up to the next attention."""

    tokens: int | None = None
    """The output projection's rows: every token of the micro-batch."""
    moe: bool = False
    dense_ffn: list[int] = dc_field(default_factory=list)
    """Input widths of the dense down projections that saw every token (the MLP, or a shared expert)."""
    ups: list[tuple] = dc_field(default_factory=list)
    """``(in, out)`` of the GEMMs from hidden that saw every token, after the output projection
    (``(in, out, rows)`` while the segment is read)."""
    expert_downs: list[int] = dc_field(default_factory=list)
    """Input widths of down projections that saw fewer tokens (per-expert GEMMs)."""
    expert_weights: list[tuple[int, int]] = dc_field(default_factory=list)
    grouped: list[list] = dc_field(default_factory=list)
    """``Input Dims`` of the segment's grouped GEMMs."""


@dataclass
class Projections:
    hidden: int | None
    weights: Counter
    """``(in, out)`` → forward GEMMs per forward pass."""
    ws: list
    head_w: tuple[int, int] | None
    pre_attention: list[tuple[int, int]]
    """The first layer's GEMMs before its attention kernel (its Q/K/V projections)."""
    segments: list[Segment]


def _gemm(name: str, dims) -> tuple[tuple[int, int], int] | None:
    """``((in, out), rows)`` of a forward GEMM, or None."""
    if not dims:
        return None
    try:
        if name in GROUPED_MM:
            a, b = dims[0], dims[1]
            return ((int(b[1]), int(b[2])), int(a[0])) if len(a) == 2 and len(b) == 3 else None
        x, w = (dims[1], dims[2]) if name == "aten::addmm" else (dims[0], dims[1])
    except IndexError:
        return None
    if name == "aten::convolution" or len(w) != 2 or len(x) != 2:
        return None
    return (int(w[0]), int(w[1])), int(x[0])


def weight(name: str, dims) -> tuple[int, int] | None:
    """``(in, out)`` of a forward GEMM's weight (``W.t()`` as the op sees it)."""
    g = _gemm(name, dims) if name not in GROUPED_MM else None
    return g[0] if g else None


def projections(ctx: Context, f: Candidates) -> Candidates:
    """``ffn``, ``gated`` (the dense MLP), ``vocab`` (the head, where no table said), ``layers``
    (MLPs, where no attention kernel said); sets ``ctx.proj``."""
    out: Candidates = {}
    hidden = f.get("hidden", {}).get("value")
    n_layers = f.get("layers", {}).get("value")
    fwd = ctx.forward_first()
    fw = fwd[(fwd["ts_us"] < ctx.b0) & fwd["name"].isin(list(kineto.WEIGHT_OPS) + list(GROUPED_MM))]
    rows = [(t, n, g) for t, n, d in zip(fw["ts_us"], fw["name"], fw["dims"]) if (g := _gemm(n, d)) is not None]
    dense = [(t, g[0], g[1]) for t, n, g in rows if n not in GROUPED_MM]
    ws = [w for _, w, _ in dense]
    weights = Counter({w: c / ctx.passes_before for w, c in Counter(ws).items()})
    ctx.evidence["weights"] = {f"{i}x{o}": n for (i, o), n in weights.items()}
    # the output head is the pass's last GEMM, from hidden to something wider (a pipeline's last
    # stage has a head and no embedding); it is not an MLP's up-projection
    head_w = ws[-1] if ws and hidden and ws[-1][0] == hidden and ws[-1][1] > hidden else None
    if head_w and "vocab" not in f and n_layers is not None:
        out["vocab"] = field(int(head_w[1]), f"the output head's width (the forward's last GEMM, {hidden}→{head_w[1]})", "medium")
    att = ctx.attention_ts
    pre = [w for t, w, _ in dense if len(att) and t < att[0]]
    segments = _segments(ctx, rows, hidden, head_w) if hidden and len(att) else []
    ctx.proj = Projections(hidden=hidden, weights=weights, ws=ws, head_w=head_w, pre_attention=pre, segments=segments)
    if not hidden or not weights:
        return out
    if segments:
        out.update(_mlp_of_segments(ctx, segments, hidden))
    else:
        out.update(_mlp_by_widths(ctx, weights, head_w, hidden, n_layers))
    if "layers" not in f and "ffn" in out and ("vocab" in f or "vocab" in out):
        # no attention op the analysis knows (a fused kernel of another library): one MLP per layer
        n = ctx.evidence.get("mlp_down_per_pass")
        if n and n >= 2:
            out["layers"] = field(int(n), f"{int(n)} MLP down-projections {out['ffn']['value']}→{hidden} per forward pass "
                                          "(no attention op recognised)", "medium")
    vocab = (f.get("vocab") or out.get("vocab") or {}).get("value")
    if vocab:
        ctx.evidence["head_gemms"] = weights.get((hidden, vocab), 0)
    return out


def routers(ctx: Context, head_w) -> pd.DataFrame:
    """The first passes' router calls: ``aten::topk`` but over the logits (``[tokens, vocab]``: an
    accuracy metric or a sampler, not a router)."""
    t = ctx.first_pass_args(ROUTER_OPS)
    vocab = {head_w[1]} if head_w else set()
    vocab |= {int(r) for r, _ in ctx.tables}
    keep = [not (a.dims and a.dims[0] and a.dims[0][-1] in vocab) for a in t["args"]]
    return t[np.array(keep, dtype=bool)]


def _segments(ctx: Context, rows, hidden: int, head_w) -> list[Segment]:
    att = ctx.attention_ts
    routers_ts = routers(ctx, head_w)["ts_us"].to_numpy(dtype=float)
    seg_of = lambda ts: int(np.searchsorted(att, ts, side="right"))  # noqa: E731
    segs = [Segment() for _ in range(len(att) + 1)]
    for t in routers_ts:
        segs[seg_of(t)].moe = True
    for t, name, ((i, o), m) in rows:
        k = seg_of(t)
        s = segs[k]
        if name in GROUPED_MM:
            s.moe = True
            s.grouped.append([m, i, o])
            continue
        if k == 0 or (head_w and (i, o) == head_w):
            continue
        if s.tokens is None:
            if o == hidden:  # the attention's output projection: its rows are every token
                s.tokens = m
            continue
        if i == hidden and o != hidden:
            s.ups.append((i, o, m))
        elif o == hidden and i != hidden:
            if s.tokens is None or m == s.tokens:
                s.dense_ffn.append(i)
            else:
                s.expert_downs.append(i)
    for s in segs:
        # GEMMs from hidden with fewer rows than the tokens are an expert's (a per-expert loop)
        s.expert_weights = [(i, o) for i, o, m in s.ups if s.tokens is not None and m != s.tokens]
        s.ups = [(i, o) for i, o, m in s.ups if s.tokens is None or m == s.tokens]
        if s.expert_downs:
            s.moe = True
    return segs[1:]


def _mlp_of_segments(ctx: Context, segments: list[Segment], hidden: int) -> Candidates:
    out: Candidates = {}
    plain = [s for s in segments if not s.moe and s.dense_ffn]
    ctx.evidence["mlp_segments"] = {"dense": len(plain) / ctx.passes_before,
                                    "moe": sum(s.moe for s in segments) / ctx.passes_before}
    if not plain:
        return out
    widths = Counter(w for s in plain for w in s.dense_ffn)
    ffn, n = widths.most_common(1)[0]
    per_pass = n / ctx.passes_before
    ctx.evidence["mlp_down_per_pass"] = per_pass
    ups = sum(sum(1 for i, o in s.ups if o == ffn) for s in plain)
    fused = sum(sum(1 for i, o in s.ups if o == 2 * ffn) for s in plain)
    out["ffn"] = field(int(ffn), f"input width of the {per_pass:g} dense down-projections back to hidden {hidden} per forward pass "
                                 "(after each attention's output projection)")
    out["gated"] = field(bool(ups >= 2 * n or fused >= n),
                         f"{ups / ctx.passes_before:g} up-projections {hidden}→{ffn} (+{fused / ctx.passes_before:g} fused "
                         f"{hidden}→{2 * ffn}) per {per_pass:g} down-projections")
    return out


def _mlp_by_widths(ctx: Context, weights: Counter, head_w, hidden: int, n_layers: int | None) -> Candidates:
    """No attention kernel to cut the pass by: the down projections are the GEMMs back to hidden
    from a wider input."""
    out: Candidates = {}
    mlp = Counter(weights)
    if head_w:
        mlp[head_w] -= 1
    down = Counter({i: n for (i, o), n in mlp.items() if o == hidden and i != hidden and n > 0})
    if not down:
        return out
    ffn, per_pass = down.most_common(1)[0]
    if n_layers and per_pass < n_layers * 0.5:
        return out
    up = sum(c for (i, o), c in mlp.items() if i == hidden and o == ffn)
    fused = sum(c for (i, o), c in mlp.items() if i == hidden and o == 2 * ffn)
    out["ffn"] = field(int(ffn), f"input width of the {per_pass:g} projections back to hidden {hidden} per forward pass")
    out["gated"] = field(bool(up >= 2 * per_pass or fused >= per_pass),
                         f"{up:g} up-projections {hidden}→{ffn} (+{fused:g} fused {hidden}→{2 * ffn}) per {per_pass:g} down-projections")
    ctx.evidence["mlp_down_per_pass"] = per_pass
    return out
