"""The analysed run as typed fields, and its one serializer: the ``workbench analyze --json`` schema.

:class:`Result` is what every consumer reads (the CLI's text, ``compare``, the planner's
calibration, the report, the app); ``Result.to_json()`` is the ``--json`` document and
``Result.from_json(doc)`` reads one back (the result cache, a file a user saved). Both directions
live here and nowhere else.

The document (``json_schema`` = :data:`JSON_SCHEMA`)::

    {
      "json_schema": "workbench.analyze/1",
      "run": {"path", "name", "status", "world_size", "device", "has_gpu", "warnings": [str],
              "steps_from",             # what ended a step (manifest), or null
              "partial": {"world_size", "ranks_analysed": [int], "ranks_missing": str},
                                        # present only when traces of fewer ranks than the job's
              "devices": {device: [rank]}},   # present only when ranks ran on different GPU models
      "summary": {
        "steps": int,                   # profiled steps per rank (min over ranks)
        "step_ms": float,               # the job's step: the mean of the unprofiled
                                        # steps (analysis.job), the profiled ones where there are none
        "breakdown_pct": {category: float},   # mean share of step time, sums to 100
        "per_rank": [{"rank", "steps", "step_ms", "<category>_ms", "<category>_pct"}],
        "host_step_ms": float,          # the same steps timed on the host (ProfilerStep annotations)
        "host_ahead": {"device_step_ms", "host_step_ms", "ratio"} | null
                                        # set when the GPU's steps take HOST_AHEAD_RATIO× the host's:
                                        # the host ran ahead (CUDA graphs, no sync); step_ms is the GPU's
        "trace_step_ms", "steps_covered", "job", "capture_overhead", "note"   # Analysis.job_json
      },
      "diagnoses": [{"id", "severity", "title", "evidence", "recommendation",
                     "estimated_gain", "fix", "ranks",
                     "alternatives"}],  # alternatives: the planner's answers to the finding, calibrated on
                                        # the run (workbench.calibration.alternatives); [] where none
                                        # serves; absent where no plan applies
      "verdict": str,                   # one line
      "metrics": {name: float|null},    # flat, the rows of `workbench compare`:
          step_ms, <category>_pct, gpu_busy_pct (kernels, GPU runs) or compute_busy_pct (CPU),
          exposed_comm_pct (min over ranks), comm_ms_per_step, peak_reserved_gib,
          peak_allocated_gib, straggler_work_ratio, tokens_per_s, steady_step_ms, trace_step_ms,
          capture_overhead_ratio, mfu_pct, hfu_pct, expert_maxvio (a key is present where it was
          measured)
          step_ms is the job's step (summary.step_ms: the mean of the unprofiled steady steps
          summary.steps_covered names, analysis.job), the <category>_pct the profiled steps set
          against it; steady_step_ms is the same figure, present where the steps CSVs gave it
          (absent where step_ms is the recorded steps'); trace_step_ms the profiled steps' own
          mean; capture_overhead_ratio = trace_step_ms / step_ms (summary.capture_overhead);
          tokens_per_s = the script's own tokens per job step (record_metrics) / step_ms, else the
          inferred model's tokens per step / the job's step (analysis.job)
      "collectives": [{"rank", "op", "dtype", "bytes", "group_size", "pg_name", "calls",
                       "calls_per_step", "bytes_per_step", "total_ms"}],
      "clock": {rank: {"offset_us", "source"}},
      "efficiency": {                   # null when no op's FLOPs could be counted
        "flops_per_step": float,        # FLOPs the trace executed per step and device (analysis.flops)
        "achieved_tflops": float,       # those FLOPs / step time (the GPU's clock), per device
        "mfu_pct": float|null,          # the model's FLOPs (model.convention per token) / (job step ×
                                        # the dense peak of the GEMMs' dtype); HFU where no model
        "mfu_bf16_pct": float|null,     # the same against the bf16 peak
        "hfu_pct", "hfu_bf16_pct",      # the trace's executed FLOPs (recomputation included)
        "mfu_source": "model"|"trace", "mfu_convention": str, "mfu_note": str|null,
        "model_flops_per_step": float|null,
        "mfu_by_convention": {NAME: {"formula", "model_flops_per_token", "mfu_pct"}},  # nanogpt (the
                                        # headline's), torchtitan, megatron, palm (analysis.model.conventions)
        "moe": {"expert_gemm_pct", "routing_pct", "dispatch_pct", "source", …} | null,  # a mixture of
                                        # experts' shares of the step (analysis.moe_time)
        "dtype_flops_pct": {dtype: float},  # share of the FLOPs per dtype that ran
        "peak": {"tflops": {dtype: float}, "hbm_tb_s", "source"} | null,   # workbench.hardware.peaks
        "per_step": [{"rank", "step", "step_ms", "flops", "tflops_per_s", "mfu_pct", "mfu_bf16_pct",
                      "hfu_pct", "hfu_bf16_pct"}],
        "classes": [{"class", "subclass", "kernels", "time_ms", "time_pct", "flops", "tflops_per_s",
                     "bytes", "gb_per_s", "bound", "pct_of_peak"}],   # every GPU kernel of all
                                        # ranks in one class (analysis.kernel_classes), largest first
        "other_kernels": [{"name", "calls", "time_ms"}]   # kernels no class matched, by name
      },
      "model": {"kind", "convention", "fields": {NAME: {"value", "source", "confidence"}}},
                                        # analysis.model_run.run_model: the model the traces show
      "memory": {"rank", "at": "peak"|"out of memory", "peak_allocated_gib", "peak_reserved_gib",
                 "by_category": {"weights"|"gradients"|"optimizer"|"activations"|"other": {"gib", "source"}},
                 "sum_gib", "note", "per_rank": [...], "planned": {...}} | null
                                        # analysis.memory_categories: the peak (or the memory at an
                                        # out-of-memory error) by category, summing to the reserved
                                        # peak; "planned": the planner's split of the run's own layout
                                        # (calibration.alternatives)
      "expert_load": {                  # only where the capture recorded tokens per expert (MoE runs)
        "source", "definition", "maxvio": float,   # the worst layer's MaxVio (mean over steps)
        "layers": [{"layer", "steps", "experts", "tokens_per_step", "mean_tokens", "max_over_mean",
                    "maxvio", "maxvio_max", "noise_maxvio", "hottest_experts", "hottest_share_pct"}]
      }                                 # analysis.experts; an MoE run without it has a run warning
      "implausible": [{"figure", "value", "bound", "why"}]
                                        # present only where a figure was past its physical bound
                                        # (workbench.pipeline.bounds): it is withheld (null) above,
                                        # and a line of run.warnings says which evidence disagreed
      "history": {...}, "windows": [...], "hang": {...}
                                        # a long run's: the whole run's steps and change points
                                        # (analysis.history), the launch and opened windows
                                        # (pipeline.long_run), a hung job's collective (analysis.hang);
                                        # present where the run has them (docs/analyze.md)
    }

Categories: compute, communication, memcpy, dataloader, host, idle (see analysis.steps).

Versions (:data:`SCHEMA_NOTES`): keys are only ever added to ``workbench.analyze/1``, never renamed
or removed; a key whose meaning changes is a new key. A consumer reads a document of any release
of version 1 (``Result.from_json`` fills what an older document lacks with None).

No pandas here: a cached run's verdict prints without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

JSON_SCHEMA = "workbench.analyze/1"
from workbench.pipeline.schema_notes import SCHEMA_NOTES  # noqa: E402 - what each release added
CATEGORIES = ("compute", "communication", "memcpy", "dataloader", "host", "idle")
"""The step's categories (workbench.analysis.steps.CATEGORIES; repeated here so that reading a
document needs no pandas — tests/pipeline pins them equal)."""


def _plain(v: Any) -> Any:
    """A JSON value: tuples as lists, dict keys as strings (what reads back)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


