"""``exposed_communication``: the step waits on collectives that compute does not hide.

Signal: analysis.comm.comm_overlap per rank — communication time not overlapped by compute,
share of the step. In synchronous training a fast rank also "waits in communication" for a slow
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
"""

from __future__ import annotations

from workbench.analysis import frames
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for
from workbench.diagnose.registry import rule

INFO_PCT = 10.0
WARNING_PCT = 20.0
CRITICAL_PCT = 40.0
MIN_MS_PER_STEP = 2.0
BANDS = ((INFO_PCT, "info"), (WARNING_PCT, "warning"), (CRITICAL_PCT, "critical"))


@rule("exposed_communication", reads=(frames.COMM_OVERLAP,), group="distributed",
      summary="communication not overlapped by compute (collectives; point-to-point waits are the pipeline's)",
      threshold=f"{INFO_PCT:g} / {WARNING_PCT:g} / {CRITICAL_PCT:g} % of step, ≥ {MIN_MS_PER_STEP:g} ms",
      source="TensorBoard plugin (comm > 10 %)")
def exposed_communication(ctx: Context) -> Diagnosis | None:
    if not ctx.ranks:
        return None
    per_rank = {}
    for rank in ctx.ranks:
        ov = ctx.frame(frames.COMM_OVERLAP, rank)
        if ov.empty or ov["comm_ms"].sum() == 0:
            continue
        p2p = ov["exposed_p2p_ms"] if "exposed_p2p_ms" in ov else 0.0
        # the device's communication time in the job's step (ctx.device_ms, job_step_ms)
        dev = lambda ms: ctx.device_ms(rank, ms)  # noqa: E731
        per_rank[rank] = (dev(float((ov["exposed_ms"] - p2p).clip(lower=0).mean())), ctx.job_step_ms(rank) or float(ov["step_ms"].mean()),
                          dev(float(ov["comm_ms"].mean())), dev(float(ov["overlapped_ms"].mean())))
    if not per_rank:
        return None
    shares = {r: 100.0 * v[0] / v[1] for r, v in per_rank.items() if v[1] > 0}
    if not shares:
        return None
    best = min(shares, key=shares.get)
    exposed_ms, step_ms, comm_ms, over_ms = per_rank[best]
    share = shares[best]
    severity = severity_for(share, BANDS)
    if severity is None or exposed_ms < MIN_MS_PER_STEP:
        return None
    return Diagnosis(
        id="exposed_communication",
        severity=severity,
        title=f"communication not hidden by compute: {exposed_ms:.1f} ms ({share:.0f}%) of each step",
        evidence={"exposed_ms_per_step": round(exposed_ms, 3), "comm_ms_per_step": round(comm_ms, 3),
                  "overlapped_ms_per_step": round(over_ms, 3), "step_ms": round(step_ms, 3),
                  "share_pct": round(share, 2), "least_waiting_rank": int(best),
                  "per_rank_exposed_pct": {int(r): round(v, 2) for r, v in shares.items()},
                  "source": "NCCL kernels outside compute kernels (GPU); blocking c10d ops and gloo threads "
                            "while the main thread waits (CPU); point-to-point waits excluded"},
        recommendation=("overlap communication with backward: smaller DDP buckets (bucket_cap_mb) start "
                        "all-reduces earlier; accumulate gradients with no_sync to communicate less often; "
                        "compress gradients (bf16/fp16 comm hook, PowerSGD)"),
        estimated_gain=gain(step_ms, exposed_ms, "step_ms / (step_ms - exposed_comm_ms)"),
        fix=["parallel.bucket_cap_mb", "parallel.comm_hook", "parallel.no_sync", "train.grad_accum"],
        ranks=sorted(int(r) for r, v in shares.items() if v >= INFO_PCT),
    )
