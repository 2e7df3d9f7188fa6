"""The per-rank files the capture writes beside the traces: the steps, NVML, expert-load and
history CSVs, the memory, trainer and launch records and the fake-tensor step (workbench.format.contract
names each).

Missing files are fine; a CSV cut short by a crash keeps its whole rows; every value is checked against
what the capture writes (:mod:`workbench.load.run_files`): a value or a record that is not is left out
with a one-line warning. Files named like the run's own but not as the contract names them
(``steps_rankX.csv``, ``memory_rank.json``) and files of ranks past the job's world are noted, not read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from workbench.load import run_files
from workbench.load.run_files import shown
from workbench.load.state import STATUS_FILE

CONTRACT_FILES = {"steps": re.compile(r"steps_rank([0-9]{1,7})\.csv"), "nvml": re.compile(r"nvml_rank([0-9]{1,7})\.csv"),
                  "memory": re.compile(r"memory_rank([0-9]{1,7})\.json"),
                  "trainer": re.compile(r"trainer_rank([0-9]{1,7})\.json"),
                  "launch": re.compile(r"launch_rank([0-9]{1,7})\.json"),
                  "fake_step": re.compile(r"fake_step_rank([0-9]{1,7})\.json"),
                  "experts": re.compile(r"experts_rank([0-9]{1,7})\.csv"),
                  "history": re.compile(r"history_rank([0-9]{1,7})\.csv")}
"""The per-rank files :func:`rank_files` reads, by the names the contract gives them (a rank of 1-7 digits)."""
_FAMILIES = re.compile(r"(steps|nvml|memory|trainer|launch|fake_step|experts|history|status|env|hang)_rank.*")
_OTHERS = re.compile(r"(env|hang)_rank[0-9]{1,7}\.json|memory_snapshot_rank[0-9]{1,7}\.pickle")
"""Per-rank files of the contract read elsewhere (status: workbench.load.state; hang: format.hang_record)."""
MAX_RECORD_JSON_BYTES = 16 << 20
"""launch_rank{r}.json holds a row per parameter tensor (bounded by the capture: ~2 MiB at its cap)."""


def _by_kind(path: Path, wanted: set[int] | None, warnings: list[str],
             world: int | None) -> dict[str, list[tuple[int, Path]]]:
    """The contract's per-rank files under ``path``, by kind; strays and ranks past ``world`` noted."""
    out: dict[str, list[tuple[int, Path]]] = {k: [] for k in CONTRACT_FILES}
    stray, beyond = [], []
    for f in sorted(path.iterdir()):
        kind = next((k for k, rx in CONTRACT_FILES.items() if rx.fullmatch(f.name)), None)
        if kind is None:
            if _FAMILIES.fullmatch(f.name) and not STATUS_FILE.fullmatch(f.name) and not _OTHERS.fullmatch(f.name):
                stray.append(f.name)
            continue
        r = int(CONTRACT_FILES[kind].fullmatch(f.name).group(1))
        if world and r >= world:
            beyond.append(f.name)
        elif (wanted is None or r in wanted) and f.is_file():
            out[kind].append((r, f))
    if stray:
        warnings.append(f"ignored {len(stray)} file{'s' * (len(stray) != 1)} named like the run's own but not as the "
                        f"run directory contract names them: {', '.join(shown(n, 40) for n in stray[:5])}")
    if beyond:
        warnings.append(f"ignored {len(beyond)} file{'s' * (len(beyond) != 1)} of ranks past the job's {world}: "
                        f"{', '.join(shown(n, 40) for n in beyond[:5])}")
    return out


def rank_files(path: Path, wanted: set[int] | None, warnings: list[str],
               world: int | None = None) -> list[tuple[int, str, Any]]:
    """(rank, RankData field, value) of each per-rank file under ``path`` of the ranks ``wanted``
    (None: all) and below ``world`` (None: any), in the order they are read; each checked
    (:mod:`workbench.load.run_files`); what a reader must know goes to ``warnings``."""
    out: list[tuple[int, str, Any]] = []
    if path.is_file():
        return out
    files = _by_kind(path, wanted, warnings, world)
    for kind in ("steps", "nvml"):
        for r, f in files[kind]:
            df, note = run_files.read_csv(f, kind)
            if note:
                warnings.append(note)
            if df is not None:
                out.append((r, kind, df))
    for kind in ("memory", "trainer", "launch", "fake_step"):
        for r, f in files[kind]:
            doc, note = run_files.read_json(f, MAX_RECORD_JSON_BYTES if kind in ("launch", "fake_step")
                                            else run_files.MAX_SMALL_JSON_BYTES)
            if doc is not None and kind == "memory":
                doc, note = run_files.check_memory(doc, f.name)
            out.append((r, kind, doc))
            if note:
                warnings.append(note)
    for kind in ("experts", "history"):
        for r, f in files[kind]:
            df, note = run_files.read_csv(f, kind)
            if note:
                warnings.append(note)
            if df is not None and (kind != "experts" or len(df)) and (kind != "history" or "step_ms" in df):
                out.append((r, kind, df))
    return out


__all__ = ["CONTRACT_FILES", "rank_files"]
