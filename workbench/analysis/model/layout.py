"""The parallel layout: degrees from DeviceMesh groups and each wrapper's and schedule's traces.

One rank's evidence (:func:`layout_evidence`): ``distributedInfo`` (world size, DeviceMesh groups
named ``mesh_<dim>``, Megatron's ``group_desc``), FSDP2's ``FSDP::`` annotations (a module gathered
twice per forward pass reshards after forward: ZeRO-3), DDP's ``DistributedDataParallel.forward``,
``ZeroRedundancyOptimizer`` (ZeRO-1), pipeline actions and point-to-point ops, collectives issued
during forward outside FSDP (tensor parallelism), all-to-all during forward (expert parallelism's
token dispatch). :func:`run_layout` merges the ranks' into ``{world_size, dp, tp, pp, fsdp, zero,
ep[, cp]}``.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from workbench.analysis.intervals import str_mask
from workbench.analysis.model.context import Context, Spans, field
from workbench.format import kineto
from workbench.trainers.deepspeed import ZERO3_FUNCTIONS

import pandas as pd

_MESH = re.compile(r"^mesh_(\w+)$")
"""DeviceMesh's process groups (torchtitan, torch's tensor parallel): ``mesh_dp_shard``, ``mesh_tp`` …"""
_GROUP_DESC = {"TENSOR_MODEL_PARALLEL_GROUP": "tp", "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
               "DATA_PARALLEL_GROUP": "dp", "CONTEXT_PARALLEL_GROUP": "cp", "EXPERT_MODEL_PARALLEL_GROUP": "ep"}
"""Megatron-LM's ``group_desc`` for its process groups (``parallel_state.initialize_model_parallel``)."""
_DDP = "DistributedDataParallel.forward"
_FSDP_AG = re.compile(r"^FSDP::all_gather \((.+)\)$")
_TP_OPS = frozenset({"all_reduce", "reduce_scatter", "all_gather"})


def layout_evidence(ctx: Context) -> dict[str, Any]:
    """What this rank's trace says about the parallel layout (merged by :func:`run_layout`)."""
    trace, ev, names, ops, bwd, steps, step_of, n_mb = (ctx.trace, ctx.ev, ctx.names, ctx.ops, ctx.bwd, ctx.steps,
                                                        ctx.step_of, ctx.n_mb)
    dist = trace.distributed or {}
    out: dict[str, Any] = {"world_size": dist.get("world_size") or trace.world_size, "rank": dist.get("rank"), "mesh": {}}
    for pg in dist.get("pg_config") or []:
        desc = str(pg.get("pg_desc") or "")
        m = _MESH.match(desc)
        dim = m.group(1) if m else _GROUP_DESC.get(desc)
        if dim and pg.get("pg_size"):
            out["mesh"][dim] = int(pg["pg_size"])
    cats = pd.Series(names.cat.categories.astype(str)) if isinstance(names.dtype, pd.CategoricalDtype) else pd.Series(names.unique().astype(str))
    out["ddp"] = bool((cats == _DDP).any())
    out["fsdp"] = bool(cats.str.startswith(kineto.FSDP_PREFIX).any() or cats.str.startswith("FullyShardedDataParallel").any())
    out["zero1"] = bool(cats.str.contains("ZeroRedundancyOptimizer").any())
    out["deepspeed_zero3"] = bool(cats.isin(ZERO3_FUNCTIONS[:2]).any())
    ag = ev[str_mask(names, lambda c: c.str.match(_FSDP_AG.pattern))]
    if len(ag) and steps:
        first = ag[step_of(ag["ts_us"].to_numpy()) == steps[0]]
        per_module = Counter(str(n) for n in first["name"])
        out["fsdp_gathers_per_pass"] = max(per_module.values()) / max(n_mb or 1, 1) if per_module else None
    out["pipeline"] = bool(cats.str.match(kineto.PP_ACTION.pattern).any())
    p2p = cats[cats.str.match(kineto.P2P_OP.pattern)]
    out["p2p"] = bool(len(p2p))
    # tensor parallelism: collectives issued during forward, outside FSDP's own and DDP's
    comms = trace.comms
    tp_calls = 0
    if comms is not None and not comms.empty and steps:
        c = comms[~comms["is_gpu"]]
        c = c[c["name"].astype(str).str.match(kineto.ISSUED_COLLECTIVE.pattern) | (c["name"].astype(str) == kineto.RECORD_PARAM_COMMS)]
        kinds = c["collective"].map(kineto.normalise_op)
        a2a = c[(kinds == "all_to_all").to_numpy()]
        if len(a2a):
            sizes = a2a["group_size"].dropna()
            out["all_to_all_calls"] = int((step_of(a2a["ts_us"].to_numpy()) == steps[0]).sum())
            if len(sizes):
                out["all_to_all_group_size"] = int(sizes.mode().iloc[0])
        c = c[kinds.isin(_TP_OPS).to_numpy()]
        if not c.empty:
            fsdp = Spans(ev, str_mask(names, lambda x: x.str.startswith(kineto.FSDP_PREFIX) | x.str.startswith("Optimizer.")))
            t, tid = c["ts_us"].to_numpy(), c["tid"].astype(str).to_numpy(dtype=object)
            fwd = ~bwd.inside(tid, t) & ~fsdp.inside(tid, t) & (step_of(t) == steps[0])
            # forward lies between the step's first forward op and its first backward node
            f_ops = ops[(ops["step"] == steps[0]) & ~ops["in_bwd"]]
            b_start = ctx.bwd_starts(steps[0])
            if len(f_ops) and len(b_start):
                fwd &= (t >= float(f_ops["ts_us"].min())) & (t < float(b_start.min()))
                tp_calls = int(fwd.sum())
                sizes = c["group_size"][fwd].dropna()
                if len(sizes):
                    out["tp_group_size"] = int(sizes.mode().iloc[0])
    out["forward_collectives"] = tp_calls
    return out


