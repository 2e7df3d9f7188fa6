"""From a run's per-rank frames to its analysis: load → analysis → diagnose, the run-level numbers.

:func:`analyze_run` builds an :class:`Analysis` (the frames, the rules' findings and the numbers
the JSON reports); ``Analysis.result()`` is its typed :class:`~workbench.pipeline.result.Result`,
whose ``to_json()`` is the ``workbench analyze --json`` document (the schema and its versions are
documented in :mod:`workbench.pipeline.result`). Callers go through :func:`workbench.pipeline.analyze`,
which adds the caches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.pipeline import bounds, long_run, reduce
from workbench.analysis import frames
from workbench.analysis.frames import Params, RankFrames, unique
from workbench.analysis.job import capture_cost, correct_breakdown, correction_note, device_bound_job, job_steps, job_words
from workbench.analysis.kernel_classes import Efficiency, class_breakdown, unclassified
from workbench.analysis.failure import run_failure
from workbench.analysis.experts import ROUTED_EXPERTS, expert_load_json, not_recorded_note
from workbench.analysis.memory import GIB
from workbench.analysis.memory_categories import rank_categories, run_categories
from workbench.analysis.model import CONVENTION, CONVENTIONS, flops_per_token, value
from workbench.analysis.frames import MOE_TIME
from workbench.analysis.moe_time import moe_shares
from workbench.analysis.model_run import run_model
from workbench.analysis.skew import rank_skew
from workbench.analysis.steps import BREAKDOWN_COLUMNS, CATEGORIES, rank_summary
from workbench.analysis.throughput import step_set, step_time_ms, steps_words, tokens_per_s  # noqa: F401 - step_time_ms: callers import it from here
from workbench.diagnose import READS as RULE_READS, Context, Diagnosis, diagnose
from workbench.diagnose.memory import memory_summaries
from workbench.format.errors import WorkbenchError
from workbench.format.jsonout import dumps  # strict JSON: no NaN/Infinity
from workbench.load import Run, completeness
from workbench.format.overhead import capture_overhead
from workbench.pipeline.result import JSON_SCHEMA, Efficiency, Finding, Metrics, ModelInfo, Result, RunInfo, Summary  # noqa: F401 - JSON_SCHEMA: callers import it from here

# A GPU step 10 % longer than the host's view of it is beyond the launch lag of a synchronous loop
# (the committed GPU runs whose loops sync every step differ by < 3 %, ~0.5 ms).
HOST_AHEAD_RATIO = 1.10
FAILURE_IDS = ("out_of_memory", "job_failed")
"""Findings that say the job ended: the verdict's headline whatever else was found."""
TIME_WINDOWS_VERDICT = "[steps are time windows, not iterations] "
ANALYSIS_READS = (frames.WINDOWS, frames.BREAKDOWN, frames.DEVICE_BUSY, frames.COMM_OVERLAP, frames.MEMORY_SUMMARY,
                  frames.INVENTORY, frames.EFFICIENCY, frames.MODEL, frames.GEMM_CALLS, frames.STEP_TRANSIENT,
                  ROUTED_EXPERTS, frames.MOE_TIME)
"""The frames the run-level numbers read (``metrics``, ``collectives``, ``efficiency``; the app's
and the report's pages read the same; the planner's calibration reads ``gemm_calls`` and
``step_transient``; ``routed_experts`` says an MoE run lacks its expert load)."""
READS = unique((*ANALYSIS_READS, *RULE_READS))
"""Every frame a run's analysis reads: what workbench.pipeline.reduce computes next to each trace."""


