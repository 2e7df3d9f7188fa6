"""``pipeline_bubble``: pipeline-parallel stages idle between micro-batches.

Signal: ranks whose trace holds ``torch.distributed.pipelining`` annotations (``Forward i`` /
``Backward i`` of the single-stage schedules, ``PP:…`` actions of the multi-stage runtime).
Bubble = step time on the main thread outside those annotations, plus the point-to-point waits
inside them (a stage's action opens before its input has arrived: the ``gloo:recv`` that
follows is the stage idling, not working; an async send's annotation is a wait only after the
thread's last activity inside it, ``intervals.blocked_waits``), share of the step, compared
with the ideal (p − 1)/(m + p − 1) for p stages (ranks with PP annotations) and m micro-batches
(distinct forward indices per step) (GPipe, Huang et al. 2019, §2.2; 1F1B has the same bubble).
A schedule that records no actions (torch.distributed.pipelining's 1F1B in torch 2.11-2.13) is
read from its point-to-point ops instead: the main thread blocked in them is the bubble (the
transfers' own time included: on gloo they block), m the transfers per step.

Thresholds (measured bubble, share of step): info ≥ 10 %, warning ≥ 20 %, critical ≥ 40 %
(GPipe: the bubble is negligible when m ≥ 4p, i.e. ≤ 1/(4 + 1) ≈ 20 % at p = 2 before overheads).

Estimated gain (upper bound): with m' = 4p micro-batches the bubble falls to the ideal at m':
saved ≤ bubble_ms − step_ms × (p − 1)/(4p + p − 1).
"""

from __future__ import annotations

import numpy as np

from workbench.format import kineto
from workbench.analysis.events import classify
from workbench.analysis.frames import Frame, RankFrames, WINDOWS
from workbench.analysis.intervals import blocked_waits, cat_mask, clip, overlap_length, union_length
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for
from workbench.diagnose.pipeline import has_pipeline_actions
from workbench.diagnose.registry import rule

BANDS = ((10.0, "info"), (20.0, "warning"), (40.0, "critical"))


def _and3(a, b, c) -> float:
    """|A ∩ B ∩ C| by inclusion–exclusion over unions (each argument a (start, end) pair)."""
    u = lambda *xs: union_length(np.concatenate([x[0] for x in xs]), np.concatenate([x[1] for x in xs]))
    return u(a) + u(b) + u(c) - u(a, b) - u(a, c) - u(b, c) + u(a, b, c)


def _bubble(rf: RankFrames) -> dict | None:
    """The rank's pipeline bubble over its steps: bubble_pct, step_ms, p2p_wait_pct, microbatches;
    None when it runs no pipeline actions (nor, see :func:`_p2p_bubble`, an unannotated schedule)."""
    trace, windows = rf.trace, rf[WINDOWS]
    if not has_pipeline_actions(trace):
        return _p2p_bubble(trace, windows)
    ev, c = trace.events, classify(trace)
    s_all, e_all = c.start_us, c.end_us
    in_pp = c.on_main & cat_mask(ev["name"], lambda n: n.str.match(kineto.PP_ACTION.pattern))
    p2p, span = c.on_main & c.p2p, c.comm_span
    # blocking p2p ops (c10d::send on gloo) and the blocked part of p2p annotations (gloo:recv)
    w_s, w_e = blocked_waits(s_all, e_all, p2p & span, c.on_main & ~c.step & ~span)
    wait = (np.concatenate([s_all[p2p & ~span], w_s]), np.concatenate([e_all[p2p & ~span], w_e]))
    work_mask = c.on_main & c.cpu_op & ~c.comm_op
    work = s_all[work_mask], e_all[work_mask]
    s, e = s_all[in_pp], e_all[in_pp]
    fwd = ev["name"][in_pp].astype(str).str.extract(kineto.PP_FORWARD.pattern, expand=False).dropna().astype(int)
    busy, waited, total = 0.0, 0.0, 0.0
    for lo, hi in windows[["start_us", "end_us"]].itertuples(index=False):
        act, w, k = clip(s, e, lo, hi), clip(*wait, lo, hi), clip(*work, lo, hi)
        # inside an action: waiting on a peer, unless the thread ran real ops meanwhile
        idle_in_act = overlap_length(act, w) - _and3(act, w, k) if len(w[0]) else 0.0
        busy += union_length(*act) - idle_in_act
        waited += idle_in_act
        total += hi - lo
    return {"bubble_pct": 100.0 * (1 - busy / total) if total > 0 else 0.0, "step_ms": total / 1e3 / max(len(windows), 1),
            "p2p_wait_pct": 100.0 * waited / total if total > 0 else 0.0,
            "microbatches": int(fwd.nunique()) if len(fwd) else None}


