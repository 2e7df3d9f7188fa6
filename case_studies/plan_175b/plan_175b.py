"""The seed article's closing example, planned: GPT-3 175B on 8-way tensor x 16-way pipeline x
64-way data parallel = 8,192 GPUs (H100 80GB, 8 per node, as its section 4.1 recommends).

    python case_studies/plan_175b/plan_175b.py              # ~3 s: prints RESULTS.md's tables
    python case_studies/plan_175b/plan_175b.py --json results.json

For each global batch (GPT-3's own 1,536 x 2,048 tokens = 3.1M; and 8,192 sequences = 16.8M
tokens, Llama 3's batch) and each network (a DGX H100's 400 Gb/s per GPU; the article's literal
"400 Gb/s InfiniBand", read as one per node = 50 Gb/s per GPU) it evaluates the article's layout
as written (Megatron-LM's 2022 recipe for the unstated knobs: ZeRO-1, micro-batch 1, selective
recomputation, sequence parallelism), the best variant of 8 x 16 x 64 (the planner's choice of the
unstated knobs), and the best layout of the whole search. Default efficiencies (no calibration:
no H100 run of ours exists).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workbench.hardware.systems import make_cluster  # noqa: E402
from workbench.plan.layout import parse_layout  # noqa: E402
from workbench.plan.presets import model_spec  # noqa: E402
from workbench.plan.report import short_key  # noqa: E402
from workbench.plan.search import PlanRequest, evaluate, plan  # noqa: E402

ARTICLE = "tp=8,pp=16,dp=64,zero=1,mb=1,recompute=selective,sp=1"
BATCHES = (1536, 8192)
NETWORKS = ((400.0, "400 Gb/s per GPU (DGX H100)"), (50.0, "400 Gb/s per node (the article's words)"))


def _row(ev) -> dict:
    t, m = ev.time, ev.memory
    return {"layout": ev.layout.key(), "short": short_key(ev.layout.to_json()), "fits": m.fits,
            "memory_gib": round(m.total / 2**30, 1), "step_s": round(t.step_s, 3), "mfu_pct": round(100 * t.mfu, 1),
            "tokens_per_s": round(t.tokens_per_s), "compute_s": round(t.compute_s, 3), "tp_comm_s": round(t.tp_comm_s, 3),
            "bubble_s": round(t.bubble_s, 3), "dp_exposed_s": round(t.dp_exposed_s, 3), "pp_comm_s": round(t.pp_comm_s, 3)}


def results() -> list[dict]:
    out = []
    for inter, net in NETWORKS:
        for batch in BATCHES:
            req = PlanRequest(model=model_spec("gpt3-175b"), cluster=make_cluster("H100", 8192, 8, None, inter),
                              global_batch=batch, layout=parse_layout(ARTICLE))
            p = plan(req)
            variants = [e for e in p.ranked if (e.layout.tp, e.layout.pp, e.layout.dp) == (8, 16, 64)]
            rank = next(i + 1 for i, e in enumerate(p.ranked) if e.layout == p.given.layout) if p.given.time else None
            out.append({"network": net, "inter_node_gbps": inter, "global_batch": batch, "tokens": batch * 2048,
                        "searched": p.searched, "fitting": p.fitting, "article": _row(evaluate(req, p.given.layout)),
                        "article_rank": rank, "article_best_variant": _row(variants[0]) if variants else None,
                        "best": _row(p.ranked[0]),
                        "lost": [{"reason": x.reason, "count": x.count, "example": x.example, "detail": x.detail}
                                 for x in p.losses]})
    return out


def markdown(res: list[dict]) -> str:
    lines = ["| network | global batch | layout | memory (GiB) | step (s) | compute | TP comm | bubble | exposed DP | MFU | tokens/s |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res:
        for label, row in (("article as written", r["article"]), ("article, best knobs", r["article_best_variant"]),
                           ("best found", r["best"])):
            if row is None:
                continue
            tag = f"{label}: `{row['short']}`" + (f" (rank {r['article_rank']} of {r['fitting']})" if label == "article as written" else "")
            lines.append(f"| {r['network']} | {r['global_batch']:,} ({r['tokens'] / 1e6:.1f}M tokens) | {tag} | "
                         f"{row['memory_gib']} | {row['step_s']:.2f} | {row['compute_s']:.2f} | {row['tp_comm_s']:.2f} | "
                         f"{row['bubble_s']:.2f} | {row['dp_exposed_s']:.2f} | {row['mfu_pct']} % | {row['tokens_per_s']:,} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    res = results()
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
