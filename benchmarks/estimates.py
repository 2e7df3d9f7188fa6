"""Estimates of the whole fix against measured fix pairs.

Each pair is two committed runs of one script, before and after the one change a verdict names,
made in one device call (or one CPU session) side by side. The estimate is what the *before* run's
diagnosis for that fix says: ``estimated_gain.speedup_max``, or for a batch-size fix the
per-sample bound at the pair's batch factor (``estimated_gain.per_sample_speedup``). The measured
speed-up is per sample: the job's step before over the job's step after (``summary.step_ms``: the
mean of the unprofiled steps, the recorded steps where a run has none), times the batch factor.

    python -m benchmarks.estimates             # the table BENCHMARKS.md holds
    python -m benchmarks.estimates --json OUT.json

``tests/benchmarks/test_estimates.py`` holds every pair to ``GOAL`` (within 30 % of the measured speed-up)
unless the pair is listed as a known miss with its cause.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
GOAL = 0.30
"""Within 30 % of the measured speed-up: |estimate − measured| / measured ≤ 0.30."""


@dataclass(frozen=True, kw_only=True)
class Pair:
    before: str
    after: str
    fix: str
    diagnosis: str
    batch_factor: int = 1
    workers: str | None = None
    """For a DataLoader fix: the key of ``estimated_gain.workers_speedup`` the pair ran (``16``
    workers, or ``x8`` the workers the script had)."""
    where: str = "one H200"
    known_miss: str = ""
    """Why the estimate misses the goal, when it does (the test accepts the miss only with a cause)."""


PAIRS = (
    Pair(before="corpus/nanogpt_fp32_gpu", after="corpus/nanogpt_bf16_gpu", fix="fp32 → bf16 autocast (nanoGPT --dtype)",
         diagnosis="fp32_matmul"),
    Pair(before="corpus/imagenet_j1_gpu", after="corpus/imagenet_j8_gpu", fix="DataLoader workers 1 → 8 (imagenet -j)",
         diagnosis="dataloader_stall", workers="x8"),
    Pair(before="corpus/hf_trainer_gpu", after="corpus/hf_trainer_b64_gpu", fix="batch 8 → 64 (HF Trainer)",
         diagnosis="host_bound", batch_factor=8),
    Pair(before="corpus/word_lm_gpu", after="corpus/word_lm_b160_gpu", fix="batch 20 → 160 (word_language_model)",
         diagnosis="host_bound", batch_factor=8,
         known_miss="the bound assumes kernel time grows with the batch; 95 % of this LSTM's kernels are under 10 µs "
                    "and grew 2.3× for 8× the batch"),
    Pair(before="corpus/timm_bench_train_gpu", after="corpus/timm_bench_train_cl_gpu", fix="--channels-last (timm)",
         diagnosis="layout_conversion"),
    Pair(before="case_gpu_0_baseline", after="case_gpu_1_more_workers", fix="DataLoader workers 4 → 16 (engine)",
         diagnosis="dataloader_stall", workers="16"),
    Pair(before="case_gpu_1_more_workers", after="case_gpu_2_preload_shm", fix="preload to shared memory (engine)",
         diagnosis="dataloader_stall"),
    Pair(before="case_gpu_2_preload_shm", after="case_gpu_3_batch32", fix="batch 16 → 32 (engine)", diagnosis="low_mfu",
         batch_factor=2),
    Pair(before="case_cpu_0_baseline", after="case_cpu_1_more_workers", fix="DataLoader workers 0 → 1 (engine, 2 gloo ranks)",
         diagnosis="dataloader_stall", workers="1", where="this CPU machine",
         known_miss="not explained: the main process loaded a batch in 41 ms per step, one worker process in under "
                    "28 ms (its prefetch of 2 batches overlaps them; the model counts one)"),
    Pair(before="case_cpu_1_more_workers", after="case_cpu_2_preload_shm", fix="preload to shared memory (engine, gloo)",
         diagnosis="dataloader_stall", where="this CPU machine"),
    Pair(before="case_cpu_2_preload_shm", after="case_cpu_3_no_redundant_allgather", fix="no redundant all-gather (engine, gloo)",
         diagnosis="redundant_allgather", where="this CPU machine"),
)


def estimate(doc: dict, pair: Pair) -> float | None:
    d = next((d for d in doc["diagnoses"] if d["id"] == pair.diagnosis), None)
    if d is None:
        return None
    g = d["estimated_gain"]
    if pair.batch_factor > 1 and g.get("per_sample_speedup"):
        return float(g["per_sample_speedup"][str(pair.batch_factor)])
    if pair.workers and g.get("workers_speedup", {}).get(pair.workers):
        return float(g["workers_speedup"][pair.workers])
    return float(g["speedup_max"])


def measure(pair: Pair) -> dict:
    from workbench.pipeline.verdict import analyze_run

    a, b = (analyze_run(TRACES / p).to_json() for p in (pair.before, pair.after))
    est = estimate(a, pair)
    measured = a["summary"]["step_ms"] / b["summary"]["step_ms"] * pair.batch_factor
    steps = "job" if a["summary"].get("job") and b["summary"].get("job") else "profiled"
    err = (est - measured) / measured if est else None
    return {"pair": f"{pair.before} → {pair.after}", "fix": pair.fix, "diagnosis": pair.diagnosis, "where": pair.where,
            "batch_factor": pair.batch_factor, "estimate": est, "measured": round(measured, 3), "steps": steps,
            "error": None if err is None else round(err, 3), "within_goal": err is not None and abs(err) <= GOAL,
            "known_miss": pair.known_miss}


def table(rows: list[dict]) -> str:
    out = ["| pair | fix | diagnosis | estimate | measured (per sample) | error | within 30 % |",
           "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        est = f"{r['estimate']:.2f}×" if r["estimate"] else "—"
        err = f"{100 * r['error']:+.0f} %" if r["error"] is not None else "—"
        ok = "yes" if r["within_goal"] else f"no: {r['known_miss']}" if r["known_miss"] else "no"
        steps = "" if r["steps"] == "job" else " (profiled steps)"
        out.append(f"| `{r['pair']}` | {r['fix']} | `{r['diagnosis']}` | {est} | {r['measured']:.2f}×{steps} | {err} | {ok} |")
    hit = sum(r["within_goal"] for r in rows)
    out.append(f"\n{hit} of {len(rows)} pairs within 30 % of the measured speed-up.")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    rows = [measure(pair) for pair in PAIRS]
    print(table(rows))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
