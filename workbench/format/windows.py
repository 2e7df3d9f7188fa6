"""The files of windows opened on a running job (docs/capture.md): the request the ranks read
(``window_request.json``) and each rank's record of a window (``windows/<id>/window_rank{r}.json``).
Ground floor: read by the capture (which writes them) and by analysis."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from workbench.format import contract


def write_request(run_dir: Path, req: dict[str, Any]) -> None:
    tmp = Path(run_dir) / (contract.WINDOW_REQUEST + ".tmp")
    tmp.write_text(json.dumps(req, indent=1))
    os.replace(tmp, Path(run_dir) / contract.WINDOW_REQUEST)  # whole, never half-written


def read_request(run_dir: Path) -> dict[str, Any] | None:
    try:
        req = json.loads((Path(run_dir) / contract.WINDOW_REQUEST).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(req, dict) and isinstance(req.get("id"), str) and isinstance(req.get("first_step"), int) \
        and isinstance(req.get("steps"), int) and req["steps"] >= 1
    return req if ok else None


def records(run_dir: Path, wid: str) -> dict[int, dict[str, Any]]:
    """The ranks' records of window ``wid`` so far (windows/<id>/window_rank{r}.json)."""
    out = {}
    for f in sorted((Path(run_dir) / contract.WINDOWS / wid).glob("window_rank*.json")):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("rank"), int):
            out[rec["rank"]] = rec
    return out
