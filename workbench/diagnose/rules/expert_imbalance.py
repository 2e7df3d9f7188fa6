"""``expert_imbalance``: a mixture-of-experts router sends far more tokens to some experts than to others.

Signal: the expert load the capture recorded (``experts_rank{r}.csv``, analysis.experts): per MoE
layer and profiled step, MaxVio = (max load − mean load) / mean load over the step's global batch
(all ranks added), the measure of Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing Strategy
for Mixture-of-Experts" (arXiv 2408.15664); averaged over the recorded steps. The worst layer sets
the severity. The paper's balanced models keep MaxVio at a few hundredths and its auxiliary-loss
baselines at several tenths; a collapsed router sends every token to the same experts
(MaxVio = E / k − 1 when k experts take them all).

Thresholds (``BANDS``, MaxVio of the worst layer): info ≥ 0.5 (the busiest expert does 1.5× the
mean work: the auxiliary-loss baselines' level), warning ≥ 1.0 (2×), critical ≥ 2.0 (3×); ours.
A balanced random router is uneven by chance too: the layer must also exceed ``NOISE_FACTOR`` ×
sqrt(2·ln E / m), the MaxVio a balanced router reaches with m tokens per expert on average
(analysis.experts.noise_maxvio). Measured on the engine's tiny MoE (8 experts, top-2, 2 gloo
ranks, m = 256, chance 0.13): 0.27–0.32 per step with the router as initialised, 0.10–0.28 with
the auxiliary-loss-free bias balancing it (traces/engine_moe_balanced: 0.11 and 0.18 per layer),
0.5–1.5 and growing when it trains at lr 1e-3 unbalanced (it drifts towards a few experts), 3.0 with
the planted skew (traces/engine_moe_skewed).

What it costs: with expert parallelism the rank holding the busiest experts does up to
max / mean times the balanced expert work while the others wait at the combine all-to-all, and
its all-to-all receives as much more; without it, the experts' total work is the same, but the
idle experts learn from few tokens (the model's capacity goes unused). The trace does not
separate the experts' share of the step, so no step-time gain is claimed: ``expert_work_saved_pct``
is the busiest expert's work beyond the mean, 100 · (1 − mean / max).

Where no rank recorded expert counts nothing fires; an MoE run (grouped expert GEMMs in its
traces, or experts in its inferred model) then carries a run warning that its expert load was not
recorded (workbench.pipeline.verdict).
"""

from __future__ import annotations

from workbench.analysis.experts import layer_load
from workbench.diagnose.base import Context, Diagnosis, severity_for
from workbench.diagnose.registry import rule

BANDS = ((0.5, "info"), (1.0, "warning"), (2.0, "critical"))
NOISE_FACTOR = 2.0


@rule("expert_imbalance", reads=(), group="distributed",  # the experts CSVs only
      summary="MoE layer's MaxVio = (max − mean) / mean tokens per expert (Wang et al. 2024), worst layer",
      threshold=f"{BANDS[0][0]:g} / {BANDS[1][0]:g} / {BANDS[2][0]:g} MaxVio, and > {NOISE_FACTOR:g}× a balanced "
                "router's chance MaxVio",
      source="Wang et al. 2024 (MaxVio); ours")
def expert_imbalance(ctx: Context) -> Diagnosis | None:
    layers = layer_load(ctx.experts)
    if layers.empty:
        return None
    layers = layers.assign(over_noise=layers["maxvio"] > NOISE_FACTOR * layers["noise_maxvio"])
    fired = layers[layers["over_noise"] & (layers["maxvio"] >= BANDS[0][0])]
    if fired.empty:
        return None
    worst = fired.loc[fired["maxvio"].idxmax()]
    severity = severity_for(float(worst["maxvio"]), BANDS)
    ratio = float(worst["max_over_mean"])
    hot = ", ".join(str(e) for e in worst["hottest_experts"])
    per_layer = {r["layer"]: {"maxvio": round(float(r["maxvio"]), 3), "max_over_mean": round(float(r["max_over_mean"]), 3),
                              "maxvio_max": round(float(r["maxvio_max"]), 3), "noise_maxvio": round(float(r["noise_maxvio"]), 3),
                              "mean_tokens_per_expert": round(float(r["mean_tokens"]), 1),
                              "tokens_per_step": round(float(r["tokens_per_step"]), 1),
                              "hottest_experts": list(r["hottest_experts"]),
                              "hottest_share_pct": round(float(r["hottest_share_pct"]), 1)}
                 for r in layers.to_dict("records")}
    return Diagnosis(
        id="expert_imbalance", severity=severity,
        title=(f"MoE layer {worst['layer']}: the busiest expert gets {ratio:.2f}× the mean tokens (MaxVio "
               f"{worst['maxvio']:.2f}; hottest experts {hot}); {len(fired)} of {len(layers)} MoE layers are uneven"),
        evidence={"worst_layer": worst["layer"], "maxvio": round(float(worst["maxvio"]), 3),
                  "max_over_mean": round(ratio, 3), "experts": int(worst["experts"]),
                  "uneven_layers": [str(x) for x in fired["layer"]], "moe_layers": int(len(layers)),
                  "steps": int(worst["steps"]), "ranks": sorted(int(r) for r in ctx.experts),
                  "per_layer": per_layer,
                  "source": "experts_rank{r}.csv (tokens per expert in the profiled steps, ranks added); "
                            "MaxVio = (max − mean) / mean per step, mean over steps"},
        recommendation=("balance the router: a per-expert bias on the routing scores updated from the load "
                        "(auxiliary-loss-free balancing, DeepSeek-V3; torchtitan's load_balance_coeff) or a "
                        "load-balancing auxiliary loss (Switch Transformer; Mixtral's router_aux_loss_coef); "
                        "in the engine, model.moe_balance_coeff (the bias), and the planted skew is "
                        "faults.skewed_routing"),
        estimated_gain={"step_time_saved_pct": 0.0, "speedup_max": None,
                        "expert_work_saved_pct": round(100.0 * (1.0 - 1.0 / ratio), 1) if ratio > 0 else 0.0,
                        "formula": "expert work beyond the mean = 1 − mean / max load of the worst layer; with "
                                   "expert parallelism the other ranks wait for it (the trace does not separate the "
                                   "experts' share of the step: no step-time gain claimed)"},
        fix=["model.moe_balance_coeff", "faults.skewed_routing"],
        ranks=sorted(int(r) for r in ctx.experts),
    )