@dataclass(slots=True)
class Analysis:
    run: Run
    breakdown: pd.DataFrame
    per_rank: pd.DataFrame
    diagnoses: list[Diagnosis] = field(default_factory=list)
    context: Context | None = None
    """Each rank's frames (``context.frame(FRAME, rank)``) and what the rules read."""
    trace_breakdown: pd.DataFrame | None = None
    """The breakdown of the recorded steps themselves (``breakdown`` is set against the job's
    step: analysis.job); the Timeline and "profiled steps" figures read this one."""
    job: pd.DataFrame | None = None
    """analysis.job.job_steps: each rank's job step (the mean of its unprofiled steps)."""
    withheld: list[dict] = field(default_factory=list)
    """Findings set aside because their evidence is past a physical bound (pipeline.bounds)."""
    windows: list[dict] | None = None
    """The launch window and the windows opened while the job ran (pipeline.long_run.windows_json)."""
    _model: dict | None = None
    _efficiency: dict | None = None
    _expert_load: dict | None = None
    _result: Result | None = None

    def job_scale(self) -> pd.Series:
        """rank → recorded step / job step (1.0 where the job's step is unknown or on CPU traces,
        whose device time stretched with the step): a share of the recorded step of time the GPU
        measured, times this, is its share of the job's step."""
        ctx = self.context
        if ctx is None:
            return pd.Series(dtype=float)
        return pd.Series({r: ctx.to_job(r) for r in ctx.ranks}, dtype=float)

    def per_rank_frames(self, frame) -> dict[int, Any]:
        """rank → ``frame`` of that rank (workbench.analysis.frames), for every rank."""
        ctx = self.context
        return {} if ctx is None else {r: ctx.frame(frame, r) for r in ctx.ranks}

    def collectives(self) -> pd.DataFrame:
        """analysis.comm.collective_inventory of every rank, with a ``rank`` column."""
        parts = [f.assign(rank=r) for r, f in self.per_rank_frames(frames.INVENTORY).items()]
        parts = [f for f in parts if not f.empty]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def metrics(self) -> dict[str, float | None]:
        """Flat run-level numbers (the ``metrics`` JSON key and the rows of ``workbench compare``)."""
        out: dict[str, float | None] = {"step_ms": float(self.breakdown["step_ms"].mean()) if not self.breakdown.empty else None}
        for c, v in self.breakdown_pct().items():
            out[f"{c}_pct"] = v
        ctx = self.context
        if ctx is None or not ctx.ranks:
            return out
        if self.trace_breakdown is not None and not self.trace_breakdown.empty:
            out["trace_step_ms"] = float(self.trace_breakdown["step_ms"].mean())
        scale = self.job_scale()
        busy = {r: b for r, b in self.per_rank_frames(frames.DEVICE_BUSY).items() if not b.empty}
        busy_pct = float(np.mean([ctx.busy_pct(r, b) for r, b in busy.items()])) if busy else None
        out["gpu_busy_pct" if ctx.has_gpu else "compute_busy_pct"] = busy_pct
        ov = {r: o for r, o in self.per_rank_frames(frames.COMM_OVERLAP).items() if not o.empty}
        out["exposed_comm_pct"] = min(float(o["exposed_pct"].mean()) * scale.get(r, 1.0) for r, o in ov.items()) if ov else None
        out["comm_ms_per_step"] = float(np.mean([ctx.device_ms(r, o["comm_ms"].mean()) for r, o in ov.items()])) if ov else None
        over = self.capture_overhead()
        if over and over.get("ratio"):
            out["capture_overhead_ratio"] = float(over["ratio"])
        mem = list(memory_summaries(ctx).values())  # [memory] events, else the allocator's peaks (steps CSV)
        res = [m["peak_reserved_bytes"] for m in mem if m["peak_reserved_bytes"]]
        alloc = [m["peak_allocated_bytes"] for m in mem if m["peak_allocated_bytes"]]
        out["peak_reserved_gib"] = max(res) / GIB if res else None
        out["peak_allocated_gib"] = max(alloc) / GIB if alloc else None
        if self.breakdown["rank"].nunique() > 1:
            sk = rank_skew(self.breakdown)
            out["straggler_work_ratio"] = float(sk["work_ratio"].max())
        tps = None
        if self.job_known:
            # the job's step, one figure: steady_step_ms is step_ms (kept as a key of its own for
            # the readers that ask for it), both the mean of the same unprofiled steps
            out["steady_step_ms"] = out["step_ms"]
            tps = tokens_per_s(self.job)  # the script's own count (record_metrics) wins
        if tps is None:
            tps = model_tokens_per_s(self.model_json(), out.get("steady_step_ms") or out.get("step_ms"))
        if tps is not None:
            out["tokens_per_s"] = tps
        eff = self.efficiency_json()
        if eff:
            out["mfu_pct"], out["hfu_pct"] = eff.get("mfu_pct"), eff.get("hfu_pct")
        if self.time_windows:  # a window is not an iteration: no per-step rate is the job's
            for k in ("steady_step_ms", "tokens_per_s", "mfu_pct", "hfu_pct"):
                out.pop(k, None)
        if load := self.expert_load_json():
            out["expert_maxvio"] = load["maxvio"]
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}

    def model_json(self) -> dict[str, Any]:
        """The ``model`` JSON key: the model inferred from the traces (analysis.model_run.run_model)."""
        if self._model is None:
            ranks = self.per_rank_frames(frames.MODEL)
            self._model = run_model(ranks, self.run.world_size)
            if self._model.get("expert_load") and self.expert_load_json():
                # the trace cannot hold tokens per expert, but this run's capture recorded them
                self._model["expert_load"] = "recorded by the capture in the profiled steps (the expert_load key)"
        return self._model

    def expert_load_json(self) -> dict[str, Any] | None:
        """The ``expert_load`` JSON key (analysis.experts.expert_load_json): per MoE layer the tokens
        per expert and MaxVio of the profiled steps; None where no rank recorded them."""
        if self._expert_load is None:
            self._expert_load = expert_load_json(self.context.experts if self.context else {}) or {}
        return self._expert_load or None

    def efficiency_frames(self) -> dict[int, Efficiency]:
        """analysis.kernel_classes.efficiency of every rank (FLOPs, MFU per step, kernel classes)."""
        return self.per_rank_frames(frames.EFFICIENCY)

    def efficiency_json(self) -> dict[str, Any] | None:
        """The ``efficiency`` JSON key (see the module docstring); None when no FLOPs were counted."""
        if self._efficiency is None:
            self._efficiency = self._efficiency_json() or {}
            if self._efficiency and self.time_windows:
                self._efficiency.update(mfu_pct=None, mfu_bf16_pct=None, hfu_pct=None, hfu_bf16_pct=None,
                                        mfu_note="no MFU: the steps are time windows, not iterations")
        return self._efficiency or None

    def _efficiency_json(self) -> dict[str, Any] | None:
        frames = self.efficiency_frames()
        scale = self.job_scale()
        steps = [_per_step_of_job(e.per_step, scale.get(r, 1.0)).assign(rank=r) for r, e in frames.items() if not e.per_step.empty]
        steps = pd.concat(steps, ignore_index=True) if steps else pd.DataFrame()
        if steps.empty or not (steps["flops"] > 0).any():
            return None
        from workbench.hardware.peaks import device_peak

        def num(v):
            return None if v is None or (isinstance(v, float) and np.isnan(v)) else round(float(v), 4)

        by_dtype = pd.concat([e.ops.groupby("dtype")["flops"].sum() for e in frames.values()]).groupby(level=0).sum()
        kernels = pd.concat([e.kernels for e in frames.values() if not e.kernels.empty] or [pd.DataFrame()], ignore_index=True)
        classes = class_breakdown(kernels, self.run.device_name) if not kernels.empty else pd.DataFrame()
        peak = device_peak(self.run.device_name) if not kernels.empty else None  # a CPU trace: no GPU peak
        # HFU: the FLOPs the trace executed (recomputation included, causal attention halved)
        steps = steps.rename(columns={"mfu_pct": "hfu_pct", "mfu_bf16_pct": "hfu_bf16_pct"})
        hfu = num(steps["hfu_pct"].mean()) if steps["hfu_pct"].notna().any() else None
        hfu_bf16 = num(steps["hfu_bf16_pct"].mean()) if steps["hfu_bf16_pct"].notna().any() else None
        mfu = model_mfu(self.model_json(), steps, peak, self.run.world_size)
        return {
            "flops_per_step": num(steps["flops"].mean()),
            "achieved_tflops": num(steps["tflops_per_s"].mean()),
            "mfu_pct": mfu["mfu_pct"] if mfu else hfu,
            "mfu_bf16_pct": mfu["mfu_bf16_pct"] if mfu else hfu_bf16,
            "hfu_pct": hfu,
            "hfu_bf16_pct": hfu_bf16,
            "mfu_source": "model" if mfu else "trace",
            "mfu_convention": CONVENTION if mfu else "the trace's executed FLOPs (HFU): " + _no_model(self.model_json()),
            "model_flops_per_step": mfu["model_flops_per_step"] if mfu else None,
            "mfu_by_convention": mfu_by_convention(self.model_json(), steps, peak, self.run.world_size),
            "moe": moe_shares(self.per_rank_frames(MOE_TIME)),
            "mfu_note": mfu_note(self.model_json(), mfu["mfu_pct"] if mfu else None, hfu,
                                 mfu["mfu_bf16_pct"] if mfu else None, hfu_bf16,
                                 {str(d): 100.0 * f / by_dtype.sum() for d, f in by_dtype.items()}),
            "dtype_flops_pct": {str(d): round(100.0 * f / by_dtype.sum(), 2) for d, f in by_dtype.items()},
            "peak": {"tflops": dict(peak.tflops), "hbm_tb_s": peak.hbm_tb_s, "source": peak.source} if peak else None,
            "per_step": [{k: (int(v) if k in ("rank", "step") else num(v)) for k, v in row.items()}
                         for row in _per_step_mfu(steps, mfu)[["rank", "step", "step_ms", "flops", "tflops_per_s", "mfu_pct",
                                                               "mfu_bf16_pct", "hfu_pct", "hfu_bf16_pct"]].to_dict("records")],
            "classes": [{k: (num(v) if isinstance(v, (float, np.floating)) else (int(v) if isinstance(v, (int, np.integer)) else v))
                         for k, v in row.items()} for row in classes.to_dict("records")],
            "other_kernels": [{"name": str(r["name"]), "calls": int(r["calls"]), "time_ms": num(r["time_ms"])}
                              for r in (unclassified(kernels).to_dict("records") if not kernels.empty else [])],
        }

    def host_ahead(self) -> dict[str, float] | None:
        """The host ran ahead of the GPU: steps take longer on the GPU's clock than on the host's."""
        b = self.trace_breakdown if self.trace_breakdown is not None else self.breakdown
        if b.empty or "host_step_ms" not in b or not self.run.has_gpu:
            return None
        dev, host = float(b["step_ms"].mean()), float(b["host_step_ms"].mean())
        if host <= 0 or dev < HOST_AHEAD_RATIO * host:
            return None
        return {"device_step_ms": round(dev, 3), "host_step_ms": round(host, 3), "ratio": round(dev / host, 2)}

    @property
    def job_known(self) -> bool:
        """The steps CSVs gave the job's step (analysis.job), and the breakdown is set against it."""
        return (self.job is not None and not self.job.empty and "job" in self.breakdown
                and bool(self.breakdown["job"].any()))

    def capture_overhead(self) -> dict[str, Any] | None:
        """What the capture cost this run: the profiled steps (the trace's mean) against the job's
        step (analysis.job.capture_cost: the one comparison the CLI, the note, ``metrics`` and the
        app state), with the counts per rank, and from the steps CSVs (workbench.format.overhead)
        the profiler's warm-up steps, the export's pause and the hooks' cost. None where the job's
        step is not the unprofiled steps'."""
        cost = capture_cost(self.breakdown, self.job) if self.job_known else None
        if cost is None:
            return None
        ctx = self.context
        rows = {r: df.to_dict("records") for r, df in (ctx.steps if ctx else {}).items() if df is not None and len(df)}
        raw = capture_overhead(rows, warmup=ctx.steps_warmup) if rows else None
        if raw is None and isinstance(self.run.manifest.get("capture_overhead"), dict):
            raw = self.run.manifest["capture_overhead"]
        raw = raw or {}
        tb = self.trace_breakdown if self.trace_breakdown is not None else self.breakdown
        clocks = set(self.job["clock"])
        return {**cost,
                "recorded_steps": int(tb.groupby("rank")["step"].nunique().max()) if not tb.empty else 0,
                "unprofiled_steps": int(self.job["steps"].max()),
                "warmup_step_ms": raw.get("warmup_step_ms"), "export_ms": raw.get("export_ms"),
                "capture_ms_per_step": raw.get("capture_ms_per_step"),
                "clock": next((k for k in ("gpu", "sync", "host") if k in clocks), "host")}

    def job_json(self) -> dict[str, Any]:
        """The summary's job keys: ``trace_step_ms`` (the recorded steps' own mean),
        ``steps_covered`` (which steps ``step_ms`` and the shares are of), ``job`` (per rank: its
        unprofiled steps, mean and median, the clock) or null, ``capture_overhead`` or null, and
        ``note``, the one line the CLI prints when the recorded steps were not the job's."""
        tb = self.trace_breakdown if self.trace_breakdown is not None else self.breakdown
        job = self.job if self.job is not None else pd.DataFrame()
        covered = "profiled steps (no unprofiled steps in the steps CSVs)"
        if self.job_known:
            profiled = steps_words(step_set(tb["step"]), profiled=True) if not tb.empty else "the profiled steps"
            covered = f"the job's step: the mean of {job_words(job)}; device time from {profiled}"
        return {
            "trace_step_ms": round(float(tb["step_ms"].mean()), 3) if not tb.empty else None,
            "steps_covered": covered,
            "job": [{k: (v if isinstance(v, str) else int(v) if k in ("rank", "steps", "first_step", "last_step")
                         else None if v != v else round(float(v), 3)) for k, v in row.items()}
                    for row in job.to_dict("records")] or None,
            "capture_overhead": self.capture_overhead(),
            "note": correction_note(self.breakdown, job) if not job.empty else None,
        }

    @property
    def time_windows(self) -> bool:
        """The run's steps are auto's time windows, not iterations."""
        return str(self.run.manifest.get("steps_from") or "").startswith("time:")

    @property
    def verdict(self) -> str:
        # low_mfu is the summary; a finding that names a fix takes the line when there is one
        serious = sorted((d for d in self.diagnoses if d.severity != "info"),
                         key=lambda d: (d.id not in FAILURE_IDS, d.id == "low_mfu"))
        if serious:
            top = serious[0]
            line = f"{top.id}: {top.title} → {top.recommendation.split(';')[0]}"
            return (TIME_WINDOWS_VERDICT + line) if self.time_windows else line
        # "no bottleneck" only when compute fills >= 90% of the step and MFU is near what
        # this GPU reaches (low_mfu silent: MFU over the busy share >= 0.75 of the GEMMs' rate)
        NO_BOTTLENECK_COMPUTE_PCT = 90.0
        pct = self.breakdown_pct()
        busy = pct.get("compute", 0.0)
        mfu = next((d for d in self.diagnoses if d.id == "low_mfu"), None)
        if busy >= NO_BOTTLENECK_COMPUTE_PCT and mfu is None:
            return (TIME_WINDOWS_VERDICT if self.time_windows else "") + f"no bottleneck found: compute fills {busy:.0f}% of the step"
        # every remaining point of the step goes somewhere the user can look: name the shares
        rest = sorted(((v, c) for c, v in pct.items() if c != "compute" and v >= 1.0), reverse=True)
        parts = [f"compute {busy:.0f}% of the step"] + [f"{c} {v:.0f}%" for v, c in rest]
        if mfu is not None:
            # low_mfu's figure counts the executed FLOPs (HFU), as the GEMMs' ceiling does
            parts.append(f"HFU {mfu.evidence['mfu_pct']:.0f}% vs {mfu.evidence['ceiling_pct']:.0f}% this GPU reaches on "
                         f"these GEMMs")
        small = [d.id for d in self.diagnoses if d.id != "low_mfu"]
        return (TIME_WINDOWS_VERDICT if self.time_windows else "") + "no single bottleneck: " + ", ".join(parts) + (f" (minor: {', '.join(small)})" if small else "")

    def breakdown_pct(self) -> dict[str, float]:
        if self.breakdown.empty:
            return {}
        total = self.breakdown["step_ms"].sum()
        return {c: round(100.0 * self.breakdown[f"{c}_ms"].sum() / total, 2) for c in CATEGORIES}

    def result(self) -> Result:
        """The run's typed result (workbench.pipeline.result), as printed and as cached: its values
        pass once through JSON, so that pandas' and numpy's numbers are JSON's own."""
        if self._result is None:
            m = self.run.manifest
            pr = self.per_rank
            partial, mixed = completeness.partial(self.run), completeness.mixed_devices(self.run)
            r = Result(
                run=RunInfo(path=str(self.run.path), name=self.run.name, status=m.get("status", "bare"),
                            world_size=self.run.world_size, device=self.run.device_name, has_gpu=self.run.has_gpu,
                            warnings=tuple(self.run.warnings), steps_from=m.get("steps_from"), partial=partial,
                            devices=mixed),
                summary=Summary(
                    steps=int(pr["steps"].min()) if not pr.empty else 0,
                    step_ms=round(float(self.breakdown["step_ms"].mean()), 3) if not self.breakdown.empty else None,
                    breakdown_pct=self.breakdown_pct(),
                    per_rank=tuple({k: (int(v) if k in ("rank", "steps") else round(float(v), 3)) for k, v in row.items()}
                                   for row in pr.to_dict("records")),
                    host_step_ms=round(float(self.breakdown["host_step_ms"].mean()), 3) if not self.breakdown.empty else None,
                    host_ahead=self.host_ahead(), **self.job_json()),
                diagnoses=tuple(Finding.from_json(d.to_dict()) for d in self.diagnoses),
                verdict=self.verdict + completeness.verdict_suffix(partial, mixed),
                metrics=Metrics.from_json(self.metrics()),
                collectives=tuple({k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}
                                  for row in self.collectives().to_dict("records")),
                clock={str(r): {"offset_us": t.clock_offset_us, "source": t.clock_source} for r, t in self.run.rank_info.items()},
                efficiency=Efficiency.from_json(self.efficiency_json()),
                model=ModelInfo.from_json(self.model_json()),
                memory=self.context.memory_by_category if self.context is not None else None,
                expert_load=self.expert_load_json(), history=self.context.history if self.context else None,
                windows=tuple(self.windows) if self.windows else ())
            # every figure held to its physical bound (pipeline.bounds), then as it reads back
            self._result = Result.from_json(json.loads(dumps(bounds.apply(r.to_json(), self.withheld), default=str)))
        return self._result

    def to_json(self) -> dict[str, Any]:
        """The ``workbench analyze --json`` document (workbench.pipeline.result)."""
        return self.result().to_json()