@dataclass(frozen=True, slots=True)
class RunInfo:
    path: str
    name: str
    status: str
    world_size: int
    device: str | None
    has_gpu: bool
    warnings: tuple[str, ...] = ()
    steps_from: str | None = None
    partial: dict | None = None
    """Traces of fewer ranks than the job had (workbench.load.completeness.partial), or None."""
    devices: dict | None = None
    """device → its ranks where the ranks ran on different GPU models, or None."""

    def to_json(self) -> dict[str, Any]:
        out = _plain({f.name: getattr(self, f.name) for f in fields(self)})
        return {k: v for k, v in out.items() if k not in ("partial", "devices") or v is not None}


@dataclass(frozen=True, slots=True)
class Summary:
    steps: int
    step_ms: float | None
    """The job's step (the unprofiled steps' mean where the steps CSVs hold them)."""
    breakdown_pct: dict[str, float]
    per_rank: tuple[dict, ...]
    host_step_ms: float | None = None
    host_ahead: dict | None = None
    trace_step_ms: float | None = None
    steps_covered: str | None = None
    job: tuple[dict, ...] | None = None
    capture_overhead: dict | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """A diagnosis as the document holds it (workbench.diagnose.base.Diagnosis, plus what the
    planner answered)."""

    id: str
    severity: str
    title: str
    evidence: dict[str, Any]
    recommendation: str
    estimated_gain: dict[str, Any]
    fix: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    alternatives: tuple[dict, ...] | None = None
    """The planner's alternatives (``[]``: none serves the finding); None: no plan applies."""

    def to_json(self) -> dict[str, Any]:
        out = {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name != "alternatives"}
        if self.alternatives is not None:
            out["alternatives"] = _plain(self.alternatives)
        return out

    @classmethod
    def from_json(cls, d: dict) -> Finding:
        alts = d.get("alternatives")
        return cls(id=d["id"], severity=d["severity"], title=d["title"], evidence=d.get("evidence") or {},
                   recommendation=d.get("recommendation") or "", estimated_gain=d.get("estimated_gain") or {},
                   fix=tuple(d.get("fix") or ()), ranks=tuple(d.get("ranks") or ()),
                   alternatives=tuple(alts) if alts is not None else None)


