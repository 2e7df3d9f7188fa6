"""What a long run holds beside its launch window: the windows opened while it ran, the JSON block
``workbench analyze`` adds for them (its step history is workbench.analysis.history's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from workbench.format import contract
from workbench.load import Run


def _launch_ranks(recorded) -> dict[str, dict[str, int]]:
    if recorded is None or len(recorded) == 0:
        return {}
    return {str(int(r)): {"first_step": int(g["step"].min()), "last_step": int(g["step"].max())}
            for r, g in recorded.groupby("rank")}


def _means(breakdown) -> dict[str, float]:
    from workbench.analysis.steps import CATEGORIES

    if breakdown is None or len(breakdown) == 0:
        return {}
    return {"step_ms": float(breakdown["step_ms"].mean()),
            **{f"{c}_ms": float(breakdown[f"{c}_ms"].mean()) for c in CATEGORIES}}


def windows_json(run: Run, recorded, analyze: Callable[[Path], Any]) -> list[dict[str, Any]] | None:
    """The ``windows`` block: the launch window and every window opened while the job ran
    (``windows/<id>/``), each with its trigger and per rank its first and last step; an opened window is
    analysed (``analyze(path)`` → workbench.pipeline.verdict.Analysis) and set against the launch window
    (the recorded steps' mean time per category, both). None for a run that has neither a step history
    nor an opened window (a run from before windows existed, a bare trace directory)."""
    if not run.windows and not any(d.history is not None for d in run.ranks.values()):
        return None
    launch = _means(recorded)
    out = [{"id": "launch", "trigger": "launch", "path": ".", "ranks": _launch_ranks(recorded),
            "status": "recorded" if launch else "none"}]
    for wid, recs in run.windows.items():
        d = Path(run.path) / contract.WINDOWS / wid
        first = next(iter(recs.values()), {})
        w: dict[str, Any] = {"id": d.name, "trigger": first.get("trigger"), "path": f"{contract.WINDOWS}/{d.name}",
                             "requested_unix_s": first.get("requested_unix_s"), "by": first.get("by"),
                             "ranks": {str(r): {k: rec.get(k) for k in ("first_step", "last_step", "status", "reason")}
                                       for r, rec in sorted(recs.items())}}
        w["status"] = ("recorded" if recs and all(r.get("status") == "recorded" for r in recs.values())
                       else "partial" if any(r.get("status") in ("recorded", "partial") for r in recs.values()) else "none")
        if any(True for _ in d.glob("rank*.pt.trace.json*")):
            try:
                a = analyze(d)
            except Exception as e:  # a window that cannot be analysed is listed with why
                w["error"] = f"{type(e).__name__}: {e}"[:300]
            else:
                mine = _means(a.trace_breakdown)
                w["summary"] = {"trace_step_ms": round(mine.get("step_ms", 0.0), 3) if mine else None,
                                "breakdown_pct": a.breakdown_pct(), "verdict": a.verdict,
                                "diagnoses": [x.id for x in a.diagnoses if x.severity != "info"]}
                if launch and mine:
                    w["vs_launch"] = {k: {"launch": round(launch[k], 3), "window": round(mine[k], 3),
                                          "change_pct": round(100.0 * (mine[k] / launch[k] - 1.0), 1) if launch[k] else None}
                                      for k in launch}
        out.append(w)
    return out
