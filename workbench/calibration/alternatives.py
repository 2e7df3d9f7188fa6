"""Alternatives to what a run did, from the planner calibrated on that run: the answer a memory or
layout finding gives ("recompute none instead of full: 63 GiB of 140, 285 ms per step").

A run is a :class:`RunCase` — the model, layout, stack, batch and cluster that ran, and what it
measured (its job step and the allocator's peak). :func:`alternatives` changes one thing at a time
(recomputation, micro-batch at the same global batch, ZeRO stage, twice the GPUs …), predicts each
with the planner, and keeps those that serve the goal:

- ``memory``: a run near its device's capacity (``oom_risk``). Alternatives that leave at least
  :data:`SAFE_HEADROOM` of the device free, fastest first; those that fit more tightly are named
  "too tight".
- ``speed``: a run that fits (``low_mfu``, ``host_bound``, ``low_gpu_utilization``,
  ``exposed_communication``, ``pipeline_bubble``). Alternatives predicted faster per sample than
  the run and still fitting with headroom, fastest first.

Predictions are **anchored on the run**: the planner predicts the run's own layout too, and every
alternative's step and memory are scaled by measured / predicted for the run (the part of the
error the run shares with its neighbours: kernels the model does not count, the allocator's
reserve), so an alternative's figure is the run's measured figure times the planner's ratio
between the two layouts. The anchor is stated in each alternative's ``basis``.

Each alternative's ``basis`` says what its figures rest on: the effect the planner models for
that change (recomputation: the forward re-run per block; micro-batch: matmul sizes, the
activations held, the host's launches; ZeRO: the sharded states and their collectives; more GPUs:
the searched layout's communication), whether the run measured what that effect depends on (the
matmul sizes, the host's rate, the collectives' bandwidth) or a stated default stands in, and the
anchor.

Never suggested: the run's own layout, a layout that changes what is trained (sequence length,
global batch — except ``bigger batch``, whose speed-up is per sample and says so), a layout that
cannot run (divisibility) or does not fit, a ZeRO stage at one replica (dp = 1: there is nothing to
shard, every stage is the run's own layout; the search keeps the run's stage there), and a speed-up
from a change the planner does not model: an alternative whose layout differs from the run's only
in what the model does not time (the ZeRO stage at dp = 1) is the run itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from workbench.hardware.systems import FIT_FRACTION, Cluster, make_cluster
from workbench.pipeline.api import Extra
from workbench.pipeline.result import Result
from workbench.plan.activations import kept_per_token
from workbench.plan.layout import Layout, Stack, torch_stack
from workbench.plan.recompute import modes_for
from workbench.plan.memory import memory
from workbench.plan.model import ModelSpec
from workbench.plan.search import PlanRequest, check_layout, plan
from workbench.plan.efficiency import Efficiencies
from workbench.plan.timing import step_time

SAFE_HEADROOM = 0.10
"""Fraction of the device an alternative must leave free to be offered for a memory finding (the
allocator's fragmentation and a longer sequence in the data need room: oom_risk warns at 85 %)."""
MIN_SPEEDUP = 1.03
"""A speed alternative must beat the run by 3 % per sample (the planner's median error on the
engine's H200 runs is ~4 %: less is noise)."""
SCALE_UP = (2, 4, 8)
"""More GPUs, as multiples of the run's."""
GOALS = ("memory", "speed")
ADVISED = {"oom_risk": "memory", "out_of_memory": "memory", "low_mfu": "speed", "host_bound": "speed", "low_gpu_utilization": "speed",
           "exposed_communication": "speed", "pipeline_bubble": "speed"}
"""The findings a plan answers, and what its alternatives are for."""


@dataclass(kw_only=True, slots=True)
class RunCase:
    """What ran, as the planner sees it, and what it measured."""

    model: ModelSpec
    layout: Layout
    stack: Stack
    global_batch: int
    """Sequences per optimizer step (all replicas)."""
    cluster: Cluster
    efficiencies: Efficiencies = field(default_factory=Efficiencies)
    """The planner's efficiencies, calibrated on this run where possible."""
    measured_step_ms: float | None = None
    """The job's step (unprofiled steps)."""
    measured_peak_bytes: float | None = None
    """The allocator's peak (reserved), on the rank that peaked."""
    data_wait_ms: float = 0.0
    """Of the measured step, the wait on the data loader: no layout changes it, so the anchor leaves
    it out and every alternative keeps it (scaled with its samples per step)."""
    trainer: str | None = None
    """The trainer that ran it (its recomputation modes are the ones offered)."""


@dataclass(kw_only=True, slots=True)
class Alternative:
    change: str
    """What changes, in words: "recompute none instead of full"."""
    layout: Layout
    gpus: int
    global_batch: int
    step_ms: float
    """Predicted step, anchored on the run (see the module docstring)."""
    memory_gib: float
    """Predicted peak per GPU, anchored on the run."""
    capacity_gib: float
    headroom_pct: float
    """Free share of the device at the predicted peak."""
    speedup: float
    """Throughput per GPU against the run's measured: samples/s/GPU ratio (1.0: as fast)."""
    tight: bool
    """Fits, but with less than SAFE_HEADROOM free."""
    basis: str

    def to_json(self) -> dict:
        return {"change": self.change, "layout": self.layout.key(), "gpus": self.gpus, "global_batch": self.global_batch,
                "step_ms": round(self.step_ms, 1), "memory_gib": round(self.memory_gib, 2),
                "capacity_gib": round(self.capacity_gib, 2), "headroom_pct": round(self.headroom_pct, 1),
                "speedup": round(self.speedup, 3), "tight": self.tight, "basis": self.basis}

    def line(self) -> str:
        """One line for the CLI: "recompute none instead of full: 63.0 GiB of 139.8 (45 % free), 285 ms per step (1.25x)"."""
        gain = f"{self.speedup:.2f}x per GPU" if self.gpus != 1 or self.speedup else ""
        tight = " - too tight" if self.tight else ""
        return (f"{self.change}: {self.memory_gib:.1f} GiB of {self.capacity_gib:.1f} ({self.headroom_pct:.0f} % free{tight}), "
                f"{self.step_ms:,.0f} ms per step ({gain})")


@dataclass(slots=True)
class _Anchor:
    step: float
    mem: float
    text: str


def _predict(case: RunCase, layout: Layout, stack: Stack, batch: int, cluster: Cluster) -> tuple[float, float, bool]:
    mem = memory(case.model, layout, stack, batch, cluster.gpu.memory_bytes, FIT_FRACTION)
    t = step_time(case.model, layout, stack, batch, cluster, case.efficiencies)
    return t.step_s * 1e3, mem.total, mem.fits


def _anchor(case: RunCase) -> _Anchor:
    step, mem, _ = _predict(case, case.layout, case.stack, case.global_batch, case.cluster)
    busy = (case.measured_step_ms or 0.0) - case.data_wait_ms
    ks = busy / step if busy > 0 else 1.0
    km = case.measured_peak_bytes / mem if case.measured_peak_bytes else 1.0
    parts = []
    if case.measured_step_ms:
        waited = f", {case.data_wait_ms:,.0f} of them waiting on data" if case.data_wait_ms else ""
        parts.append(f"step x {ks:.2f} (the run measured {case.measured_step_ms:,.0f} ms{waited}, the planner says {step:,.0f})")
    if case.measured_peak_bytes:
        parts.append(f"memory x {km:.2f} (measured {case.measured_peak_bytes / 2**30:.1f} GiB, "
                     f"planned {mem / 2**30:.1f})")
    text = "planner calibrated on the run, " + ("; ".join(parts) if parts else "not anchored (nothing measured)")
    return _Anchor(step=ks, mem=km, text=text)


def _stack_for(case: RunCase, layout: Layout) -> Stack:
    """The run's stack with the ZeRO stage the layout asks for (torch: DDP up to ZeRO-1, FSDP2 above)."""
    if layout.zero == case.layout.zero:
        return case.stack
    return torch_stack(case.stack.dtype, zero=layout.zero, optimizer_bytes=case.stack.optimizer_bytes,
                       reduce_each_microbatch=case.stack.dp_reduce_each_microbatch, pipeline=layout.pp > 1)


def _candidates(case: RunCase, goal: str) -> list[tuple[str, Layout, int, Cluster]]:
    """(change in words, layout, global batch, cluster) one step away from the run."""
    lay, B, n = case.layout, case.global_batch, case.cluster.gpus
    out: list[tuple[str, Layout, int, Cluster]] = []
    per_replica = B // lay.dp
    kept = kept_per_token(case.model, case.stack, lay, lay.recompute)
    for rc in modes_for(case.trainer, lay.recompute):
        # a mode that keeps less than the run's recomputes more: what a memory finding offers, not a
        # speed one (torchtitan's op-level policy keeps less than every other block and may still take
        # less time than it: there the prediction decides)
        if goal == "speed" and kept_per_token(case.model, case.stack, lay, rc) < kept and not lay.recompute.startswith("layer:"):
            continue
        for mb in sorted({d for d in range(1, per_replica + 1) if per_replica % d == 0 and d <= 4 * lay.mb}):
            if (rc, mb) == (lay.recompute, lay.mb):
                continue
            words = []
            if rc != lay.recompute:
                words.append(f"recompute {rc} instead of {lay.recompute}")
            if mb != lay.mb:
                acc = per_replica // mb
                words.append(f"micro-batch {mb} x {acc} accumulation steps" if acc > 1 else f"micro-batch {mb}")
            out.append((", ".join(words), replace(lay, recompute=rc, mb=mb), B, case.cluster))
    if lay.dp > 1:
        for z in range(4):
            if z != lay.zero:
                out.append((f"ZeRO-{z} instead of ZeRO-{lay.zero}", replace(lay, zero=z), B, case.cluster))
    if goal == "speed":
        # the classic fix for a launch-bound or low-MFU step: more work per launch (per-sample gain)
        out.append((f"twice the micro-batch ({2 * lay.mb}), twice the global batch", replace(lay, mb=2 * lay.mb), 2 * B,
                    case.cluster))
    for k in SCALE_UP:
        # nodes of 8 unless the run's are larger; the run's own links. The planner's search picks
        # the layout (data, tensor or pipeline parallel: a global batch of 1 cannot be split by data)
        cl = make_cluster(case.cluster.gpu.name, n * k, max(case.cluster.gpus_per_node, 8), case.cluster.intra_gbps,
                          case.cluster.inter_gbps)
        req = PlanRequest(model=case.model, cluster=cl, global_batch=B, stack="torch", dtype=case.stack.dtype,
                          efficiencies=case.efficiencies, top=1, zero_at_dp1=lay.zero)
        ranked = plan(req).ranked
        if goal == "speed":
            ranked = [e for e in ranked if kept_per_token(case.model, case.stack, e.layout, e.layout.recompute) >= kept]
        if ranked:
            best = ranked[0].layout
            out.append((f"{n * k} GPUs ({_degrees(best)}), same global batch", best, B, cl))
    return out


def _degrees(lay: Layout) -> str:
    parts = [f"{name} x {v}" for name, v in (("data parallel", lay.dp), ("tensor parallel", lay.tp),
                                             ("pipeline", lay.pp)) if v > 1]
    if lay.zero:
        parts.append(f"ZeRO-{lay.zero}")
    if lay.recompute != "none":
        parts.append(f"recompute {lay.recompute}")
    parts.append(f"micro-batch {lay.mb}")
    return ", ".join(parts)


def alternatives(case: RunCase, goal: str, limit: int = 3) -> list[Alternative]:
    """The best ``limit`` alternatives for ``goal`` ("memory" or "speed"), best first; [] when none
    serves it (a finding then says what it protects instead of a gain)."""
    if goal not in GOALS:
        raise ValueError(f"goal must be one of {GOALS}, got {goal!r}")
    anchor = _anchor(case)
    run_step = case.measured_step_ms or _predict(case, case.layout, case.stack, case.global_batch, case.cluster)[0]
    run_rate = case.global_batch / run_step / case.cluster.gpus  # samples per ms per GPU
    found: list[Alternative] = []
    for change, lay, batch, cluster in _candidates(case, goal):
        if check_layout(case.model, lay, batch) is not None or not modelled(case.layout, lay):
            continue
        step, mem, fits = _predict(case, lay, _stack_for(case, lay), batch, cluster)
        # the loader's wait stays, per sample of each GPU
        wait = case.data_wait_ms * (batch / case.global_batch) * (case.cluster.gpus / cluster.gpus)
        step, mem = step * anchor.step + wait, mem * anchor.mem
        cap = cluster.gpu.memory_bytes
        if not fits or mem > FIT_FRACTION * cap:
            continue
        headroom = 1.0 - mem / cap
        speedup = (batch / step / cluster.gpus) / run_rate
        alt = Alternative(change=change, layout=lay, gpus=cluster.gpus, global_batch=batch, step_ms=step,
                          memory_gib=mem / 2**30, capacity_gib=cap / 2**30, headroom_pct=100 * headroom,
                          speedup=speedup, tight=headroom < SAFE_HEADROOM,
                          basis=f"{basis(case, lay, cluster)}; {anchor.text}")
        if goal == "memory":
            run_mem = case.measured_peak_bytes or memory(case.model, case.layout, case.stack, case.global_batch,
                                                         cap, FIT_FRACTION).total * anchor.mem
            if mem < run_mem:
                found.append(alt)
        elif speedup >= MIN_SPEEDUP and not alt.tight:
            found.append(alt)
    if goal == "memory":
        # safe ones first, on the run's own GPUs before more of them, fastest per GPU among them
        found.sort(key=lambda a: (a.tight, a.gpus != case.cluster.gpus, -a.speedup))
    else:
        # the run's own GPUs first: more of them is a different budget
        found.sort(key=lambda a: (a.gpus != case.cluster.gpus, -a.speedup))
    return _distinct(found)[:limit]


def modelled(run: Layout, alt: Layout) -> bool:
    """Whether ``alt`` differs from ``run`` in something the planner models: not when the only
    difference is the ZeRO stage of a single replica (nothing to shard: the run's own layout); a
    layout of one replica keeps the run's stage."""
    return not (alt.dp == 1 and alt.zero != run.zero)


def basis(case: RunCase, lay: Layout, cluster: Cluster) -> str:
    """What an alternative's prediction rests on: the modelled effect of each change, and whether
    the run measured what the effect depends on or a stated default stands in."""
    run, eff = case.layout, case.efficiencies
    parts = []
    if lay.recompute != run.recompute:
        parts.append(f"recomputation {run.recompute} -> {lay.recompute}: what each block keeps and the forward work "
                     "it re-runs (workbench.plan.recompute) at the run's measured kernel rates")
    if lay.mb != run.mb:
        host = "the host's launch rate measured on the run" if eff.host_s_per_kernel else "no host limit measured"
        parts.append(f"micro-batch {run.mb} -> {lay.mb}: matmul sizes (efficiency by size from the run's own matmuls "
                     f"where measured), activations held, {host}")
    if lay.zero != run.zero:
        parts.append(f"ZeRO-{run.zero} -> ZeRO-{lay.zero} over dp {lay.dp}: sharded states and their collectives")
    if cluster.gpus != case.cluster.gpus or (lay.tp, lay.pp, lay.dp, lay.ep) != (run.tp, run.pp, run.dp, run.ep):
        parts.append(f"{cluster.gpus} GPUs as tp {lay.tp} x pp {lay.pp} x dp {lay.dp}"
                     + (f", ep {lay.ep}" if lay.ep > 1 else "") + ": their communication")
    comm = lay.tp > 1 or lay.pp > 1 or lay.dp > 1 or lay.ep > 1
    if comm:
        parts.append("collectives at " + ("the run's measured bus bandwidth" if eff.busbw
                                          else "the links' stated bandwidth (the run measured none)"))
    return "; ".join(parts) or "the run's layout"


def _distinct(alts: list[Alternative]) -> list[Alternative]:
    """One alternative per kind of change (recomputation, GPUs, ZeRO stage, batch), in the order
    given: of a kind's micro-batches, the largest (the least change to the run) among those within
    the planner's noise (MIN_SPEEDUP) of that kind's fastest."""
    kinds: dict[tuple, list[Alternative]] = {}
    for a in alts:
        kinds.setdefault((a.layout.recompute, a.gpus, a.layout.zero, a.global_batch), []).append(a)
    out = []
    for group in kinds.values():
        best = max(a.speedup for a in group)
        close = [a for a in group if a.speedup * MIN_SPEEDUP >= best and a.tight == group[0].tight]
        out.append(max(close, key=lambda a: a.layout.mb))
    order = {id(a): i for i, a in enumerate(alts)}
    return sorted(out, key=lambda a: order[id(a)])


def run_case(run, result: Result | None = None, analysis=None) -> RunCase | None:
    """The planner's view of a GPU run (``plan --from-run``'s: the engine's config, else the model
    inferred from the trace), calibrated on the run itself; None where no plan applies (a CPU run,
    a model the trace does not show: a convolutional net, a trace without shapes)."""
    from workbench.format.errors import WorkbenchError
    from workbench.calibration.calibrate import calibrate
    from workbench.calibration.from_run import run_job

    try:
        job = run_job(run, result=result)
    except WorkbenchError:
        return None
    if job.device != "cuda" or not job.device_name:
        return None
    try:
        cluster = make_cluster(job.device_name, job.gpus, min(8, job.gpus))
        eff = calibrate([job.path], results={job.path: job.result} if job.result else None,
                        analyses={job.path: analysis} if analysis is not None else None)
    except WorkbenchError:
        return None
    reserved = job.result.metrics.peak_reserved_gib if job.result else None
    peak = reserved * 2**30 if isinstance(reserved, (int, float)) and reserved > 0 else job.measured_peak_bytes
    return RunCase(model=job.model, layout=job.layout, stack=job.stack, global_batch=job.global_batch, cluster=cluster,
                   efficiencies=eff, measured_step_ms=job.measured_step_ms, measured_peak_bytes=peak,
                   data_wait_ms=job.data_wait_ms or 0.0, trainer=getattr(job, "trainer", None))


def advise(result: Result, run, analysis=None) -> Result:
    """``result`` with ``alternatives`` on every finding a plan answers (:data:`ADVISED`): the
    planner's best changes to the run, each with its predicted step, memory and headroom
    (:meth:`Alternative.to_json`); ``[]`` where none serves the finding's goal. Findings of runs
    no plan applies to are left as they are. ``analysis``: the run's Analysis where the caller holds
    it (its frames calibrate the planner; else they come from the run's cache)."""
    wanted = {ADVISED[d.id] for d in result.diagnoses if d.id in ADVISED}
    if not wanted:
        return result
    case = run_case(run, result, analysis)
    if case is None:
        return result
    found = {goal: [a.to_json() for a in alternatives(case, goal)] for goal in wanted if goal != "memory" or
             any(d.id != "out_of_memory" and ADVISED.get(d.id) == "memory" for d in result.diagnoses)}
    out = {d.id: found[ADVISED[d.id]] for d in result.diagnoses if d.id in ADVISED and d.id != "out_of_memory"}
    if result.finding("out_of_memory") is not None:
        out["out_of_memory"] = [a.to_json() for a in failed_run_alternatives(case)]
    result = result.with_alternatives(out)
    if result.memory is not None:  # the planner's split of the run's own layout, beside the measured one
        from dataclasses import replace as _replace

        result = _replace(result, memory={**result.memory, "planned": planned_memory(case)})
    return result


def planned_memory(case: RunCase) -> dict:
    """The planner's memory of the run's own layout by category (GiB, not anchored): what the app
    draws beside the run's measured categories (workbench.analysis.memory_categories)."""
    m = memory(case.model, case.layout, case.stack, case.global_batch, case.cluster.gpu.memory_bytes, FIT_FRACTION)
    g = lambda b: round(b / 2**30, 3)  # noqa: E731
    return {"layout": case.layout.key(), "weights": g(m.weights), "gradients": g(m.gradients), "optimizer": g(m.optimizer),
            "activations": g(m.activations + m.loss), "other": g(m.buffers), "total": g(m.total), "fits": m.fits,
            "source": "the planner on the run's model and layout (activations include the loss's tensors; other: DDP "
                      "buckets, bf16 weight copies, gathered parameters)"}


UNANCHORED = ("the planner on the model inferred from the run's traces, calibrated on its kernels' rates where they "
              "were recorded (matmuls, attention, memory-bound kernels; the host's pace and the optimizer's at their "
              "defaults: a run's first steps set up its state and time neither); not anchored on a measured step or "
              "peak: the run failed before a steady step (its peak is the failure's)")


def failed_run_alternatives(case: RunCase, limit: int = 3) -> list[Alternative]:
    """What fits where a run ran out of memory: the memory alternatives of the planner on the run's
    model (:func:`alternatives`, goal ``memory``), unanchored — the failed run measured no full step,
    and the memory it held when it failed is not its peak — keeping those that leave
    :data:`SAFE_HEADROOM` free, fastest first."""
    defaults = Efficiencies()
    kernels_only = replace(case.efficiencies, host_s_per_kernel=defaults.host_s_per_kernel,
                           kernels_per_layer=defaults.kernels_per_layer, optimizer=defaults.optimizer)
    bare = replace(case, efficiencies=kernels_only, measured_step_ms=None, measured_peak_bytes=None, data_wait_ms=0.0)
    alts = [a for a in alternatives(bare, "memory", limit=limit + 3) if not a.tight]
    for a in alts:
        a.basis = UNANCHORED
    alts.sort(key=lambda a: (a.gpus != case.cluster.gpus, -a.speedup))
    return alts[:limit]


ALTERNATIVES = Extra("alternatives", lambda analysed: advise(analysed.result, analysed.path, analysed.analysis()))
"""The planner's answers to a run's findings, as an extra of workbench.pipeline.analyze: what the
CLI, the app and the report show."""
