"""Which traces of a directory can be one job, and which must be set aside.

A directory can hold traces of several jobs: ``tensorboard_trace_handler`` adds files to one
folder run after run, and people copy traces together. Ranks of different jobs analysed as one
run give nonsense (rank 1 "works 24× the others"). :func:`one_job` keeps the traces that can be
one job and names the others.

Two traces cannot be one job when (all read from what the parsed traces already hold):

* their ``distributedInfo`` ``world_size`` or ``backend`` differ;
* their ``pg_config`` disagree: one ``pg_name`` with different ``pg_size``/``ranks``, or a group
  that one trace lists with the other's rank in it and the other does not list (torch records the
  groups of each process's own pg map, and every member of a group has it);
* they claim the same rank and come from different processes (``host_name``, ``pid``). Traces of
  one rank from one process are ``tensorboard_trace_handler`` cycles: the newest is kept, as
  before, and the others are dropped with the "several traces" warning;
* their recorded spans (first event's start to last event's end, Unix time from
  ``baseTimeNanoseconds``) are more than :data:`CLOCK_TOLERANCE_S` apart. Each step of a
  synchronous job ends in a collective, so its ranks record at the same time.

With a manifest (a run directory), a trace must also have the manifest's ``world_size`` and lie
within its ``start_utc``–``end_utc``.

The choice: traces are taken in rank order (newest first within a rank); each not yet placed
starts a set, which takes every later trace consistent with all its members. The largest set is
kept (a tie goes to the set holding the lowest rank, then to the newest), and then takes every
other trace consistent with all its members.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workbench.load.trace import Trace, iter_text

# NTP keeps hosts' clocks within milliseconds (RFC 5905; chrony on a LAN: tens of µs). 1 s is
# far beyond that, and below the gap between two jobs' traces: a new job spends more than that
# starting (a 2-rank gloo job: ~3.5 s from launch, docs/measured.md) before its first profiled step.
CLOCK_TOLERANCE_S = 1.0
# The manifest stamps start_utc/end_utc to the second.
MANIFEST_STAMP_S = 1.0
MAX_NAMED = 3  # set-aside files named in the one-line warning
_HEAD_PID = re.compile(rb'"pid"\s*:\s*(\d+)')
_HEAD_HOST = re.compile(rb'"host_name"\s*:\s*"([^"]*)"')


@dataclass(slots=True, eq=False)
class Candidate:
    """One parsed trace (or its workbench.analysis.frames.RankSummary) and the rank it will be analysed as."""

    rank: int
    trace: Trace
    start_s: float | None = None
    """Unix time (s) of its first event's start; None without ``baseTimeNanoseconds``."""
    end_s: float | None = None
    _process: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        self.start_s, self.end_s = self.trace.span_s

    @property
    def name(self) -> str:
        return self.trace.path.name

    @property
    def process(self) -> tuple[str, int] | None:
        """(host_name, pid) of the process that wrote the trace, from the first piece of its text
        (Kineto writes the header and the process's metadata events first). Read only when two
        traces claim one rank: it opens the file again, since the parsed tables keep no pid."""
        if self._process is None:
            text = iter_text(self.trace.path)
            try:
                head = next(text, b"")
            finally:
                text.close()
            pid, host = _HEAD_PID.search(head), _HEAD_HOST.search(head)
            self._process = ((host.group(1).decode() if host else ""), int(pid.group(1))) if pid else ("", -1)
        return None if self._process[1] < 0 else self._process


def _groups(t: Trace) -> dict[str, tuple[Any, tuple]]:
    cfg = t.distributed.get("pg_config")
    if not isinstance(cfg, list):
        return {}
    return {str(g["pg_name"]): (g.get("pg_size"), tuple(g.get("ranks") or ())) for g in cfg if isinstance(g, dict) and "pg_name" in g}