METRIC_NAMES = ("step_ms", *(f"{c}_pct" for c in CATEGORIES), "trace_step_ms", "gpu_busy_pct", "compute_busy_pct",
                "exposed_comm_pct", "comm_ms_per_step", "capture_overhead_ratio", "peak_reserved_gib",
                "peak_allocated_gib", "straggler_work_ratio", "steady_step_ms", "tokens_per_s", "mfu_pct", "hfu_pct",
                "expert_maxvio")


@dataclass(frozen=True, slots=True)
class Metrics:
    """The run's flat numbers (``metrics``): the rows of ``workbench compare``. ``keys``: the
    metrics measured on this run, in order (a key absent from the document is not measured)."""

    step_ms: float | None = None
    compute_pct: float | None = None
    communication_pct: float | None = None
    memcpy_pct: float | None = None
    dataloader_pct: float | None = None
    host_pct: float | None = None
    idle_pct: float | None = None
    trace_step_ms: float | None = None
    gpu_busy_pct: float | None = None
    compute_busy_pct: float | None = None
    exposed_comm_pct: float | None = None
    comm_ms_per_step: float | None = None
    capture_overhead_ratio: float | None = None
    peak_reserved_gib: float | None = None
    peak_allocated_gib: float | None = None
    straggler_work_ratio: float | None = None
    steady_step_ms: float | None = None
    tokens_per_s: float | None = None
    mfu_pct: float | None = None
    hfu_pct: float | None = None
    expert_maxvio: float | None = None
    keys: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, float | None]:
        """name → value of every measured metric, in order."""
        return {k: getattr(self, k) for k in self.keys}

    def to_json(self) -> dict[str, float | None]:
        return self.as_dict()

    @classmethod
    def from_json(cls, d: dict) -> Metrics:
        known = [k for k in d if k in METRIC_NAMES]
        return cls(**{k: d[k] for k in known}, keys=tuple(known))


