"""Engine runs with recomputation none / selective / full on one GPU: the ground truth for the
model the analysis infers from a trace (recomputation, MFU as trainers print it, HFU), and for
the planner's alternatives measured after it suggested them.

    python -m benchmarks.recompute_gpu run OUTDIR    # on one H200 (~8 min): OUTDIR/recompute_gpu.tgz + .txt

Each run is a profiled ``workbench train`` of the ~1.3B GPT (24 layers, d 2048, 16 heads, seq 1024,
DDP at world size 1, bf16 autocast, fused AdamW) with the engine's own log kept as the run's
``console.log``: its ``step N … step_ms X`` lines time every step (the loss's ``.item()`` syncs the
host each step) and its model size and FLOP convention are the manifest's config, so the engine's
own MFU over the unprofiled steps can be recomputed exactly (``tests/analysis/test_model_gpu.py``).
After the run: ``tar -xzf recompute_gpu.tgz -C traces/``.
Imports neither pandas nor plotly on the GPU machine (``run`` only starts ``workbench train``).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFIG = "case_studies/engine/gpt370m_ddp.toml"
SIZE = ["model.d_model=2048"]  # the 370M preset's 24 layers and 16 heads at d 2048: ~1.3B
RUNS = {  # name: --set overrides
    **{f"recompute_1p3b_b16_{m}": [*SIZE, "data.batch_size=16", f'train.recompute="{m}"']
       for m in ("none", "selective", "full")},
    **{f"recompute_1p3b_b48_{m}": [*SIZE, "data.batch_size=48", f'train.recompute="{m}"']
       for m in ("none", "full")},
    # what the planner, calibrated on recompute_1p3b_b48_full, suggests instead (tests/plan/test_advise.py)
    "recompute_1p3b_b48_mb24x2_none": [*SIZE, "data.batch_size=24", "train.grad_accum=2", 'train.recompute="none"'],
    "recompute_1p3b_b48_mb12x4_none": [*SIZE, "data.batch_size=12", "train.grad_accum=4", 'train.recompute="none"'],
}
STEPS, SCHEDULE = 16, "5,2,2"
RUN_TIMEOUT_S = 150


def run(out: Path, only: list[str] | None = None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    runs = ROOT / "runs" / "recompute"
    log = []
    for name, sets in RUNS.items():
        if only and name not in only:
            continue
        cmd = [sys.executable, "-m", "workbench", "train", "--config", CONFIG, "--profile", "--no-analyze",
               "--schedule", SCHEDULE, "--out", str(runs / name), "--set", f"train.steps={STEPS}"]
        cmd += [a for s in sets for a in ("--set", s)]
        try:
            r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
            text, code = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            text, code = f"{e.stdout or ''}{e.stderr or ''}\ntimed out after {RUN_TIMEOUT_S} s", "timeout"
            text = text if isinstance(text, str) else text.decode(errors="replace")
        if (runs / name).is_dir():
            (runs / name / "console.log").write_text(text)
        lines = [ln for ln in text.splitlines() if "throughput" in ln or "rror" in ln or "model " in ln][-4:]
        log.append(f"=== {name} (exit {code}) {' '.join(sets)}\n" + "\n".join(lines))
        print(log[-1], flush=True)
        # pack after every run: a call that runs out of time keeps the runs before
        (out / "recompute_gpu.txt").write_text("\n".join(log) + "\n")
        with tarfile.open(out / "recompute_gpu.tgz", "w:gz") as tar:
            for done in RUNS:
                if (runs / done).is_dir():
                    tar.add(runs / done, arcname=done)
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        sys.exit(run(Path(sys.argv[2]), sys.argv[3:] or None))
    sys.exit(__doc__)