def analyze_run(path: Path | str | Run, progress=None, workers: int | None = None, cache: bool = True,
                executor: str | None = None, peak: str | None = None) -> Analysis:
    """Load a run, reduce each rank to the frames its analysis reads (:data:`READS`, by
    :mod:`workbench.pipeline.reduce`), and run the rules on them.

    ``path``: a run directory, a bare trace directory or one trace file, or a :class:`Run` already
    loaded with its traces (their frames are then computed here, as the rules ask). ``workers``,
    ``cache``, ``executor``: see :func:`workbench.pipeline.reduce.load_reduced`. ``peak``: the user's peak
    for the device, ``"400 bf16"`` (workbench.hardware.devices.peak_spec), for a device the table lacks.
    """
    if isinstance(path, Run):
        run = path
        params = Params.of_manifest(run.manifest, peak)
        ranks = {r: RankFrames.of_trace(t, r, params) for r, t in run.traces.items()}
    else:
        run = reduce.load_reduced(path, READS, workers=workers, cache=cache, executor=executor, progress=progress,
                                  peak=peak)
        ranks = {r: s.rank_frames(run.params) for r, s in run.summaries.items()}
    failure = run_failure(run.manifest)
    if not ranks and failure is None:
        raise WorkbenchError(f"{run.path}: no trace to analyze (the run wrote no rank*.pt.trace.json.gz; did it reach the profiled steps?)")
    if not ranks:  # the job failed before a trace was written: the verdict is the failure, from what the run holds
        run.warnings.append("no trace: the job failed before the profiler wrote one; the verdict is read from the "
                            "manifest, the ranks' status, steps, samples and memory records")
    ranks = dict(sorted(ranks.items()))
    parts = [b for b in (rf.summary(frames.BREAKDOWN) for rf in ranks.values()) if len(b)]
    recorded = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    config = run.manifest.get("config")
    steps = iteration_steps({r: d.steps for r, d in run.ranks.items()}, run.manifest, run.warnings)
    warmup = (run.manifest.get("schedule") or {}).get("warmup")
    # the recorded steps against the job's step (the unprofiled steps of the steps CSVs)
    job = job_steps(steps, warmup)
    gpu = any(rf.has_gpu for rf in ranks.values())
    if gpu:  # a host-timed job step shorter than the GPU's work: the host ran ahead
        job, notes = device_bound_job(job, recorded, steps, warmup)
        run.warnings.extend(notes)
    breakdown = correct_breakdown(recorded, job, gpu)
    waits = {int(r): float(g[["dataloader_ms", "host_ms", "idle_ms"]].sum(axis=1).mean()) for r, g in recorded.groupby("rank")} \
        if len(recorded) else {}
    experts = {r: d.experts for r, d in run.ranks.items() if d.experts is not None}
    ctx = Context(breakdown=breakdown, run_config=config, job=job, ranks=ranks, steps=steps, steps_warmup=warmup,
                  capacity_bytes=run.device_memory_bytes, world_size=run.world_size, trace_wait_ms=waits, failure=failure,
                  experts=experts, history=long_run.history_json(run))
    ctx.memory_by_category = memory_by_category(run, steps, ctx, failure)
    findings, withheld = bounds.plausible_findings(diagnose(breakdown, config, ctx))
    a = Analysis(run=run, breakdown=breakdown, per_rank=rank_summary(breakdown), diagnoses=findings,
                 context=ctx, trace_breakdown=recorded, job=job, withheld=withheld)
    a.windows = long_run.windows_json(run, recorded, analyze_run)
    if not experts:  # an MoE run without its expert load says so (analysis.experts)
        evidence = {r: ctx.frame(ROUTED_EXPERTS, r) for r in ranks}
        if note := not_recorded_note(evidence, value(a.model_json(), "experts")):
            run.warnings.append(note)
    return a


