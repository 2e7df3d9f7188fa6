"""``--calibrate RUN…``: the efficiencies the user's own runs measured replace the defaults.

From each run (any number; one GPU is enough), through its analysed result
(``workbench.pipeline.analyze(path).result``) and the run directory:

- GEMM efficiency by size: each matmul call's FLOPs over its kernels' time, bucketed by FLOPs
  per call (the analysis' declared ``gemm_calls`` frame, from the run's cached summaries: :func:`gemm_calls`);
- attention: the attention kernels' FLOP/s over the peak of the dtype they ran in;
- a mixture of experts' routed (grouped) matmuls: the kernel classes the analysis names for them
  (a class or subclass with "expert" or "grouped" in its name), their FLOP/s over the peak;
- memory-bound kernels (norms, activations, casts, reductions, copies) and the optimizer: their
  time per step against the bytes this planner counts for the run (engine runs, whose manifest
  says the model and layout), i.e. an effective share of HBM bandwidth;
- host overhead: a step longer than its kernels (steady steps, GPU clock) is the host's launch
  rate: seconds per kernel, kernels per layer;
- collective bus bandwidth by size: NCCL collectives of ≥ 1 MiB in multi-rank GPU runs.

What a run cannot tell (no collectives at world size 1, no memory-bound model for a non-engine
run) stays the stated default, and :attr:`Efficiencies.notes` says so.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from workbench.format.errors import WorkbenchError
from workbench.plan.comm import bus_factor
from workbench.calibration.measured import data_wait_ms
from workbench.plan.efficiency import Efficiencies
from workbench.plan.gemms import routed_gemm_flops
from workbench.plan.timing import launch_factor
from workbench.pipeline.result import Result

MEMORY_BOUND_CLASSES = ("elementwise", "normalization", "reduction", "indexing", "copy", "other")
HOST_COPIES = ("memcpy_htod", "memcpy_dtoh")
HOST_BOUND_MIN = 0.03
"""A steady step this much longer than its kernels is taken as host-bound (launch-limited)."""
MIN_COLLECTIVE_BYTES = 1 << 20


def rank_frame(run: str | Path, frame, analysis=None) -> dict:
    """rank → one declared per-rank frame of the run (workbench.analysis.frames): from ``analysis``
    (the run's workbench.pipeline.verdict.Analysis) when the caller holds it, else from the run's
    cached summaries (the ones ``workbench analyze`` wrote, made when missing) — no trace is read
    again when they are there."""
    from workbench.pipeline.reduce import load_reduced
    from workbench.pipeline.verdict import READS

    if analysis is not None:
        return analysis.per_rank_frames(frame)
    r = load_reduced(run, READS)
    return {rank: s.rank_frames(r.params).summary(frame) for rank, s in r.summaries.items()}


def gemm_calls(run: str | Path, analysis=None) -> list[tuple[float, float]]:
    """Each matmul op's (FLOPs, seconds), all ranks: the analysis' declared ``gemm_calls`` frame."""
    from workbench.analysis.frames import GEMM_CALLS

    calls: list[tuple[float, float]] = []
    for rank, f in sorted(rank_frame(run, GEMM_CALLS, analysis).items()):
        calls += [(float(x), float(y)) for x, y in zip(f["flops"], f["seconds"])]
    return calls


def step_transient_bytes(run: str | Path, analysis=None) -> dict[int, list[float]]:
    """rank → bytes one profiled step allocates above its floor on the CPU allocator's counter
    (the analysis' declared ``step_transient`` frame: workbench.analysis.memory.step_transient),
    for the ranks whose traces recorded memory: what the planner's transient memory is held to on
    gloo runs."""
    from workbench.analysis.frames import STEP_TRANSIENT

    out = {}
    for rank, f in sorted(rank_frame(run, STEP_TRANSIENT, analysis).items()):
        if len(f):
            out[rank] = [float(v) for v in f["transient_bytes"]]
    return out


def gemm_by_size(calls: list[tuple[float, float]], peak_flops: float, per_decade: int = 4) -> tuple[tuple[float, float], ...]:
    """(FLOPs per call, share of peak) per log bucket: total FLOPs over total time of its calls."""
    buckets: dict[int, list[float]] = {}
    for f, s in calls:
        b = buckets.setdefault(int(math.floor(math.log10(f) * per_decade)), [0.0, 0.0, 0.0])
        b[0] += f
        b[1] += s
        b[2] += 1
    pts = [(10 ** ((k + 0.5) / per_decade), v[0] / v[1] / peak_flops) for k, v in sorted(buckets.items()) if v[2] >= 2]
    return tuple(pts)


def gemm_calls_in_buckets(calls: list[tuple[float, float]], per_decade: int = 4) -> list[tuple[float, float]]:
    """The calls :func:`gemm_by_size` measures (those in buckets of two calls or more)."""
    key = [int(math.floor(math.log10(f) * per_decade)) for f, _ in calls]
    count: dict[int, int] = {}
    for k in key:
        count[k] = count.get(k, 0) + 1
    return [c for c, k in zip(calls, key) if count[k] >= 2]


def _per_step(result: Result, classes: tuple[str, ...], *, exclude_sub: tuple[str, ...] = ()) -> float:
    eff = result.efficiency
    steps = max(1, int(result.summary.steps or 1)) * max(1, int(result.run.world_size or 1))
    return sum(c["time_ms"] for c in (eff.classes if eff else ()) if c["class"] in classes
               and c["subclass"] not in exclude_sub) / steps * 1e-3


def _dominant_dtype(result: Result) -> str:
    mix = result.efficiency.dtype_flops_pct if result.efficiency else {}
    return max(mix, key=mix.get) if mix else "bf16"


def _collective_busbw(result: Result, hosts: int) -> dict[str, float]:
    """Median bus bandwidth of the run's large collectives (bytes/s), by link."""
    world = int(result.run.world_size or 1)
    if world < 2 or not result.run.has_gpu:
        return {}
    rates = []
    for c in result.collectives:
        b, n, ms = c.get("bytes"), c.get("calls") or 0, c.get("total_ms") or 0
        if b and b >= MIN_COLLECTIVE_BYTES and n and ms and c["op"] in ("all_reduce", "all_gather", "reduce_scatter"):
            rates.append(bus_factor(c["op"], int(c["group_size"] or world)) * b / (ms * 1e-3 / n))
    if not rates:
        return {}
    rates.sort()
    return {"intra" if hosts <= 1 else "inter": rates[len(rates) // 2]}


def calibrate(runs: list[str | Path], base: Efficiencies | None = None, results: dict | None = None,
              analyses: dict | None = None) -> Efficiencies:
    """Efficiencies measured on ``runs`` (GPU runs of the workbench; CPU runs only give collectives).
    ``results``: ``{str(run): its analysed Result}`` already at hand (else workbench.pipeline.analyze);
    ``analyses``: ``{str(run): its Analysis}`` (the frames behind it) where the caller holds them."""
    from workbench.hardware.peaks import device_peak
    from workbench.plan.engine_runs import engine_case, read_manifest
    from workbench.pipeline import analyze

    if not runs:
        raise WorkbenchError("--calibrate needs at least one run directory")
    eff = base or Efficiencies()
    notes: list[str] = []
    calls_by_peak: list[tuple[float, float, float]] = []
    attn = [0.0, 0.0]          # FLOPs at peak, seconds
    experts = [0.0, 0.0]       # routed experts' matmuls: FLOPs at peak, seconds
    membound = [0.0, 0.0]      # bytes counted, seconds x HBM
    opt = [0.0, 0.0]
    host: list[tuple[float, float]] = []
    busbw: dict[str, float] = {}
    used: list[str] = []
    for run in runs:
        res = (results or {}).get(str(run)) or analyze(run).result
        name = Path(run).name
        e = res.efficiency
        peak = device_peak(res.run.device)
        # a bare trace directory (no manifest) calibrates as well: GEMMs and attention need only the traces
        man = read_manifest(run) if (Path(run) / "manifest.json").exists() else {}
        busbw.update(_collective_busbw(res, len(man.get("hosts") or [])))
        if not e or not peak or not res.run.has_gpu:
            notes.append(f"{name}: no GPU kernels with a known peak — only its collectives are used")
            continue
        used.append(str(run))
        dtype = _dominant_dtype(res)
        # the share of the peak the planner times that dtype's matmuls against (timing: fp32 work
        # at the fp32 peak), so that the run's own layout is predicted back at its own rate
        for f, s in gemm_calls(run, (analyses or {}).get(str(run))):
            calls_by_peak.append((f, s, (peak.tflops.get(dtype) or peak.tflops["bf16"]) * 1e12))
        for c in e.classes:
            if is_expert_gemm(c) and c.get("flops") and c.get("time_ms"):
                experts[0] += c["flops"] / ((peak.tflops.get(dtype) or peak.tflops["bf16"]) * 1e12)
                experts[1] += c["time_ms"] * 1e-3
            if c["class"] == "attention" and c["flops"]:
                p = (peak.tflops.get("fp32" if dtype in ("fp32", "tf32") else dtype) or peak.tflops["bf16"]) * 1e12
                attn[0] += c["flops"] / p
                attn[1] += c["time_ms"] * 1e-3
        try:
            case = engine_case(run, man)
        except WorkbenchError:
            case = _inferred_case(res, name)
            if case is None:
                notes.append(f"{name}: not an engine run and no model inferred from its traces — memory-bound, "
                             "optimizer and host rates stay defaults")
                continue
            notes.append(f"{name}: memory-bound, optimizer and host rates against the model inferred from its traces")
        counted = counted_bytes(case)
        hbm = peak.hbm_tb_s * 1e12
        # a GPU run's grouped GEMMs are not a kernel class of their own: efficiency.moe times the
        # expert matmuls from the ops that launched them, against the FLOPs the timing gives them
        moe = getattr(e, "moe", None) or {}
        if (case.model.experts and moe.get("source") == "kernels" and moe.get("expert_gemm_ms")
                and not any(is_expert_gemm(c) for c in e.classes)):
            routed = routed_gemm_flops(case.model, case.stack, case.layout, case.global_batch)
            if routed:
                experts[0] += routed / ((peak.tflops.get(dtype) or peak.tflops["bf16"]) * 1e12)
                experts[1] += moe["expert_gemm_ms"] * 1e-3
        mb_s = _per_step(res, MEMORY_BOUND_CLASSES, exclude_sub=HOST_COPIES)
        opt_s = _per_step(res, ("optimizer",))
        if mb_s:
            membound[0] += counted["memory_bound"]
            membound[1] += mb_s * hbm
        if opt_s:
            opt[0] += counted["optimizer"]
            opt[1] += opt_s * hbm
        kernels = sum(c["kernels"] for c in e.classes) / max(1, int(res.summary.steps or 1))
        kernel_s = _per_step(res, tuple({c["class"] for c in e.classes}), exclude_sub=HOST_COPIES)
        # the steady (unprofiled) steps where the run has them, else the job's step; less the time
        # the loop waited on its data loader (not the host launching kernels: a stalled loader
        # would otherwise pass for a slow host and follow every alternative)
        steady = res.metrics.steady_step_ms or res.summary.step_ms
        wait = data_wait_ms(res)
        if steady and wait:
            steady = max(0.0, steady - wait)
        # per block and micro-batch as timing counts them: a recomputing run's kernels include the
        # forward's second launch, which the timing adds back for the run's recomputation
        layer_runs = case.model.layers / case.layout.pp * case.layout.microbatches(case.global_batch) * launch_factor(
            case.model, case.layout, case.stack, 0)
        if steady and kernels and steady * 1e-3 > kernel_s * (1 + HOST_BOUND_MIN):
            host.append((steady * 1e-3 / kernels, kernels / layer_runs))
        else:
            notes.append(f"{name}: steady steps ≈ their kernels (GPU-bound) — the host's rate is not measured")
    if calls_by_peak:
        by_peak: dict[float, list] = {}
        for f, s, p in calls_by_peak:
            by_peak.setdefault(p, []).append((f, s))
        p, calls = max(by_peak.items(), key=lambda kv: len(kv[1]))
        pts = gemm_by_size(calls, p)
        total = sum(f for f, _ in calls) / sum(s for _, s in calls) / p
        kept = gemm_calls_in_buckets(calls)
        if pts and kept:
            lo, hi = min(f for f, _ in kept), max(f for f, _ in kept)
            eff = replace(eff, gemm_by_size=pts, gemm_flops_range=(lo, hi))
            notes.append(f"GEMM: {len(calls)} matmul calls in {len(pts)} size buckets, {total:.0%} of peak overall; "
                         f"measured from {lo:.2g} to {hi:.2g} FLOPs per call (other sizes: the default "
                         f"{eff.gemm:.0%} of peak)")
        else:
            notes.append(f"GEMM: {len(calls)} matmul calls, too few of any one size to calibrate — "
                         f"the default {eff.gemm:.0%} of peak is used")
    if experts[1]:
        eff = replace(eff, expert_gemm=experts[0] / experts[1])
        notes.append(f"routed experts' matmuls: {experts[0] / experts[1]:.0%} of peak")
    if attn[1]:
        eff = replace(eff, attention=attn[0] / attn[1])
        notes.append(f"attention: {attn[0] / attn[1]:.0%} of peak")
    if membound[1]:
        share, said = _within_hbm(membound[0] / membound[1], "memory-bound kernels", "for the bytes counted")
        eff = replace(eff, memory_bound=share)
        notes.append(said)
    if opt[1]:
        share, said = _within_hbm(opt[0] / opt[1], "optimizer", "")
        eff = replace(eff, optimizer=share)
        notes.append(said)
    if host:
        per_kernel = sum(h[0] for h in host) / len(host)
        per_layer = sum(h[1] for h in host) / len(host)
        eff = replace(eff, host_s_per_kernel=per_kernel, kernels_per_layer=per_layer)
        notes.append(f"host: {per_kernel * 1e6:.1f} µs per kernel, {per_layer:.0f} kernels per layer and micro-batch")
    if busbw:
        eff = replace(eff, busbw={**eff.busbw, **busbw})
        notes.append("collectives: " + ", ".join(f"{k} {v / 1e9:.0f} GB/s bus bandwidth" for k, v in busbw.items()))
    else:
        notes.append("collectives: none of ≥ 1 MiB on several GPUs in these runs — link bandwidths stay the stated defaults")
    if not used and not busbw:
        raise WorkbenchError("--calibrate: none of the runs has GPU kernels or collectives to measure")
    return replace(eff, source="calibrated", runs=tuple(str(r) for r in runs), notes=tuple(notes))


def is_expert_gemm(c: dict) -> bool:
    """A kernel class row of a mixture of experts' routed matmuls (grouped GEMMs, per-expert loops)."""
    name = f"{c.get('class') or ''} {c.get('subclass') or ''}".lower()
    return "expert" in name or "grouped" in name


def _inferred_case(result: Result, name: str):
    """The run as the planner sees it from the analysis' inferred model (workbench.calibration.from_run),
    or None when there is none to plan."""
    from workbench.calibration.from_run import run_model

    try:
        return run_model(result, name=name)
    except WorkbenchError:
        return None


def counted_bytes(case) -> dict[str, float]:
    """Bytes per step this planner counts for an engine run's memory-bound kernels (layers, loss,
    embedding) and optimizer: the denominators of the calibrated shares."""
    from workbench.hardware.systems import make_cluster
    from workbench.plan.timing import step_time

    unit = Efficiencies(memory_bound=1.0, optimizer=1.0)
    cluster = make_cluster(case.device_name or "H100", case.world)
    t = step_time(case.model, case.layout, case.stack, case.global_batch, cluster, unit)
    hbm = cluster.gpu.hbm_tb_s * 1e12
    return {"memory_bound": t.memory_bound_s * hbm, "optimizer": t.optimizer_s * hbm}


def _within_hbm(share: float, what: str, tail: str) -> tuple[float, str]:
    """(the share of HBM bandwidth the planner takes, the note): a measured share above 100 % is no device's
    (the bytes the planner counts moved faster than HBM can: small tensors stayed in the L2 cache, or the
    kernels' times are wrong), so it is said as inconsistent evidence and the planner takes 100 %."""
    if share <= 1.0:
        return share, f"{what}: {share:.0%} of HBM bandwidth" + (f" {tail}" if tail else "")
    return 1.0, (f"{what}: inconsistent: the bytes counted moved at {share:.0%} of HBM bandwidth, more than the device "
                 "can (small tensors kept in the L2 cache, or wrong kernel times): 100 % is used")
