"""``host_sync``: ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` / ``cudaEventSynchronize``
/ synchronous ``cudaMemcpy`` inside a step (``.item()``, ``.cpu()``, printing a tensor). After a
sync the GPU queue is empty, so the GPU idles until the host launches the next kernel: the cost
of each sync is the gap from its end to the next GPU event. Thresholds (share of step) as
``dataloader_stall`` (GPU idle caused by the host): info ≥ 5 %, warning ≥ 10 %, critical ≥ 20 %.
Gain ≤ step_ms / (step_ms − sync_gap_ms).

A residual rule (workbench.diagnose.explained): a gap inside the spans of the trainer's machinery that
another finding explains (an offloaded optimizer's step on the host, its copies, a sharded layout's
gathers and releases: analysis.machinery) is that finding's, not a sync point to remove.

One of three rules that measure GPU time lost to the host, as a share of the step (low_gpu_utilization,
host_sync, pageable_memcpy); none applies to CPU traces.
"""

from __future__ import annotations

import numpy as np

from workbench.format import kineto
from workbench.analysis import frames
from workbench.analysis.frames import Frame, RankFrames
from workbench.analysis.intervals import cat_mask, merge
from workbench.analysis.machinery import part_spans
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for
from workbench.diagnose.explained import Explained
from workbench.diagnose.registry import rule

SYNC_BANDS = ((5.0, "info"), (10.0, "warning"), (20.0, "critical"))


def _sync_gaps(rf: RankFrames) -> dict:
    """Host syncs inside the steps and the GPU idle after each: syncs, gap_us, items (.item() calls)."""
    trace, windows = rf.trace, rf[frames.WINDOWS]
    ev = trace.events
    cpu = ~ev["is_gpu"].to_numpy()
    sync = ev[cat_mask(ev["name"], lambda c: c.isin(kineto.SYNC_NAMES)) & cpu]
    gpu = ev[ev["is_gpu"]]
    gstart = np.sort(gpu["ts_us"].to_numpy())
    out = {"syncs": 0, "gap_us": 0.0, "items": 0}
    if sync.empty or len(gstart) == 0:
        return out
    ends = (sync["ts_us"] + sync["dur_us"]).to_numpy()
    w = windows.sort_values("start_us")
    lo, hi = w["start_us"].to_numpy(), w["end_us"].to_numpy()
    i = np.searchsorted(lo, ends, side="right") - 1
    inside = (i >= 0) & (ends < hi[np.clip(i, 0, None)])
    ends, step_end = ends[inside], hi[np.clip(i, 0, None)][inside]
    j = np.searchsorted(gstart, ends, side="left")
    nxt = np.where(j < len(gstart), gstart[np.clip(j, 0, len(gstart) - 1)], np.inf)
    gaps = np.clip(np.minimum(nxt, step_end) - ends, 0, None)
    # time the main thread then spends waiting on the DataLoader is dataloader_stall's, not ours
    dl = ev[cat_mask(ev["name"], lambda c: c.str.match(kineto.DATALOADER.pattern)) & cpu]
    if not dl.empty and len(ends):
        ds, de = merge(dl["ts_us"].to_numpy(), (dl["ts_us"] + dl["dur_us"]).to_numpy())
        covered = np.concatenate([[0.0], np.cumsum(de - ds)])

        def cover_upto(t):  # length of DataLoader time before t
            k = np.searchsorted(ds, t, side="right")
            inside = np.clip(t - ds[np.clip(k - 1, 0, None)], 0, (de - ds)[np.clip(k - 1, 0, None)])
            return covered[np.clip(k - 1, 0, None)] + np.where(k > 0, inside, 0.0)

        gaps = np.clip(gaps - (cover_upto(ends + gaps) - cover_upto(ends)), 0, None)
    items = ev[cat_mask(ev["name"], lambda c: c == kineto.ITEM) & cpu]
    # how much of the gaps lies inside each part of the trainer's machinery
    parts = {p: _covered(ends, gaps, s, e) for p, (s, e) in part_spans(trace).items() if len(s)}
    return {"syncs": int(inside.sum()), "gap_us": float(gaps.sum()),
            "items": len(items), "gap_in_us": {p: v for p, v in parts.items() if v > 0}}


