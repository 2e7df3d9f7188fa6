"""How a run ended, from all its evidence: the manifest, the ranks' status files and the error texts.

The launcher writes ``status: running`` into the manifest when the job starts and folds the ranks'
``status_rank{r}.json`` into it when the job ends. A launcher that was killed (the scheduler's time
limit, a node lost, ``kill -9``) never folds them: the manifest still says ``running`` while each rank
recorded its out-of-memory error or its collective timeout; a run copied without its manifest has only
the status files. So the status files are always read: a rank that exited non-zero or recorded an error
makes the run failed whatever the manifest says (with a warning that says which evidence disagreed), and
an error text in the manifest makes it failed too. The manifest returned is the one analysis reads: its
``ranks`` hold the status files' fields where the manifest lacked them, and ``status``, ``exit_code``
and ``error`` say how the run ended. A run that failed is never analysed as a healthy one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from workbench.format import contract
from workbench.format.printable import printable
from workbench.load.run_files import check_status, read_json

STATUS_FILE = re.compile(r"status_rank([0-9]{1,7})\.json")


def _failed(info: dict) -> bool:
    code = info.get("exit_code")
    error = info.get("error")
    return (isinstance(code, int) and not isinstance(code, bool) and code != 0) or (isinstance(error, str) and bool(error.strip()))


ENDED_BY_SIGNAL = {contract.STATUS_HUNG, contract.STATUS_INTERRUPTED}
"""Statuses of a job the launcher ended itself: a hang it detected (it sends SIGTERM, then SIGKILL, exit
124) or a signal the user sent. The ranks' deaths from that ending are not failures of the job."""

_ENDING_CODES = {contract.HANG_EXIT_CODE, 128 + 2, 128 + 9, 128 + 15, -2, -9, -15}
_DIED = re.compile(r"rank [0-9]+ died without reporting")


def _interrupted(info: dict) -> bool:
    """A rank that only recorded being ended by a signal ("interrupted by SIGTERM", or killed before it
    could say anything), as the launcher tells a rank's own failure from one (capture/launcher.py)."""
    error = info.get("error")
    if isinstance(error, str) and error.strip():
        return error.strip().startswith("interrupted by")
    code = info.get("exit_code")
    return bool(info.get("signal")) or code in _ENDING_CODES or code in (None, 0)


def _hang_symptom(status: Any, error: Any) -> bool:
    """In a hung run, a rank's collective timeout or lost peer (a connection the killed rank closed) is
    what the hang and its ending did to it, not a failure of its own (as the launcher decides: hung)."""
    if status != contract.STATUS_HUNG or not isinstance(error, str) or not error.strip():
        return False
    text = error if len(error) <= 2 * _KEEP else error[:_KEEP] + error[-_KEEP:]  # linear time on a MiB of text
    return not _OOM.search(text) and bool(_SYMPTOM.search(text))


# what analysis.failure.classify calls a collective timeout or a lost peer, read here below the analysis
# layer: the loader decides how the run ended before any analysis runs
_KEEP = 32 << 10
_OOM = re.compile(r"out of memory|OutOfMemoryError|can't allocate memory")
_SYMPTOM = re.compile(r"Watchdog caught collective operation timeout|Timed out waiting [0-9]{1,18}ms for \w{1,64} operation"
                      r"|Connection (?:closed|reset) by peer|Broken pipe|ProcessGroupNCCL[^\n]{0,512}?abort"
                      r"|NCCL communicator was aborted|DistNetworkError|DistBackendError")


def _ending_error(error: str) -> bool:
    """The manifest's error is one the launcher's own ending caused: a rank interrupted or killed by it."""
    text = error.strip()
    return bool(re.match(r"(rank [0-9]+: )?interrupted by", text)) or bool(_DIED.match(text))


