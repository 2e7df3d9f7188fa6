"""The Diagnosis record, the rules' Context and how a rule declares the frames it reads."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import pandas as pd

from workbench.analysis import frames
from workbench.analysis.frames import Frame, Params, RankFrames
from workbench.analysis.steps import BREAKDOWN_COLUMNS
from workbench.load.trace import Trace

SEVERITIES = ("info", "warning", "critical")
Rule = Callable[..., "Diagnosis | None"]


@dataclass(kw_only=True, slots=True)
class Diagnosis:
    """One named finding. ``evidence`` holds numbers with units in their keys."""

    id: str
    """Stable rule id, e.g. ``dataloader_stall``."""
    severity: str
    """info | warning | critical."""
    title: str
    """One line with the headline number: "DataLoader waits 34% of each step"."""
    evidence: dict[str, Any]
    """Numbers with units in the key (``dataloader_ms_per_step``, ``share_pct``) and where they
    come from (ranks, steps, time range in trace microseconds)."""
    recommendation: str
    """What to change, in the user's words."""
    estimated_gain: dict[str, Any]
    """Upper bound of the gain if the cause is removed: ``{"step_time_saved_pct", "speedup_max",
    "formula"}``."""
    fix: list[str] = field(default_factory=list)
    """Engine toggle keys that address it (``data.num_workers`` …)."""
    ranks: list[int] = field(default_factory=list)
    """Ranks where it was found."""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    @property
    def rank_order(self) -> int:
        return SEVERITIES.index(self.severity)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def severity_for(value: float, bands: tuple[tuple[float, str], ...]) -> str | None:
    """The severity of the highest band whose threshold ``value`` reaches, or None."""
    found = None
    for threshold, severity in bands:
        if value >= threshold:
            found = severity
    return found


