"""Parameters: total, the input embedding tables, the tie, and those active per token.

``torch::autograd::AccumulateGrad`` runs once per trainable parameter tensor and backward pass
with the gradient's shape (kineto.MODEL_OP): the first backward pass's add up to the parameters,
a tied table counted once (it is one tensor). FSDP2 accumulates into the gathered (full)
parameters; tensor parallelism into local shards. Without them (no backward): the weights the
forward GEMMs multiply by plus the embedding tables, a lower bound.

Tied: one gradient of the token table's shape while a GEMM multiplies by its transpose (the output
head); two gradients: untied. The embedding parameters are the input tables a model looks up
without a GEMM (token, position, type tables); a tied token table counts as the output head,
not here, so that ``params_non_embedding`` is what the convention's 6·N multiplies.

Active per token (torchtitan's ``get_moe_model_nparams_and_flops``): every parameter but the
routed experts', plus the routed experts' × top_k // experts; a dense model's are all.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from workbench.analysis.model.context import Candidates, Context, field, least
from workbench.format import kineto


def parameters(ctx: Context, f: Candidates) -> Candidates:
    """``params_total``, ``tied``, ``params_embedding``, ``params_non_embedding``."""
    out: Candidates = {}
    evid, p = ctx.evidence, ctx.proj
    weights = p.weights if p else Counter()
    head_w = p.head_w if p else None
    hidden = f.get("hidden", {}).get("value")
    tables = Counter(ctx.tables)
    # a pipeline stage's input (a leaf that requires grad) accumulates a gradient too, of an
    # activation's shape ([batch, seq, hidden] or [seq, batch, hidden]): not a parameter. The shape,
    # not only its size: an expert weight [E, D, H] can hold as many elements
    act = sorted((f["micro_batch"]["value"], f["seq"]["value"])) if "micro_batch" in f and "seq" in f and hidden else None
    grads = ctx.grads if ctx.grads is not None else []
    shapes = [tuple(x.dims[0]) for x in (grads["args"] if len(grads) else []) if x.dims and x.dims[0]]
    shapes = [sh for sh in shapes if not (len(sh) == 3 and act and sh[2] == hidden and sorted(sh[:2]) == act)]
    shape_count = Counter(shapes)
    if shapes:
        out["params_total"] = field(int(sum(int(np.prod(sh)) for sh in shapes)),
                                    f"{len(shapes)} parameter tensors' gradients (torch::autograd::AccumulateGrad) "
                                    "in the first backward pass")
        evid["param_tensors"] = len(shapes)
        if "token_table" in evid:
            t = tuple(evid["token_table"])
            n_grads = shape_count.get(t, 0)
            # GEMMs multiplying by a [vocab, hidden] weight: the head, and any layer of that shape
            gemms = weights.get((t[1], t[0]), 0)
            if gemms and n_grads == gemms:
                out["tied"] = field(True, f"{n_grads} gradient(s) of the {list(t)} table's shape for {gemms:g} GEMM weight(s) "
                                          "of that shape: the table is one of them (the output head)")
            elif gemms and n_grads == gemms + 1:
                out["tied"] = field(False, f"{n_grads} gradients of the {list(t)} table's shape for {gemms:g} GEMM weight(s) "
                                           "of that shape: the table is a parameter of its own")
            elif not gemms and not ctx.trace.comms.empty and not ctx.trace.comms["name"].astype(str).str.match(
                    kineto.P2P_OP.pattern).any():
                # (a pipeline's first stage has no head: the last stage's may share the table)
                out["tied"] = field(False, "no GEMM multiplies by the token table", "medium")
    elif weights:
        total = sum(int(np.prod(w)) for w in weights) + sum(int(np.prod(t)) for t in tables)
        out["params_total"] = field(int(total), "forward GEMM weights plus embedding tables (no backward: a lower bound)", "low")
    if "params_total" in out and not tables and head_w:
        # no embedding op (a compiled graph gathers with its own kernel): the head's [vocab, hidden]
        # gradients say whether a token table of that shape is a parameter of its own
        t = (head_w[1], head_w[0])
        n_grads, gemms = shape_count.get(t, 0), weights.get(head_w, 0)
        if gemms and n_grads in (gemms, gemms + 1):
            out["tied"] = field(n_grads == gemms, f"{n_grads} gradient(s) of the head's {list(t)} shape for {gemms:g} GEMM "
                                                  "weight(s) of that shape (no embedding op in the trace)", "medium")
            tables = Counter({t: 1}) if n_grads == gemms + 1 else Counter()
            evid["token_table"] = list(t)
            if not tables:  # tied: the table is the head; position tables are not seen
                out["params_embedding"] = field(0, "the token table is the tied head; no embedding op shows position tables",
                                                "low")
    if "params_total" in out and tables:
        tied = out.get("tied", {}).get("value")
        token_table = tuple(evid["token_table"])
        emb = sum(int(np.prod(t)) for t in tables if not (tied and t == token_table))
        out["params_embedding"] = field(emb, "input embedding tables" + (" (the tied token table counts as the head)" if tied else ""),
                                        "high" if "tied" in out else "medium")
    if "params_total" in out and "params_embedding" in out:
        out["params_non_embedding"] = field(out["params_total"]["value"] - out["params_embedding"]["value"],
                                            "params_total − params_embedding",
                                            least(out["params_total"]["confidence"], out["params_embedding"]["confidence"]))
    return out


def active(total: dict | None, routed: int | None, f: Candidates) -> dict | None:
    """``params_active`` from ``params_total``, the routed experts' parameters, ``top_k`` and
    ``experts`` (torchtitan's rule: routed × top_k // experts); ``params_total`` for a model
    with no experts."""
    if not total:
        return None
    if "experts" not in f and "top_k" not in f and not routed:
        return field(total["value"], "params_total (no experts: every parameter is active)", total["confidence"])
    e, k = f.get("experts", {}).get("value"), f.get("top_k", {}).get("value")
    if not (routed and e and k):
        return None
    act = total["value"] - routed + routed * k // e
    return field(int(act), f"params_total − routed experts' {routed:,} + {routed:,} × top_k {k} // experts {e}",
                 least(total["confidence"], f["experts"]["confidence"], f["top_k"]["confidence"]))
