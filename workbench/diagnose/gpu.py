"""GPU-side rules: ``low_gpu_utilization`` / ``host_bound``, ``host_sync``, ``pageable_memcpy``.

All three measure GPU time lost to the host, as a share of the step; none applies to CPU traces.

``low_gpu_utilization`` / ``host_bound``: kernels cover less than ``BUSY_WARNING_PCT`` = 50 % of
the step (the PyTorch TensorBoard plugin's "GPU utilization < 50 %"), critical below 25 %, and
the idle is not explained by another rule's cause: the breakdown's host + idle share (GPU idle
while the main thread is not waiting on data) is at least ``UNEXPLAINED_MIN_PCT``. Named
``host_bound`` when most kernels are shorter than analysis.kernels.TINY_KERNEL_US (the host's
per-op launch cost sets the pace). Gain ≤ step_ms / (step_ms − (host + idle)_ms).

``host_sync``: ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` / ``cudaEventSynchronize``
/ synchronous ``cudaMemcpy`` inside a step (``.item()``, ``.cpu()``, printing a tensor). After a
sync the GPU queue is empty, so the GPU idles until the host launches the next kernel: the cost
of each sync is the gap from its end to the next GPU event. Thresholds (share of step) as
``dataloader_stall`` (GPU idle caused by the host): info ≥ 5 %, warning ≥ 10 %, critical ≥ 20 %.
Gain ≤ step_ms / (step_ms − sync_gap_ms).

``pageable_memcpy``: ``Memcpy … (Pageable …)`` copies: staged through a bounce buffer, blocking,
about half the bandwidth of pinned copies (CUDA C++ Best Practices Guide, "Pinned Memory").
Thresholds (copy time share of step): info ≥ 1 %, warning ≥ 5 %, critical ≥ 20 %. Gain ≤
step_ms / (step_ms − pageable_ms) (pinned + non_blocking copies overlap with compute).
"""

from __future__ import annotations

import numpy as np

from workbench.format import kineto
from workbench.analysis import frames
from workbench.analysis.frames import Frame, RankFrames
from workbench.analysis.intervals import cat_mask, merge
from workbench.analysis.kernels import TINY_KERNEL_US
from workbench.diagnose.base import per_sample, Context, Diagnosis, gain, reads, severity_for

BUSY_WARNING_PCT = 50.0
BUSY_CRITICAL_PCT = 25.0
UNEXPLAINED_MIN_PCT = 25.0
TINY_SHARE = 0.5
SYNC_BANDS = ((5.0, "info"), (10.0, "warning"), (20.0, "critical"))
PAGEABLE_BANDS = ((1.0, "info"), (5.0, "warning"), (20.0, "critical"))


def _gpu_ranks(ctx: Context) -> list[int]:
    return [r for r in ctx.ranks if ctx.rank_has_gpu(r)]


@reads(frames.DEVICE_BUSY)
def low_gpu_utilization(ctx: Context) -> Diagnosis | None:
    ranks = _gpu_ranks(ctx)
    if not ranks:
        return None
    b = ctx.breakdown[ctx.breakdown["rank"].isin(ranks)]
    busy = {r: ctx.frame(frames.DEVICE_BUSY, r) for r in ranks}
    # kernels' share of the job's step: the trace's busy share of a recorded step the
    # profiler stretched, times recorded / job step
    busy_pct = float(np.mean([ctx.busy_pct(r, d) for r, d in busy.items()]))
    step_ms = float(b["step_ms"].mean())
    unexplained_ms = float((b["host_ms"] + b["idle_ms"]).mean())
    unexplained = 100.0 * unexplained_ms / step_ms if step_ms > 0 else 0.0
    if busy_pct >= BUSY_WARNING_PCT or unexplained < UNEXPLAINED_MIN_PCT:
        return None
    kernels = sum(int(d["kernels"].sum()) for d in busy.values())
    tiny = sum(int(d["tiny_kernels"].sum()) for d in busy.values())
    tiny_share = tiny / kernels if kernels else 0.0
    host_bound = tiny_share >= TINY_SHARE
    rid = "host_bound" if host_bound else "low_gpu_utilization"
    severity = "critical" if busy_pct < BUSY_CRITICAL_PCT else "warning"
    n_steps = sum(len(d) for d in busy.values())
    meds = np.concatenate([d["median_kernel_us"].to_numpy(float) for d in busy.values()])
    meds = meds[np.isfinite(meds)]  # steps without kernels have none (nanmedian of nothing warns)
    med = float(np.median(meds)) if len(meds) else float("nan")
    rec = ("the host cannot launch kernels fast enough: fuse small ops (torch.compile), capture the step in a "
           "CUDA graph, raise the batch size so each kernel does more work" if host_bound else
           "the GPU waits on the host between kernels: move Python work out of the step, overlap it "
           "(asynchronous logging, prefetch), raise the batch size")
    return Diagnosis(
        id=rid, severity=severity,
        title=f"GPU busy {busy_pct:.0f}% of the step; {unexplained:.0f}% idle waiting on the host"
              + (f" ({tiny_share:.0%} of kernels < {TINY_KERNEL_US:.0f} µs)" if host_bound else ""),
        evidence={"gpu_busy_pct": round(busy_pct, 2), "host_idle_pct": round(unexplained, 2),
                  "host_idle_ms_per_step": round(unexplained_ms, 3), "step_ms": round(step_ms, 3),
                  "kernels_per_step": round(kernels / max(n_steps, 1), 1), "tiny_kernel_share": round(tiny_share, 3),
                  "median_kernel_us": round(med, 2),
                  "source": "union of kernels per step; breakdown host + idle (GPU idle, main thread not on data)"},
        recommendation=rec,
        estimated_gain={**gain(step_ms, unexplained_ms, "step_ms / (step_ms - (host + idle)_ms)"),
                        **per_sample(step_ms, step_ms * busy_pct / 100.0)},
        fix=["train.compile", "data.batch_size"],
        ranks=sorted(int(r) for r in ranks),
    )


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
    return {"syncs": int(inside.sum()), "gap_us": float(gaps.sum()),
            "items": len(items)}