def iteration_steps(steps: dict, manifest: dict, warnings: list[str]) -> dict:
    """The steps CSVs' rows that are iterations: where ``--steps-from auto`` began with time windows
    and iterations replaced them (the ranks' ``steps_from_switched``), the windows' rows are dropped;
    where the run's steps stayed time windows, a warning says so loudly."""
    ranks = manifest.get("ranks") if isinstance(manifest.get("ranks"), dict) else {}
    out = dict(steps)
    for key, info in ranks.items():
        sw = info.get("steps_from_switched") if isinstance(info, dict) else None
        if not isinstance(sw, list) or not sw:
            continue
        last = sw[-1]
        try:
            r, at = int(info.get("rank", key)), int(last.get("step"))
        except (TypeError, ValueError, AttributeError):
            continue
        df = out.get(r)
        if df is not None and "step" in df and str(last.get("from", "")).startswith("time:"):
            out[r] = df[pd.to_numeric(df["step"], errors="coerce") > at].reset_index(drop=True)
            if r == min(int(i.get("rank", k)) for k, i in ranks.items() if isinstance(i, dict) and "rank" in i):
                warnings.append(f"steps were {last['from']} time windows until step {at}, when iterations appeared "
                                f"({last.get('to')}): the windows' rows are left out, the profiled window was restarted "
                                "on iterations")
    if str(manifest.get("steps_from") or "").startswith("time:"):
        warnings.append(TIME_WINDOWS)
    return out


