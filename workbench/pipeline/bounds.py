"""The physical bounds of every derived figure, checked where the run's result is assembled.

A trace's shapes, byte counts and durations are taken as written, so an edited, foreign or broken
trace can state what no device does: tensor shapes that make a 24 ms step execute 5e21 FLOPs (an
"MFU" of 2e10 %), a copy class moving more bytes per second than the GPU's HBM, a model of hidden
size 0 at "high" confidence. Every figure here has a bound that no measurement can pass:

- MFU and HFU (``efficiency.*_pct``, ``per_step``, ``metrics``) ≤ 100 % of the device's peak;
- a kernel class's share of its roofline (``classes[].pct_of_peak``: FLOPs against the dense peak
  of their dtype, bytes against HBM bandwidth) ≤ 100 %;
- the FLOPs of a step ≤ the step's time × the device's highest dense peak (achieved TFLOP/s ≤
  that peak): past it the FLOP count or the step time is wrong;
- a model's sizes (layers, hidden, heads, vocabulary, sequence, batch, tokens, parameters, FLOPs
  per token) > 0: a zero-size tensor is no model.

Past a bound the figure is withheld (null) — never printed as a fact —, the confidence of what it
was read from drops (the model's fields one step: high → medium → low), a finding whose evidence
rests on such a figure is withheld with it, and one line in ``run.warnings`` says which evidence
disagreed. ``implausible`` in ``--json`` lists each figure withheld: ``{"figure", "value",
"bound", "why"}``. A run within its bounds comes out as it went in.
"""

from __future__ import annotations

import copy
from typing import Any

MAX_PCT = 100.0
"""No figure held to a peak passes the peak."""
SIZE_FIELDS = ("params_total", "params_non_embedding", "params_active", "layers", "hidden", "heads", "kv_heads",
               "head_dim", "v_head_dim", "ffn", "moe_ffn", "experts", "top_k", "vocab", "seq", "micro_batch",
               "micro_batches", "tokens_per_step", "global_tokens_per_step", "model_flops_per_token")
"""The model's fields that count something: zero (or less) is a zero-size tensor, not a size. Not
here: counts that are 0 in real models (``params_embedding`` of a tied table with rotary positions,
``shared_experts``, ``dense_layers``)."""
PEAK_FIGURES = ("mfu_pct", "mfu_bf16_pct", "hfu_pct", "hfu_bf16_pct")
EVIDENCE_PCT = ("mfu_pct", "mfu_bf16_pct", "hfu_pct", "hfu_bf16_pct", "ceiling_pct", "pct_of_peak", "peak_reserved_pct",
                "share_pct")
"""A finding's evidence keys that are shares of a whole: a peak, the device's memory (what a device holds
cannot pass it: the capacity or the measure is wrong), the step."""
OVER_PEAK = 1.0
"""Percentage points a share may pass 100 by before it is no measurement (rounding of two figures)."""
LOWER = {"high": "medium", "medium": "low", "low": "low"}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _fmt(v: float) -> str:
    return f"{v:,.1f}" if abs(v) < 1e6 else f"{v:.3g}"


def plausible_findings(findings: list) -> tuple[list, list[dict]]:
    """``findings`` (workbench.diagnose Diagnosis) split into those whose evidence holds and the
    ``implausible`` entries of those that rest on a share of a peak above 100 %."""
    kept, out = [], []
    for d in findings:
        bad = {k: v for k, v in (d.evidence or {}).items() if k in EVIDENCE_PCT and (_num(v) or 0) > MAX_PCT + OVER_PEAK}
        if not bad:
            kept.append(d)
            continue
        k, v = next(iter(bad.items()))
        whole = "the device's memory" if k == "peak_reserved_pct" else "the step" if k == "share_pct" else "the device's peak"
        out.append({"figure": f"diagnoses.{d.id}", "value": v, "bound": MAX_PCT,
                    "why": f"its evidence {k} is {_fmt(v)} %, past {whole} (inconsistent evidence: the whole or the "
                           "measure is wrong): the finding is withheld"})
    return kept, out


