"""``exposed_communication``: the step waits on collectives that compute does not hide.

Signal: the step breakdown's communication (time no compute hides) with the part under compute beside it
(workbench.analysis.exposed: one computation for this rule, ``metrics`` and the pages; communication is
exposed + hidden, so the exposed part is never more than the whole), share of the step. In synchronous training a fast rank also "waits in communication" for a slow
one; that part is the straggler's cost (``straggler_rank``), not the network's. So the share used
is the *minimum over ranks*: the exposed communication even the rank that waits least pays.

Collectives only: point-to-point waits (send/recv, ``exposed_p2p_ms``) are how pipeline stages
wait for each other, which ``pipeline_bubble`` reports with pipeline advice; bucket sizes and
gradient compression do nothing for them.

Thresholds (share of step): info ≥ 10 % (PyTorch TensorBoard plugin: communication > 10 % of the
step), warning ≥ 20 %, critical ≥ 40 % (our bands: at 20 % one in five seconds is spent
waiting on the network, at 40 % overlap, not compute, sets the pace). At least 2 ms per step.

Estimated gain (upper bound): full overlap hides the exposed part:
speed-up ≤ step_ms / (step_ms − exposed_ms).

The advice follows the collective that takes half the communication time or more (the inventory's
``total_ms``): an MoE run whose traffic is mostly all-to-all gets expert-parallel advice, FSDP's all-gathers
prefetching, a DDP run's all-reduces bucket sizes and compression.
"""

from __future__ import annotations

from workbench.analysis import frames
from workbench.analysis.exposed import least_waiting
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for
from workbench.diagnose.registry import rule

INFO_PCT = 10.0
WARNING_PCT = 20.0
CRITICAL_PCT = 40.0
MIN_MS_PER_STEP = 2.0
BANDS = ((INFO_PCT, "info"), (WARNING_PCT, "warning"), (CRITICAL_PCT, "critical"))


@rule("exposed_communication", reads=(frames.COMM_OVERLAP, frames.INVENTORY), group="distributed",
      summary="communication not overlapped by compute (collectives; point-to-point waits are the pipeline's)",
      threshold=f"{INFO_PCT:g} / {WARNING_PCT:g} / {CRITICAL_PCT:g} % of step, ≥ {MIN_MS_PER_STEP:g} ms",
      source="TensorBoard plugin (comm > 10 %)")
def exposed_communication(ctx: Context) -> Diagnosis | None:
    if not ctx.ranks:
        return None
    # one computation of the figures for the rule, metrics and the pages (workbench.analysis.exposed)
    per_rank = {r: c for r in ctx.ranks if (c := ctx.communication(r)) is not None}
    top = least_waiting(list(per_rank.values()))
    if top is None:
        return None
    shares = {r: c["exposed_pct"] for r, c in per_rank.items()}
    exposed_ms, step_ms, share = top["exposed_ms"], top["step_ms"], top["exposed_pct"]
    severity = severity_for(share, BANDS)
    if severity is None or exposed_ms < MIN_MS_PER_STEP:
        return None
    mix = collective_mix(ctx)
    recommendation, fix = advice(mix)
    return Diagnosis(
        id="exposed_communication",
        severity=severity,
        title=f"communication not hidden by compute: {exposed_ms:.1f} ms ({share:.0f}%) of each step"
              + (f" ({mix['dominant']} {mix['dominant_pct']:.0f}% of the communication time)" if mix.get("dominant") else ""),
        evidence={"exposed_ms_per_step": round(exposed_ms, 3), "comm_ms_per_step": round(top["comm_ms"], 3),
                  "overlapped_ms_per_step": round(top["overlapped_ms"], 3), "step_ms": round(step_ms, 3),
                  "share_pct": round(share, 2), "least_waiting_rank": int(top["rank"]),
                  "per_rank_exposed_pct": {int(r): round(v, 2) for r, v in shares.items()},
                  "collective_time_pct": mix.get("time_pct") or None,
                  "source": "the step breakdown's communication (GPU: NCCL kernels outside compute kernels; CPU: "
                            "blocking c10d ops and gloo threads while the main thread waits), point-to-point waits "
                            "excluded; hidden: communication under compute (comm_overlap)"},
        recommendation=recommendation,
        estimated_gain=gain(step_ms, exposed_ms, "step_ms / (step_ms - exposed_comm_ms)"),
        fix=fix,
        ranks=sorted(int(r) for r, v in shares.items() if v >= INFO_PCT),
    )


def collective_mix(ctx: Context) -> dict:
    """Each collective's share of the run's communication time (the inventory's ``total_ms`` over every
    rank) and the one that dominates (≥ :data:`DOMINANT_PCT`), if one does."""
    totals: dict[str, float] = {}
    for r in ctx.ranks:
        inv = ctx.frame(frames.INVENTORY, r)
        if inv is None or inv.empty or "op" not in inv or "total_ms" not in inv:
            continue
        for op, ms in inv.groupby(inv["op"].astype(str))["total_ms"].sum().items():
            totals[op] = totals.get(op, 0.0) + float(ms)
    whole = sum(totals.values())
    if not whole > 0:
        return {}
    pct = {op: round(100.0 * ms / whole, 1) for op, ms in sorted(totals.items(), key=lambda kv: -kv[1])}
    op, share = next(iter(pct.items()))
    return {"time_pct": pct, **({"dominant": op, "dominant_pct": share} if share >= DOMINANT_PCT else {})}


DOMINANT_PCT = 50.0
"""A collective that takes half the communication time or more sets the advice."""
DDP_ADVICE = ("overlap communication with backward: smaller DDP buckets (bucket_cap_mb) start all-reduces earlier; "
              "accumulate gradients with no_sync to communicate less often; compress gradients (bf16/fp16 comm hook, "
              "PowerSGD)")
ADVICE = {
    "all_to_all": ("expert parallelism's token exchange dominates: overlap the dispatch and combine all-to-alls with the "
                   "experts' compute (split the micro-batch and pipeline its chunks), keep the expert-parallel group "
                   "within a node (NVLink), lower the capacity factor or top-k, balance the router so no rank waits on the "
                   "busiest expert's tokens", ["parallel.ep", "model.moe_top_k"]),
    "all_gather": ("sharded parameters are gathered before use (FSDP / ZeRO-3): prefetch the next layer's all-gather "
                   "(forward and backward prefetch), keep parameters gathered between forward and backward "
                   "(reshard_after_forward=False, ZeRO-2) where memory allows, or use fewer, larger shards",
                   ["parallel.mode", "parallel.reshard_after_forward"]),
    "reduce_scatter": ("gradients are reduce-scattered (FSDP / ZeRO-2/3): overlap them with backward (backward "
                       "prefetch), accumulate gradients to reduce less often, reduce in bf16",
                       ["parallel.mode", "train.grad_accum"]),
}
"""Advice for the collective that dominates; anything else (all_reduce, broadcast, a mix) gets DDP's."""


def advice(mix: dict) -> tuple[str, list[str]]:
    """(the recommendation, the engine's toggles) for the run's collective mix."""
    dominant = mix.get("dominant")
    if dominant in ADVICE:
        text, fix = ADVICE[dominant]
        return text, list(fix)
    return DDP_ADVICE, ["parallel.bucket_cap_mb", "parallel.comm_hook", "parallel.no_sync", "train.grad_accum"]