def _covered(starts: np.ndarray, lengths: np.ndarray, s: np.ndarray, e: np.ndarray) -> float:
    """Total length of the intervals [starts, starts + lengths) inside the sorted, disjoint [s, e)."""
    if not len(starts) or not len(s):
        return 0.0
    cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def upto(t):
        k = np.searchsorted(s, t, side="right")
        part = np.clip(t - s[np.clip(k - 1, 0, None)], 0, (e - s)[np.clip(k - 1, 0, None)])
        return cum[np.clip(k - 1, 0, None)] + np.where(k > 0, part, 0.0)

    return float(np.clip(upto(starts + lengths) - upto(starts), 0, lengths).sum())


SYNC_GAPS = Frame("sync_gaps", _sync_gaps, returns=dict)


@rule("host_sync", reads=(SYNC_GAPS, frames.WINDOWS), group="host", residual=True,
      summary="GPU idle after `cudaStreamSynchronize`/`.item()` inside steps",
      threshold=f"{SYNC_BANDS[0][0]:g} / {SYNC_BANDS[1][0]:g} / {SYNC_BANDS[2][0]:g} % of step",
      source="as dataloader_stall")
def host_sync(ctx: Context) -> Diagnosis | None:
    ranks = ctx.gpu_ranks()
    if not ranks:
        return None
    per = {r: ctx.frame(SYNC_GAPS, r) for r in ranks}
    steps = {r: max(len(ctx.windows(r)), 1) for r in ranks}
    step_ms = float(ctx.breakdown[ctx.breakdown["rank"].isin(ranks)]["step_ms"].mean())
    # the gaps are host time after each sync: as long in the job as its waiting
    ex = ctx.explained or Explained()
    claimed = {r: sum(v for p, v in (per[r].get("gap_in_us") or {}).items() if p in ex.parts) for r in ranks}
    gap_ms = float(np.mean([(per[r]["gap_us"] - claimed[r]) / 1e3 / steps[r] * ctx.wait_scale(r) for r in ranks]))
    left_out = float(np.mean([claimed[r] / 1e3 / steps[r] * ctx.wait_scale(r) for r in ranks]))
    syncs = float(np.mean([per[r]["syncs"] / steps[r] for r in ranks]))
    share = 100.0 * gap_ms / step_ms if step_ms > 0 else 0.0
    severity = severity_for(share, SYNC_BANDS)
    if severity is None or syncs == 0:
        return None
    by = [k for k, v in ex.by.items() if v > 0]
    return Diagnosis(
        id="host_sync", severity=severity,
        title=f"{syncs:.0f} host syncs per step leave the GPU idle {gap_ms:.1f} ms ({share:.0f}% of the step)"
              + (f" beyond what {', '.join(by)} explain{'s' if len(by) == 1 else ''}" if left_out > 0 else ""),
        evidence={"syncs_per_step": round(syncs, 1), "gpu_idle_after_sync_ms_per_step": round(gap_ms, 3),
                  **({"explained_ms": round(left_out, 3), "explained_by": by} if left_out > 0 else {}),
                  "step_ms": round(step_ms, 3), "share_pct": round(share, 2),
                  "item_calls_per_step": round(float(np.mean([per[r]["items"] / steps[r] for r in ranks])), 1),
                  "source": "cuda*Synchronize / cudaMemcpy inside steps; gap from each sync's end to the next GPU event"},
        recommendation=("remove sync points from the step: keep metrics on the GPU and read them every N steps "
                        "(no .item()/.cpu()/print of tensors per layer or per step), use non_blocking copies"),
        estimated_gain=gain(step_ms, gap_ms, "step_ms / (step_ms - gpu_idle_after_sync_ms)"),
        fix=["faults.host_sync_every_step"],
        ranks=sorted(int(r) for r in ranks if per[r]["syncs"]),
    )
