"""``training_instability``: loss or gradient-norm spikes and non-finite values, per step.

Signal: the ``loss`` and ``grad_norm`` columns of steps_rank{r}.csv (every step, not only the
profiled ones; the engine writes them with ``workbench.capture.record_metrics``). A spike is a
value above ``LOSS_SPIKE_FACTOR`` (loss) / ``GRAD_SPIKE_FACTOR`` (grad norm) × the median of
the previous ``WINDOW`` steps (at least ``MIN_HISTORY`` of them).

A non-finite loss is ``nonfinite_loss``'s finding (not repeated here); a spike before it is this one's.
Thresholds: a non-finite grad norm is critical (the run is lost without a restart);
a loss spike or a grad-norm spike is a warning. Factors are ours: noise on a healthy loss curve
is a few percent, and PaLM (Chowdhery et al. 2022, §5.1) restarts ~100 steps before spikes
"of roughly 2× the loss"; grad-norm clipping is usually set near the typical norm, so 5× is far
outside it. No time gain: the gain is not wasting the steps after the spike.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.registry import rule

LOSS_SPIKE_FACTOR = 2.0
GRAD_SPIKE_FACTOR = 5.0
WINDOW = 5
MIN_HISTORY = 3


def _spikes(values: pd.Series, factor: float) -> np.ndarray:
    v = pd.to_numeric(values, errors="coerce")
    base = v.shift(1).rolling(WINDOW, min_periods=MIN_HISTORY).median()
    return ((v > factor * base) & (base > 0)).to_numpy()


@rule("training_instability", reads=(), group="stability",  # the steps CSVs only
      summary="non-finite grad norm (critical), loss and grad-norm spikes vs the recent median (warning)",
      threshold=f"non-finite grad norm: critical; a spike > {LOSS_SPIKE_FACTOR:g}× (loss) / {GRAD_SPIKE_FACTOR:g}× (grad norm) "
                f"the previous {WINDOW} steps' median: warning",
      source="PaLM §5.1 (~2× loss spikes); ours")
def training_instability(ctx: Context) -> Diagnosis | None:
    found: list[dict] = []
    for rank, df in sorted(ctx.steps.items()):
        if df is None or df.empty:
            continue
        for col, factor in (("loss", LOSS_SPIKE_FACTOR), ("grad_norm", GRAD_SPIKE_FACTOR)):
            marked = f"{col}_nonfinite" in df and df[f"{col}_nonfinite"].fillna(False).astype(bool).any()
            if col not in df or (df[col].isna().all() and not marked):
                continue
            v = pd.to_numeric(df[col], errors="coerce")
            if f"{col}_nonfinite" in df:  # the checked reader kept "nan" apart from an empty cell
                bad = df[f"{col}_nonfinite"].fillna(False).to_numpy(bool)
            else:
                present = df[col].notna().to_numpy()
                bad = present & ~np.isfinite(v.to_numpy(float, na_value=np.nan))
                bad |= present & v.isna().to_numpy()  # "nan"/"inf" strings that did not parse
            for i in np.flatnonzero(bad) if col != "loss" else ():  # a non-finite loss: nonfinite_loss
                found.append({"rank": int(rank), "step": int(df["step"].iloc[i]), "metric": col, "kind": "non_finite",
                              "value": str(df[col].iloc[i])})
            v = v.where(~bad)
            for i in np.flatnonzero(_spikes(v, factor) & ~bad):
                prev = v.iloc[max(0, i - WINDOW):i].median()
                found.append({"rank": int(rank), "step": int(df["step"].iloc[i]), "metric": col, "kind": "spike",
                              "value": round(float(v.iloc[i]), 6), "previous_median": round(float(prev), 6),
                              "factor": round(float(v.iloc[i] / prev), 2)})
    if not found:
        return None
    non_finite = [f for f in found if f["kind"] == "non_finite"]
    first = min(found, key=lambda f: f["step"])
    severity = "critical" if non_finite else "warning"
    title = (f"non-finite {non_finite[0]['metric']} from step {min(f['step'] for f in non_finite)}" if non_finite else
             f"{first['metric']} spiked {first['factor']}× its recent median at step {first['step']}")
    return Diagnosis(
        id="training_instability", severity=severity, title=title,
        evidence={"events": found[:50], "first_step": int(first["step"]), "non_finite_steps": len(non_finite),
                  "spikes": len(found) - len(non_finite), "loss_spike_factor": LOSS_SPIKE_FACTOR,
                  "grad_spike_factor": GRAD_SPIKE_FACTOR, "source": "steps_rank{r}.csv loss / grad_norm"},
        recommendation=("clip gradients (clip_grad_norm_ at about the typical norm), lower the learning rate or "
                        "lengthen warm-up, keep reductions and the loss in fp32 under mixed precision, skip or "
                        "restart from a checkpoint before the spike"),
        estimated_gain={"step_time_saved_pct": 0.0, "speedup_max": None,
                        "formula": "no time gain; avoids losing the steps after the spike"},
        fix=["train.grad_clip", "train.lr"],
        ranks=sorted({f["rank"] for f in found}),
    )
