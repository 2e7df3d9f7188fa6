"""The model of a whole run from each rank's view (:func:`workbench.analysis.model.rank_model`):
the parallel layout's degrees across ranks, local shards and stages made the model's, tokens of
every data-parallel replica, and the convention's FLOPs per token. No I/O; dicts in, a dict out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from workbench.analysis.model import CONVENTION, FIELDS, TRANSFORMER_FIELDS, _rank, field, value

def _layout(ranks: dict[int, dict], world: int | None) -> dict[str, Any] | None:
    lays = [r["evidence"].get("layout") or {} for r in ranks.values()]
    if not lays:
        return None
    # distributedInfo's world size first: a run may hold the traces of a few ranks only
    world = next((l.get("world_size") for l in lays if l.get("world_size")), None) or world or 1
    mesh: dict[str, int] = {}
    for l in lays:
        mesh.update(l.get("mesh") or {})
    src = []
    fsdp = any(l.get("fsdp") for l in lays)
    pp_sig = any(l.get("pipeline") or l.get("p2p") for l in lays)
    # tensor parallelism issues at least one collective per layer in forward (Megatron: two
    # all-reduces; sequence parallel: an all-gather and a reduce-scatter per sub-block); a loss
    # or metric gathered once per step is not it
    fwd_colls = [((m["evidence"].get("layout") or {}).get("forward_collectives", 0),
                  m["fields"].get("layers", {}).get("value") or 1) for m in ranks.values()]
    tp_sig = bool(fwd_colls) and all(c >= n for c, n in fwd_colls)
    # degrees from DeviceMesh groups where the job made them; the rest from the signals
    dp = mesh.get("dp") or (mesh.get("dp_replicate", 1) * mesh.get("dp_shard", 1) if ("dp_replicate" in mesh or "dp_shard" in mesh) else None)
    tp, pp, cp = mesh.get("tp"), mesh.get("pp"), mesh.get("cp") or 1
    if mesh:
        src.append("DeviceMesh groups " + ", ".join(f"mesh_{k}={v}" for k, v in sorted(mesh.items())))
    rest = world // ((dp or 1) * (tp or 1) * (pp or 1) * cp) if world else 1
    if tp is None and pp is None and rest > 1 and dp is not None:
        if tp_sig and not pp_sig:
            tp, src = rest, src + ["collectives issued during forward (tensor parallel)"]
        elif pp_sig and not tp_sig:
            pp, src = rest, src + ["pipeline actions / point-to-point sends"]
    if tp is None and tp_sig:
        size = next((l.get("tp_group_size") for l in lays if l.get("tp_group_size")), None)
        if size:
            tp, src = size, src + ["forward collectives' group size (tensor parallel)"]
    if pp is None and pp_sig and dp is None and tp is None:
        pp, src = world, src + ["pipeline actions / point-to-point sends on every rank"]
    tp, pp = tp or 1, pp or 1
    if dp is None:
        dp = max(world // (tp * pp * cp), 1)
        src.append(f"dp = world {world} / (tp × pp" + (" × cp)" if cp > 1 else ")"))
    zero = None
    if fsdp:
        per = [l.get("fsdp_gathers_per_pass") for l in lays if l.get("fsdp_gathers_per_pass")]
        zero = 3 if per and max(per) >= 2 else 2 if per else 3
        src.append("FSDP annotations (a module gathered twice per forward pass: ZeRO-3; once: ZeRO-2)")
    elif any(l.get("zero1") for l in lays):
        zero = 1
        src.append("ZeroRedundancyOptimizer (ZeRO-1)")
    elif any(l.get("ddp") for l in lays) or dp == 1:
        zero = 0
        if any(l.get("ddp") for l in lays):
            src.append("DistributedDataParallel.forward (DDP)")
    conf = "high" if mesh or world == 1 or (dp * tp * pp == world and (fsdp or zero is not None)) else "medium"
    value = {"world_size": int(world), "dp": int(dp), "tp": int(tp), "pp": int(pp), "fsdp": bool(fsdp), "zero": zero}
    if cp > 1:  # context parallel: each rank holds seq / cp of every sequence
        value["cp"] = int(cp)
    return field(value, "; ".join(src) or f"distributedInfo world_size {world}", conf)


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
    for name in ("seq", "micro_batch", "micro_batches", "head_dim", "vocab", "tied", "gated", "dtype", "recompute",
                 "recompute_fraction", "optimizer", "hidden"):
        v = pick(name)
        if v is not None:
            f[name] = dict(v)
    layout = _layout(ranks, world_size)
    if layout:
        f["layout"] = layout
    lay = layout["value"] if layout else {"world_size": 1, "dp": 1, "tp": 1, "pp": 1}
    tp, pp, dp, world, cp = lay["tp"], lay["pp"], lay["dp"], lay["world_size"], lay.get("cp", 1)
    if cp > 1 and "seq" in f:
        f["seq"] = dict(f["seq"], value=f["seq"]["value"] * cp, source=f["seq"]["source"] + f" × cp {cp} (each rank's share)")
    all_ranks = len(ranks) == world
    global_grads = tp > 1 and _global_grads(ranks, tp)
    for name in ("heads", "kv_heads", "ffn"):
        v = pick(name)
        if v is not None:
            f[name] = dict(v)
            if tp > 1 and not (name == "ffn" and global_grads):
                f[name].update(value=v["value"] * tp, source=v["source"] + f" × tp {tp} (local shards)")
    if "hidden" not in f and "heads" in f and "head_dim" in f:
        f["hidden"] = field(f["heads"]["value"] * f["head_dim"]["value"], "heads × head_dim", "medium")
    # layers: this stage's, summed over the stages
    lv = [m["fields"]["layers"] for m in ranks.values() if "layers" in m["fields"]]
    if lv:
        if pp == 1:
            f["layers"] = dict(lv[0])
        elif all_ranks:
            total = sum(x["value"] for x in lv) / max(dp * tp, 1)
            f["layers"] = field(int(round(total)), f"attention layers summed over the {pp} pipeline stages", lv[0]["confidence"])
        else:
            f["layers"] = field(lv[0]["value"] * pp, f"this stage's {lv[0]['value']} attention layers × pp {pp} (not every rank traced)", "low")
    # parameters: one replica's ranks together hold the model
    for name in ("params_total", "params_embedding"):
        pv = {r: m["fields"][name] for r, m in ranks.items() if name in m["fields"]}
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
        elif name == "params_total":
            v = next(iter(pv.values()))
            f[name] = field(int(v["value"] * tp * pp), f"this rank's × tp {tp} × pp {pp} (not every rank traced)", "low")
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
    fpt = model_flops_per_token(f)
    if fpt is not None:
        f["model_flops_per_token"] = fpt
    if kind != "transformer":
        for k in list(f):
            if k in TRANSFORMER_FIELDS:
                f.pop(k)
    out["fields"] = {k: f[k] for k in FIELDS if k in f}
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


def model_flops_per_token(f: dict[str, dict]) -> dict | None:
    """:data:`CONVENTION` from the fields, or None when one of its terms is missing."""
    need = ("params_non_embedding", "layers", "seq")
    if any(f.get(k, {}).get("value") is None for k in need):
        return None
    n, L, s = (f[k]["value"] for k in need)
    conf = min((f[k]["confidence"] for k in need), key=_rank)
    if value({"fields": f}, "heads") and value({"fields": f}, "head_dim"):
        h, q = f["heads"]["value"], f["head_dim"]["value"]
        conf = min(conf, f["heads"]["confidence"], f["head_dim"]["confidence"], key=_rank)
        return field(int(6 * n + 12 * L * h * q * s), f"6 × {n:,} + 12 × {L} × {h} × {q} × {s}", conf)
    if value({"fields": f}, "hidden"):  # h·Q is the query's width: the hidden size
        hid = f["hidden"]["value"]
        return field(int(6 * n + 12 * L * hid * s), f"6 × {n:,} + 12 × {L} × {hid} (hidden, for heads × head_dim) × {s}",
                     min(conf, "medium", key=_rank))
    return None


