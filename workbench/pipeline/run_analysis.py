"""A run's analysis: its frames, the rules' findings, the run-level numbers and the verdict line.

:class:`Analysis` is what :func:`workbench.pipeline.verdict.analyze_run` builds; ``Analysis.result()``
is its typed :class:`~workbench.pipeline.result.Result`, whose ``to_json()`` is the ``workbench
analyze --json`` document (the schema and its versions are documented in
:mod:`workbench.pipeline.result`). The ``efficiency`` key is :mod:`workbench.pipeline.mfu`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workbench.pipeline import bounds
from workbench.analysis import frames
from workbench.analysis.frames import MOE_TIME
from workbench.analysis.job import capture_cost, correction_note, job_words, tokens_per_s
from workbench.analysis.kernel_classes import Efficiency as RankEfficiency
from workbench.analysis.experts import expert_load_json
from workbench.analysis.exposed import least_waiting
from workbench.analysis.memory import GIB
from workbench.analysis.model_run import run_model
from workbench.analysis.model.launch import overlay
from workbench.analysis.trainer_run import apply_trainer
from workbench.analysis.skew import rank_skew
from workbench.analysis.steps import CATEGORIES
from workbench.diagnose import Context, Diagnosis
from workbench.diagnose.memory import memory_summaries
from workbench.format.jsonout import dumps  # strict JSON: no NaN/Infinity
from workbench.load import Run, completeness
from workbench.format.overhead import capture_overhead
from workbench.format.steady import step_set, steps_words
from workbench.pipeline.mfu import efficiency_json, model_tokens_per_s
from workbench.pipeline.result import Efficiency, Finding, Metrics, ModelInfo, Result, RunInfo, Summary

# A GPU step 10 % longer than the host's view of it is beyond the launch lag of a synchronous loop
# (the committed GPU runs whose loops sync every step differ by < 3 %, ~0.5 ms).
HOST_AHEAD_RATIO = 1.10
FAILURE_IDS = ("out_of_memory", "job_failed", "collective_hang")
"""Findings that say the job ended: the verdict's headline whatever else was found."""
TIME_WINDOWS_VERDICT = "[steps are time windows, not iterations] "


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
    """Each rank's job step (the mean of its unprofiled steady steps: workbench.format.steady.steady_summary)."""
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
        busy = {r: b for r, b in self.per_rank_frames(frames.DEVICE_BUSY).items() if not b.empty}
        busy_pct = float(np.mean([ctx.busy_pct(r, b) for r, b in busy.items()])) if busy else None
        out["gpu_busy_pct" if ctx.has_gpu else "compute_busy_pct"] = busy_pct
        # the rule's figures (workbench.analysis.exposed): the least-waiting rank's exposed share and its
        # communication, exposed ≤ communication by construction
        comm = least_waiting(list(self.communication().values()))
        out["exposed_comm_pct"] = comm["exposed_pct"] if comm else None
        out["comm_ms_per_step"] = comm["comm_ms"] if comm else None
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

    def communication(self) -> dict[int, dict]:
        """rank → its communication per step, exposed and hidden (workbench.analysis.exposed.rank_comm): what
        ``exposed_communication``, ``metrics`` and the Communication page all state."""
        ctx = self.context
        return {} if ctx is None else {r: c for r in ctx.ranks if (c := ctx.communication(r)) is not None}

    def model_json(self) -> dict[str, Any]:
        """The ``model`` JSON key: the model inferred from the traces (analysis.model_run.run_model)."""
        if self._model is None:
            ranks = self.per_rank_frames(frames.MODEL)
            # the launch record first (the live objects), the traces where it says nothing
            launched = overlay(run_model(ranks, self.run.world_size), {r: d.launch for r, d in self.run.ranks.items()})
            self._model = apply_trainer(launched, self.context.trainer if self.context else None)
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

    def efficiency_frames(self) -> dict[int, RankEfficiency]:
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
        step = float(self.breakdown["step_ms"].mean()) if not self.breakdown.empty else None
        return efficiency_json(self.efficiency_frames(), self.job_scale(), self.model_json(), self.run.device_name,
                               self.run.world_size, self.per_rank_frames(MOE_TIME), step_ms=step)

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
                windows=tuple(self.windows) if self.windows else (), hang=self.context.hang if self.context else None)
            # every figure held to its physical bound (pipeline.bounds), then as it reads back
            self._result = Result.from_json(json.loads(dumps(bounds.apply(r.to_json(), self.withheld), default=str)))
        return self._result

    def to_json(self) -> dict[str, Any]:
        """The ``workbench analyze --json`` document (workbench.pipeline.result)."""
        return self.result().to_json()

