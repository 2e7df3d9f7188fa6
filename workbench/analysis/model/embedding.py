"""Embedding tables: the vocabulary, the hidden size, the tokens of a forward pass.

``aten::embedding``'s ``Input Dims`` are ``[[rows, hidden], [batch, seq], …]``; the table with
most rows is the token table (``vocab``, ``hidden``, ``micro_batch``, ``seq``), the others are
position or type tables. Whether the token table is tied to the output head is the parameters'
question (:mod:`.parameters`): it needs the gradients.
"""

from __future__ import annotations

from collections import Counter

from workbench.analysis.model.context import Candidates, Context, field, median


def embedding(ctx: Context) -> Candidates:
    """``vocab``, ``hidden``, ``micro_batch``, ``seq``; evidence ``tables``, ``token_table``,
    ``token_lookups_per_step``, ``flat_tokens`` (a flattened [tokens] input)."""
    out: Candidates = {}
    a = ctx.args
    emb = a[(a["name"] == "aten::embedding") & ~a["in_bwd"] & (a["step"] >= -1)]
    tables: Counter = Counter()
    for r in emb.itertuples(index=False):
        d = r.args.dims
        if len(d) >= 2 and len(d[0]) == 2:
            tables[tuple(d[0])] += 1
    ctx.tables = tables
    if not tables:
        return out
    token_table = max(tables, key=lambda t: (t[0], tables[t]))
    calls = emb[[len(x.dims[0]) == 2 and tuple(x.dims[0]) == token_table for x in emb["args"]]]
    token = calls["args"].iloc[0].dims[1]
    src = f"aten::embedding table {list(token_table)}"
    out["vocab"] = field(int(token_table[0]), src + " (the largest looked up)")
    out["hidden"] = field(int(token_table[1]), src)
    ctx.evidence["tables"] = {f"{t[0]}x{t[1]}": n for t, n in tables.items()}
    ctx.evidence["token_table"] = list(token_table)
    ctx.evidence["token_lookups_per_step"] = median([int((calls["step"] == s).sum()) for s in ctx.steps])
    if len(token) == 2:
        out["micro_batch"] = field(int(token[0]), f"aten::embedding input {list(token)} = [batch, seq]")
        out["seq"] = field(int(token[1]), f"aten::embedding input {list(token)} = [batch, seq]")
    elif len(token) == 1:
        ctx.evidence["flat_tokens"] = int(token[0])
    return out