@dataclass(kw_only=True)
class Context:
    """Everything a rule may read, built once per run (``workbench.pipeline.verdict.analyze_run``): the
    run-level breakdown, the steps CSVs, and each rank's frames (:meth:`frame`)."""

    breakdown: Any
    """The run's breakdown (BREAKDOWN_COLUMNS) set against the job's step where the steps CSVs
    say what it is (analysis.job.correct_breakdown: ``trace_step_ms`` holds the recorded step's
    length); the recorded steps themselves where they do not."""
    run_config: dict | None = None
    job: Any = None
    """workbench.format.steady.steady_summary (after analysis.job.device_bound_job): each rank's job step, its steps and clock;
    None or empty where the steps CSVs do not say it (the breakdown is then the recorded steps')."""
    steps_warmup: int | None = None
    """The schedule's warm-up steps (manifest), for steps CSVs written before the profiler column."""
    ranks: dict[int, RankFrames] = field(default_factory=dict)
    """rank → its frames (workbench.analysis.frames.RankFrames)."""
    steps: dict = field(default_factory=dict)
    """rank → steps_rank{r}.csv frame (contract.STEP_COLUMNS) or None."""
    experts: dict = field(default_factory=dict)
    """rank → experts_rank{r}.csv frame (contract.EXPERT_COLUMNS), for the ranks that recorded expert load."""
    capacity_bytes: int | None = None
    world_size: int = 1
    trace_wait_ms: dict = field(default_factory=dict)
    """rank → the recorded steps' mean dataloader + host + idle ms (before the job correction)."""
    failure: dict | None = None
    """How the job failed (workbench.analysis.failure.run_failure), or None: it did not."""
    memory_by_category: dict | None = None
    """The run's memory by category (workbench.analysis.memory_categories.run_categories), or None."""
    history: dict | None = None
    """The whole run's step history and its change points (workbench.analysis.history.summarise), or None."""
    hang: dict | None = None
    """Which collective the job hung in and why (workbench.analysis.hang.diagnose_hang), or None."""
    launch: dict = field(default_factory=dict)
    """rank → launch_rank{r}.json (workbench.capture.launch: the model from the live objects), for the
    ranks that wrote one: the model's first evidence (workbench.analysis.model.launch.overlay)."""
    trainer: dict | None = None
    """The trainer behind the run (workbench.analysis.trainer_run.run_trainer), or None: a rule phrases
    its fix with ``workbench.trainers.line(trainer name, setting, value)``."""
    opened_windows: list | None = None
    """The launch window and those opened while the job ran, each set against the launch window
    (workbench.pipeline.long_run.windows_json), or None."""
    explained: Any = None
    """What the findings so far explain of the device's idle (workbench.diagnose.explained.Explained),
    set before the residual rules run; None before."""
    undeclared: list = field(default_factory=list)
    """(rule, frame name) of frames a rule read without declaring them (see :func:`reads`)."""
    _reading: tuple[str, frozenset[str]] | None = field(default=None, init=False, repr=False)

    @classmethod
    def of_traces(cls, traces: dict[int, Trace], breakdown=None, params: Params = Params(), **kw) -> Context:
        """A context over parsed traces (tests, a Run loaded whole): frames computed on demand."""
        ranks = {r: RankFrames.of_trace(t, r, params) for r, t in sorted(traces.items())}
        if breakdown is None:
            parts = [rf.summary(frames.BREAKDOWN) for rf in ranks.values()]
            breakdown = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=BREAKDOWN_COLUMNS)
        return cls(breakdown=breakdown, ranks=ranks, **kw)

    def frame(self, frame: Frame, rank: int) -> Any:
        """``frame`` of ``rank`` as the rules read it: from the rank's summary, or computed from its
        trace (read again when the summary lacks it: ``missed``)."""
        if self._reading is not None and frame.name not in self._reading[1]:
            self.undeclared.append((self._reading[0], frame.name))
        return self.ranks[rank].summary(frame)

    @contextmanager
    def reading(self, rule) -> Iterator[None]:
        """While ``rule`` runs, note any frame it reads that it did not declare."""
        self._reading = (rule.__name__, frozenset(f.name for f in getattr(rule, "reads", ())))
        try:
            yield
        finally:
            self._reading = None

    @property
    def missed(self) -> list[tuple[str, int]]:
        """(frame name, rank) of frames computed from a re-read trace (their summary lacked them)."""
        return [(name, r) for r, rf in self.ranks.items() for name in rf.missed]

    def model(self) -> dict:
        """The model behind the run (analysis.model.run_model over the ranks' ``model`` frames: the
        run's ``--json`` model block); a rule that reads it declares ``frames.MODEL``."""
        from workbench.analysis.model.launch import overlay
        from workbench.analysis.model_run import run_model

        return overlay(run_model({r: self.frame(frames.MODEL, r) for r in self.ranks}, self.world_size), self.launch)

    def rank_has_gpu(self, rank: int) -> bool:
        """The rank's trace holds GPU events (kernels, copies)."""
        return self.ranks[rank].has_gpu

    @property
    def has_gpu(self) -> bool:
        return any(rf.has_gpu for rf in self.ranks.values())

    def gpu_ranks(self) -> list[int]:
        """The ranks whose traces hold GPU events."""
        return [r for r in self.ranks if self.rank_has_gpu(r)]

    def step_ms(self) -> float:
        return float(self.breakdown["step_ms"].mean()) if len(self.breakdown) else 0.0

    def _rank_rows(self, rank: int):
        b = self.breakdown
        return b[b["rank"] == rank] if len(b) else b

    def communication(self, rank: int) -> dict | None:
        """The rank's communication per step, exposed and hidden (workbench.analysis.exposed.rank_comm: the
        breakdown's exposed part and the overlap frame's hidden part, in the job's step), or None."""
        from workbench.analysis.exposed import rank_comm

        return rank_comm(rank, self._rank_rows(rank), self.frame(frames.COMM_OVERLAP, rank), lambda ms: self.device_ms(rank, ms))

    def job_step_ms(self, rank: int) -> float:
        """The rank's step as the rules judge it: the job's (mean of its unprofiled steps) where
        known, else the recorded steps' mean."""
        rows = self._rank_rows(rank)
        return float(rows["step_ms"].mean()) if len(rows) else 0.0

    def to_job(self, rank: int) -> float:
        """The factor that turns a share of the recorded step into a share of the job's step, for
        time the device measured: on GPU traces kernels keep their length, so a share
        of a recorded step that the profiler stretched is recorded / job times larger; on CPU
        traces the device is the main thread, stretched with the step, and the share stands."""
        rows = self._rank_rows(rank)
        if not len(rows) or "trace_step_ms" not in rows or not self.rank_has_gpu(rank):
            return 1.0
        job = float(rows["step_ms"].mean())
        return float(rows["trace_step_ms"].mean()) / job if job > 0 else 1.0

    def busy_pct(self, rank: int, busy) -> float:
        """The device's busy share of the job's step from a ``device_busy`` frame: its mean busy
        time per recorded step over the job's step on GPU traces; on CPU traces (the main thread,
        stretched with the step) busy over step time of the recorded steps. A ratio of means, not a
        mean of per-step ratios: a recorded step that stalled counts for its length."""
        if busy is None or busy.empty:
            return float("nan")
        if self.rank_has_gpu(rank):
            job = self.job_step_ms(rank)
            return min(100.0 * float(busy["busy_ms"].mean()) / job, 100.0) if job > 0 else float("nan")
        total = float(busy["step_ms"].sum())
        return 100.0 * float(busy["busy_ms"].sum()) / total if total > 0 else float("nan")

    def device_ms(self, rank: int, ms: float) -> float:
        """Milliseconds the trace measured on the device, as the job spends them: the same on a GPU,
        scaled with the step on CPU traces (the profiler stretched the main thread)."""
        rows = self._rank_rows(rank)
        if self.rank_has_gpu(rank) or not len(rows) or "trace_step_ms" not in rows:
            return ms
        rec = float(rows["trace_step_ms"].mean())
        return ms * float(rows["step_ms"].mean()) / rec if rec > 0 else ms

    def wait_scale(self, rank: int) -> float:
        """Host time the trace measured (gaps after a sync, the main thread's own work) as the job
        spends it: the breakdown's waiting in the job's step over the waiting it recorded."""
        rows = self._rank_rows(rank)
        if not len(rows) or "trace_step_ms" not in rows:
            return 1.0
        if not self.rank_has_gpu(rank):
            return self.device_ms(rank, 1.0)
        now = float((rows["dataloader_ms"] + rows["host_ms"] + rows["idle_ms"]).mean())
        t = self.trace_wait_ms.get(rank) if self.trace_wait_ms else None
        return now / t if t else 1.0

    def windows(self, rank: int):
        """analysis.steps.step_windows of ``rank``."""
        return self.frame(frames.WINDOWS, rank)