TIME_WINDOWS = ("STEPS ARE TIME WINDOWS, NOT ITERATIONS: no optimizer step or backward came before auto's deadline "
                "(--steps-from auto), so each 'step' is a fixed span of time; step time, tokens per step, tokens/s and "
                "MFU are not the job's (pass --steps-from optimizer, backward or annotation:NAME)")


def memory_by_category(run: Run, steps: dict, ctx: Context, failure: dict | None) -> dict | None:
    """The run's ``memory`` block (workbench.analysis.memory_categories): each rank's measured model
    states (memory_rank{r}.json) or the inferred model's, split against its allocator peak, or the
    memory held at its out-of-memory error."""
    model = {k: v.get("value") for k, v in ((ctx.model() if ctx.ranks else {}) or {}).get("fields", {}).items()
             if isinstance(v, dict)}
    ooms = {e["rank"]: e.get("oom") for e in (failure or {}).get("ranks", []) if e.get("kind") == "out_of_memory"}
    per_rank = {}
    for r, d in run.ranks.items():
        per_rank[r] = rank_categories(d.memory, steps.get(r), model, ooms.get(r))
    return run_categories(per_rank)


def _per_step_of_job(per_step: pd.DataFrame, scale: float) -> pd.DataFrame:
    """Efficiency rows of the recorded steps (analysis.kernel_classes) against the job's step:
    the FLOPs stay, the time is the job's (``scale`` = recorded / job step, Analysis.job_scale)."""
    if scale == 1.0 or per_step.empty:
        return per_step
    out = per_step.copy()
    out["step_ms"] = out["step_ms"] / scale
    for c in ("tflops_per_s", "mfu_pct", "mfu_bf16_pct"):
        if c in out:
            out[c] = out[c] * scale
    return out


