"""``pageable_memcpy``: ``Memcpy … (Pageable …)`` copies: staged through a bounce buffer, blocking,
about half the bandwidth of pinned copies (CUDA C++ Best Practices Guide, "Pinned Memory").
Thresholds (copy time share of step): info ≥ 1 %, warning ≥ 5 %, critical ≥ 20 %. Gain ≤
step_ms / (step_ms − pageable_ms) (pinned + non_blocking copies overlap with compute).

One of three rules that measure GPU time lost to the host, as a share of the step (low_gpu_utilization,
host_sync, pageable_memcpy); none applies to CPU traces.
"""

from __future__ import annotations

import numpy as np

from workbench.format import kineto
from workbench.analysis import frames
from workbench.analysis.frames import Frame, RankFrames
from workbench.analysis.intervals import cat_mask
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for
from workbench.diagnose.registry import rule

PAGEABLE_BANDS = ((1.0, "info"), (5.0, "warning"), (20.0, "critical"))


def _pageable(rf: RankFrames) -> tuple[float, float, float]:
    """Pageable copies inside the steps, per step: (ms, bytes, copies)."""
    ev, w = rf.trace.events, rf[frames.WINDOWS]
    pg = ev[ev["is_gpu"].to_numpy() & cat_mask(ev["name"], lambda c: c.str.contains(kineto.PAGEABLE, regex=False))]
    lo, hi = w["start_us"].min(), w["end_us"].max()
    pg = pg[(pg["ts_us"] >= lo) & (pg["ts_us"] < hi)]
    k = max(len(w), 1)
    return float(pg["dur_us"].sum() / 1e3 / k), float(pg["bytes"].sum() / k), len(pg) / k


PAGEABLE = Frame("pageable", _pageable, returns=(tuple, list))


@rule("pageable_memcpy", reads=(PAGEABLE,), group="host", summary="H2D copies from pageable memory",
      threshold=f"{PAGEABLE_BANDS[0][0]:g} / {PAGEABLE_BANDS[1][0]:g} / {PAGEABLE_BANDS[2][0]:g} % of step",
      source="ours")
def pageable_memcpy(ctx: Context) -> Diagnosis | None:
    ranks = ctx.gpu_ranks()
    if not ranks:
        return None
    per = [ctx.frame(PAGEABLE, r) for r in ranks]
    ms, nbytes, n = ([p[i] for p in per] for i in range(3))
    step_ms = float(ctx.breakdown[ctx.breakdown["rank"].isin(ranks)]["step_ms"].mean())
    copy_ms = float(np.mean(ms))
    share = 100.0 * copy_ms / step_ms if step_ms > 0 else 0.0
    severity = severity_for(share, PAGEABLE_BANDS)
    if severity is None:
        return None
    mib = float(np.mean(nbytes)) / (1 << 20)
    return Diagnosis(
        id="pageable_memcpy", severity=severity,
        title=f"copies from pageable host memory take {copy_ms:.1f} ms ({share:.0f}%) of each step",
        evidence={"pageable_copy_ms_per_step": round(copy_ms, 3), "pageable_mib_per_step": round(mib, 2),
                  "copies_per_step": round(float(np.mean(n)), 1), "step_ms": round(step_ms, 3),
                  "share_pct": round(share, 2),
                  "bandwidth_gb_s": round(mib * (1 << 20) / 1e9 / (copy_ms / 1e3), 2) if copy_ms > 0 else None,
                  "source": "GPU Memcpy events named '(Pageable …)'"},
        recommendation="pin host memory (DataLoader pin_memory=True, tensor.pin_memory()) and copy with non_blocking=True",
        estimated_gain=gain(step_ms, copy_ms, "step_ms / (step_ms - pageable_copy_ms)"),
        fix=["data.pin_memory"],
        ranks=sorted(int(r) for r, v in zip(ranks, ms) if v > 0),
    )
