"""Asking a running job for a window (workbench.capture.windows has the ranks' side): the request file,
the step it starts at, and waiting for the ranks' records. Imports no torch: ``workbench capture`` and
``workbench profile``'s SIGUSR1 handler use it from outside the job."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from workbench.format import contract
from workbench.format.windows import read_request, records, write_request

__all__ = ["claim", "last_rows", "lead_steps", "next_id", "read_request", "records", "request", "wait", "write_request"]

LEAD_S = 3.0
"""How far ahead a request's first step is, in time: the ranks look every 0.2 s, the history they are
read from is flushed every second."""
MIN_LEAD_STEPS = 3


RANK_LEAD_S = 0.6
"""The same for a request a rank writes itself (a signal, a file, a change point): the other ranks are
within a step of it and look every 0.2 s."""


def lead_steps(step_ms: float | None, lead_s: float = LEAD_S) -> int:
    """Steps between now and a window's first step: ``lead_s`` of steps, at least :data:`MIN_LEAD_STEPS`."""
    if not step_ms or step_ms <= 0:
        return MIN_LEAD_STEPS
    return max(MIN_LEAD_STEPS, math.ceil(lead_s * 1e3 / step_ms) + 1)


def next_id(run_dir: Path) -> str:
    """``w1``, ``w2``, …: one more than the windows asked so far."""
    last = read_request(run_dir)
    n = int(last["id"][1:]) if last and last["id"][1:].isdigit() else 0
    return f"w{n + 1}"


def claim(run_dir: Path, wid: str) -> bool:
    """Take ``wid`` for this process; False when another took it first."""
    d = Path(run_dir) / contract.WINDOWS
    d.mkdir(exist_ok=True)
    try:
        os.close(os.open(d / f".claim-{wid}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def last_rows(run_dir: Path) -> dict[int, dict[str, str]]:
    """Each rank's last row of its step history (the file's tail only): where the job is now."""
    out = {}
    for f in sorted(Path(run_dir).glob("history_rank*.csv")):
        try:
            with f.open("rb") as fh:
                head = fh.readline().decode().strip().split(",")
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - 8192))
                lines = fh.read().decode(errors="replace").splitlines()
        except OSError:
            continue
        for line in reversed(lines[1:] if len(lines) > 1 else lines):
            cells = line.split(",")
            if len(cells) == len(head) and cells[0].isdigit():
                out[int(f.stem.rsplit("rank", 1)[1])] = dict(zip(head, cells))
                break
    return out


def request(run_dir: Path, steps: int, *, ranks: list[int] | None = None, at: int | None = None,
            trigger: str = "on_demand", by: str = "workbench capture") -> dict[str, Any]:
    """Ask the job running in ``run_dir`` for a window of ``steps`` steps from step ``at`` (default: the
    ranks' furthest step plus :func:`lead_steps`); returns the request written. Raises ValueError with
    one line when the job cannot be asked."""
    run_dir = Path(run_dir)
    rows = last_rows(run_dir)
    if at is None and not rows:
        raise ValueError(f"{run_dir}: no step history yet (history_rank*.csv): the job has not finished a step, "
                         "or it runs without the capture; pass --at STEP to name the first step")
    if ranks is not None and rows and (missing := sorted(set(ranks) - set(rows))):
        raise ValueError(f"--ranks {','.join(map(str, missing))}: no such rank in {run_dir} (ranks {', '.join(map(str, sorted(rows)))})")
    now = max((int(r["last_step"]) for r in rows.values()), default=-1)
    ms = [float(r["step_ms"]) for r in rows.values() if r.get("step_ms")]
    first = at if at is not None else now + 1 + lead_steps(max(ms) if ms else None)
    if at is not None and rows and at <= now + 1:
        raise ValueError(f"--at {at}: the job is already at step {now + 1}; name a later step")
    wid = next_id(run_dir)
    while not claim(run_dir, wid):  # a rank's own trigger took this id a moment ago
        wid = f"w{int(wid[1:]) + 1}"
    req = {"id": wid, "first_step": int(first), "steps": int(steps), "ranks": ranks, "trigger": trigger,
           "requested_unix_s": time.time(), "by": by}
    write_request(run_dir, req)
    return req


def wait(run_dir: Path, req: dict[str, Any], ranks: list[int], timeout_s: float, poll_s: float = 0.2) -> dict[int, dict]:
    """The records of ``req``'s window once every rank of ``ranks`` wrote one, or at ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = records(run_dir, req["id"])
        if set(ranks) <= set(got) or time.monotonic() >= deadline:
            return got
        time.sleep(poll_s)
