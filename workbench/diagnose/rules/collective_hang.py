"""``collective_hang``: the job stopped inside a collective: which rank did not enter or did not finish
which collective, at which step; a collective the ranks called with another op or size; a collective a
rank skipped.

Signal: the ranks' hang records (``workbench profile --hang-timeout S``: no step ended for S seconds;
or a collective's own timeout or a peer's death, which fire first when the job's timeout is shorter)
read by workbench.analysis.hang: each rank's last collectives (the capture's record of
``torch.distributed`` calls, else PyTorch's Flight Recorder) and its Python stack. Always critical: the
job did not go on. The evidence names the collective (number, op, sizes, dtype), the step, the ranks
waiting in it and those that never came, and where each of those is (the innermost frame of the
script's own code).
"""

from __future__ import annotations

from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.registry import rule


def _op(c: dict | None) -> str:
    if not c:
        return "a collective"
    sizes = c.get("sizes") or []
    size = "×".join(str(x) for x in sizes[0]) if sizes and isinstance(sizes[0], list) else ""
    return f"{c.get('op')} #{c.get('seq')}" + (f" ({size} {c.get('dtype') or ''})".rstrip() if size else "")


def _ranks(rs: list) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def _at(w: dict | None) -> str:
    if not w:
        return "an unknown place"
    return f"{w['file']}:{w['line']} in {w['function']}" + (f" ({w['code']})" if w.get("code") else "")


@rule("collective_hang", reads=(), group="failure",  # the ranks' hang records only
      summary="the job hung in a collective: the rank that did not enter or finish it, a mismatched or skipped "
              "collective, at which step, and each rank's stack",
      threshold="always critical", source="the ranks' hang records (--hang-timeout), the Flight Recorder")
def collective_hang(ctx: Context) -> Diagnosis | None:
    h = ctx.hang
    if not h:
        return None
    kind, c, step = h.get("kind"), h.get("collective"), h.get("step")
    info = h.get("ranks") or {}
    missing, waiting = list(h.get("missing_ranks") or []), list(h.get("waiting_ranks") or [])
    at_step = f" at step {step}" if step is not None else ""
    if kind == "skipped":
        late = h["skipped_by"]
        title = (f"{_ranks(late)} skipped {_op(h.get('skipped'))} in step {h['skipped_step']}: its collectives are one "
                 f"behind the others' from there, and the job hung at {_op(c)}{at_step}")
        rec = (f"make {_ranks(late)} call the same collectives in the same order as the others in step {h['skipped_step']} "
               "(a collective inside a branch on the rank, on data, or on an early exit)")
        ranks = late
    elif kind == "mismatch":
        by = h.get("mismatch") or {}
        parts = "; ".join(f"rank {r}: {_op(x)}" for r, x in sorted(by.items(), key=lambda kv: int(kv[0])))
        title = f"mismatched collective #{(c or {}).get('seq')}{at_step}: {parts}"
        rec = "make every rank call this collective with the same op, tensor size and dtype (a size computed per rank?)"
        ranks = sorted(int(r) for r in by)
    elif kind == "not_entered":
        where = "; ".join(f"rank {r} is at {_at((info.get(str(r)) or {}).get('where'))}" for r in missing)
        title = (f"{_ranks(missing)} did not enter {_op(c)}{at_step}"
                 + (f"; {_ranks(waiting)} wait{'s' * (len(waiting) == 1)} in it" if waiting else "") + f" ({where})")
        rec = f"look at what {_ranks(missing)} {'does' if len(missing) == 1 else 'do'} instead: its stack in hang_rank*.json"
        ranks = missing
    else:
        title = f"{_ranks(waiting) if waiting else 'the ranks'} entered {_op(c)}{at_step} and did not finish it"
        rec = "every rank entered the collective: look at the transport (network, NCCL's log with NCCL_DEBUG=INFO) and the ranks' hosts"
        ranks = waiting
    evidence = {k: h.get(k) for k in ("kind", "collective", "step", "waiting_ranks", "missing_ranks", "source", "timeout_s",
                                      "skipped_by", "skipped_step", "skipped", "divergence", "mismatch", "records")
                if h.get(k) is not None}
    evidence["ranks"] = info
    return Diagnosis(id="collective_hang", severity="critical", title=title, evidence=evidence, recommendation=rec,
                     estimated_gain={"step_time_saved_pct": 0.0, "speedup_max": None, "protects": "the run itself: it hung",
                                     "formula": "no time gain: the gain is a run that goes on"},
                     fix=[], ranks=ranks)
