"""The model of a whole run from each rank's view (:func:`workbench.analysis.model.rank_model`):
the parallel layout's degrees across ranks (analysis.model.layout), local shards and stages made
the model's, tokens of every data-parallel replica, the parameters active per token and the
convention's FLOPs per token (analysis.model.conventions). No I/O; dicts in, a dict out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from workbench.analysis.model import CONVENTION, FIELDS, TRANSFORMER_FIELDS, field, flops_per_token, rank_of as _rank
from workbench.analysis.model.layout import run_layout
from workbench.analysis.model.parameters import active

def run_model(ranks: dict[int, dict], world_size: int | None = None) -> dict[str, Any]:
    """The run's ``model`` block (docs/analyze.md, ``--json``): ``{"kind", "convention", "fields"}`` from each
    rank's :func:`rank_model`. Local views become the model's: heads and FFN × tp, parameters
    summed over the ranks of one data-parallel replica (every rank traced) or scaled by tp × pp,
    layers summed over pipeline stages, tokens × dp."""
    ranks = {r: m for r, m in sorted(ranks.items()) if m and m.get("fields") is not None}
    kinds = [m.get("kind") for m in ranks.values() if m.get("kind")]
    kind = Counter(kinds).most_common(1)[0][0] if kinds else None
    out: dict[str, Any] = {"kind": kind, "convention": CONVENTION, "fields": {}}
    if not ranks or kind is None:
        return out
    def pick(name):  # the first rank that has it, preferring high confidence
        cands = [m["fields"][name] for m in ranks.values() if name in m["fields"]]
        return max(cands, key=lambda c: _rank(c["confidence"])) if cands else None

    f = out["fields"]
    for name in ("seq", "micro_batch", "micro_batches", "head_dim", "v_head_dim", "attention", "qk_norm", "q_lora_rank",
                 "kv_lora_rank",
                 "qk_rope_head_dim",
                 "experts", "top_k", "shared_experts", "shared_ffn", "vocab", "tied", "gated", "dtype", "recompute", "recompute_fraction",
                 "recompute_mode", "optimizer", "hidden"):
        v = pick(name)
        if v is not None:
            f[name] = dict(v)
    layout = run_layout(ranks, world_size)
    if layout:
        f["layout"] = layout
    lay = layout["value"] if layout else {"world_size": 1, "dp": 1, "tp": 1, "pp": 1}
    tp, pp, dp, world, cp = lay["tp"], lay["pp"], lay["dp"], lay["world_size"], lay.get("cp", 1)
    if cp > 1 and "seq" in f:
        f["seq"] = dict(f["seq"], value=f["seq"]["value"] * cp, source=f["seq"]["source"] + f" × cp {cp} (each rank's share)")
    all_ranks = len(ranks) == world
    global_grads = tp > 1 and _global_grads(ranks, tp)
    for name in ("heads", "kv_heads", "ffn", "moe_ffn"):
        v = pick(name)
        if v is not None:
            f[name] = dict(v)
            if tp > 1 and not (name == "ffn" and global_grads):
                f[name].update(value=v["value"] * tp, source=v["source"] + f" × tp {tp} (local shards)")
    if "hidden" not in f and "heads" in f and "head_dim" in f:
        f["hidden"] = field(f["heads"]["value"] * f["head_dim"]["value"], "heads × head_dim", "medium")
    # layers (and the blocks with experts or a dense MLP): this stage's, summed over the stages
    for name, what in (("layers", "attention layers"), ("moe_layers", "blocks with experts"), ("dense_layers", "dense blocks")):
        lv = [m["fields"][name] for m in ranks.values() if name in m["fields"]]
        if not lv:
            continue
        if pp == 1:
            f[name] = dict(lv[0])
        elif all_ranks:
            total = sum(x["value"] for x in lv) / max(dp * tp, 1)
            f[name] = field(int(round(total)), f"{what} summed over the {pp} pipeline stages", lv[0]["confidence"])
        else:
            f[name] = field(lv[0]["value"] * pp, f"this stage's {lv[0]['value']} {what} × pp {pp} (not every rank traced)", "low")
    # parameters: one replica's ranks together hold the model
    routed = {r: {"value": m["evidence"]["routed_params"], "confidence": "high", "source": "routed experts' parameters"}
              for r, m in ranks.items() if m["evidence"].get("routed_params")}
    for name in ("params_total", "params_embedding", "routed"):
        pv = routed if name == "routed" else {r: m["fields"][name] for r, m in ranks.items() if name in m["fields"]}
        if not pv:
            continue
        conf = min((p["confidence"] for p in pv.values()), key=_rank)
        if tp * pp == 1:
            f[name] = dict(next(iter(pv.values())))
        elif all_ranks and (len(pv) == world or name == "params_embedding"):  # tables live on the first stage
            # DTensor parameters (torch's tensor parallel) accumulate gradients of their global
            # shape, plain local shards (Megatron-style) of theirs: one replica is then tp ranks
            div = dp * (tp if global_grads else 1)
            f[name] = field(int(round(sum(p["value"] for p in pv.values()) / div)),
                            f"summed over the ranks of one replica (tp {tp} × pp {pp}"
                            + ("; DTensor gradients have the global shape" if global_grads and tp > 1 else "") + "); "
                            + next(iter(pv.values()))["source"], "medium" if tp > 1 else conf)
        elif name in ("params_total", "routed"):
            v = next(iter(pv.values()))
            f[name] = field(int(v["value"] * tp * pp), f"this rank's × tp {tp} × pp {pp} (not every rank traced)", "low")
    routed_run = f.pop("routed", {}).get("value")
    ep = lay.get("ep", 1) if layout else 1
    if routed_run and ep > 1 and "params_total" in f:
        # expert parallelism: each rank of a replica holds 1/ep of the routed experts
        t = f["params_total"]
        f["params_total"] = field(t["value"] + routed_run * (ep - 1), t["source"] + f"; + the routed experts on the other "
                                  f"{ep - 1} expert-parallel rank(s) ({routed_run:,} each)", t["confidence"])
        routed_run *= ep
    act = active(f.get("params_total"), routed_run, f)
    if act:
        f["params_active"] = act
    if "params_total" in f and "params_embedding" in f:
        f["params_non_embedding"] = field(f["params_total"]["value"] - f["params_embedding"]["value"],
                                          "params_total − params_embedding",
                                          min(f["params_total"]["confidence"], f["params_embedding"]["confidence"], key=_rank))
    # tokens: the ranks of one tensor/pipeline group share theirs; data-parallel replicas add up
    tv = pick("tokens_per_step")
    if tv is not None:
        f["tokens_per_step"] = dict(tv)
        f["global_tokens_per_step"] = field(int(tv["value"] * dp * cp), f"tokens_per_step × dp {dp}" + (f" × cp {cp}" if cp > 1 else ""),
                                            min(tv["confidence"], layout["confidence"] if layout else "high", key=_rank))
    fpt = flops_per_token(f)
    if fpt is not None:
        f["model_flops_per_token"] = fpt
    if kind != "transformer":
        for k in list(f):
            if k in TRANSFORMER_FIELDS:
                f.pop(k)
    out["fields"] = {k: f[k] for k in FIELDS if k in f}
    load = next((m["evidence"]["expert_load"] for m in ranks.values() if m["evidence"].get("expert_load")), None)
    if load and "experts" in out["fields"]:
        out["expert_load"] = load
    causal = [m["evidence"].get("causal_attention_pct") for m in ranks.values() if m["evidence"].get("causal_attention_pct") is not None]
    if causal:
        out["causal_attention_pct"] = float(np.mean(causal))
    return out


def _global_grads(ranks: dict[int, dict], tp: int) -> bool:
    """Under tensor parallelism: do the GEMMs and gradients see the global shapes (DTensor: the
    outermost op is the DTensor's) rather than the local shards (Megatron-style plain tensors)?
    Attention always runs on local heads; a weight as wide as those local heads says local."""
    for m in ranks.values():
        fl, ev = m["fields"], m["evidence"]
        h, hd, hidden = (fl.get(k, {}).get("value") for k in ("heads", "head_dim", "hidden"))
        if not (h and hd and hidden) or h * hd >= hidden:
            continue
        local = h * hd
        dims = {int(x) for w in ev.get("weights") or {} for x in w.split("x")}
        return local not in dims
    return False
