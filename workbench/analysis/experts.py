"""Expert load of mixture-of-experts layers: tokens per expert, per step and layer, and MaxVio.

Input: each rank's ``experts_rank{r}.csv`` (workbench.format.contract.EXPERT_COLUMNS; the capture
records it during the profiled steps where the job exposes per-expert counts). The ranks' counts
are added per (step, layer, expert): data-parallel ranks route different tokens, so the sum is the
step's global batch, the batch over which Wang et al. 2024 ("Auxiliary-Loss-Free Load Balancing
Strategy for Mixture-of-Experts", arXiv 2408.15664) define

    MaxVio = (max_i load_i − mean_i load_i) / mean_i load_i

(load_i: tokens routed to expert i; 0 = perfectly balanced; the busiest expert does 1 + MaxVio
times the mean work). Ranks that route the same tokens (tensor parallel) scale every count alike,
which leaves MaxVio as it is. Layers are matched across ranks by their module name, so pipeline
stages each contribute their own layers.

A perfectly balanced but random router is not exactly even either: the busiest of E experts with
m tokens each on average gets about m + sqrt(2·m·ln E) (the largest of E Poisson(m) counts, the
Gaussian extreme-value approximation), so ``noise_maxvio`` = sqrt(2·ln E / m) is the MaxVio that
chance alone reaches.

Also the MoE evidence of a trace (:data:`ROUTED_EXPERTS`): its ``aten::_grouped_mm`` calls, so that
an MoE run without recorded counts says so instead of staying silent.
"""

from __future__ import annotations

import math

import pandas as pd

from workbench.analysis.frames import Frame, RankFrames

LOAD_COLUMNS = ("step", "layer", "experts", "tokens", "mean_tokens", "max_tokens", "max_over_mean", "maxvio",
                "hottest_expert", "ranks")
"""expert_load: one row per (step, layer); tokens = token copies routed in the step (all ranks)."""
LAYER_COLUMNS = ("layer", "steps", "experts", "tokens_per_step", "mean_tokens", "max_over_mean", "maxvio",
                 "maxvio_max", "noise_maxvio", "hottest_experts", "hottest_share_pct")
"""layer_load: one row per layer, over the recorded steps (means unless named _max)."""
HOTTEST = 3
"""Experts named per layer (the most loaded over the steps)."""


def combined(per_rank: dict[int, pd.DataFrame | None]) -> pd.DataFrame:
    """The ranks' rows added per (step, layer, expert), with ``ranks`` = how many ranks reported."""
    parts = [df.assign(rank=r) for r, df in sorted(per_rank.items()) if df is not None and len(df)]
    if not parts:
        return pd.DataFrame(columns=["step", "layer", "expert", "tokens", "ranks"])
    df = pd.concat(parts, ignore_index=True)
    df = df.dropna(subset=["step", "layer", "expert", "tokens"])
    df = df.astype({"step": "int64", "layer": "str", "expert": "int64", "tokens": "int64"})
    return (df.groupby(["step", "layer", "expert"], sort=True)
              .agg(tokens=("tokens", "sum"), ranks=("rank", "nunique")).reset_index())


def expert_load(per_rank: dict[int, pd.DataFrame | None]) -> pd.DataFrame:
    """Per (step, layer): LOAD_COLUMNS. Layers in the order the model runs them (first seen)."""
    c = combined(per_rank)
    if c.empty:
        return pd.DataFrame(columns=list(LOAD_COLUMNS))
    g = c.groupby(["step", "layer"], sort=False)
    out = g.agg(experts=("expert", "nunique"), tokens=("tokens", "sum"), max_tokens=("tokens", "max"),
                ranks=("ranks", "max")).reset_index()
    out["hottest_expert"] = c.loc[g["tokens"].idxmax().to_numpy(), "expert"].to_numpy()
    out["mean_tokens"] = out["tokens"] / out["experts"]
    mean = out["mean_tokens"].where(out["mean_tokens"] > 0)
    out["max_over_mean"] = out["max_tokens"] / mean
    out["maxvio"] = out["max_over_mean"] - 1.0
    return out[list(LOAD_COLUMNS)]


def noise_maxvio(experts: int, mean_tokens: float) -> float:
    """The MaxVio a balanced random router reaches by chance: sqrt(2·ln E / m) (module docstring)."""
    if experts < 2 or mean_tokens <= 0:
        return 0.0
    return math.sqrt(2.0 * math.log(experts) / mean_tokens)