@dataclass(frozen=True, slots=True)
class Efficiency:
    """FLOPs, MFU and HFU of the job's step, and the kernel classes (``efficiency``)."""

    flops_per_step: float
    achieved_tflops: float | None
    mfu_pct: float | None
    mfu_bf16_pct: float | None
    hfu_pct: float | None = None
    hfu_bf16_pct: float | None = None
    mfu_source: str = "trace"
    mfu_convention: str | None = None
    model_flops_per_step: float | None = None
    mfu_note: str | None = None
    mfu_by_convention: dict[str, dict] = field(default_factory=dict)
    """Each convention's model FLOPs per token and MFU (analysis.model.conventions): nanogpt's
    is the headline ``mfu_pct``; torchtitan's leaves a tied table out; megatron's halves causal
    attention; palm's."""
    moe: dict | None = None
    """A mixture of experts' shares of the step: expert GEMMs, routing, dispatch/combine."""
    dtype_flops_pct: dict[str, float] = field(default_factory=dict)
    peak: dict | None = None
    per_step: tuple[dict, ...] = ()
    classes: tuple[dict, ...] = ()
    other_kernels: tuple[dict, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, d: dict | None) -> Efficiency | None:
        if not d:
            return None
        names = {f.name for f in fields(cls)}
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in names}
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """The model the traces show (analysis.model_run.run_model): ``kind`` (transformer, convnet or
    None), the FLOP convention, and per field its value, source and confidence."""

    kind: str | None = None
    convention: str | None = None
    fields: dict[str, dict] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys beside the three (``causal_attention_pct``)."""

    def value(self, name: str) -> Any:
        """A field's value, or None where it was not inferred."""
        return (self.fields.get(name) or {}).get("value")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "convention": self.convention, "fields": _plain(self.fields), **_plain(self.extra)}

    @classmethod
    def from_json(cls, d: dict | None) -> ModelInfo:
        d = d or {}
        return cls(kind=d.get("kind"), convention=d.get("convention"), fields=dict(d.get("fields") or {}),
                   extra={k: v for k, v in d.items() if k not in ("kind", "convention", "fields")})


