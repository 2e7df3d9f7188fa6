"""Figures and tables of the case study from ladder.py's raw numbers (plotly; PNGs via kaleido).

    python case_studies/utilisation_30_to_85/render.py            # writes figures/*.png and tables.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import plotly.graph_objects as go

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from workbench.present.figures import CATEGORY_COLOURS  # noqa: E402

CATEGORIES = ("compute", "communication", "memcpy", "dataloader", "host", "idle")


def load(scale: str) -> dict:
    return json.loads((HERE / f"results_{scale}.json").read_text())


def throughput_speedup(rungs: list[dict]) -> list[float]:
    """Speed-up vs the baseline in tokens/s (rungs may change the batch), else in step time."""
    base = rungs[0]
    if all(r.get("tokens_per_s") for r in rungs):
        return [r["tokens_per_s"] / base["tokens_per_s"] for r in rungs]
    return [base["step_ms"] / r["step_ms"] for r in rungs]


def utilisation_figure(rungs: list[dict], title: str) -> go.Figure:
    names = [r["rung"] for r in rungs]
    fig = go.Figure()
    fig.add_bar(name="NVML mean GPU utilisation (steady steps)", x=names, y=[r["nvml_mean_util_pct"] for r in rungs],
                text=[f"{r['nvml_mean_util_pct']:.0f}%" for r in rungs], marker_color="#2ca02c")
    fig.add_bar(name="trace GPU busy % (profiled steps)", x=names, y=[r["trace_gpu_busy_pct"] for r in rungs],
                text=[f"{r['trace_gpu_busy_pct']:.0f}%" for r in rungs], marker_color="#1f77b4")
    fig.add_hline(y=85, line_dash="dot", annotation_text="seed's result: 85%")
    fig.add_hline(y=30, line_dash="dot", annotation_text="seed's start: 30%")
    fig.update_layout(barmode="group", title=title, yaxis_title="%", yaxis_range=[0, 105], legend_orientation="h",
                      legend_y=-0.2, width=900, height=450)
    return fig


def speedup_figure(rungs: list[dict], title: str) -> go.Figure:
    sp = throughput_speedup(rungs)
    fig = go.Figure(go.Bar(x=[r["rung"] for r in rungs], y=sp, text=[f"{s:.2f}×" for s in sp], marker_color="#ff7f0e"))
    fig.add_hline(y=2.3, line_dash="dot", annotation_text="seed: 2.3×")
    fig.update_layout(title=title, yaxis_title="× baseline throughput", width=900, height=400)
    return fig


def breakdown_figure(rungs: list[dict], title: str) -> go.Figure:
    fig = go.Figure()
    names = [r["rung"] for r in rungs]
    for c in CATEGORIES:
        vals = [r["breakdown_pct"].get(c, 0) for r in rungs]
        if any(v > 0.5 for v in vals):
            fig.add_bar(name=c, x=names, y=vals, marker_color=CATEGORY_COLOURS[c])
    fig.update_layout(barmode="stack", title=title, yaxis_title="% of the profiled step", width=900, height=450,
                      legend_orientation="h", legend_y=-0.2)
    return fig


def table(rungs: list[dict]) -> str:
    sp = throughput_speedup(rungs)
    lines = ["| rung | NVML util | trace busy (GPU kernels; CPU: compute) | step ms | tokens/s | × baseline | diagnoses (≥ warning) | fix applied was the tool's? | measured gain vs estimate |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r, s in zip(rungs, sp):
        diags = ", ".join(f"{d['id']} ({d['severity']})" for d in r["diagnoses"] if d["severity"] != "info") or "none"
        vp = r.get("vs_previous")
        if vp:
            fixed = f"yes: {', '.join(vp['fix_of'])}" if vp["fix_followed"] else "no (nothing recommended at ≥ warning)"
            est = "; ".join(f"{k} ≤ {v:.2f}×" for k, v in vp["estimated_speedup_max"].items())
            gain = f"{vp['speedup_measured']:.2f}× {vp.get('measured_by', 'step time')}" + (f" (estimate {est})" if est else "")
        else:
            fixed, gain = "—", "—"
        util = "n/a (CPU)" if r["nvml_mean_util_pct"] is None else f"{r['nvml_mean_util_pct']:.1f}%"
        busy = r["trace_gpu_busy_pct"] if r["trace_gpu_busy_pct"] is not None else r.get("trace_compute_busy_pct")
        tok = f"{r['tokens_per_s']:,.0f}" if r.get("tokens_per_s") else "—"
        lines.append(f"| {r['rung']} | {util} | {busy:.1f}% | {r['step_ms']:.1f} | {tok} | {s:.2f}× | {diags} | {fixed} | {gain} |")
    return "\n".join(lines)


def main() -> None:
    out = HERE / "figures"
    out.mkdir(exist_ok=True)
    gpu, cpu = load("gpu"), load("cpu")
    figs = {
        "gpu_utilisation.png": utilisation_figure(gpu["rungs"], "GPU utilisation per rung (one H200, 370M GPT, bf16)"),
        "gpu_speedup.png": speedup_figure(gpu["rungs"], "Throughput vs the baseline (tokens/s)"),
        "gpu_breakdown.png": breakdown_figure(gpu["rungs"], "Where the profiled step goes, per rung (H200)"),
        "cpu_breakdown.png": breakdown_figure(cpu["rungs"], "CPU-scale ladder (2 gloo ranks): where the step goes"),
    }
    for name, fig in figs.items():
        fig.write_image(out / name, scale=1)
    hw = gpu["rungs"][0]["hardware"]
    cal = gpu["calibration"] or {}
    (HERE / "RESULTS.md").write_text(f"""# Results (generated by render.py from results_gpu.json and results_cpu.json)

