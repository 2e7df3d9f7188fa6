"""``nonfinite_loss``: the loss went NaN or infinite, at a step and rank named.

Signal: a ``loss`` cell of steps_rank{r}.csv written as ``nan``, ``inf`` or ``-inf`` (the steps CSV's
reader keeps them apart from an empty cell: ``loss_nonfinite``, workbench.load.run_files). The finding
names the first step that went non-finite, the rank it went on first (ties: the lowest rank), how many
steps of each rank followed, and the last finite loss before it. Always critical: every step after a
non-finite loss trains nothing (the weights it updates are NaN), so the time is lost until a restart
from a checkpoint before it. A spike before it (``training_instability``) is the usual cause; the
finding is stated apart so that a verdict never speaks of the spike and not of the NaN.
"""

from __future__ import annotations

import math

import numpy as np

from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.registry import rule


@rule("nonfinite_loss", reads=(), group="stability",  # the steps CSVs only
      summary="the loss went NaN or infinite: the first step and rank, the steps lost after it",
      threshold="always critical", source="ours: a non-finite loss trains nothing after it")
def nonfinite_loss(ctx: Context) -> Diagnosis | None:
    per_rank: dict[int, dict] = {}
    for rank, df in sorted((ctx.steps or {}).items()):
        if df is None or df.empty or "loss_nonfinite" not in df or "step" not in df:
            continue
        bad = df["loss_nonfinite"].fillna(False).to_numpy(bool)
        if not bad.any():
            continue
        order = np.argsort(df["step"].to_numpy(), kind="stable")
        steps, losses, bad = df["step"].to_numpy()[order], df["loss"].to_numpy(float, na_value=np.nan)[order], bad[order]
        i = int(np.flatnonzero(bad)[0])
        before = [x for x in losses[:i] if math.isfinite(x)]
        per_rank[int(rank)] = {"rank": int(rank), "first_step": int(steps[i]), "value": str(losses[i]),
                               "steps_nonfinite": int(bad.sum()), "steps_after": int((steps > steps[i]).sum()),
                               "last_finite_loss": round(float(before[-1]), 6) if before else None}
    if not per_rank:
        return None
    first = min(per_rank.values(), key=lambda e: (e["first_step"], e["rank"]))
    ranks = sorted(per_rank)
    others = [r for r in ranks if r != first["rank"]]
    title = (f"the loss is {first['value']} from step {first['first_step']} on "
             f"rank {first['rank']}" + (f" (and rank{'s' * (len(others) != 1)} {', '.join(map(str, others))})" if others else "")
             + f": {first['steps_nonfinite']} step{'s' * (first['steps_nonfinite'] != 1)} trained nothing")
    return Diagnosis(
        id="nonfinite_loss", severity="critical", title=title,
        evidence={"rank": first["rank"], "first_step": first["first_step"], "value": first["value"],
                  "last_finite_loss": first["last_finite_loss"], "per_rank": list(per_rank.values()),
                  "source": "steps_rank{r}.csv loss"},
        recommendation=("restart from a checkpoint before step "
                        f"{first['first_step']}; then find the cause: a learning rate too high or a warm-up too short, "
                        "no gradient clipping (clip_grad_norm_), an fp16 loss without a scaler, a division by zero or a "
                        "log of zero in the loss, a bad batch (torch.autograd.set_detect_anomaly on that step names the op)"),
        estimated_gain={"step_time_saved_pct": 0.0, "speedup_max": None,
                        "protects": f"every step after step {first['first_step']}: they trained nothing",
                        "formula": "no time gain: the gain is steps that train"},
        fix=["train.grad_clip", "train.lr"],
        ranks=ranks,
    )
