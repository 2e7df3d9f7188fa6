"""The planner held against the engine's committed runs: memory, communication volume, step time.

- memory: on gloo (CPU) runs, the peak of each step's allocations above the step's floor, from the
  profiler's CPU allocator counter (it only sees what was allocated inside the recorded window:
  weights and optimizer state were allocated before it), against the planner's ``transient``; on
  H200 runs, the steps CSV's ``max_mem_allocated_bytes`` against the planner's ``total``. Goal 10 %.
- communication: per rank, the bytes per step of the trace's collective inventory
  (``workbench analyze --json``'s ``collectives``) against the planner's collectives. Goal 5 %.
- step time: steady steps (``metrics.steady_step_ms``) of one H200 run, predicted with the
  efficiencies calibrated on a *different* run. Goal 15 %.

``benchmarks/plan_engine.py`` prints these tables (BENCHMARKS.md); ``tests/plan/test_engine_checks.py``
fails when a prediction drifts beyond its goal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workbench.plan.engine_runs import EngineCase, engine_case
from workbench.calibration.measured import max_allocated_bytes

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "traces"
MEMORY_GOAL = 0.10
COMM_GOAL = 0.05
TIME_GOAL = 0.15

CPU_RUNS = ("engine_ddp", "engine_zero1", "engine_zero2", "engine_zero3", "engine_tp", "engine_pp_gpipe_m2",
            "engine_pp_1f1b_m8")
"""Every layout the engine has, 2 gloo ranks each (traces/make_cpu_samples.sh)."""
GPU_MEMORY_RUNS = ("case_gpu_2_preload_shm", "case_gpu_3_batch32", "gpu_fsdp2_370m")
"""One-H200 engine runs: 370M DDP at batch 16 and 32, 370M FSDP2 (ZeRO-3)."""
TIME_PAIRS = (("case_gpu_3_batch32", "case_gpu_2_preload_shm"), ("case_gpu_2_preload_shm", "case_gpu_3_batch32"))
"""(predicted run, run the efficiencies are calibrated on)."""
PLAN_GPU_CALIBRATION = "plan_gpu_370m_b16"
"""benchmarks/plan_gpu.sh's calibration run; its other runs (traces/plan_gpu_*) are predicted from it."""


PLAN_GPU_MEMORY_ONLY = ("plan_gpu_370m_b16_zero3",)
"""Checked for memory, not time: FSDP2 at world size 1 is host-bound on its per-parameter hooks
(traces/gpu_fsdp2_370m: ~200 ms steps against DDP's 118), a host cost the DDP calibration run does
not have; the planner models one host rate per calibration."""


def plan_gpu_runs(root: Path = TRACES) -> list[str]:
    """The runs benchmarks/plan_gpu.sh made, once committed under traces/."""
    return sorted(p.name for p in root.glob("plan_gpu_*") if (p / "manifest.json").exists())


def time_pairs(root: Path = TRACES) -> list[tuple[str, str]]:
    pairs = list(TIME_PAIRS)
    runs = plan_gpu_runs(root)
    if PLAN_GPU_CALIBRATION in runs:
        pairs += [(r, PLAN_GPU_CALIBRATION) for r in runs if r != PLAN_GPU_CALIBRATION and r not in PLAN_GPU_MEMORY_ONLY]
    return pairs


def stage_of_rank(case: EngineCase, rank: int) -> int:
    """The engine's mesh is (dp, pp, tp), tp innermost."""
    return (rank // case.layout.tp) % case.layout.pp


@dataclass(kw_only=True, slots=True)
class Check:
    run: str
    rank: int | None
    layout: str
    what: str
    """What is compared (transient CPU bytes, peak GPU bytes, bytes per step, steady step ms)."""
    measured: float
    predicted: float
    goal: float
    detail: str = ""

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1 if self.measured else float("inf")

    @property
    def ok(self) -> bool:
        return abs(self.error) <= self.goal


def memory_checks(root: Path = TRACES) -> list[Check]:
    from workbench.calibration.calibrate import step_transient_bytes
    from workbench.plan.memory import memory_of_stage

    out = []
    for name in CPU_RUNS:
        case = engine_case(root / name)
        frames = step_transient_bytes(root / name)
        for rank, vals in sorted(frames.items()):
            vals = sorted(vals)
            measured = vals[len(vals) // 2]  # median over the profiled steps
            mem = memory_of_stage(case.model, case.layout, case.stack, case.global_batch, stage_of_rank(case, rank), 1e15)
            out.append(Check(run=name, rank=rank, layout=case.layout.key(), what="step allocations above the floor (B)",
                             measured=measured, predicted=mem.transient, goal=MEMORY_GOAL))
    for name in (*GPU_MEMORY_RUNS, *plan_gpu_runs(root)):
        case = engine_case(root / name)
        measured = max_allocated_bytes(root / name)
        if not measured:
            continue
        from workbench.plan.memory import memory

        mem = memory(case.model, case.layout, case.stack, case.global_batch, 150e9)
        out.append(Check(run=name, rank=None, layout=case.layout.key(), what="peak allocated on the H200 (B)",
                         measured=measured, predicted=mem.total, goal=MEMORY_GOAL,
                         detail=f"w {mem.weights / 2**30:.2f} + g {mem.gradients / 2**30:.2f} + o "
                                f"{mem.optimizer / 2**30:.2f} + a {mem.activations / 2**30:.2f} + loss "
                                f"{mem.loss / 2**30:.2f} + buffers {mem.buffers / 2**30:.2f} GiB"))
    return out


def comm_checks(root: Path = TRACES) -> list[Check]:
    from workbench.plan.comm import collectives
    from workbench.hardware.systems import make_cluster
    from workbench.pipeline import analyze

    out = []
    for name in CPU_RUNS:
        case = engine_case(root / name)
        res = analyze(root / name).result
        cluster = make_cluster("H100", case.world)  # the links do not change the volume
        for rank in range(case.world):
            pred = collectives(case.model, case.layout, case.stack, case.global_batch, cluster, stage_of_rank(case, rank))
            measured = sum(c["bytes_per_step"] or 0 for c in res.collectives if c["rank"] == rank)
            ops = sorted({c.op for c in pred})
            out.append(Check(run=name, rank=rank, layout=case.layout.key(), what="collective bytes per step",
                             measured=measured, predicted=sum(c.bytes_per_step for c in pred), goal=COMM_GOAL,
                             detail=", ".join(ops)))
    return out


def time_checks(root: Path = TRACES) -> list[Check]:
    from workbench.calibration.calibrate import calibrate
    from workbench.hardware.systems import make_cluster
    from workbench.plan.timing import step_time
    from workbench.pipeline import analyze

    out, cache = [], {}
    for target, cal in time_pairs(root):
        if cal not in cache:
            cache[cal] = calibrate([root / cal])
        case = engine_case(root / target)
        t = step_time(case.model, case.layout, case.stack, case.global_batch,
                      make_cluster(case.device_name or "H200", case.world), cache[cal])
        measured = analyze(root / target).result.metrics.steady_step_ms
        out.append(Check(run=target, rank=None, layout=case.layout.key(), what=f"steady step (ms), calibrated on {cal}",
                         measured=measured, predicted=t.step_s * 1e3, goal=TIME_GOAL,
                         detail=f"GEMM {t.gemm_s * 1e3:.1f} + attention {t.attention_s * 1e3:.1f} + memory-bound "
                                f"{t.memory_bound_s * 1e3:.1f} + optimizer {t.optimizer_s * 1e3:.1f} + host "
                                f"{t.host_s * 1e3:.1f} ms"))
    return out