def _p2p_bubble(trace, windows) -> dict | None:
    """A schedule that records no actions (torch.distributed.pipelining's 1F1B annotates none in
    torch 2.11-2.13, GPipe does): the stage's main thread blocked in point-to-point waits is its
    bubble. Micro-batches: a first or last stage sends (and receives) one tensor per micro-batch,
    a middle stage two, so the fewer of its sends and receives per step, halved when both directions
    carry twice that, bounds m from above; the rule takes the smallest over the stages. None when the
    rank's main thread runs no point-to-point op inside its steps (not a pipeline stage)."""
    if windows.empty:
        return None
    ev, c = trace.events, classify(trace)
    s_all, e_all = c.start_us, c.end_us
    p2p, span = c.on_main & c.p2p, c.comm_span
    lo_all, hi_all = float(windows["start_us"].min()), float(windows["end_us"].max())
    in_steps = (s_all >= lo_all) & (s_all < hi_all)
    if not (p2p & in_steps).any():
        return None
    w_s, w_e = blocked_waits(s_all, e_all, p2p & span, c.on_main & ~c.step & ~span)
    wait = (np.concatenate([s_all[p2p & ~span], w_s]), np.concatenate([e_all[p2p & ~span], w_e]))
    work_mask = c.on_main & c.cpu_op & ~c.comm_op
    work = s_all[work_mask], e_all[work_mask]
    waited, total = 0.0, 0.0
    for lo, hi in windows[["start_us", "end_us"]].itertuples(index=False):
        w, k = clip(*wait, lo, hi), clip(*work, lo, hi)
        waited += union_length(*w) - (overlap_length(w, k) if len(w[0]) and len(k[0]) else 0.0)
        total += hi - lo
    names = ev["name"][p2p & in_steps].astype(str).str.lower()
    ops = names[names.str.startswith("c10d::")]  # one op per transfer; else the backend's annotations
    names = ops if len(ops) else names
    sends, recvs = int(names.str.contains("send").sum()), int(names.str.contains("recv").sum())
    m = min(sends, recvs) // max(len(windows), 1)
    return {"bubble_pct": 100.0 * waited / total if total > 0 else 0.0, "step_ms": total / 1e3 / max(len(windows), 1),
            "p2p_wait_pct": 100.0 * waited / total if total > 0 else 0.0, "microbatches": m or None}


PP_BUBBLE = Frame("pp_bubble", _bubble, returns=(dict, type(None)))


@rule("pipeline_bubble", reads=(PP_BUBBLE,), group="distributed",
      summary="pipeline idle share vs (p−1)/(m+p−1) (schedules that annotate no actions, torch's 1F1B: "
              "the stages' blocked point-to-point waits)",
      threshold=f"{BANDS[0][0]:g} / {BANDS[1][0]:g} / {BANDS[2][0]:g} % of step", source="GPipe")
def pipeline_bubble(ctx: Context) -> Diagnosis | None:
    per = {r: ctx.frame(PP_BUBBLE, r) for r in ctx.ranks}
    per = {r: v for r, v in per.items() if v is not None}
    if not per:
        return None
    p = len(per)
    share = float(np.mean([v["bubble_pct"] for v in per.values()]))
    step_ms = float(np.mean([ctx.job_step_ms(r) or v["step_ms"] for r, v in per.items()]))  # the job's
    # the smallest count over the stages: a middle stage of an unannotated schedule counts twice
    m = min((v["microbatches"] for v in per.values() if v["microbatches"]), default=None)
    ideal = 100.0 * (p - 1) / (m + p - 1) if m else None
    severity = severity_for(share, BANDS)
    if severity is None:
        return None
    bubble_ms = step_ms * share / 100.0
    target_ms = step_ms * (p - 1) / (4 * p + p - 1)
    return Diagnosis(
        id="pipeline_bubble", severity=severity,
        title=f"pipeline stages idle {share:.0f}% of the step (ideal for {p} stages × {m} micro-batches: "
              f"{ideal:.0f}%)" if ideal is not None else f"pipeline stages idle {share:.0f}% of the step",
        evidence={"bubble_pct": round(share, 2), "ideal_bubble_pct": None if ideal is None else round(ideal, 2),
                  "stages": p, "microbatches": m, "step_ms": round(step_ms, 3),
                  "per_rank_bubble_pct": {int(r): round(v["bubble_pct"], 2) for r, v in per.items()},
                  "p2p_wait_in_actions_pct": round(float(np.mean([v["p2p_wait_pct"] for v in per.values()])), 2),
                  "source": "main-thread time outside Forward i / Backward i / PP: annotations, plus the "
                            "send/recv waits inside them"},
        recommendation="more micro-batches per step (m ≥ 4 × stages), a 1F1B or interleaved schedule, balanced stages",
        estimated_gain=gain(step_ms, max(bubble_ms - target_ms, 0.0), "step_ms / (step_ms - (bubble_ms - ideal_bubble_ms(m=4p)))"),
        fix=["parallel.microbatches", "parallel.pp_schedule"],
        ranks=sorted(int(r) for r in per),
    )