@dataclass(frozen=True, slots=True)
class Result:
    """One analysed run (:data:`JSON_SCHEMA`): what every command, the app and the report show."""

    run: RunInfo
    summary: Summary
    diagnoses: tuple[Finding, ...]
    verdict: str
    metrics: Metrics
    collectives: tuple[dict, ...] = ()
    clock: dict[str, dict] = field(default_factory=dict)
    efficiency: Efficiency | None = None
    model: ModelInfo = field(default_factory=ModelInfo)
    memory: dict | None = None
    """Memory by category (workbench.analysis.memory_categories), or None where nothing was measured."""
    json_schema: str = JSON_SCHEMA
    expert_load: dict | None = None
    """Tokens per expert and MaxVio per MoE layer (analysis.experts); None where not recorded."""
    implausible: tuple[dict, ...] = ()
    """Figures withheld past their physical bounds (workbench.pipeline.bounds): figure, value, bound, why."""
    history: dict | None = None
    """The whole run's step history: its summary and change points (workbench.analysis.history); None
    for a run without one."""
    windows: tuple[dict, ...] = ()
    """The launch window and those opened while the job ran (pipeline.long_run.windows_json)."""
    hang: dict | None = None
    """The collective a hung job waited in and why (analysis.hang); None unless the job hung."""

    def finding(self, rule_id: str) -> Finding | None:
        return next((d for d in self.diagnoses if d.id == rule_id), None)

    def serious(self) -> list[Finding]:
        """The findings above info, most severe first (the document's order)."""
        return [d for d in self.diagnoses if d.severity != "info"]

    def to_json(self) -> dict[str, Any]:
        """The ``workbench analyze --json`` document."""
        s = self.summary
        return {
            "json_schema": self.json_schema,
            "run": self.run.to_json(),
            "summary": _plain({f.name: getattr(s, f.name) for f in fields(s)}),
            "diagnoses": [d.to_json() for d in self.diagnoses],
            "verdict": self.verdict,
            "metrics": self.metrics.to_json(),
            "collectives": _plain(self.collectives),
            "clock": _plain(self.clock),
            "efficiency": self.efficiency.to_json() if self.efficiency else None,
            "model": self.model.to_json(),
            # absent where nothing was measured: documents of earlier releases read back unchanged
            **({"memory": _plain(self.memory)} if self.memory is not None else {}),
            **({"expert_load": _plain(self.expert_load)} if self.expert_load is not None else {}),
            **({"implausible": _plain(self.implausible)} if self.implausible else {}),
            **({"history": _plain(self.history)} if self.history is not None else {}),
            **({"windows": _plain(self.windows)} if self.windows else {}),
            **({"hang": _plain(self.hang)} if self.hang is not None else {}),
        }

    @classmethod
    def from_json(cls, doc: dict) -> Result:
        """A document back as typed fields (``to_json``'s inverse on what reads back as JSON)."""
        r, s = doc["run"], doc["summary"]
        run = RunInfo(path=str(r["path"]), name=r["name"], status=r.get("status", "bare"), world_size=int(r["world_size"]),
                      device=r.get("device"), has_gpu=bool(r.get("has_gpu")), warnings=tuple(r.get("warnings") or ()),
                      steps_from=r.get("steps_from"), partial=r.get("partial"), devices=r.get("devices"))
        job = s.get("job")
        summary = Summary(steps=int(s.get("steps") or 0), step_ms=s.get("step_ms"), breakdown_pct=dict(s.get("breakdown_pct") or {}),
                          per_rank=tuple(s.get("per_rank") or ()), host_step_ms=s.get("host_step_ms"),
                          host_ahead=s.get("host_ahead"), trace_step_ms=s.get("trace_step_ms"),
                          steps_covered=s.get("steps_covered"), job=tuple(job) if job is not None else None,
                          capture_overhead=s.get("capture_overhead"), note=s.get("note"))
        return cls(run=run, summary=summary, diagnoses=tuple(Finding.from_json(d) for d in doc.get("diagnoses") or ()),
                   verdict=doc.get("verdict") or "", metrics=Metrics.from_json(doc.get("metrics") or {}),
                   collectives=tuple(doc.get("collectives") or ()), clock={str(k): v for k, v in (doc.get("clock") or {}).items()},
                   efficiency=Efficiency.from_json(doc.get("efficiency")), model=ModelInfo.from_json(doc.get("model")),
                   memory=doc.get("memory") if isinstance(doc.get("memory"), dict) else None,
                   json_schema=doc.get("json_schema", JSON_SCHEMA), expert_load=doc.get("expert_load"),
                   implausible=tuple(doc.get("implausible") or ()),
                   history=doc.get("history") if isinstance(doc.get("history"), dict) else None,
                   windows=tuple(doc.get("windows") or ()), hang=doc.get("hang") if isinstance(doc.get("hang"), dict) else None)

    def with_alternatives(self, found: dict[str, list[dict]]) -> Result:
        """This result with ``found`` (finding id → the planner's alternatives) on its findings."""
        from dataclasses import replace

        return replace(self, diagnoses=tuple(replace(d, alternatives=tuple(found[d.id])) if d.id in found else d
                                             for d in self.diagnoses))


__all__ = ["CATEGORIES", "Efficiency", "Finding", "JSON_SCHEMA", "METRIC_NAMES", "Metrics", "ModelInfo", "Result", "RunInfo",
           "SCHEMA_NOTES", "Summary"]