def gist(text: str, limit: int = 160) -> str:
    """The line of an error text that says what failed, escaped and cut to ``limit`` characters: a
    traceback's last line (the exception), else the first."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()] if isinstance(text, str) else []
    line = (lines[-1] if "Traceback (most recent call last)" in lines[0] else lines[0]) if lines else ""
    line = printable(line.strip(), one_line=True)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def statuses(path: Path, wanted: set[int] | None = None) -> tuple[dict[int, dict], list[str]]:
    """rank → the rank's status file (checked: workbench.load.run_files.check_status), and warnings."""
    out: dict[int, dict] = {}
    notes: list[str] = []
    for f in sorted(path.glob("status_rank*.json")):
        m = STATUS_FILE.fullmatch(f.name)
        if not m:
            continue  # not a name of the contract: load.run's stray-file note names it
        rank = int(m.group(1))
        if wanted is not None and rank not in wanted:
            continue
        doc, note = read_json(f)
        if note:
            notes.append(note)
        if doc is None:
            continue
        doc, note = check_status(doc, f.name)
        if note:
            notes.append(note)
        out[rank] = doc
    return out, notes


def run_state(path: Path, manifest: dict[str, Any], world_size: int | None,
              wanted: set[int] | None = None) -> tuple[dict[str, Any], list[str]]:
    """(the manifest as analysis reads it: how the run ended from all its evidence, warnings)."""
    found, notes = statuses(path, wanted)
    if world_size:
        beyond = sorted(r for r in found if r >= world_size)
        if beyond:
            notes.append(f"status file{'s' * (len(beyond) != 1)} of rank{'s' * (len(beyond) != 1)} "
                         f"{', '.join(map(str, beyond[:5]))} beyond the job's {world_size}: ignored")
            found = {r: d for r, d in found.items() if r < world_size}
    m = dict(manifest)
    ranks = m.get("ranks") if isinstance(m.get("ranks"), dict) else {}
    ranks = {str(k): dict(v) if isinstance(v, dict) else v for k, v in ranks.items()}
    for r, doc in sorted(found.items()):
        key = str(r)
        have = ranks.get(key) if isinstance(ranks.get(key), dict) else {}
        ranks[key] = {**doc, **{k: v for k, v in have.items() if v is not None}, "rank": r}
    if ranks:
        m["ranks"] = ranks
    status = m.get("status")
    failing = sorted((int(k), v) for k, v in ranks.items() if isinstance(v, dict) and k.isdigit() and _failed(v))
    error = m.get("error") if isinstance(m.get("error"), str) and m["error"].strip() else None
    if status in ENDED_BY_SIGNAL:  # the ranks the launcher (or the user's signal) ended did not fail
        failing = [(r, v) for r, v in failing if not _interrupted(v) and not _hang_symptom(status, v.get("error"))]
        if error and (_ending_error(error) or _hang_symptom(status, error)):
            error = None
    if status != contract.STATUS_FAILED and (failing or error):
        said = {None: "no manifest.json", contract.STATUS_RUNNING: "the manifest still says the run is running",
                contract.STATUS_OK: "the manifest says the run ended ok"}.get(
            status if manifest else None, f"the manifest says {printable(str(status), one_line=True)[:40]!r}")
        if failing:
            r, info = failing[0]
            why = gist(info.get("error") or "") or f"exit code {info.get('exit_code')}"
            evidence = f"rank {r}'s status file says it failed ({why})"
            if not error:
                m["error"] = f"rank {r}: {info['error']}" if isinstance(info.get("error"), str) else None
            if m.get("exit_code") in (None, 0) and isinstance(info.get("exit_code"), int):
                m["exit_code"] = info["exit_code"]
        else:
            evidence = f"its error says {gist(error)!r}"
        notes.append(f"{said}, but {evidence}: analysed as a failed run")
        m["status"] = contract.STATUS_FAILED
        if m.get("exit_code") in (None, 0):
            m["exit_code"] = 1
    return m, notes


__all__ = ["ENDED_BY_SIGNAL", "STATUS_FILE", "gist", "run_state", "statuses"]