MFU_NOTE_PCT = 5.0
"""MFU and HFU more than 5 % apart get one line saying why (two runs of one configuration differ by
a few per cent: compare.NOISE_PCT)."""


def model_flops_per_device_step(model: dict, world_size: int | None) -> float | None:
    """The convention's FLOPs of one optimizer step on one device: model_flops_per_token ×
    global_tokens_per_step / world size (every device of the job shares the step's work)."""
    fpt, tokens = value(model, "model_flops_per_token"), value(model, "global_tokens_per_step")
    world = (value(model, "layout") or {}).get("world_size") or world_size or 1
    if not fpt or not tokens:
        return None
    return float(fpt) * float(tokens) / float(world)


def model_mfu(model: dict, steps: pd.DataFrame, peak, world_size: int | None) -> dict[str, float] | None:
    """Model-FLOPs MFU of the job's step (``steps``: the efficiency rows against the job's step):
    the convention's FLOPs per device and step / (step time × the device's dense peak for the
    GEMMs' dtype), and against the bf16 peak; None without the model or a peak."""
    flops = model_flops_per_device_step(model, world_size)
    if flops is None or peak is None or steps.empty:
        return None
    dtype = value(model, "dtype") or "bf16"
    p, p16 = peak.tflops.get(dtype), peak.tflops.get("bf16")
    secs = float(steps["step_ms"].mean()) / 1e3
    if not p or secs <= 0:
        return None
    return {"model_flops_per_step": round(flops, 1), "mfu_pct": round(100.0 * flops / secs / (p * 1e12), 4),
            "mfu_bf16_pct": round(100.0 * flops / secs / (p16 * 1e12), 4) if p16 else None, "dtype": dtype, "flops": flops,
            "peak": p, "peak_bf16": p16}


