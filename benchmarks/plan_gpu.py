"""The engine runs the planner's H200 checks need beyond the committed ones:
model size, batch, recomputation and dtype, each a profiled `workbench train` run.

    python -m benchmarks.plan_gpu run OUTDIR     # on one H200 (~4 min): OUTDIR/plan_gpu.tgz + plan_gpu.txt
    python -m benchmarks.plan_gpu predict        # here: what the planner predicts for them, before they run

After the run: ``tar -xzf plan_gpu.tgz -C traces/`` makes them traces/plan_gpu_*, and
``python -m benchmarks.plan_engine`` / ``tests/plan/test_engine_checks.py`` predict each one from
plan_gpu_370m_b16's calibration and hold it to the goals (memory 10 %, step time 15 %).
Imports neither pandas nor plotly on the GPU machine (``run`` only starts ``workbench train``).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DDP = "case_studies/engine/gpt370m_ddp.toml"
FSDP = "case_studies/engine/gpt370m_fsdp.toml"
RUNS = {  # name: (config, --set overrides); the first is the calibration run (checks.PLAN_GPU_CALIBRATION)
    "plan_gpu_370m_b16": (DDP, []),
    "plan_gpu_370m_b32": (DDP, ["data.batch_size=32"]),                                    # batch
    "plan_gpu_370m_b16_ac": (DDP, ["train.activation_checkpointing=true"]),                # recomputation
    "plan_gpu_370m_b32_ac": (DDP, ["data.batch_size=32", "train.activation_checkpointing=true"]),
    "plan_gpu_370m_b8_fp32": (DDP, ["data.batch_size=8", 'parallel.mixed_precision="fp32"']),  # dtype
    "plan_gpu_1p3b_b8": (DDP, ["model.d_model=2048", "data.batch_size=8"]),                 # size ~1.3B
    "plan_gpu_125m_b32": (DDP, ['model.preset="125m"', "data.batch_size=32"]),              # size 125M
    "plan_gpu_370m_b16_zero3": (FSDP, []),                                                  # FSDP2 (ZeRO-3)
}
STEPS, SCHEDULE = 20, "6,2,2"


def run(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    runs = ROOT / "runs" / "plan"
    log = []
    for name, (cfg, sets) in RUNS.items():
        cmd = [sys.executable, "-m", "workbench", "train", "--config", cfg, "--profile", "--profile-memory", "--no-analyze", "--schedule",
               SCHEDULE, "--out", str(runs / name), "--set", f"train.steps={STEPS}"] + [a for s in sets for a in ("--set", s)]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "throughput" in ln or "rror" in ln][-3:]
        log.append(f"=== {name} (exit {r.returncode}) {' '.join(sets)}\n" + "\n".join(lines))
        print(log[-1], flush=True)
    (out / "plan_gpu.txt").write_text("\n".join(log) + "\n")
    with tarfile.open(out / "plan_gpu.tgz", "w:gz") as tar:
        for name in RUNS:
            if (runs / name).is_dir():
                tar.add(runs / name, arcname=name)
    return 0


def predict() -> int:
    """Predicted steady step and peak memory of every run, calibrated on the committed 370M batch-16
    run (traces/case_gpu_2_preload_shm: the same config as plan_gpu_370m_b16)."""
    from workbench.engine.config import config_to_dict, load_config
    from workbench.calibration.calibrate import calibrate
    from workbench.plan.engine_runs import engine_case
    from workbench.hardware.systems import make_cluster
    from workbench.plan.memory import memory
    from workbench.plan.timing import step_time

    eff = calibrate([ROOT / "traces" / "case_gpu_2_preload_shm"])
    print("| run | layout | predicted step (ms) | predicted peak (GiB) |\n|---|---|---:|---:|")
    for name, (cfg, sets) in RUNS.items():
        c = load_config(ROOT / cfg, sets)
        man = {"config": config_to_dict(c), "world_size": 1, "ranks": {"0": {"device": "cuda:0"}}, "device_name": "NVIDIA H200"}
        case = engine_case(name, man)
        t = step_time(case.model, case.layout, case.stack, case.global_batch, make_cluster("H200", 1), eff)
        mem = memory(case.model, case.layout, case.stack, case.global_batch, 150e9)
        print(f"| {name} | {case.layout.key()} ({case.stack.dtype}) | {t.step_s * 1e3:.1f} | {mem.total / 2**30:.2f} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "predict":
        sys.exit(predict())
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        sys.exit(run(Path(sys.argv[2])))
    sys.exit(__doc__)