def ep_rank_imbalance(per_rank: dict[int, pd.DataFrame | None], ep: int) -> float | None:
    """The busiest expert-parallel rank's token copies over the mean, had the recorded routing run on
    ``ep`` ranks each holding experts / ep consecutive experts (torchtitan's and Megatron-Core's
    placement): per (step, layer) max over mean of the ranks' sums, averaged over them (every layer
    waits for its busiest rank). None without counts or when ep does not divide the experts."""
    c = combined(per_rank)
    if c.empty or ep < 1:
        return None
    ratios = []
    for _, g in c.groupby(["step", "layer"], sort=False):
        experts = int(g["expert"].max()) + 1
        if experts % ep:
            return None
        loads = g.groupby(g["expert"] // (experts // ep))["tokens"].sum().reindex(range(ep), fill_value=0)
        if loads.sum() > 0:
            ratios.append(float(loads.max() / loads.mean()))
    return sum(ratios) / len(ratios) if ratios else None


def layer_load(per_rank: dict[int, pd.DataFrame | None]) -> pd.DataFrame:
    """Per layer over the recorded steps: LAYER_COLUMNS (``hottest_experts``: the HOTTEST most loaded
    expert ids, ``hottest_share_pct``: their share of the layer's token copies)."""
    load, c = expert_load(per_rank), combined(per_rank)
    if load.empty:
        return pd.DataFrame(columns=list(LAYER_COLUMNS))
    rows = []
    for layer, g in load.groupby("layer", sort=False):
        per_expert = c[c["layer"] == layer].groupby("expert")["tokens"].sum().sort_values(ascending=False, kind="stable")
        hot = per_expert.head(HOTTEST)
        experts, mean_tokens = int(g["experts"].max()), float(g["mean_tokens"].mean())
        rows.append({"layer": layer, "steps": len(g), "experts": experts, "tokens_per_step": float(g["tokens"].mean()),
                     "mean_tokens": mean_tokens, "max_over_mean": float(g["max_over_mean"].mean()),
                     "maxvio": float(g["maxvio"].mean()), "maxvio_max": float(g["maxvio"].max()),
                     "noise_maxvio": noise_maxvio(experts, mean_tokens),
                     "hottest_experts": [int(e) for e in hot.index],
                     "hottest_share_pct": 100.0 * float(hot.sum()) / float(per_expert.sum()) if per_expert.sum() else 0.0})
    return pd.DataFrame(rows, columns=list(LAYER_COLUMNS))


def expert_load_json(per_rank: dict[int, pd.DataFrame | None]) -> dict | None:
    """The ``expert_load`` JSON key: per layer the numbers of :func:`layer_load` (rounded) and the
    worst layer's MaxVio; None when no rank recorded expert counts."""
    layers = layer_load(per_rank)
    if layers.empty:
        return None

    def num(v):
        return round(float(v), 4)

    return {
        "source": "experts_rank{r}.csv: tokens per expert counted by the capture in the profiled steps, all ranks added",
        "definition": "MaxVio = (max load − mean load) / mean load per step and layer (Wang et al. 2024), mean over steps",
        "maxvio": num(layers["maxvio"].max()),
        "layers": [{"layer": r["layer"], "steps": int(r["steps"]), "experts": int(r["experts"]),
                    "tokens_per_step": num(r["tokens_per_step"]), "mean_tokens": num(r["mean_tokens"]),
                    "max_over_mean": num(r["max_over_mean"]), "maxvio": num(r["maxvio"]),
                    "maxvio_max": num(r["maxvio_max"]), "noise_maxvio": num(r["noise_maxvio"]),
                    "hottest_experts": list(r["hottest_experts"]), "hottest_share_pct": num(r["hottest_share_pct"])}
                   for r in layers.to_dict("records")],
    }


def _routed_experts(rf: RankFrames) -> dict:
    """MoE evidence in one rank's trace: its ``aten::_grouped_mm`` calls (grouped expert GEMMs)."""
    ev = rf.trace.events
    return {"grouped_mm_calls": int((ev["name"] == "aten::_grouped_mm").sum()) if len(ev) else 0}


ROUTED_EXPERTS = Frame("routed_experts", _routed_experts, returns=dict)

NOT_RECORDED = ("expert load not recorded: the traces show routed experts ({why}) but the run has no "
                "experts_rank*.csv; the trace alone does not hold per-expert token counts (grouped GEMMs' "
                "offsets are not recorded): profile the job with `workbench profile`, which reads a module's "
                "tokens_per_expert buffer or a router's top-k ids")


def not_recorded_note(evidence: dict[int, dict], model_experts: int | None) -> str | None:
    """The warning for an MoE run whose expert load was not recorded (None: not an MoE run, as far
    as the trace and the inferred model show)."""
    calls = sum(int((e or {}).get("grouped_mm_calls") or 0) for e in evidence.values())
    if calls:
        return NOT_RECORDED.format(why=f"{calls} aten::_grouped_mm calls")
    if model_experts:
        return NOT_RECORDED.format(why=f"the model has {model_experts} routed experts per MoE layer")
    return None
