"""The workbench's MFU and tokens/s against torchtitan's own log on the committed torchtitan runs
(traces/corpus/torchtitan_*: one H200, torch 2.11, torchtitan v0.2.2), over the same steps: the
job's unprofiled steps (torchtitan's step N is the workbench's step N - 1); its Qwen3 and MoE
families beside the planner's prediction of each run (``plan --from-run``). The engine's 1.3B runs
(traces/recompute_1p3b_*) against the engine's own step times and FLOP convention follow, then a
Llama-shaped trainer (Hugging Face's LlamaForCausalLM and a torchtitan-style model under FSDP2,
tests/analysis/data/llama_gpu_*) against its own timer over the steps the capture did no work in.

    python -m benchmarks.torchtitan_truth     # Markdown tables (BENCHMARKS.md)
"""

from __future__ import annotations

import json
import sys
from statistics import mean

import pandas as pd


def main() -> int:
    from tests.analysis.test_recompute_gpu import H200_BF16, OWN_STEP, RUNS, engine_flops_per_token
    from tests.analysis.test_torchtitan import RUNS as TT, TRACES, own
    from workbench.pipeline.verdict import analyze_run

    def unprofiled(d, job):
        rows = pd.read_csv(d / "steps_rank0.csv")
        return rows[(rows["profiler"] == "off") & rows["step"].between(job["first_step"], job["last_step"])]["step"]

    print("| run | MFU | torchtitan's MFU | HFU | tokens/s | torchtitan's tokens/s |\n|---|---:|---:|---:|---:|---:|")
    for name in TT:
        d = TRACES / "corpus" / f"torchtitan_{name}_gpu"
        doc = analyze_run(d).to_json()
        steps, _ = own(name)
        (job,) = doc["summary"]["job"]
        cov = [steps[s] for s in unprofiled(d, job)]
        e = doc["efficiency"]
        print(f"| `corpus/torchtitan_{name}_gpu` | {e['mfu_pct']:.1f} % | {mean(m for _, m in cov):.1f} % | {e['hfu_pct']:.1f} % "
              f"| {doc['metrics']['tokens_per_s']:,.0f} | {mean(t for t, _ in cov):,.0f} |")
    from tests.analysis.test_torchtitan_families import SHAPES as FAMILIES, own as family_own, path as family_path
    from workbench.calibration.alternatives import _predict, run_case

    print("\n| run | MFU (torchtitan's convention) | torchtitan's MFU | headline MFU (nanoGPT's) | tokens/s | "
          "torchtitan's tokens/s | plan --from-run step | peak (against reserved) |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in FAMILIES:
        d = family_path(name)
        doc = analyze_run(d).to_json()
        steps, _ = family_own(name)
        (job,) = doc["summary"]["job"]
        cov = [steps[s] for s in unprofiled(d, job)]
        e = doc["efficiency"]
        case = run_case(d)
        step_ms, peak, _ = _predict(case, case.layout, case.stack, case.global_batch, case.cluster)
        print(f"| `corpus/torchtitan_{name}_gpu` | {e['mfu_by_convention']['torchtitan']['mfu_pct']:.2f} % | "
              f"{mean(m for _, m in cov):.2f} % | {e['mfu_pct']:.2f} % | {doc['metrics']['tokens_per_s']:,.0f} | "
              f"{mean(t for t, _ in cov):,.0f} | {100 * (step_ms / case.measured_step_ms - 1):+.1f} % | "
              f"{100 * (peak / case.measured_peak_bytes - 1):+.1f} % |")
    print("\n| run | recomputation | MFU | the engine's (its step times) | HFU |\n|---|---|---:|---:|---:|")
    for run, rc in RUNS.items():
        d = TRACES / run
        man = json.loads((d / "manifest.json").read_text())
        cfg, tr = man["config"]["model"], man["config"]["train"]
        doc = analyze_run(d).to_json()
        (job,) = doc["summary"]["job"]
        own_steps = {int(k): float(v) for k, v in OWN_STEP.findall((d / "console.log").read_text())}
        s = mean(own_steps[x] for x in unprofiled(d, job)) / 1e3
        tokens = man["config"]["data"]["batch_size"] * cfg["seq_len"] * tr["grad_accum"]
        print(f"| `{run}` | {rc} | {doc['efficiency']['mfu_pct']:.1f} % | "
              f"{100 * engine_flops_per_token(cfg) * tokens / s / H200_BF16:.1f} % | {doc['efficiency']['hfu_pct']:.1f} % |")
    from tests.analysis.test_llama_gpu import RUNS as LLAMA, analysed, script_truth

    print("\n| run | recomputation | step (ms) | its own | tokens/s | its own | MFU | its own | HFU |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for run, (rc, _, _) in LLAMA.items():
        doc, t = analysed(run), script_truth(run)
        m, e = doc["metrics"], doc["efficiency"]
        print(f"| `{run}` | {rc} | {m['step_ms']:.1f} | {t['step_ms']:.1f} | {m['tokens_per_s']:,.0f} | "
              f"{t['tokens'] / t['step_ms'] * 1e3:,.0f} | {e['mfu_pct']:.1f} % | {t['mfu_pct']:.1f} % | {e['hfu_pct']:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
