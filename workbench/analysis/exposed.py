"""Communication per step, exposed and hidden: one computation that the rule, ``metrics``, the CLI and the
app all read, so that the run states one figure for each.

The exposed part is the step breakdown's ``communication`` category (analysis.steps: the time in which
communication is what the device does, nothing of compute over it), less the point-to-point waits a
pipeline stage spends on its neighbours (``pipeline_bubble``'s). The hidden part is the overlap frame's
communication under compute (analysis.comm.comm_overlap). Communication is their sum, so the exposed part
is never more than the whole: the two frames measured them with different rules (on CPU traces the
overlap frame counts the gloo threads' whole transfers, the breakdown only what the main thread waited),
and 44.5 ms exposed beside 25.5 ms of communication was what reading each from its own frame gave.

Per rank, in the breakdown's steps (set against the job's step: analysis.job) or in the recorded steps
when those are what the breakdown holds; ``scale`` turns a time the trace measured on the device into the
job's (``Context.device_ms``: 1 on GPU traces, the step's stretch on CPU ones).
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

COLUMNS = ["rank", "step_ms", "comm_ms", "overlapped_ms", "exposed_ms", "exposed_pct"]


def rank_comm(rank: int, breakdown: pd.DataFrame, overlap: pd.DataFrame,
              scale: Callable[[float], float] = lambda ms: ms) -> dict | None:
    """One rank's mean step: ``{rank, step_ms, comm_ms, overlapped_ms, exposed_ms, exposed_pct}``, or None
    where it has no communication. ``breakdown``: the rank's rows of the step breakdown; ``overlap``: its
    comm_overlap frame."""
    if overlap is None or overlap.empty or breakdown is None or breakdown.empty or float(overlap["comm_ms"].sum()) == 0:
        return None
    p2p = scale(float(overlap["exposed_p2p_ms"].mean())) if "exposed_p2p_ms" in overlap else 0.0
    exposed = max(0.0, float(breakdown["communication_ms"].mean()) - p2p)
    hidden = max(0.0, scale(float(overlap["overlapped_ms"].mean())))
    step = float(breakdown["step_ms"].mean())
    return {"rank": int(rank), "step_ms": step, "comm_ms": exposed + hidden, "overlapped_ms": hidden,
            "exposed_ms": exposed, "exposed_pct": 100.0 * exposed / step if step > 0 else 0.0}


def per_step(breakdown: pd.DataFrame, overlap: pd.DataFrame) -> pd.DataFrame:
    """The same per recorded step of one or more ranks (both frames with ``rank`` and ``step``): the
    Communication page's bars. Columns: :data:`COLUMNS` with ``step``."""
    if overlap is None or overlap.empty or breakdown is None or breakdown.empty:
        return pd.DataFrame(columns=["rank", "step", *COLUMNS[1:]])
    ov = overlap[["rank", "step", "overlapped_ms", *(["exposed_p2p_ms"] if "exposed_p2p_ms" in overlap else [])]]
    m = breakdown[["rank", "step", "step_ms", "communication_ms"]].merge(ov, on=["rank", "step"], how="inner")
    p2p = m["exposed_p2p_ms"] if "exposed_p2p_ms" in m else 0.0
    m["exposed_ms"] = (m["communication_ms"] - p2p).clip(lower=0)
    m["overlapped_ms"] = m["overlapped_ms"].clip(lower=0)
    m["comm_ms"] = m["exposed_ms"] + m["overlapped_ms"]
    m["exposed_pct"] = (100.0 * m["exposed_ms"] / m["step_ms"]).where(m["step_ms"] > 0, 0.0)
    return m[["rank", "step", *COLUMNS[1:]]]


def least_waiting(per_rank: list[dict]) -> dict | None:
    """The run's figure: the rank whose exposed share is least. In synchronous training a fast rank also
    waits in communication for a slow one; that part is the straggler's, so the exposed communication
    every rank pays is the least of them (``exposed_communication``, ``metrics.exposed_comm_pct``)."""
    ranks = [r for r in per_rank if r is not None and r["step_ms"] > 0]
    return min(ranks, key=lambda r: (r["exposed_pct"], r["rank"])) if ranks else None


__all__ = ["COLUMNS", "least_waiting", "per_step", "rank_comm"]
