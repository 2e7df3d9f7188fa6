"""Which collective a hung job waits in, and why: the ranks' hang records (their stacks and last
collectives, workbench.capture.hang), their collective rings and PyTorch's Flight Recorder dumps read
side by side.

Each rank's collectives are numbered in the order it called them (the capture's own record: calls
through ``torch.distributed``'s Python API; else the Flight Recorder's ``collective_seq_id``, which
counts the C++ ones too — one source for every rank, never a mix: the capture's where a rank is stuck in
one of its calls, else the Flight Recorder where every rank kept one). The collective the job hangs in is
the first that some rank entered and did not leave. Then, in this order:

- ``skipped``: the ranks called collective #k in different steps — the rank that called it a step later
  skipped one in the step before (its collectives are out of step with the others' from there; the
  job hangs where the counts finally disagree, often at its end);
- ``mismatch``: the ranks called #k with another op, size or dtype (gloo aborts the rank that receives
  more than it expects: its ring, written as it entered, still says what it called);
- ``not_entered``: some ranks never reached #k: where their main thread is instead (the innermost frame
  of the script's own code in their stack) is the cause;
- ``not_finished``: every rank entered #k and none returned (the transport, a peer's death).

Pure functions over dicts: no torch, no files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from workbench.load import Run

PENDING = ("entered", "scheduled", "started", "raised")
"""States of a collective that did not return (the capture's ring; the Flight Recorder's ``state``)."""
OWN_PATHS = ("/torch/", "/workbench/", "/site-packages/", "<frozen", "/threading.py", "/runpy.py")


def op_name(profiling_name: str | None) -> str:
    """``nccl:all_reduce`` / ``gloo:all_reduce`` → ``all_reduce``."""
    name = str(profiling_name or "")
    return name.split(":", 1)[1] if ":" in name else name


def from_flight_recorder(fr: dict[str, Any] | None, step_of) -> list[dict[str, Any]]:
    """A Flight Recorder dump's collectives as the capture's ring holds them (``step_of(unix_s)`` maps a
    creation time to the rank's step)."""
    out = []
    for e in (fr or {}).get("entries") or []:
        if e.get("is_p2p") or not isinstance(e.get("collective_seq_id"), int):
            continue
        done = e.get("state") == "completed" or (e.get("retired") and e.get("state") != "started")
        t = (e.get("time_created_ns") or 0) / 1e9
        dtypes = e.get("input_dtypes") or []
        out.append({"seq": e["collective_seq_id"], "op": op_name(e.get("profiling_name")),
                    "sizes": e.get("input_sizes") or [], "dtype": str(dtypes[0]).lower() if dtypes else None,
                    "group": (e.get("process_group") or [None, None])[1] if isinstance(e.get("process_group"), list) else None,
                    "step": step_of(t) if t else None, "t": t, "state": "done" if done else e.get("state") or "scheduled"})
    return sorted(out, key=lambda e: e["seq"])


def where(stacks: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The main thread's innermost frame in the script's own code (not torch, not workbench), else its
    innermost frame: ``{file, line, function, code}``."""
    main = next((s for s in stacks or [] if s.get("main")), None)
    frames = (main or {}).get("frames") or []
    own = [f for f in frames if not any(p in str(f.get("file")) for p in OWN_PATHS)]
    f = (own or frames or [None])[-1]
    if f is None:
        return None
    return {"file": str(f.get("file", "")).rsplit("/", 1)[-1], "line": f.get("line"), "function": f.get("function"),
            "code": f.get("code"), "innermost": (frames[-1].get("function") if frames else None)}


def _describe(e: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if e is None else {k: e.get(k) for k in ("seq", "op", "sizes", "dtype", "group", "step", "state")}


def diagnose_hang(ranks: dict[int, dict[str, Any]], world: list[int]) -> dict[str, Any] | None:
    """``ranks``: rank → ``{"collectives": [...] (the capture's ring), "flight_recorder": [...] (already
    as ring entries), "stacks", "kind", "why", "step", "died"}`` (what each rank left); ``world``: every
    rank of the job. The hang named (see the module doc), or None when no rank left a collective."""
    own = {r: d.get("collectives") or [] for r, d in ranks.items()}
    fr = {r: d.get("flight_recorder") or [] for r, d in ranks.items()}

    def pending_in(src) -> bool:
        return any(e.get("state") in PENDING for r in world for e in src.get(r, []))

    # the capture's record where a rank is stuck in one of its collectives (it alone survives a rank that
    # died in one), else the Flight Recorder where every rank has one (it also holds DDP's, from C++)
    if all(own.get(r) for r in world) and pending_in(own):
        use_own = True
    elif all(fr.get(r) for r in world) and pending_in(fr):
        use_own = False
    else:
        use_own = any(own.values())
    seqs = own if use_own else fr
    source = "the capture's record of torch.distributed calls" if use_own else "PyTorch's Flight Recorder"
    if not any(seqs.values()):
        return None
    by_seq = {r: {e["seq"]: e for e in seqs.get(r, [])} for r in world}
    pending = sorted(e["seq"] for r in world for e in seqs.get(r, []) if e.get("state") in PENDING)
    last = {r: max(by_seq[r], default=0) for r in world}
    k = pending[0] if pending else max(last.values())
    at = {r: by_seq[r].get(k) for r in world}
    entered = sorted(r for r, e in at.items() if e is not None)
    missing = sorted(r for r in world if at[r] is None and last[r] < k)
    ref = next((at[r] for r in entered if at[r].get("state") in PENDING), at[entered[0]] if entered else None)
    out: dict[str, Any] = {"source": source, "collective": _describe(ref), "step": (ref or {}).get("step"),
                           "waiting_ranks": sorted(r for r in entered if at[r].get("state") in PENDING),
                           "missing_ranks": missing,
                           "ranks": {str(r): {"last": _describe(by_seq[r].get(last[r])), "where": where(ranks.get(r, {}).get("stacks")),
                                              "step": ranks.get(r, {}).get("step"), "record": ranks.get(r, {}).get("kind"),
                                              "died": bool(ranks.get(r, {}).get("died"))} for r in world}}
    # a skipped collective: the same number called in different steps
    common = sorted(set.intersection(*(set(by_seq[r]) for r in world))) if world else []
    for s in common:
        steps = {r: by_seq[r][s].get("step") for r in world}
        if None not in steps.values() and len(set(steps.values())) > 1:
            low = min(steps.values())
            late = sorted(r for r, st in steps.items() if st > low)
            other = next(r for r in world if steps[r] == low)
            out.update(kind="skipped", skipped_by=late, skipped_step=low,
                       skipped=_describe(by_seq[other][s]), divergence={"seq": s, "steps": {str(r): st for r, st in steps.items()}})
            return out
    if len(entered) > 1:
        keys = {r: (at[r].get("op"), str(at[r].get("sizes")), at[r].get("dtype")) for r in entered}
        if len(set(keys.values())) > 1:
            out.update(kind="mismatch", mismatch={str(r): _describe(at[r]) for r in entered})
            return out
    if missing:
        out["kind"] = "not_entered"
    elif out["waiting_ranks"]:
        out["kind"] = "not_finished"
    else:
        out["kind"] = "unknown"
    return out


def _step_of(history) -> Callable[[float], int | None]:
    """unix seconds → the step that was running then on a rank (its history's rows), else None."""
    if history is None or len(history) == 0:
        return lambda t: None
    import numpy as np

    starts = history["start_unix_s"].to_numpy(dtype=float)
    firsts = history["first_step"].to_numpy(dtype=int)
    lasts = history["last_step"].to_numpy(dtype=int)

    def step_of(t: float) -> int | None:
        i = int(np.searchsorted(starts, t, side="right")) - 1
        if i < 0:
            return None
        return int(lasts[i]) + 1 if i == len(starts) - 1 and t > float(history["end_unix_s"].iloc[-1]) else int(firsts[i])
    return step_of


def hang_json(run: Run) -> dict[str, Any] | None:
    """The ``hang`` block: which collective the job hung in and why (:func:`diagnose_hang`), from the
    ranks' hang records, collective rings and Flight Recorder dumps (``run.hangs``, read with the run);
    None for a run that did not hang."""
    docs, rings, nccl = run.hangs.get("hang", {}), run.hangs.get("collectives", {}), run.hangs.get("nccl", {})
    if not docs and not nccl:
        return None
    m = run.manifest
    world = sorted({*docs, *rings, *nccl, *(int(k) for k in (m.get("ranks") or {}) if str(k).isdigit())})
    reported = {int(k) for k, v in (m.get("ranks") or {}).items() if str(k).isdigit() and isinstance(v, dict) and "exit_code" in v}
    ranks = {}
    for r in world:
        d = docs.get(r) or {}
        hist = run.ranks[r].history if r in run.ranks else None
        fr = d.get("flight_recorder") or nccl.get(r)
        ranks[r] = {"collectives": d.get("collectives") or rings.get(r) or [],
                    "flight_recorder": from_flight_recorder(fr, _step_of(hist)), "stacks": d.get("stacks"),
                    "kind": d.get("kind") or ("nccl_watchdog" if r in nccl else None), "why": d.get("why"),
                    "step": d.get("step"), "died": r not in docs and r not in reported}
    out = diagnose_hang(ranks, world)
    if out is None:
        return None
    out["timeout_s"] = next((d.get("timeout_s") for d in docs.values() if d.get("timeout_s")), None)
    out["records"] = {str(r): {"kind": d.get("kind"), "why": d.get("why"), "idle_s": d.get("idle_s")} for r, d in docs.items()}
    return out
