"""The planner against published large runs : prints the table BENCHMARKS.md holds.

    python -m benchmarks.plan_published            # a few s, no GPU, no network

The dense runs first (their median error), then the mixture-of-experts runs of the papers (theirs),
then the published MoE training runs of workbench/plan/published_moe.py (NeMo AutoModel,
Megatron-Bridge, the Megatron-MoE ModelZoo, torchtitan) with their median error over the held-out
rows, the peak memory a source reports against the prediction, and the runs that ran out of memory.
Every row is predicted from the model, cluster and layout its source states, with the planner's
stated default efficiencies (workbench/plan/efficiency.py) — the same for every paper, none fitted.
Knobs a source leaves open are chosen by the planner (shown in the layout column as "planner:").
See workbench/plan/published.py for the sources and how a per-GPU TFLOP/s becomes an iteration time.
"""

from __future__ import annotations

import sys


from workbench.plan.presets import PRESETS  # noqa: E402
from workbench.plan.published import MOE, median_abs_error, predict, predict_all  # noqa: E402
from workbench.plan.published_moe import OUT_OF_MEMORY, ROWS, TITAN_16B_IMBALANCE, TITAN_16B_RUN  # noqa: E402


def _layout(p) -> str:
    lay = p.evaluated.layout
    s = f"tp {lay.tp} · pp {lay.pp} · dp {lay.dp}"
    if lay.ep > 1:
        s += f" · ep {lay.ep}"
    parts = [f"mb {lay.mb}", lay.recompute + " recompute" if lay.recompute != "none" else "no recompute"]
    if lay.vpp > 1:
        parts.append(f"vpp {lay.vpp}")
    if lay.sp:
        parts.append("SP")
    if lay.zero:
        parts.append(f"ZeRO-{lay.zero}")
    chosen = ", ".join(f"{k} {'on' if v is True else 'off' if v is False else v}" for k, v in p.chosen.items())
    return s + ", " + ", ".join(parts) + (f" (planner: {chosen})" if chosen else "")


def _table(preds) -> None:
    print("| source | model | GPUs | layout | paper | paper s/iter | predicted s/iter | error |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for p in preds:
        r = p.row
        m = PRESETS[r.model]
        paper = {"tflops_per_gpu": f"{r.value:g} TFLOP/s/GPU", "iteration_s": f"{r.value:g} s/iter",
                 "gpu_hours_per_t_tokens": f"{r.value / 1e3:g}K GPU-hours per 10¹² tokens",
                 "tokens_per_gpu_s": f"{r.value:,g} tokens/s/GPU"}[r.metric]
        gpu = r.gpu.replace("A100-SXM4-80GB", "A100 80GB").replace("H100", "H100 80GB")
        if r.links:
            gpu = "H800 (as H100 80GB, NVLink 160 GB/s)"
        size = f"{m.params() / 1e9:.3g}B" + (f", {m.params_active() / 1e9:.3g}B active" if m.moe else "")
        fit = "" if p.fits else " (does not fit per the planner)"
        print(f"| {r.source} | {r.model} ({size}){' ' + r.note if r.note else ''} | {r.gpus:,} x {gpu} "
              f"| {_layout(p)}{fit} | {paper} | {p.paper_s:.2f} | {p.predicted_s:.2f} | {100 * p.error:+.1f} % |")
    print()


def titan_imbalance(ep: int = 8) -> float:
    """The busiest of ``ep`` ranks' load over the mean in torchtitan's own 16B routing (our run)."""
    from pathlib import Path

    from workbench.analysis.experts import ep_rank_imbalance
    from workbench.load.run import load_run

    run = load_run(Path(__file__).resolve().parent.parent / TITAN_16B_RUN)
    return ep_rank_imbalance({r: d.experts for r, d in run.ranks.items()}, ep)


def main() -> int:
    preds = predict_all()
    _table(preds)
    print(f"median |error| {100 * median_abs_error(preds):.1f} % over {len(preds)} runs")
    print()
    moe = predict_all(MOE)
    _table(moe)
    print(f"mixture of experts: median |error| {100 * median_abs_error(moe):.1f} % over {len(moe)} runs")
    print()
    runs = predict_all(ROWS)
    _table(runs)
    held = [p for p in runs if p.row.split == "held_out"]
    worst = max(held, key=lambda p: abs(p.error))
    print(f"published MoE runs: median |error| {100 * median_abs_error(held):.1f} % over {len(held)} held-out runs "
          f"({100 * median_abs_error(runs):.1f} % over all {len(runs)}); worst {100 * worst.error:+.1f} % "
          f"({worst.row.model}, {worst.row.gpus} GPUs)")
    for p in runs:
        if p.row.memory_gib:
            got = p.evaluated.memory.total / 2**30
            print(f"memory {p.row.model} on {p.row.gpus} GPUs: predicted {got:.1f} GiB, reported {p.row.memory_gib:g} GiB "
                  f"({100 * (got / p.row.memory_gib - 1):+.1f} %)")
    print(f"expert-parallel imbalance of torchtitan's 16B routing from scratch, {TITAN_16B_RUN} at ep 8: "
          f"{titan_imbalance():.3f} (its row plans {TITAN_16B_IMBALANCE:g})")
    for r in OUT_OF_MEMORY:
        p = predict(r)
        print(f"out of memory as published: {r.model} on {r.gpus} GPUs, {r.note}: predicted "
              f"{p.evaluated.memory.total / 2**30:.1f} GiB, {'fits' if p.fits else 'does not fit'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