def apply(doc: dict[str, Any], withheld: list[dict] | None = None) -> dict[str, Any]:
    """The ``--json`` document ``doc`` with every figure past its bound withheld and marked (see the
    module docstring); ``withheld``: the findings :func:`plausible_findings` set aside."""
    found = list(withheld or ())
    eff = doc.get("efficiency")
    lines: list[str] = []
    out = copy.deepcopy(doc)
    shapes_wrong = False
    if eff:
        e = out["efficiency"]
        step_ms = _num((doc.get("summary") or {}).get("step_ms"))
        peaks = [p for p in ((eff.get("peak") or {}).get("tflops") or {}).values() if _num(p)]
        achieved = _num(eff.get("achieved_tflops"))
        if peaks and achieved and achieved > max(peaks):
            shapes_wrong = True
            flops = _num(eff.get("flops_per_step")) or 0.0
            found.append({"figure": "efficiency.achieved_tflops", "value": achieved, "bound": max(peaks),
                          "why": "the ops' shapes give more FLOPs than the device can run in the step"})
            lines.append(f"implausible: the ops' shapes give {flops:.3g} FLOPs per step, {_fmt(achieved)} TFLOP/s over the "
                         f"{_fmt(step_ms or 0)} ms step, past the device's highest peak ({max(peaks):g} TFLOP/s): the "
                         "shapes or the step time are wrong; HFU, achieved TFLOP/s and the classes' % of peak are "
                         "withheld, the model's confidence lowered")
            e["achieved_tflops"] = None
        for k in PEAK_FIGURES:
            v = _num(eff.get(k))
            if v is not None and (v > MAX_PCT or (shapes_wrong and k.startswith("hfu"))):
                e[k] = None
                found.append({"figure": f"efficiency.{k}", "value": v, "bound": MAX_PCT,
                              "why": "past the device's peak" if v > MAX_PCT else "the ops' FLOPs are past the device's peak"})
        over = [k for k in PEAK_FIGURES if (_num(eff.get(k)) or 0) > MAX_PCT]
        if over and not shapes_wrong:
            lines.append(f"implausible: {', '.join(k.replace('_pct', '').upper().replace('_BF16', ' vs bf16') for k in over)} "
                         f"{_fmt(_num(eff[over[0]]))} % is past 100 % of the device's peak: the FLOPs counted (the model's "
                         "or the ops' shapes) or the step time are wrong; withheld, the model's confidence lowered")
            shapes_wrong = True
        if shapes_wrong or over:
            e["mfu_note"] = None  # it sets the withheld figures side by side
        for row in e.get("per_step") or []:
            for k in PEAK_FIGURES + ("tflops_per_s",):
                v = _num(row.get(k))
                if v is not None and ((k != "tflops_per_s" and v > MAX_PCT) or (shapes_wrong and k in ("hfu_pct", "hfu_bf16_pct",
                                                                                                       "tflops_per_s"))):
                    row[k] = None
        classes = []
        for c in e.get("classes") or []:
            v = _num(c.get("pct_of_peak"))
            if v is not None and (v > MAX_PCT or (shapes_wrong and c.get("bound") == "compute")):
                c["pct_of_peak"] = None
                if v > MAX_PCT:
                    classes.append((c, v))
                    found.append({"figure": f"efficiency.classes.{c.get('class')}/{c.get('subclass')}.pct_of_peak",
                                  "value": v, "bound": MAX_PCT, "why": "past the device's peak"})
        for c, v in classes:
            if c.get("bound") == "memory":
                lines.append(f"implausible: {c.get('class')}/{c.get('subclass')} moved {_fmt(_num(c.get('gb_per_s')) or 0)} GB/s, "
                             f"{_fmt(v)} % of the device's HBM bandwidth: the trace's bytes or durations disagree with the "
                             "device; its % of roofline is withheld")
            elif not shapes_wrong:
                lines.append(f"implausible: {c.get('class')}/{c.get('subclass')} ran at {_fmt(v)} % of its dtype's peak: the ops' "
                             "shapes or the kernels' durations are wrong; its % of roofline is withheld")
    metrics = out.get("metrics") or {}
    for k in ("mfu_pct", "hfu_pct"):
        if k in metrics and metrics[k] is not None and eff and out["efficiency"].get(k) is None:
            metrics[k] = None
    for field, bound, why in _over_their_whole(out):
        lines.append(f"implausible: the model's {field} is more than its {bound} ({why}): {field} withheld, the evidence "
                     "is inconsistent")
        found.append({"figure": f"model.fields.{field}", "value": why, "bound": f"≤ {bound}", "why": "more than its whole"})
    zero = _zero_sizes(out)
    if zero:
        lines.append(f"implausible: the model's {', '.join(zero)} {'is' if len(zero) == 1 else 'are'} 0 in the trace's shapes "
                     "(zero-size tensors): withheld, and the model's other fields lowered to at most medium confidence")
        found += [{"figure": f"model.fields.{f}", "value": 0, "bound": "> 0", "why": "a zero-size tensor"} for f in zero]
    if shapes_wrong or zero:
        _lower_confidence(out)
    for d in withheld or ():
        lines.append(f"implausible: {d['figure'].split('.', 1)[1]} withheld: {d['why']}")
    if found:
        out["implausible"] = found
        out["run"]["warnings"] = list(out["run"].get("warnings") or ()) + lines
    return out


def _zero_sizes(doc: dict) -> list[str]:
    """The model's size fields (:data:`SIZE_FIELDS`) that are 0 or less: withheld in place."""
    fields = ((doc.get("model") or {}).get("fields") or {})
    zero = []
    for name in SIZE_FIELDS:
        f = fields.get(name)
        v = _num((f or {}).get("value"))
        if v is not None and v <= 0:
            zero.append(name)
            f["value"], f["confidence"] = None, "low"
    f = fields.get("params_embedding")
    if zero and f and (_num(f.get("value")) or 0) <= 0 and f.get("value") is not None:
        # 0 embedding parameters is a tied table's count, but not beside zero-size tensors
        zero.append("params_embedding")
        f["value"], f["confidence"] = None, "low"
    return zero


PARTS = (("top_k", "experts"), ("kv_heads", "heads"), ("params_active", "params_total"), ("dense_layers", "layers"),
         ("moe_layers", "layers"), ("params_embedding", "params_total"))
"""(part, whole) of the model's fields: a part past its whole (top-64 of 8 experts) is no model."""


def _over_their_whole(doc: dict) -> list[tuple[str, str, str]]:
    """The model's fields past their whole (:data:`PARTS`): withheld in place, (field, whole, "64 of 8")."""
    fields = ((doc.get("model") or {}).get("fields") or {})
    out = []
    for part, whole in PARTS:
        a, b = (_num((fields.get(k) or {}).get("value")) for k in (part, whole))
        if a is not None and b is not None and b > 0 and a > b:
            fields[part]["value"], fields[part]["confidence"] = None, "low"
            out.append((part, whole, f"{a:,.0f} of {b:,.0f}"))
    return out


def _lower_confidence(doc: dict) -> None:
    for f in ((doc.get("model") or {}).get("fields") or {}).values():
        if isinstance(f, dict) and f.get("confidence") in LOWER:
            f["confidence"] = LOWER[f["confidence"]]


__all__ = ["MAX_PCT", "SIZE_FIELDS", "apply", "plausible_findings"]