GPU ladder: one {hw['device_name']} ({hw['device_memory_bytes'] / 2**30:.0f} GiB), {hw['cpu_count']} CPU cores,
torch {hw['versions']['torch']}, CUDA {hw['versions']['cuda']}, NCCL {hw['versions']['nccl']}, Python {hw['versions']['python']}.
Command: `PYTHONPATH=. python case_studies/utilisation_30_to_85/ladder.py --scale gpu --out runs/case --sample-cost-ms {cal.get('sample_cost_ms')}`
(calibration on that host: one round of the transform = {cal.get('round_ms')} ms → `data.sample_cost = {cal.get('sample_cost_rounds')}`).
Profiler schedule {gpu['schedule']} (wait, warm-up, active); 30 steps per rung.

CPU ladder: this repository's CPU machine (2 cores), 2 gloo ranks, tiny GPT;
`python case_studies/utilisation_30_to_85/ladder.py --scale cpu --out /tmp/case`. It holds the
communication rung, which one GPU cannot show.

"× baseline" is throughput (tokens/s) over the baseline's; "measured gain" is throughput over the
rung before's (step time where a run has no tokens), next to the tool's upper-bound estimate for
the diagnosis that rung fixed. "step ms" and "tokens/s" cover the steady steps (step ≥ 1, neither
profiled nor the profiler's warm-up; all ranks): the numbers `workbench compare` gives for the same
run (`metrics.steady_step_ms`, `metrics.tokens_per_s`). Re-derived on 2026-12-03 from the committed
runs (`remeasure.py`): warm-up steps left out of the steady steps, the recorded steps' breakdown,
trace busy share and estimates set against the job's step; what moved is in the README.

## GPU ladder

{table(gpu["rungs"])}

## CPU ladder

{table(cpu["rungs"])}

![utilisation](figures/gpu_utilisation.png)
![speed-up](figures/gpu_speedup.png)
![breakdown](figures/gpu_breakdown.png)
![cpu breakdown](figures/cpu_breakdown.png)
""")
    print("\n".join(str(out / n) for n in figs))


if __name__ == "__main__":
    main()