def _ago(seconds: float) -> str:
    s = abs(seconds)
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def conflict(a: Candidate, b: Candidate) -> str | None:
    """Why ``a`` cannot be in one job with ``b`` (worded about ``a``), or None."""
    da, db = a.trace.distributed, b.trace.distributed
    for key, word in (("world_size", "world size"), ("backend", "backend")):
        if da.get(key) is not None and db.get(key) is not None and da[key] != db[key]:
            return f"{word} {da[key]}, {b.name} has {db[key]}"
    ga, gb = _groups(a.trace), _groups(b.trace)
    for name, cfg in ga.items():
        if name in gb and gb[name] != cfg:
            return f"process group {name} is {cfg[0]} ranks {list(cfg[1])}, in {b.name} {gb[name][0]} ranks {list(gb[name][1])}"
    for x, y, gx, gy in ((a, b, ga, gb), (b, a, gb, ga)):
        if gy:
            for name, (_, ranks) in gx.items():
                if y.rank in ranks and name not in gy:
                    return f"{x.name} has process group {name} with rank {y.rank}, {y.name} does not"
    if a.rank == b.rank and a.process != b.process:
        return f"rank {a.rank} again, from another process than {b.name}"
    if a.start_s is not None and b.start_s is not None:
        gap = max(a.start_s - b.end_s, b.start_s - a.end_s)
        if gap > CLOCK_TOLERANCE_S:
            return f"recorded {_ago(gap)} {'after' if a.start_s > b.start_s else 'before'} {b.name}"
    return None


def against_manifest(c: Candidate, manifest: dict[str, Any]) -> str | None:
    """Why trace ``c`` is not part of the job the run directory's manifest describes, or None."""
    ws, tws = manifest.get("world_size"), c.trace.world_size
    if ws and tws is not None and int(tws) != int(ws):
        return f"world size {tws}, the manifest says {ws}"
    if c.start_s is None:
        return None
    slack = CLOCK_TOLERANCE_S + MANIFEST_STAMP_S
    for key, late in (("start_utc", False), ("end_utc", True)):
        try:
            t = datetime.fromisoformat(str(manifest[key])).timestamp()
        except (KeyError, ValueError):
            continue
        gap = c.start_s - t if late else t - c.end_s
        if gap > slack:
            return f"recorded {_ago(gap)} {'after the run ended' if late else 'before the run started'} ({key} in manifest.json)"
    return None


def newest_per_process(cands: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """Keep the newest trace of each (rank, process): one process's ``tensorboard_trace_handler``
    cycles. Returns (kept, dropped); file order breaks ties (later wins, as before)."""
    best: dict[int, list[Candidate]] = {}
    for c in cands:
        same = best.setdefault(c.rank, [])
        dup = [k for k, o in enumerate(same) if o.process == c.process] if same else []
        if not dup:
            same.append(c)
            continue
        o = same[dup[0]]
        if (c.end_s or 0.0) >= (o.end_s or 0.0):
            same[dup[0]] = c
    kept = [c for cs in best.values() for c in cs]
    return kept, [c for c in cands if c not in kept]


def one_job(cands: list[Candidate]) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """Split ``cands`` (at most one per rank and process) into the set analysed as one job and
    the traces set aside, each with its reason (see the module docstring for the rule)."""
    order = sorted(cands, key=lambda c: (c.rank, -(c.end_s or 0.0)))
    placed: set[int] = set()
    sets: list[list[Candidate]] = []
    for i, seed in enumerate(order):
        if id(seed) in placed:
            continue
        members = [seed]
        for c in order[i + 1:]:
            if id(c) not in placed and all(conflict(c, m) is None for m in members):
                members.append(c)
        placed.update(id(m) for m in members)
        sets.append(members)
    if not sets:
        return [], []
    best = max(sets, key=lambda s: (len(s), -min(c.rank for c in s), max(c.end_s or 0.0 for c in s)))
    # An earlier set may have taken a trace that also fits the chosen one.
    for c in order:
        if c not in best and all(conflict(c, m) is None for m in best):
            best.append(c)
    aside = []
    for c in cands:
        if c not in best:
            aside.append((c, next(r for m in best if (r := conflict(c, m)) is not None)))
    return best, aside


def aside_warning(aside: list[tuple[Candidate, str]], kept: int, why: str = "cannot be one job with the others") -> str:
    """One line naming the set-aside files and why."""
    named = "; ".join(f"{c.name} ({reason})" for c, reason in aside[:MAX_NAMED])
    more = f"; and {len(aside) - MAX_NAMED} more" if len(aside) > MAX_NAMED else ""
    n = len(aside)
    return f"set aside {n} trace{'s' if n > 1 else ''} that {why}: {named}{more}; analysing the other {kept}"