def run_layout(ranks: dict[int, dict], world: int | None) -> dict[str, Any] | None:
    """The run's ``layout`` field from each rank's :func:`layout_evidence` and fields."""
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
    elif any(l.get("deepspeed_zero3") for l in lays):
        zero = 3
        src.append("DeepSpeed ZeRO-3's autograd functions around every module (PreBackwardFunctionForModule, "
                   "PostBackwardFunctionModule)")
    elif any(l.get("zero1") for l in lays):
        zero = 1
        src.append("ZeroRedundancyOptimizer (ZeRO-1)")
    elif any(l.get("ddp") for l in lays) or dp == 1:
        zero = 0
        if any(l.get("ddp") for l in lays):
            src.append("DistributedDataParallel.forward (DDP)")
    conf = "high" if mesh or world == 1 or (dp * tp * pp == world and (fsdp or zero is not None)) else "medium"
    # expert parallelism: DeviceMesh's ep group (torchtitan), else the all-to-all that dispatches
    # tokens to the experts on other ranks (its group size), else each rank's share of the experts
    ep = mesh.get("ep")
    moe = any("experts" in m["fields"] for m in ranks.values())  # (Ulysses' all-to-all is no expert's)
    if ep is None and moe:
        a2a = [l.get("all_to_all_group_size") for l in lays if l.get("all_to_all_calls")]
        share = [(m["fields"].get("experts", {}).get("value"), m["evidence"].get("experts_per_rank")) for m in ranks.values()]
        share = [e // r for e, r in share if e and r and e % r == 0]
        if a2a and a2a[0]:
            ep, src = int(a2a[0]), src + [f"all-to-all in forward over {a2a[0]} ranks (expert parallel dispatch)"]
        elif share:
            ep, src = share[0], src + [f"each rank holds 1/{share[0]} of the experts"]
    value = {"world_size": int(world), "dp": int(dp), "tp": int(tp), "pp": int(pp), "fsdp": bool(fsdp), "zero": zero,
             "ep": int(ep or 1)}
    if cp > 1:  # context parallel: each rank holds seq / cp of every sequence
        value["cp"] = int(cp)
    return field(value, "; ".join(src) or f"distributedInfo world_size {world}", conf)