def mfu_by_convention(model: dict, steps: pd.DataFrame, peak, world_size: int | None) -> dict[str, dict]:
    """Each convention's model FLOPs per token (analysis.model.conventions) and the MFU they give
    on the job's step (None without a peak: a CPU trace); ``torchtitan`` is the headline's."""
    out = {}
    fields = (model or {}).get("fields") or {}
    for name, formula in CONVENTIONS.items():
        fpt = flops_per_token(fields, name)
        if fpt is None:
            continue
        m = model_mfu({"fields": {**fields, "model_flops_per_token": fpt}}, steps, peak, world_size)
        out[name] = {"formula": formula, "model_flops_per_token": fpt["value"], "mfu_pct": m["mfu_pct"] if m else None}
    return out


def _per_step_mfu(steps: pd.DataFrame, mfu: dict | None) -> pd.DataFrame:
    out = steps.copy()
    if mfu is None:
        out["mfu_pct"], out["mfu_bf16_pct"] = out["hfu_pct"], out["hfu_bf16_pct"]
        return out
    secs = out["step_ms"] / 1e3
    out["mfu_pct"] = 100.0 * mfu["flops"] / secs / (mfu["peak"] * 1e12)
    out["mfu_bf16_pct"] = 100.0 * mfu["flops"] / secs / (mfu["peak_bf16"] * 1e12) if mfu["peak_bf16"] else None
    return out