def reads(*declared: Frame) -> Callable[[Rule], Rule]:
    """Declare the per-rank frames a rule reads: ``@reads(frames.COMM_OVERLAP)``. workbench.pipeline.reduce
    computes exactly the frames the rules declare (next to each trace, cached), so a frame read but
    not declared is computed from a re-read trace (``Context.undeclared`` names it)."""
    def mark(rule: Rule) -> Rule:
        rule.reads = tuple(declared)
        return rule
    return mark


def speedup(step_ms: float, saved_ms: float) -> float:
    """Upper-bound speed-up when ``saved_ms`` of each ``step_ms`` step disappears."""
    return round(step_ms / max(step_ms - saved_ms, 1e-9), 2) if step_ms > 0 else 1.0


def gain(step_ms: float, saved_ms: float, formula: str) -> dict[str, Any]:
    return {"step_time_saved_pct": round(100.0 * saved_ms / step_ms, 1) if step_ms > 0 else 0.0,
            "speedup_max": speedup(step_ms, saved_ms), "formula": formula}


BATCH_FACTORS = (2, 4, 8)
PER_SAMPLE_FORMULA = ("samples/s at k× the batch ≤ min(k, step_ms / gpu_busy_ms): the host's work per step "
                      "stays, the kernels' grows with the batch, so the step stays host-bound up to k = step / busy")


def per_sample(step_ms: float, busy_ms: float) -> dict[str, Any]:
    """What a bigger batch buys per sample when the host sets the pace: at k×
    the batch a step does k× the samples; the GPU's kernels take up to k× as long, the host's
    per-step work (launches, Python) stays. Samples/s then grow by k·T / max(T, k·G) = min(k, T/G)
    (T the job's step, G the kernels' busy time per step). Measured: Hugging Face Trainer batch
    8 → 64 at 6 % busy gave 7.8× (bound 8×); word_language_model 20 → 160 at 18 % gave 7.0× (bound
    5.6×: small kernels grow less than linearly with the batch)."""
    if step_ms <= 0 or busy_ms <= 0:
        return {}
    ceiling = step_ms / busy_ms
    return {"per_sample_speedup": {str(k): round(min(k, ceiling), 2) for k in BATCH_FACTORS},
            "per_sample_formula": PER_SAMPLE_FORMULA}



