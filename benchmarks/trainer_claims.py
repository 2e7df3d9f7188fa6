"""What the trainer findings claim on the committed one-H100 runs (traces/trainers_*_gpu, made by
``bash benchmarks/gpu_trainers.sh OUT``) against what the fix they name measured: each pair's job
steps (the unprofiled steps, GPU clock) from ``workbench analyze``'s breakdown.

    python -m benchmarks.trainer_claims
"""

from __future__ import annotations

from pathlib import Path

from workbench.pipeline.verdict import analyze_run

TRACES = Path(__file__).resolve().parent.parent / "traces"
PAIRS = (("ds_z3", "ds_z2", "sharding_nothing"), ("ds_z3_offload", "ds_z3", "offload_optimizer_step"),
         ("pl_data", "pl_data_workers", "dataloader_stall"))


def main() -> int:
    runs = {}
    for before, after, _ in PAIRS:
        for name in (before, after):
            if name not in runs:
                a = analyze_run(TRACES / f"trainers_{name}_gpu")
                b = a.context.breakdown
                runs[name] = (a.to_json(), float(b["step_ms"].mean()), float((b["host_ms"] + b["idle_ms"]).mean()))
    print("| run | finding | claimed saving (ms) | the fix's run | measured saving (ms) | claimed / measured "
          "| estimate × | measured × |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for before, after, rid in PAIRS:
        doc, step, _ = runs[before]
        d = next(x for x in doc["diagnoses"] if x["id"] == rid)
        claimed = step * d["estimated_gain"]["step_time_saved_pct"] / 100
        measured = step - runs[after][1]
        print(f"| `{before}` ({step:.1f} ms) | `{rid}` {d['severity']} | {claimed:.1f} | `{after}` ({runs[after][1]:.1f} ms) "
              f"| {measured:.1f} | {claimed / measured:.2f} | {d['estimated_gain']['speedup_max']:.2f} "
              f"| {step / runs[after][1]:.2f} |")
    print()
    for name, (doc, step, waits) in runs.items():
        ev = {d["id"]: d["evidence"] for d in doc["diagnoses"]}
        ex = {k: e["explains_idle_ms"] for k, e in ev.items() if "explains_idle_ms" in e}
        rest = {k: e["host_idle_ms_per_step"] for k, e in ev.items() if "host_idle_ms_per_step" in e}
        print(f"{name}: step {step:.1f} ms, host + idle {waits:.1f} ms; explained by {ex or '-'}; "
              f"left to low_gpu_utilization / host_bound {rest or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
