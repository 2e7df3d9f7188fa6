"""One call from a run to its verdict: load → analysis → diagnose. Shared by the CLI and the app.

``analyze_run(path).to_json()`` is the stable ``workbench analyze --json`` schema
(``json_schema`` = ``workbench.analyze/1``)::

    {
      "json_schema": "workbench.analyze/1",
      "run": {"path", "name", "status", "world_size", "device", "has_gpu", "warnings": [str],
              "steps_from"},            # added in issue 11: what ended a step (manifest), or null
      "summary": {
        "steps": int,                   # profiled steps per rank (min over ranks)
        "step_ms": float,               # mean step time over ranks and steps
        "breakdown_pct": {category: float},   # mean share of step time, sums to 100
        "per_rank": [{"rank", "steps", "step_ms", "<category>_ms", "<category>_pct"}],
        "host_step_ms": float,          # the same steps timed on the host (ProfilerStep annotations)
        "host_ahead": {"device_step_ms", "host_step_ms", "ratio"} | null
                                        # set when the GPU's steps take HOST_AHEAD_RATIO× the host's:
                                        # the host ran ahead (CUDA graphs, no sync); step_ms is the GPU's
      },
      "diagnoses": [{"id", "severity", "title", "evidence", "recommendation",
                     "estimated_gain", "fix", "ranks"}],
      "verdict": str,                   # one line
      "metrics": {name: float|null},    # added in issue 4; flat, the rows of `workbench compare`:
          step_ms, <category>_pct, gpu_busy_pct (kernels, GPU runs) or compute_busy_pct (CPU),
          exposed_comm_pct (min over ranks), comm_ms_per_step, peak_reserved_gib,
          peak_allocated_gib, straggler_work_ratio, tokens_per_s (steps CSV, when written),
          steady_step_ms (added in issue 10)
          step_ms and the <category>_pct cover the profiled steps (the trace); steady_step_ms and
          tokens_per_s the steady steps of the steps CSVs: step ≥ 1, not profiled, step time
          gpu_step_ms where captured; tokens_per_s = the job's tokens per steady step /
          steady_step_ms (analysis.throughput; issue 10 — before, it also counted step 0's
          start-up and the profiled steps)
      "collectives": [{"rank", "op", "dtype", "bytes", "group_size", "pg_name", "calls",
                       "calls_per_step", "bytes_per_step", "total_ms"}],   # added in issue 4
      "clock": {rank: {"offset_us", "source"}},                         # added in issue 4
      "efficiency": {                   # added in issue 10; null when no op's FLOPs could be counted
        "flops_per_step": float,        # model FLOPs per step and device, from the ops' shapes
                                        # (analysis.flops), mean over ranks and steps
        "achieved_tflops": float,       # those FLOPs / step time (the GPU's clock), per device
        "mfu_pct": float|null,          # time the FLOPs need at each dtype's dense peak / step time
        "mfu_bf16_pct": float|null,     # all FLOPs against the bf16 peak (the usual headline)
        "dtype_flops_pct": {dtype: float},  # share of the FLOPs per dtype that ran (bf16, fp16,
                                        # fp8, tf32, fp32 …)
        "peak": {"tflops": {dtype: float}, "hbm_tb_s", "source"} | null,   # workbench.peaks
        "per_step": [{"rank", "step", "step_ms", "flops", "tflops_per_s", "mfu_pct", "mfu_bf16_pct"}],
        "classes": [{"class", "subclass", "kernels", "time_ms", "time_pct", "flops", "tflops_per_s",
                     "bytes", "gb_per_s", "bound", "pct_of_peak"}],   # every GPU kernel of all
                                        # ranks in one class (analysis.kernel_classes), largest first
        "other_kernels": [{"name", "calls", "time_ms"}]   # kernels no class matched, by name
      }
    }
Categories: compute, communication, memcpy, dataloader, host, idle (see analysis.steps).
Keys are only ever added to this schema, never renamed or removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

import numpy as np

from workbench.analysis.comm import collective_inventory, comm_overlap
from workbench.analysis.kernel_classes import Efficiency, class_breakdown, efficiency, unclassified
from workbench.analysis.kernels import device_busy
from workbench.analysis.memory import GIB, memory_summary
from workbench.analysis.skew import rank_skew
from workbench.analysis.steps import BREAKDOWN_COLUMNS, CATEGORIES, rank_summary
from workbench.analysis.throughput import step_time_ms, steady_step_ms, steady_summary, tokens_per_s  # noqa: F401 - step_time_ms: callers import it from here
from workbench.diagnose import Context, Diagnosis, diagnose
from workbench.errors import WorkbenchError
from workbench.load import Run

JSON_SCHEMA = "workbench.analyze/1"
# A GPU step 10 % longer than the host's view of it is beyond the launch lag of a synchronous loop
# (the committed GPU runs whose loops sync every step differ by < 3 %, ~0.5 ms).
HOST_AHEAD_RATIO = 1.10


@dataclass(slots=True)
class Analysis:
    run: Run
    breakdown: pd.DataFrame
    per_rank: pd.DataFrame
    diagnoses: list[Diagnosis] = field(default_factory=list)
    context: Context | None = None
    """The frames the rules read (traces, step windows, cached per-rank frames)."""

    def collectives(self) -> pd.DataFrame:
        """analysis.comm.collective_inventory of every rank, with a ``rank`` column."""
        if self.context is None:
            return pd.DataFrame()
        frames = [self.context.frame("inventory", r, collective_inventory).assign(rank=r) for r in self.context.traces]
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def metrics(self) -> dict[str, float | None]:
        """Flat run-level numbers (the ``metrics`` JSON key and the rows of ``workbench compare``)."""
        out: dict[str, float | None] = {"step_ms": float(self.breakdown["step_ms"].mean()) if not self.breakdown.empty else None}
        for c, v in self.breakdown_pct().items():
            out[f"{c}_pct"] = v
        ctx = self.context
        if ctx is None or not ctx.traces:
            return out
        busy = [ctx.frame("device_busy", r, device_busy) for r in ctx.traces]
        busy_pct = float(np.mean([b["busy_pct"].mean() for b in busy if not b.empty])) if busy else None
        out["gpu_busy_pct" if ctx.has_gpu else "compute_busy_pct"] = busy_pct
        ov = [ctx.frame("comm_overlap", r, comm_overlap) for r in ctx.traces]
        ov = [o for o in ov if not o.empty]
        out["exposed_comm_pct"] = min(float(o["exposed_pct"].mean()) for o in ov) if ov else None
        out["comm_ms_per_step"] = float(np.mean([o["comm_ms"].mean() for o in ov])) if ov else None
        mem = [ctx.frame("memory_summary", r, lambda t, w: memory_summary(t, ctx.capacity_bytes, w)) for r in ctx.traces]
        res = [m["peak_reserved_bytes"] for m in mem if m["peak_reserved_bytes"]]
        alloc = [m["peak_allocated_bytes"] for m in mem if m["peak_allocated_bytes"]]
        out["peak_reserved_gib"] = max(res) / GIB if res else None
        out["peak_allocated_gib"] = max(alloc) / GIB if alloc else None
        if self.breakdown["rank"].nunique() > 1:
            sk = rank_skew(self.breakdown)
            out["straggler_work_ratio"] = float(sk["work_ratio"].max())
        steady = steady_summary(ctx.steps)
        if not steady.empty:
            out["steady_step_ms"] = steady_step_ms(steady)
            tps = tokens_per_s(steady)
            if tps is not None:
                out["tokens_per_s"] = tps
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}

    def efficiency_frames(self) -> dict[int, Efficiency]:
        """analysis.kernel_classes.efficiency of every rank (FLOPs, MFU per step, kernel classes)."""
        ctx = self.context
        if ctx is None:
            return {}
        device = self.run.device_name
        return {r: ctx.frame("efficiency", r, lambda t, w: efficiency(t, device, w)) for r in ctx.traces}

    def efficiency_json(self) -> dict[str, Any] | None:
        """The ``efficiency`` JSON key (see the module docstring); None when no FLOPs were counted."""
        frames = self.efficiency_frames()
        steps = [e.per_step.assign(rank=r) for r, e in frames.items() if not e.per_step.empty]
        steps = pd.concat(steps, ignore_index=True) if steps else pd.DataFrame()
        if steps.empty or not (steps["flops"] > 0).any():
            return None
        from workbench.peaks import device_peak

        def num(v):
            return None if v is None or (isinstance(v, float) and np.isnan(v)) else round(float(v), 4)

        by_dtype = pd.concat([e.ops.groupby("dtype")["flops"].sum() for e in frames.values()]).groupby(level=0).sum()
        kernels = pd.concat([e.kernels for e in frames.values() if not e.kernels.empty] or [pd.DataFrame()], ignore_index=True)
        classes = class_breakdown(kernels, self.run.device_name) if not kernels.empty else pd.DataFrame()
        peak = device_peak(self.run.device_name) if not kernels.empty else None  # a CPU trace: no GPU peak
        return {
            "flops_per_step": num(steps["flops"].mean()),
            "achieved_tflops": num(steps["tflops_per_s"].mean()),
            "mfu_pct": num(steps["mfu_pct"].mean()) if steps["mfu_pct"].notna().any() else None,
            "mfu_bf16_pct": num(steps["mfu_bf16_pct"].mean()) if steps["mfu_bf16_pct"].notna().any() else None,
            "dtype_flops_pct": {str(d): round(100.0 * f / by_dtype.sum(), 2) for d, f in by_dtype.items()},
            "peak": {"tflops": dict(peak.tflops), "hbm_tb_s": peak.hbm_tb_s, "source": peak.source} if peak else None,
            "per_step": [{k: (int(v) if k in ("rank", "step") else num(v)) for k, v in row.items()}
                         for row in steps[["rank", "step", "step_ms", "flops", "tflops_per_s", "mfu_pct", "mfu_bf16_pct"]].to_dict("records")],
            "classes": [{k: (num(v) if isinstance(v, (float, np.floating)) else (int(v) if isinstance(v, (int, np.integer)) else v))
                         for k, v in row.items()} for row in classes.to_dict("records")],
            "other_kernels": [{"name": str(r["name"]), "calls": int(r["calls"]), "time_ms": num(r["time_ms"])}
                              for r in (unclassified(kernels).to_dict("records") if not kernels.empty else [])],
        }

    def host_ahead(self) -> dict[str, float] | None:
        """The host ran ahead of the GPU: steps take longer on the GPU's clock than on the host's."""
        if self.breakdown.empty or "host_step_ms" not in self.breakdown or not self.run.has_gpu:
            return None
        dev, host = float(self.breakdown["step_ms"].mean()), float(self.breakdown["host_step_ms"].mean())
        if host <= 0 or dev < HOST_AHEAD_RATIO * host:
            return None
        return {"device_step_ms": round(dev, 3), "host_step_ms": round(host, 3), "ratio": round(dev / host, 2)}

    @property
    def verdict(self) -> str:
        # low_mfu is the summary; a finding that names a fix takes the line when there is one
        serious = sorted((d for d in self.diagnoses if d.severity != "info"), key=lambda d: d.id == "low_mfu")
        if serious:
            top = serious[0]
            return f"{top.id}: {top.title} → {top.recommendation.split(';')[0]}"
        # issue 10: "no bottleneck" only when compute fills >= 90% of the step and MFU is near what
        # this GPU reaches (low_mfu silent: MFU over the busy share >= 0.75 of the GEMMs' rate)
        NO_BOTTLENECK_COMPUTE_PCT = 90.0
        pct = self.breakdown_pct()
        busy = pct.get("compute", 0.0)
        mfu = next((d for d in self.diagnoses if d.id == "low_mfu"), None)
        if busy >= NO_BOTTLENECK_COMPUTE_PCT and mfu is None:
            return f"no bottleneck found: compute fills {busy:.0f}% of the step"
        # every remaining point of the step goes somewhere the user can look: name the shares
        rest = sorted(((v, c) for c, v in pct.items() if c != "compute" and v >= 1.0), reverse=True)
        parts = [f"compute {busy:.0f}% of the step"] + [f"{c} {v:.0f}%" for v, c in rest]
        if mfu is not None:
            parts.append(f"MFU {mfu.evidence['mfu_pct']:.0f}% vs {mfu.evidence['ceiling_pct']:.0f}% this GPU reaches on "
                         f"these GEMMs")
        small = [d.id for d in self.diagnoses if d.id != "low_mfu"]
        return "no single bottleneck: " + ", ".join(parts) + (f" (minor: {', '.join(small)})" if small else "")

    def breakdown_pct(self) -> dict[str, float]:
        if self.breakdown.empty:
            return {}
        total = self.breakdown["step_ms"].sum()
        return {c: round(100.0 * self.breakdown[f"{c}_ms"].sum() / total, 2) for c in CATEGORIES}

    def to_json(self) -> dict[str, Any]:
        m = self.run.manifest
        return {
            "json_schema": JSON_SCHEMA,
            "run": {
                "path": str(self.run.path),
                "name": self.run.name,
                "status": m.get("status", "bare"),
                "world_size": self.run.world_size,
                "device": self.run.device_name,
                "has_gpu": self.run.has_gpu,
                "warnings": list(self.run.warnings),
                "steps_from": m.get("steps_from"),
            },
            "summary": {
                "steps": int(self.per_rank["steps"].min()) if not self.per_rank.empty else 0,
                "step_ms": round(float(self.breakdown["step_ms"].mean()), 3) if not self.breakdown.empty else None,
                "breakdown_pct": self.breakdown_pct(),
                "per_rank": [
                    {k: (int(v) if k in ("rank", "steps") else round(float(v), 3)) for k, v in row.items()}
                    for row in self.per_rank.to_dict("records")
                ],
                "host_step_ms": round(float(self.breakdown["host_step_ms"].mean()), 3) if not self.breakdown.empty else None,
                "host_ahead": self.host_ahead(),
            },
            "diagnoses": [d.to_dict() for d in self.diagnoses],
            "verdict": self.verdict,
            "metrics": self.metrics(),
            "collectives": [
                {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}
                for row in self.collectives().to_dict("records")
            ],
            "clock": {int(r): {"offset_us": t.clock_offset_us, "source": t.clock_source} for r, t in self.run.rank_info.items()},
            "efficiency": self.efficiency_json(),
        }


def analyze_run(path: Path | str | Run, progress=None, workers: int | None = None, cache: bool = True,
                executor: str | None = None, peak: str | None = None) -> Analysis:
    """Load (as per-rank summaries, :mod:`workbench.reduce`), analyse and diagnose a run.

    ``path``: a run directory, a bare trace directory or one trace file, or a :class:`Run` already
    loaded with its traces (reduced here, in this process). ``workers``, ``cache``, ``executor``:
    see :func:`workbench.reduce.load_reduced`. ``peak``: the user's peak for the device, ``"400 bf16"``
    (workbench.devices.peak_spec), for a device the table lacks.
    """
    from workbench import reduce

    if isinstance(path, Run):
        run = path
        params = reduce.Params(device_name=run.manifest.get("device_name"),
                               capacity_bytes=int(run.manifest["device_memory_bytes"]) if run.manifest.get("device_memory_bytes") else None,
                               peak=peak)
        for r, d in run.ranks.items():
            if d.trace is not None and d.summary is None:
                d.summary = reduce.summarize(d.trace, d.trace.path, params, rank=r)
    else:
        run = reduce.load_reduced(path, workers=workers, cache=cache, executor=executor, progress=progress, peak=peak)
    summaries = run.summaries
    if not summaries:
        raise WorkbenchError(f"{run.path}: no trace to analyze (the run wrote no rank*.pt.trace.json.gz; did it reach the profiled steps?)")
    parts = [s.breakdown for _, s in sorted(summaries.items()) if len(s.breakdown)]
    breakdown = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    per_rank = rank_summary(breakdown)
    config = run.manifest.get("config")
    ctx = Context(breakdown=breakdown, run_config=config, traces=summaries,
                  windows={r: s.windows for r, s in summaries.items()},
                  steps={r: d.steps for r, d in run.ranks.items()},
                  capacity_bytes=run.device_memory_bytes, world_size=run.world_size,
                  cache={(k, r): v for r, s in summaries.items() for k, v in s.frames.items()})
    return Analysis(run=run, breakdown=breakdown, per_rank=per_rank, diagnoses=diagnose(breakdown, config, ctx), context=ctx)


def warm(trace, rank: int, windows: pd.DataFrame, breakdown: pd.DataFrame, device_name: str | None,
         capacity_bytes: int | None) -> dict[str, Any]:
    """Every per-rank frame the run-level analysis reads, computed from one rank's ``trace``:
    the rules, the JSON's metrics, collectives and efficiency run on this rank alone and each
    frame they ask :meth:`Context.frame` for is kept (workbench.reduce calls it per rank).
    Frames a rule reads only under conditions a single rank cannot show (straggler_rank with
    two ranks) are named in ``diagnose.RANK_FRAMES``."""
    from workbench.diagnose import RANK_FRAMES
    from workbench.load.run import RankData

    ctx = Context(breakdown=breakdown, traces={rank: trace}, windows={rank: windows}, capacity_bytes=capacity_bytes)
    run = Run(path=Path(trace.path).parent, manifest={"device_name": device_name, "device_memory_bytes": capacity_bytes},
              ranks={rank: RankData(rank=rank, trace=trace)})
    a = Analysis(run=run, breakdown=breakdown, per_rank=rank_summary(breakdown), context=ctx)
    diagnose(breakdown, None, ctx)
    a.metrics()
    a.collectives()
    a.efficiency_frames()
    for fn in RANK_FRAMES:
        fn(ctx, rank)
    return {k: v for (k, _), v in ctx.cache.items()}
