"""The per-rank files the capture writes beside the traces: the steps, NVML, expert-load and
history CSVs, the memory, trainer and launch records and the fake-tensor step (workbench.format.contract
names each).

Missing files are fine; a CSV cut short by a crash keeps its whole rows; a record that is not what
the capture writes is left out with a one-line warning.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.format import contract
from workbench.format.errors import TraceError


def rank_files(path: Path, wanted: set[int] | None, warnings: list[str]) -> list[tuple[int, str, Any]]:
    """(rank, RankData field, value) of each per-rank file under ``path`` of the ranks ``wanted``
    (None: all), in the order they are read; what a reader must know goes to ``warnings``."""
    out: list[tuple[int, str, Any]] = []
    if not path.is_file():
        for f in sorted(path.glob("steps_rank*.csv")):
            r = int(re.findall(r"\d+", f.stem)[-1])
            if wanted is None or r in wanted:
                out.append((r, "steps", _read_csv(f)))
        for f in sorted(path.glob("nvml_rank*.csv")):
            r = int(re.findall(r"\d+", f.stem)[-1])
            if wanted is None or r in wanted:
                out.append((r, "nvml", _read_csv(f)))
        for f in sorted(path.glob("memory_rank*.json")):
            r = int(re.findall(r"\d+", f.stem)[-1])
            if wanted is None or r in wanted:
                doc, note = _read_small_json(f)
                out.append((r, "memory", doc))
                if note:
                    warnings.append(note)
        for f in sorted(path.glob("trainer_rank*.json")):
            r = int(re.findall(r"\d+", f.stem)[-1])
            if wanted is None or r in wanted:
                doc, note = _read_small_json(f)
                out.append((r, "trainer", doc))
                if note:
                    warnings.append(note)
        for pattern, field in (("launch_rank*.json", "launch"), ("fake_step_rank*.json", "fake_step")):
            for f in sorted(path.glob(pattern)):
                r = int(re.findall(r"\d+", f.stem)[-1])
                if wanted is None or r in wanted:
                    doc, note = _read_small_json(f, MAX_RECORD_JSON_BYTES)
                    out.append((r, field, doc))
                    if note:
                        warnings.append(note)
        for f in sorted(path.glob("experts_rank*.csv")):
            r = int(re.findall(r"\d+", f.stem)[-1])
            if (wanted is None or r in wanted) and (df := _read_csv(f)) is not None:
                if missing := [c for c in contract.EXPERT_COLUMNS if c not in df.columns]:
                    raise TraceError(f, f"not an expert-load file: no column {', '.join(missing)}")
                out.append((r, "experts", df))
        for f in sorted(path.glob("history_rank*.csv")):
            r = int(re.findall(r"\d+", f.stem)[-1])
            if (wanted is None or r in wanted) and (df := _read_csv(f)) is not None and "step_ms" in df:
                out.append((r, "history", df))
    return out


def _read_csv(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        df = pd.read_csv(path, on_bad_lines="skip")  # a crash can leave a half-written last row
    except pd.errors.EmptyDataError:
        return None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise TraceError(path, f"unreadable CSV ({e})") from None
    return df


MAX_SMALL_JSON_BYTES = 1 << 20
"""memory_rank{r}.json is a few hundred bytes; anything over 1 MiB is not what the capture wrote."""


MAX_RECORD_JSON_BYTES = 16 << 20
"""launch_rank{r}.json holds a row per parameter tensor (bounded by the capture: ~2 MiB at its cap)."""


def _read_small_json(path: Path, limit: int = MAX_SMALL_JSON_BYTES) -> tuple[dict | None, str | None]:
    """A small JSON object the capture wrote beside the traces, or (None, a one-line warning)."""
    import json

    try:
        if path.stat().st_size > limit:
            return None, f"{path.name}: over {limit >> 20} MiB, not what the capture writes; ignored"
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        return None, f"{path.name}: unreadable ({type(e).__name__}); ignored"
    if not isinstance(doc, dict):
        return None, f"{path.name}: not a JSON object; ignored"
    return doc, None
