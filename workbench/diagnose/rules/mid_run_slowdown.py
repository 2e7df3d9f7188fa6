"""``mid_run_slowdown``: the job's steps became slower part way through the run, and stayed slower.

Signal: the step history's change points (workbench.analysis.history: ruptures' PELT search on the
log of each rank's step time, changes of at least 10 % between the medians of their two sides).
A slowdown is a change to slower steps; the finding names the largest, with the step it started
at, before and after, the ranks and what came with it on the same steps (the history's cause: the
DataLoader wait, one rank's host CPU time, the GPU's clocks, temperature and throttle reasons, or
one rank alone being slower — a straggler's onset). Where the history does not say, a window opened
after the change (``workbench capture``, ``--window-on-change``) set against the launch window does:
the category whose time per step grew most.

Bands: warning from 10 % (the smallest change reported: two runs of one configuration differ by a few
per cent), critical from :data:`CRITICAL_PCT`. The gain is the time the slowdown added to each step
after it, as a share of the slower step.
"""

from __future__ import annotations

from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.registry import rule

CRITICAL_PCT = 50.0
"""A step half again as long as before: the job's remaining time grows by a third."""

_WHY = {
    "data_wait": "the DataLoader wait rose on {who}",
    "gpu_clocks": "the GPU's clocks fell on {who} (throttling: temperature, power or a hardware slowdown)",
    "host_cpu": "the training thread's CPU time rose on {who} (another process on the host, a slower CPU clock, "
                "more host work per step)",
    "rank": "{who} alone became slower: the others wait for it (a straggler)",
}
_DO = {
    "data_wait": "look at the input path of {who} from that step (storage, network, the DataLoader's workers; "
                 "more workers or prefetch if it is the pipeline itself)",
    "gpu_clocks": "check cooling, power and the GPU's health on {who} (nvidia-smi -q -d PERFORMANCE); move the job "
                  "off that node if it stays hot",
    "host_cpu": "look at what else runs on {who}'s host (top) and its CPU frequency",
    "rank": "look at {who}: its host, its GPU, its share of the data",
}


def _window_after(windows: list | None, step: int) -> dict | None:
    """The first window opened at or after ``step`` that was set against the launch window: its id and the
    category whose time per step grew most."""
    for w in windows or ():
        spans = [v.get("first_step") for v in (w.get("ranks") or {}).values() if v.get("first_step") is not None]
        vs = w.get("vs_launch") or {}
        if w.get("id") == "launch" or not spans or min(spans) < step or not vs:
            continue
        grew = [(v["window"] - v["launch"], k[:-3]) for k, v in vs.items() if k != "step_ms" and k.endswith("_ms")]
        if grew:
            delta, cat = max(grew)
            return {"id": w["id"], "category": cat, "delta_ms": round(delta, 3), "first_step": min(spans)}
    return None


def _who(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


@rule("mid_run_slowdown", reads=(), group="distributed",  # the step history only
      summary="the steps became slower part way through the run (a change point of the step history) and stayed so",
      threshold="— / ≥ 10 % / ≥ 50 % slower",
      source="the history's change points (ruptures PELT, ≥ 10 % between the medians of the two sides)")
def mid_run_slowdown(ctx: Context) -> Diagnosis | None:
    h = ctx.history
    if not h:
        return None
    slower = [c for c in h.get("change_points") or () if c.get("change_pct", 0) > 0]
    if not slower:
        return None
    top = max(slower, key=lambda c: c["change_pct"])
    cause = top.get("cause") or {}
    kind, cause_ranks = cause.get("kind", "unknown"), list(cause.get("ranks") or [])
    pct, step = float(top["change_pct"]), int(top["step"])
    ranks = list(top.get("ranks") or [])
    on = "all ranks" if len(ranks) == len(h.get("ranks") or ()) else _who(ranks)
    title = (f"steps {pct:.0f}% slower from step {step:,} ({top['before_ms']:g} → {top['after_ms']:g} ms) on {on}"
             + (f": {_WHY[kind].format(who=_who(cause_ranks))}" if kind in _WHY else ""))
    shown = _window_after(ctx.opened_windows, step) if kind not in _DO else None
    if kind in _DO:
        rec = _DO[kind].format(who=_who(cause_ranks))
    elif shown is not None:
        title += (f": window {shown['id']} (after it) against the launch window: {shown['category']} "
                  f"{shown['delta_ms']:+.2f} ms per step")
        rec = (f"the slow steps spend more in {shown['category']}: look at that share in window {shown['id']} "
               f"(workbench analyze RUN/windows/{shown['id']}) against the launch window")
    else:
        rec = ("the history does not say why: open a window on the slow steps of the running job (workbench capture "
               "RUN --steps 5) and compare it with the launch window")
    saved = 100.0 * (top["after_ms"] - top["before_ms"]) / top["after_ms"] if top["after_ms"] else 0.0
    evidence = {"step": step, "before_ms": top["before_ms"], "after_ms": top["after_ms"], "change_pct": pct,
                "window": shown,
                "ranks": ranks, "cause": cause, "steps_in_run": h.get("steps"), "method": h.get("method"),
                "slowdowns": [{k: c[k] for k in ("step", "before_ms", "after_ms", "change_pct", "ranks")} for c in slower]}
    return Diagnosis(id="mid_run_slowdown", severity="critical" if pct >= CRITICAL_PCT else "warning", title=title,
                     evidence=evidence, recommendation=rec,
                     estimated_gain={"step_time_saved_pct": round(saved, 2),
                                     "speedup_max": round(top["after_ms"] / top["before_ms"], 3) if top["before_ms"] else None,
                                     "formula": "(after_ms − before_ms) / after_ms: the steps after the change, back at "
                                                "the speed before it"},
                     fix=[], ranks=cause_ranks or ranks)
