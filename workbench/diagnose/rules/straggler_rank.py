"""``straggler_rank``: one rank works longer per step than the others, and they wait for it.

Signal: analysis.skew.rank_skew — per rank, work = step time − communication (in synchronous
training the fast ranks spend the difference waiting inside the collective), compared with the
median of the *other* ranks (with two ranks the median of all would halve the ratio).

Per step, then over steps the ratio the rank reaches in at least two steps of three
(``STEP_QUANTILE`` = 1/3): a straggler is slow every step, while on ranks that share cores the
"slow" rank changes from step to step. Measured on fault-free 2-rank gloo runs once blocking
``gloo:`` waits count as communication: per-step medians reached 1.22–1.28 (the slow
rank alternating), the 1/3 quantile 1.10; the planted straggler stays above 1.3 every step.
Thresholds (work / others' median): info ≥ 1.1, warning ≥ 1.3, critical ≥ 1.6, and at least
``MIN_EXCESS_MS`` more work per step. Ours: fault-free 2-rank gloo runs on a shared 2-core
machine measured 1.05–1.14 with ~150 ms steps (tests/analysis healthy fixture), up to 1.8 with
~50 ms steps while other jobs ran (CPU contention is a real straggler, but not a code fault);
a rank 30 % slower wastes a quarter of every other rank's time.

Only ranks that communicate wait for one another: a run whose traces hold no collective or
point-to-point op (independent processes, e.g. a Trainer that fell back to one model per rank)
has no straggler, however different its ranks' speeds (a 2-rank Hugging Face Trainer run on CPU
that never wrapped the model in DDP was reported as "rank 0 works 1.33× the others; they wait").

Pipeline stages (ranks with ``Forward i``/``Backward i`` actions) run different layers by design:
their imbalance is part of ``pipeline_bubble`` ("balanced stages"), not a straggler.

Estimated gain (upper bound): the straggler's excess work disappears from every step:
speed-up ≤ step_ms / (step_ms − excess_ms).
"""

from __future__ import annotations

from workbench.analysis.frames import Frame, RankFrames
from workbench.analysis.skew import rank_skew
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for
from workbench.diagnose.pipeline import PIPELINE_STAGE
from workbench.diagnose.registry import rule

BANDS = ((1.1, "info"), (1.3, "warning"), (1.6, "critical"))
MIN_EXCESS_MS = 5.0
STEP_QUANTILE = 1 / 3


def per_step_ratios(b) -> dict[int, float]:
    """Per rank, the STEP_QUANTILE quantile over steps of (its work / the other ranks' median
    work that step): a real straggler is slow every step, a rank the OS parked once is not."""
    w = b.assign(work_ms=b["step_ms"] - b["communication_ms"]).pivot_table(index="step", columns="rank", values="work_ms")
    out = {}
    for r in w.columns:
        others = w.drop(columns=r).median(axis=1)
        ratio = (w[r] / others.where(others > 0)).dropna()
        out[int(r)] = float(ratio.quantile(STEP_QUANTILE)) if len(ratio) else 1.0
    return out


def _has_collectives(rf: RankFrames) -> bool:
    """The rank's trace records any collective or point-to-point call."""
    return not rf.trace.comms.empty


HAS_COLLECTIVES = Frame("has_collectives", _has_collectives, returns=bool)


@rule("straggler_rank", reads=(HAS_COLLECTIVES, PIPELINE_STAGE), group="distributed",
      summary="one rank's work (step − communication) vs the others' median",
      threshold=f"{BANDS[0][0]:g} / {BANDS[1][0]:g} / {BANDS[2][0]:g} ×, ≥ {MIN_EXCESS_MS:g} ms",
      source="ours (measured noise 1.05–1.14)")
def straggler_rank(ctx: Context) -> Diagnosis | None:
    b = ctx.breakdown
    if b.empty or b["rank"].nunique() < 2:
        return None
    if ctx.ranks and not any(ctx.frame(HAS_COLLECTIVES, r) for r in ctx.ranks):
        return None  # no rank waits for another
    if any(ctx.frame(PIPELINE_STAGE, r) for r in ctx.ranks):
        return None  # stages differ by design: pipeline_bubble
    skew = rank_skew(b).set_index("rank")
    work = skew["work_ms"]
    ratios = per_step_ratios(b)
    worst = max(ratios, key=ratios.get)
    ratio, excess = ratios[worst], float(skew.loc[worst, "work_excess_ms"])
    severity = severity_for(ratio, BANDS)
    if severity is None or excess < MIN_EXCESS_MS:
        return None
    row = skew.loc[worst]
    others = skew.drop(worst)
    what = max(("compute", "dataloader"), key=lambda c: row[f"{c}_ms"] - others[f"{c}_ms"].median())
    step_ms = float(skew["step_ms"].mean())
    return Diagnosis(
        id="straggler_rank", severity=severity,
        title=f"rank {worst} works {ratio:.2f}× the others ({excess:.1f} ms more per step, mostly {what}); they wait for it",
        evidence={"rank": int(worst), "work_ratio": round(ratio, 3), "excess_ms_per_step": round(excess, 3),
                  "slowest_part": what, "step_ms": round(step_ms, 3),
                  "per_rank_work_ms": {int(r): round(float(v), 3) for r, v in work.items()},
                  "per_rank_compute_ms": {int(r): round(float(v), 3) for r, v in skew["compute_ms"].items()},
                  "per_rank_dataloader_ms": {int(r): round(float(v), 3) for r, v in skew["dataloader_ms"].items()},
                  "source": "step breakdown: work = step - communication, per rank"},
        recommendation=(f"find what makes rank {worst} slow: its input pipeline (data on a slower disk, fewer "
                        "workers), its host (other processes, CPU affinity, thermal throttling) or an uneven "
                        "share of the work (unbalanced batches or pipeline stages)"),
        estimated_gain=gain(step_ms, excess, "step_ms / (step_ms - straggler_excess_ms)"),
        fix=["faults.straggler_rank", "data.num_workers"],
        ranks=[int(worst)],
    )
