"""Attention: heads, head dims, KV heads, the attention's kind, the layers.

The attention kernel's operands (analysis.flops.ATTENTION; the flash-attn package's own ops where
no aten one runs) give the query's heads and head dim and the sequence; the value's last dim is
the value head dim (latent attention: ``v_head_dim`` ≠ ``head_dim``); the key's heads, or the K/V
projections' widths when K/V were repeated before the kernel, the KV heads. The forward calls per
forward pass are the attention layers. heads × head_dim is *not* the hidden size in several
current families (Qwen3: 32 × 128 against 2560): the hidden size comes from the embedding table,
and this product only stands in when no table was seen.

Latent attention (MLA, DeepSeek-V2/V3) shows in the projections: a low-rank query
(``hidden → q_lora_rank → heads·head_dim``) and a compressed KV (``kv_lora_rank → heads·(qk_nope +
v_head_dim)``).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from workbench.analysis.flops import ATTENTION
from workbench.analysis.model.context import FWD_ATTENTION, Candidates, Context, field, median

QK_NORM_OPS = ("aten::rms_norm", "aten::_fused_rms_norm", "aten::layer_norm", "aten::native_layer_norm", "aten::pow")
"""Ops a per-head query/key norm runs as: torch's norms, or an eager RMSNorm's ``x.pow(2).mean(-1)``
(Hugging Face's Qwen3RMSNorm) over ``[batch, seq, heads, head_dim]``."""

ROTATE_HALF_OPS = ("aten::neg", "aten::cat")
"""The rotary embedding's ``rotate_half(x) = cat(-x2, x1)`` over the query and key head by head,
``[batch, seq, heads, head_dim / 2]`` (or heads before seq): what shows the heads where the attention
itself runs as no op the analysis knows (torchtitan's gpt-oss: FlexAttention under torch.compile)."""

FLASH_ATTN = ("flash_attn::_flash_attn_forward", "flash_attn::_flash_attn_varlen_forward")
"""The flash-attn package's forward ops: q ``[batch, seq, heads, dim]`` (varlen: ``[tokens, heads, dim]``)."""


def attention_kernels(ctx: Context, f: Candidates) -> Candidates:
    """``heads``, ``head_dim``, ``v_head_dim``, ``layers`` (and ``seq``/``micro_batch``/``hidden``
    where the embedding did not say); sets ``ctx.attention_ts``."""
    out: Candidates = {}
    ops, args, evid = ctx.ops, ctx.args, ctx.evidence
    is_fwd = ops["name"].isin(FWD_ATTENTION).to_numpy()
    att = ops[is_fwd & ops["dims"].notna().to_numpy()]
    att_out = att[~att["in_bwd"]]
    attention = ATTENTION
    if att_out.empty:  # the flash-attn package's ops (not counted as FLOPs: analysis.flops knows aten's)
        fa = args[args["name"].isin(FLASH_ATTN)]
        att_out = fa[~fa["in_bwd"]].assign(dims=[x.dims for x in fa[~fa["in_bwd"]]["args"]])
        attention = {n: (0, 1, -1, "bshd") for n in FLASH_ATTN}
    if att_out.empty:
        return _matmul_attention(ctx, f)
    evid["attention_op"] = str(att_out["name"].iloc[0])
    first = att_out[(att_out["step"] == ctx.first) & (att_out["ts_us"] < ctx.b0)]
    ctx.attention_ts = np.sort(first["ts_us"].to_numpy(dtype=float))
    name = att_out["name"].iloc[0]
    qi, ki, _, layout = attention[name]
    d = att_out["dims"].iloc[0]
    q, k = d[qi], d[ki]
    v = d[ki + 1] if len(d) > ki + 1 else []
    if len(q) == 3 and len(k) == 3:  # varlen: [tokens, heads, dim], sequences packed
        q, k, v = [1, *q], [1, *k], ([1, *v] if len(v) == 3 else v)
        evid["packed_sequences"] = True
    if len(q) == 4 and len(k) == 4:
        b, h, s, hd = (q[0], q[2], q[1], q[3]) if layout == "bshd" else tuple(q)
        kh = k[2] if layout == "bshd" else k[1]
        src = f"{name} query {list(q)}"
        out["heads"] = field(int(h), src)
        out["head_dim"] = field(int(hd), src)
        if len(v) == 4 and v[-1] != hd:
            out["v_head_dim"] = field(int(v[-1]), f"{name} value {list(v)} (its head dim differs from the query's)")
        evid["attention_kv_heads"] = int(kh)
        if evid.get("packed_sequences"):
            s = b = None  # one packed batch: its length is no sequence's
        if "seq" in f and "micro_batch" in f and (f["seq"]["value"], f["micro_batch"]["value"]) == (b, s) and b != s:
            # the embedding's input was [seq, batch] (sequence-first): the attention says which
            out["seq"] = field(int(s), f"{src} (the embedding's input is [seq, batch])")
            out["micro_batch"] = field(int(b), src)
        if "seq" not in f and s:
            out["seq"] = field(int(s), src, "medium")
        if "micro_batch" not in f and b:
            out["micro_batch"] = field(int(b), src, "medium")
        if "hidden" not in f:
            out["hidden"] = field(int(h * hd), "heads × head_dim of the attention's query (no embedding table seen)", "low")
    calls = median([int((att_out["step"] == s).sum()) for s in ctx.steps])
    if calls and ctx.n_mb:
        layers = calls / ctx.n_mb
        out["layers"] = field(int(round(layers)), f"{int(calls)} attention forwards per step / {ctx.n_mb} forward passes",
                              "high" if float(layers).is_integer() else "medium")
    if "seq" in f and "micro_batch" not in f and "seq" not in out and "flat_tokens" in evid:
        out["micro_batch"] = field(evid["flat_tokens"] // f["seq"]["value"], "flattened embedding input / seq", "medium")
    return out


def _matmul_attention(ctx: Context, f: Candidates) -> Candidates:
    """Attention written as two matmuls (eager attention: gpt-oss's sinks, models without an SDPA
    path): ``aten::bmm`` ``[B·H, s, d] × [B·H, d, s']`` (the scores) followed on its thread by
    ``[B·H, s, s'] × [B·H, s', d_v]`` (the weighted values). H = B·H / the micro-batch; the key
    may have been repeated to every head first, so KV heads come from the projections."""
    mb = f.get("micro_batch", {}).get("value")
    ops = ctx.ops
    b = ops[(ops["name"] == "aten::bmm") & ~ops["in_bwd"] & ops["dims"].notna()].sort_values("ts_us", kind="stable")
    if not mb or len(b) < 2:
        return {}
    pairs = []
    for tid, g in b.groupby("tid", sort=False):
        rows = list(zip(g["ts_us"], g["step"], g["dims"]))
        i = 0
        while i + 1 < len(rows):  # pairs do not overlap: a weighted-values bmm is no next scores'
            (t, st, d), (_, _, e) = rows[i], rows[i + 1]
            i += 1
            if len(d) < 2 or len(e) < 2 or any(len(x) != 3 for x in (d[0], d[1], e[0], e[1])):
                continue
            (n, sq, hd), (n2, hd2, sk) = d[0], d[1]
            if n == n2 and hd == hd2 and list(e[0]) == [n, sq, sk] and e[1][0] == n and e[1][1] == sk and n % mb == 0:
                pairs.append((t, st, n // mb, sq, hd, e[1][2]))
                i += 1
    if not pairs:
        return {}
    t, _, h, sq, hd, dv = pairs[0]
    src = f"matmul attention: aten::bmm [{h * mb}, {sq}, {hd}] × [{h * mb}, {hd}, {sq}] then × [{h * mb}, {sq}, {dv}] " \
          f"(B·heads with micro-batch {mb})"
    out: Candidates = {"heads": field(int(h), src), "head_dim": field(int(hd), src)}
    if dv != hd:
        out["v_head_dim"] = field(int(dv), src)
    ctx.evidence["attention_op"] = "aten::bmm (matmul attention)"
    first = [p[0] for p in pairs if p[1] == ctx.first and p[0] < ctx.b0]
    ctx.attention_ts = np.sort(np.asarray(first, dtype=float))
    calls = median([sum(1 for p in pairs if p[1] == s) for s in ctx.steps])
    if calls and ctx.n_mb:
        layers = calls / ctx.n_mb
        out["layers"] = field(int(round(layers)), f"{int(calls)} matmul attentions per step / {ctx.n_mb} forward passes",
                              "high" if float(layers).is_integer() else "medium")
    return out


def per_head_views(ctx: Context, f: Candidates) -> Candidates:
    """``heads``, ``head_dim`` and ``layers`` where no attention op nor matmul attention showed them (an
    attention compiled into one kernel: torchtitan's gpt-oss runs FlexAttention under torch.compile),
    read off the rotary embedding's ``rotate_half`` (:data:`ROTATE_HALF_OPS`) over ``[micro-batch, seq,
    H, D / 2]`` (or ``[micro-batch, H, seq, D / 2]``): the query's H × D is a projection's width from
    hidden (its Q projection), the key's a narrower one. Layers: the Q projection's runs per forward pass."""
    p = ctx.proj
    mb, s = f.get("micro_batch", {}).get("value"), f.get("seq", {}).get("value")
    if "heads" in f or p is None or not p.hidden or not mb or not s:
        return {}
    widths = {o: c for (i, o), c in p.weights.items() if i == p.hidden}
    seen: Counter = Counter()
    for x in ctx.first_pass_args(ROTATE_HALF_OPS)["args"]:
        for d in (x.dims or [])[:2]:
            if d and len(d) == 4 and d[0] == mb and s in (d[1], d[2]):
                h, hd = (d[2], 2 * d[3]) if d[1] == s else (d[1], 2 * d[3])
                if h * hd in widths and h > 1 and hd > 1:
                    seen[(int(h), int(hd))] += 1
    if not seen:
        return {}
    h, hd = max(seen, key=lambda k: (k[0] * k[1], seen[k]))  # the query: the widest per-head view
    kv = min((k for k in seen if k[1] == hd), key=lambda k: k[0])[0]
    src = (f"the rotary embedding's rotate_half over [{mb}, {s}, {h}, {hd // 2}] around an attention that runs as no op "
           f"the analysis knows (a compiled kernel): the Q projection {p.hidden}→{h * hd} per head")
    out: Candidates = {"heads": field(int(h), src, "medium"), "head_dim": field(int(hd), src, "medium")}
    if kv < h:
        ctx.evidence["attention_kv_heads"] = int(kv)
    ctx.evidence["attention_op"] = "per-head views (an attention the trace does not show as an op)"
    q_runs = widths[h * hd]
    # one Q projection per layer where its width is the query's alone (hidden→hidden is also the output's)
    if "layers" not in f and h * hd != p.hidden and float(q_runs).is_integer() and q_runs >= 1:
        out["layers"] = field(int(q_runs), f"{q_runs:g} Q projections {p.hidden}→{h * hd} per forward pass", "medium")
    return out


def attention_heads(ctx: Context, f: Candidates) -> Candidates:
    """``kv_heads``, ``attention`` (MHA / GQA / MQA / MLA) and the latent ranks, once the
    projections are known (:mod:`.projections`)."""
    out: Candidates = {}
    if "head_dim" not in f or "heads" not in f:
        return out
    hd, h = f["head_dim"]["value"], f["heads"]["value"]
    hidden = f.get("hidden", {}).get("value")
    n_layers = f.get("layers", {}).get("value")
    weights = ctx.proj.weights if ctx.proj else {}
    latent, why = _latent(ctx, h, hd, f.get("v_head_dim", {}).get("value"))
    kv = ctx.evidence.get("attention_kv_heads")
    if why:
        out.update(latent)
        # the compressed KV is expanded to every head before the kernel: one KV head per query head
        out["kv_heads"] = field(int(kv or h), "latent attention: K/V expanded from the compressed KV to every head")
        out["attention"] = field("MLA", why)
        return out
    if kv and kv < h:
        out["kv_heads"] = field(int(kv), "the attention's key heads")
    else:
        # K/V repeated to every head before the kernel: the first layer's projections before its
        # attention are its q, k and v; k and v are the narrower pair (a wider net would catch an
        # MLP's or an expert's projection from hidden: a shared expert, a router, an expert loop)
        pre = Counter(o // hd for i, o in (ctx.proj.pre_attention if ctx.proj else [])
                      if hidden and i == hidden and o % hd == 0 and 0 < o // hd < h)
        narrow = [pre.most_common(1)[0][0]] if pre else sorted(
            {o // hd for (i, o), c in weights.items()
             if hidden and i == hidden and o % hd == 0 and 0 < o // hd < h and n_layers and c >= 2 * n_layers})
        if narrow:
            out["kv_heads"] = field(int(narrow[0]), f"K/V projections {hidden}→{narrow[0] * hd} (K/V repeated before the kernel)",
                                    "medium")
        else:
            out["kv_heads"] = field(int(h), "the attention's key heads = query heads, no narrower K/V projection",
                                    "medium" if kv is None else "high")
    kvh = out["kv_heads"]["value"]
    kind = "MHA" if kvh == h else "MQA" if kvh == 1 else "GQA"
    out["attention"] = field(kind, f"{h} query heads, {kvh} KV head{'s' if kvh > 1 else ''}", out["kv_heads"]["confidence"])
    if n_layers:
        out.update(_qk_norm(ctx, hd, {h, kvh}, n_layers))
    return out


def _qk_norm(ctx: Context, head_dim: int, heads: set[int], layers: int) -> Candidates:
    """``qk_norm``: a norm over each head's query and key (Qwen3, OLMo 2, Gemma 3) — forward norm
    ops (:data:`QK_NORM_OPS`) whose input is ``[batch, seq, heads, head_dim]`` (or heads before
    seq), at least one per attention layer. The planner counts what they save (fp32 under autocast)."""
    a = ctx.first_pass_args(QK_NORM_OPS)
    hits = Counter()
    for name, x in zip(a["name"], a["args"]):
        d = x.dims[0] if x.dims and x.dims[0] else ()
        if len(d) == 4 and d[-1] == head_dim and (d[2] in heads or d[1] in heads):
            hits[name] += 1
    passes = max(1, getattr(ctx, "passes_before", 1) or 1)
    if hits and max(hits.values()) >= layers * passes:
        name, n = hits.most_common(1)[0]
        return {"qk_norm": field(True, f"{n} {name} over [.., heads, {head_dim}] in the first forward ({layers} layers)")}
    if len(a) >= layers:  # the model's norms are in the trace, none over a head's width
        return {"qk_norm": field(False, f"{len(a)} norm ops in the first forward, none over a head's width ({head_dim})")}
    return {"qk_norm": field(False, f"no norm op in the first forward shows a head's width ({head_dim}): fused norms "
                                    "hide it", "medium")}


def _latent(ctx: Context, heads: int, head_dim: int, v_head_dim: int | None) -> tuple[Candidates, str | None]:
    """Latent attention's low-rank projections in the attention part of a layer: the query's
    ``r_q → heads·head_dim`` (q_lora_rank r_q) and the KV's ``r_kv → heads·(qk_nope + v_head_dim)``
    (kv_lora_rank r_kv), both from a width that is not the hidden size."""
    p = ctx.proj
    if p is None or not p.pre_attention:
        return {}, None
    hidden = p.hidden
    # a rank is latent attention's only when a down-projection from hidden feeds it: the query's
    # hidden → r_q, the KV's hidden → r_kv + the shared rope dims (< head_dim); a GEMM of another
    # width before the first attention (a data transform on the main thread) is not one
    downs = {o for i, o in p.pre_attention if i == hidden}
    q_rank = kv_rank = kv_out = None
    for i, o in p.pre_attention:
        if i == hidden:
            continue
        if o == heads * head_dim and q_rank is None and i in downs:
            q_rank = i
        elif (o % heads == 0 and o // heads > (v_head_dim or 0) and kv_rank is None and i != q_rank
              and any(i <= d < i + head_dim for d in downs)):
            kv_rank, kv_out = i, o
    if kv_rank is None and not (v_head_dim and v_head_dim != head_dim):
        return {}, None
    out: Candidates = {}
    why = []
    if v_head_dim and v_head_dim != head_dim:
        why.append(f"value head dim {v_head_dim} ≠ query/key head dim {head_dim}")
    if kv_rank:
        out["kv_lora_rank"] = field(int(kv_rank), f"the KV up-projection {kv_rank}→{kv_out} ({heads} heads × {kv_out // heads}) "
                                                  "before the attention kernel, fed by a down-projection from hidden")
        why.append(f"a compressed KV of width {kv_rank}")
    if q_rank:
        out["q_lora_rank"] = field(int(q_rank), f"the query up-projection {q_rank}→{heads * head_dim} (heads × head_dim)")
    if kv_rank and v_head_dim and kv_out % heads == 0:
        # the KV up-projection makes each head's non-rotary key part and its value: the rest of
        # the query/key head is the rotary part, shared by the heads
        rope = head_dim - (kv_out // heads - v_head_dim)
        if 0 < rope < head_dim:
            out["qk_rope_head_dim"] = field(int(rope), f"head_dim {head_dim} − ({kv_out}/{heads} heads − v_head_dim {v_head_dim}): "
                                                       "the rotary part of the query/key head")
    return out, "latent attention: " + ", ".join(why)