def _no_model(model: dict) -> str:
    kind = (model or {}).get("kind")
    if kind is None:
        return "the model could not be inferred from the trace (no shapes or no step)"
    if kind != "transformer":
        return f"a {kind} has no per-token model FLOPs"
    missing = [k for k in ("params_non_embedding", "layers", "heads", "head_dim", "seq", "global_tokens_per_step")
               if value(model, k) is None]
    return f"the model's {', '.join(missing) or 'FLOPs'} could not be inferred"


def mfu_note(model: dict, mfu: float | None, hfu: float | None, mfu16: float | None = None,
             hfu16: float | None = None, dtype_pct: dict[str, float] | None = None) -> str | None:
    """One line when MFU and HFU are more than :data:`MFU_NOTE_PCT` apart (or when MFU fell back
    to the trace's FLOPs), saying why. FLOPs are compared against one peak (bf16's where there is
    one), so the line names a difference of FLOPs; HFU's per-dtype peaks are a reason of their own."""
    if mfu is None:
        return ("MFU is the trace's executed FLOPs (HFU): " + _no_model(model)) if hfu is not None else None
    a, b = (mfu16, hfu16) if mfu16 is not None and hfu16 is not None else (mfu, hfu)
    if hfu is None or not mfu or abs(hfu / mfu - 1) * 100 <= MFU_NOTE_PCT:
        return None
    why = []
    if b is not None and a and abs(b / a - 1) * 100 > MFU_NOTE_PCT:
        why.append(f"the trace executed {b / a:.2f}× the convention's FLOPs")
    mixed = {d: p for d, p in (dtype_pct or {}).items() if p >= 1.0}
    if len(mixed) > 1:
        why.append("HFU holds each dtype's FLOPs to that dtype's peak (" + ", ".join(f"{d} {p:.0f}%" for d, p in mixed.items())
                   + "), MFU all of them to the GEMMs' dtype's")
    rec, frac = value(model, "recompute"), value(model, "recompute_fraction")
    if rec and rec != "none":
        why.append(f"{rec} recomputation re-ran {frac:.0%} of the forward's FLOPs (counted in HFU, not in MFU)")
    if (model or {}).get("causal_attention_pct"):
        why.append(f"the executed count halves causal attention ({model['causal_attention_pct']:.0f}% of the attention FLOPs "
                   "are causal), the convention counts it in full")
    if len(why) == (len(mixed) > 1):
        why.append("the executed count differs from the convention's 6·N + 6·L·h·(q + v)·s (attention backward at 2.5×, "
                   "biases, the head's and embedding's work)")
    return f"HFU {hfu:.1f}% vs MFU {mfu:.1f}%: " + "; ".join(why)


def model_tokens_per_s(model: dict, step_ms: float | None) -> float | None:
    """The job's tokens per second from the inferred model: global tokens per step / the job's step."""
    tokens = value(model, "global_tokens_per_step")
    if not tokens or not step_ms:
        return None
    return float(tokens) / (float(step_ms) / 1e3)