SYNC_GAPS = Frame("sync_gaps", _sync_gaps, returns=dict)


@reads(SYNC_GAPS, frames.WINDOWS)
def host_sync(ctx: Context) -> Diagnosis | None:
    ranks = _gpu_ranks(ctx)
    if not ranks:
        return None
    per = {r: ctx.frame(SYNC_GAPS, r) for r in ranks}
    steps = {r: max(len(ctx.windows(r)), 1) for r in ranks}
    step_ms = float(ctx.breakdown[ctx.breakdown["rank"].isin(ranks)]["step_ms"].mean())
    # the gaps are host time after each sync: as long in the job as its waiting
    gap_ms = float(np.mean([per[r]["gap_us"] / 1e3 / steps[r] * ctx.wait_scale(r) for r in ranks]))
    syncs = float(np.mean([per[r]["syncs"] / steps[r] for r in ranks]))
    share = 100.0 * gap_ms / step_ms if step_ms > 0 else 0.0
    severity = severity_for(share, SYNC_BANDS)
    if severity is None or syncs == 0:
        return None
    return Diagnosis(
        id="host_sync", severity=severity,
        title=f"{syncs:.0f} host syncs per step leave the GPU idle {gap_ms:.1f} ms ({share:.0f}% of the step)",
        evidence={"syncs_per_step": round(syncs, 1), "gpu_idle_after_sync_ms_per_step": round(gap_ms, 3),
                  "step_ms": round(step_ms, 3), "share_pct": round(share, 2),
                  "item_calls_per_step": round(float(np.mean([per[r]["items"] / steps[r] for r in ranks])), 1),
                  "source": "cuda*Synchronize / cudaMemcpy inside steps; gap from each sync's end to the next GPU event"},
        recommendation=("remove sync points from the step: keep metrics on the GPU and read them every N steps "
                        "(no .item()/.cpu()/print of tensors per layer or per step), use non_blocking copies"),
        estimated_gain=gain(step_ms, gap_ms, "step_ms / (step_ms - gpu_idle_after_sync_ms)"),
        fix=["faults.host_sync_every_step"],
        ranks=sorted(int(r) for r in ranks if per[r]["syncs"]),
    )


def _pageable(rf: RankFrames) -> tuple[float, float, float]:
    """Pageable copies inside the steps, per step: (ms, bytes, copies)."""
    ev, w = rf.trace.events, rf[frames.WINDOWS]
    pg = ev[ev["is_gpu"].to_numpy() & cat_mask(ev["name"], lambda c: c.str.contains(kineto.PAGEABLE, regex=False))]
    lo, hi = w["start_us"].min(), w["end_us"].max()
    pg = pg[(pg["ts_us"] >= lo) & (pg["ts_us"] < hi)]
    k = max(len(w), 1)
    return float(pg["dur_us"].sum() / 1e3 / k), float(pg["bytes"].sum() / k), len(pg) / k


PAGEABLE = Frame("pageable", _pageable, returns=(tuple, list))


@reads(PAGEABLE)
def pageable_memcpy(ctx: Context) -> Diagnosis | None:
    ranks = _gpu_ranks(ctx)
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
