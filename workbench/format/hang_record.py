"""What a rank leaves when its job hangs (``workbench profile --hang-timeout``, docs/capture.md): the
capture's own ring of collectives (``collectives_rank{r}.jsonl``), PyTorch's Flight Recorder dump
(gloo's and NCCL's, the same format: ``torch/csrc/distributed/c10d/FlightRecorder.hpp``; NCCL's
watchdog writes it on a timeout with ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` to
``$TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>``) and the rank's ``hang_rank{r}.json``.

The Flight Recorder's dump is a pickle. A run directory can come from anyone, so it is read with an
unpickler that refuses every class (:class:`_Plain`): only dicts, lists, tuples, strings, numbers,
booleans and None come back, never code. Ground floor: imports nothing of workbench but the contract.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

from workbench.format import contract

FR_KEEP = ("record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
           "input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "state", "retired", "time_created_ns",
           "time_discovered_started_ns", "time_discovered_completed_ns", "timeout_ms", "is_p2p")
"""The fields of a Flight Recorder entry kept (its frames are left out: the rank's stacks are taken apart)."""
MAX_DUMP_BYTES = 64 << 20


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # noqa: ARG002 - every class is refused
        raise pickle.UnpicklingError(f"refused: {module}.{name} (a Flight Recorder dump holds plain data only)")


def load_plain_pickle(data: bytes) -> Any:
    """A pickle of plain data (dicts, lists, strings, numbers); anything that names a class is refused."""
    return _Plain(io.BytesIO(data)).load()


def fr_entries(dump: Any, last: int = 64) -> dict[str, Any]:
    """A Flight Recorder dump (its dict: ``version``, ``pg_config``, ``pg_status``, ``entries``) reduced to
    what the analysis reads: the last ``last`` entries (:data:`FR_KEEP`), the process groups, their status."""
    if not isinstance(dump, dict):
        return {"entries": []}
    entries = [e for e in (dump.get("entries") or []) if isinstance(e, dict)]
    out = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in e.items() if k in FR_KEEP} for e in entries[-last:]]
    return {"version": dump.get("version"), "pg_config": _plain(dump.get("pg_config")),
            "pg_status": _plain(dump.get("pg_status")), "entries": out}


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def read_fr_file(path: Path) -> dict[str, Any] | None:
    """A Flight Recorder dump NCCL's watchdog wrote (pickle, or JSON), reduced (:func:`fr_entries`);
    None when it cannot be read as plain data."""
    try:
        data = Path(path).read_bytes()[: MAX_DUMP_BYTES + 1]
    except OSError:
        return None
    if len(data) > MAX_DUMP_BYTES:
        return None
    try:
        dump = json.loads(data) if data[:1] in (b"{", b"[") else load_plain_pickle(data)
    except (pickle.UnpicklingError, ValueError, EOFError, TypeError, IndexError, AttributeError, RecursionError):
        return None
    return fr_entries(dump)


def read_collectives(path: Path) -> list[dict[str, Any]]:
    """The entries of a ``collectives_rank{r}.jsonl`` ring, oldest first (by sequence number); blank or
    torn lines left out."""
    out = []
    try:
        data = Path(path).read_bytes()
    except OSError:
        return out
    for line in data.split(b"\n"):
        line = line.strip()
        if not line:
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and isinstance(e.get("seq"), int):
            out.append(e)
    return sorted(out, key=lambda e: e["seq"])


def read_hang(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def read_all(run_dir: Path) -> dict[str, dict[int, Any]]:
    """What the ranks recorded when the job hung, under ``run_dir``: ``hang`` (rank →
    hang_rank{r}.json, :func:`read_hang`; unreadable ones left out), ``collectives`` (rank → its ring,
    :func:`read_collectives`), ``nccl`` (rank → its Flight Recorder dump, :func:`read_fr_file`)."""
    run_dir = Path(run_dir)
    docs = {int(f.stem[len("hang_rank"):]): read_hang(f) for f in run_dir.glob("hang_rank*.json")
            if f.stem[len("hang_rank"):].isdigit()}
    rings = {int(f.name[len("collectives_rank"):-len(".jsonl")]): read_collectives(f)
             for f in run_dir.glob("collectives_rank*.jsonl") if f.name[len("collectives_rank"):-len(".jsonl")].isdigit()}
    nccl = {int(f.name[len(contract.NCCL_TRACE_PREFIX):]): read_fr_file(f) for f in run_dir.glob(contract.NCCL_TRACE_PREFIX + "*")
            if f.name[len(contract.NCCL_TRACE_PREFIX):].isdigit()}
    return {"hang": {r: d for r, d in docs.items() if d is not None}, "collectives": rings, "nccl": nccl}
