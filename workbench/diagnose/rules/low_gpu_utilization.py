"""``low_gpu_utilization`` / ``host_bound``: kernels cover less than ``BUSY_WARNING_PCT`` = 50 % of
the step (the PyTorch TensorBoard plugin's "GPU utilization < 50 %"), critical below 25 %, and
the idle is not explained by another rule's cause: the breakdown's host + idle share (GPU idle
while the main thread is not waiting on data) is at least ``UNEXPLAINED_MIN_PCT``. Named
``host_bound`` when most kernels are shorter than analysis.kernels.TINY_KERNEL_US (the host's
per-op launch cost sets the pace). Gain ≤ step_ms / (step_ms − (host + idle)_ms).

A residual rule (workbench.diagnose.explained): it runs after the others and counts only the host +
idle time no finding explains (the trainer's optimizer on the host and its copies, a sharded layout's
gathers and releases): the share, the gain and the busy share the severity reads are of the step
without what those findings explain, so the finding that names the cause leads and the same
milliseconds are not said twice.

One of three rules that measure GPU time lost to the host, as a share of the step (low_gpu_utilization,
host_sync, pageable_memcpy); none applies to CPU traces.
"""

from __future__ import annotations

import numpy as np

from workbench.analysis import frames
from workbench.analysis.kernels import TINY_KERNEL_US
from workbench.diagnose.base import Context, Diagnosis, gain, per_sample
from workbench.diagnose.explained import Explained
from workbench.diagnose.registry import rule

BUSY_WARNING_PCT = 50.0
BUSY_CRITICAL_PCT = 25.0
UNEXPLAINED_MIN_PCT = 25.0
TINY_SHARE = 0.5


@rule("low_gpu_utilization", reads=(frames.DEVICE_BUSY,), also=("host_bound",), group="host", residual=True,
      summary=f"kernels cover < {BUSY_WARNING_PCT:g} % (critical < {BUSY_CRITICAL_PCT:g} %) of the step; "
              f"host_bound when most kernels are < {TINY_KERNEL_US:g} µs",
      threshold=f"{BUSY_WARNING_PCT:g} / {BUSY_CRITICAL_PCT:g} % busy", source="TensorBoard plugin (< 50 %)")
def low_gpu_utilization(ctx: Context) -> Diagnosis | None:
    ranks = ctx.gpu_ranks()
    if not ranks:
        return None
    b = ctx.breakdown[ctx.breakdown["rank"].isin(ranks)]
    busy = {r: ctx.frame(frames.DEVICE_BUSY, r) for r in ranks}
    # kernels' share of the job's step: the trace's busy share of a recorded step the
    # profiler stretched, times recorded / job step
    busy_pct = float(np.mean([ctx.busy_pct(r, d) for r, d in busy.items()]))
    step_ms = float(b["step_ms"].mean())
    waits_ms = float((b["host_ms"] + b["idle_ms"]).mean())
    ex = ctx.explained or Explained()
    left_out = min(ex.ms, waits_ms)
    unexplained_ms = waits_ms - left_out
    unexplained = 100.0 * unexplained_ms / step_ms if step_ms > 0 else 0.0
    # the busy share of the step without what the other findings explain: what their fixes leave
    rest_ms = step_ms - left_out
    busy_rest = min(busy_pct * step_ms / rest_ms, 100.0) if rest_ms > 0 else busy_pct
    if busy_rest >= BUSY_WARNING_PCT or unexplained < UNEXPLAINED_MIN_PCT:
        return None
    kernels = sum(int(d["kernels"].sum()) for d in busy.values())
    tiny = sum(int(d["tiny_kernels"].sum()) for d in busy.values())
    tiny_share = tiny / kernels if kernels else 0.0
    host_bound = tiny_share >= TINY_SHARE
    rid = "host_bound" if host_bound else "low_gpu_utilization"
    severity = "critical" if busy_rest < BUSY_CRITICAL_PCT else "warning"
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
              + (f" beyond what {', '.join(ex.by)} explain{'s' if len(ex.by) == 1 else ''}" if left_out else "")
              + (f" ({tiny_share:.0%} of kernels < {TINY_KERNEL_US:.0f} µs)" if host_bound else ""),
        evidence={"gpu_busy_pct": round(busy_pct, 2), "host_idle_pct": round(unexplained, 2),
                  "host_idle_ms_per_step": round(unexplained_ms, 3), "step_ms": round(step_ms, 3),
                  **({"explained_ms": round(left_out, 3), "explained_by": {k: round(v, 3) for k, v in ex.by.items()},
                      "gpu_busy_without_explained_pct": round(busy_rest, 2)} if left_out else {}),
                  "kernels_per_step": round(kernels / max(n_steps, 1), 1), "tiny_kernel_share": round(tiny_share, 3),
                  "median_kernel_us": round(med, 2),
                  "source": "union of kernels per step; breakdown host + idle (GPU idle, main thread not on data), less "
                            "what other findings explain"},
        recommendation=rec,
        estimated_gain={**gain(step_ms, unexplained_ms, "step_ms / (step_ms - (host + idle - explained)_ms)" if left_out
                               else "step_ms / (step_ms - (host + idle)_ms)"),
                        **per_sample(step_ms, step_ms * busy_pct / 100.0)},
        fix=["train.compile", "data.batch_size"],
        ranks=sorted(int(r) for r in ranks),
    )
