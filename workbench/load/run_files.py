"""The run directory's small files, read and checked: the per-step, device-sample and expert-load CSVs,
the memory records and the ranks' status files (workbench.format.contract names them all).

A run directory can come from anyone, so no value is trusted: every cell of a CSV column the contract
names is read as text and checked against what the capture writes there (a number, a whole number,
one of a few words; finite; within the range a real run can reach: no negative time, no step of more
than :data:`MAX_MS`, no memory beyond :data:`MAX_BYTES`, no percentage past its scale). A value that does
not fit is left out (unknown) with one warning per file that counts what was left out and shows the
first of each column, printed as data: a run's text never reaches a terminal raw. A row whose step is no
step is dropped. A JSON record is checked key by key the same way. Nothing here raises on a file's
content: a file that cannot be read at all is a warning and left out; the traces still analyse.

A loss or gradient norm written as ``nan`` or ``inf`` is not missing: it is what the training computed.
Those cells stay non-finite and the frame gains ``loss_nonfinite`` / ``grad_norm_nonfinite`` (True where
the run wrote a non-finite value), which ``nonfinite_loss`` reads; pandas' own reader makes "nan" and an
empty cell the same NaN.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.format import contract
from workbench.format.printable import printable

MAX_MS = 1e9  # 11.6 days: longer than any step, wait or capture a run records
MAX_UNIX_S = 1e11  # the year 5138: a later wall clock is not a clock
MAX_BYTES = float(1 << 50)  # a pebibyte: more than any device or host holds
MAX_COUNT = float(1 << 53)  # tokens, steps, experts: past this a float no longer counts one by one
MAX_SMALL_JSON_BYTES = 1 << 20
"""A memory record or a status file is a few hundred bytes (an error is cut at 4,000 characters by the
capture); anything over 1 MiB is not what the capture wrote."""
MAX_CSV_BYTES = 256 << 20
"""A steps CSV holds ~200 bytes a step, NVML samples ~150 bytes each: 256 MiB is over a million steps."""


@dataclass(frozen=True, slots=True)
class Column:
    kind: str  # "number", "count" (a whole number), "flag" (0/1), "word" (one of ``words``), "text"
    lo: float = 0.0
    hi: float = math.inf
    words: tuple[str, ...] = ()
    nonfinite_kept: bool = False  # a non-finite value is data (a loss that went NaN), not damage


def _ms() -> Column:
    return Column("number", 0.0, MAX_MS)


def _bytes() -> Column:
    return Column("count", 0.0, MAX_BYTES)


def _pct(hi: float = 100.0) -> Column:
    return Column("number", 0.0, hi)


STEP_RULES = {
    "step": Column("count", 0, MAX_COUNT), "start_unix_s": Column("number", 0, MAX_UNIX_S), "step_ms": _ms(),
    "data_wait_ms": _ms(), "profiled": Column("flag"), "loss": Column("number", -math.inf, math.inf, nonfinite_kept=True),
    "grad_norm": Column("number", 0, math.inf, nonfinite_kept=True), "tokens": Column("count", 0, MAX_COUNT),
    "mem_allocated_bytes": _bytes(), "mem_reserved_bytes": _bytes(), "max_mem_allocated_bytes": _bytes(),
    "rss_bytes": _bytes(), "gpu_step_ms": _ms(), "capture_ms": _ms(),
    "profiler": Column("word", words=contract.PROFILER_PHASES), "max_mem_reserved_bytes": _bytes(),
}
NVML_RULES = {
    "ts_unix_s": Column("number", 0, MAX_UNIX_S), "source": Column("word", words=("nvml", "cpu")),
    "device": Column("count", 0, 1 << 16), "gpu_util_pct": _pct(), "mem_util_pct": _pct(), "mem_used_bytes": _bytes(),
    "mem_total_bytes": _bytes(), "power_w": Column("number", 0, 1e5), "sm_clock_mhz": Column("number", 0, 1e5),
    "pcie_tx_kbps": Column("number", 0, 1e12), "pcie_rx_kbps": Column("number", 0, 1e12), "cpu_util_pct": _pct(),
    "proc_cpu_pct": _pct(100.0 * 65536), "rss_bytes": _bytes(), "gpu_temp_c": Column("number", -273.15, 1000.0),
    "throttle_reasons": Column("count", 0, float(1 << 62)),
}
HISTORY_RULES = {
    "first_step": Column("count", 0, MAX_COUNT), "last_step": Column("count", 0, MAX_COUNT),
    "steps": Column("count", 0, MAX_COUNT), "start_unix_s": Column("number", 0, MAX_UNIX_S),
    "end_unix_s": Column("number", 0, MAX_UNIX_S), "step_ms": _ms(), "step_ms_min": _ms(), "step_ms_max": _ms(),
    "data_wait_ms": _ms(), "cpu_ms": _ms(), "gpu_step_ms": _ms(), "capture_ms": _ms(), "profiled": Column("count", 0, MAX_COUNT),
    "gpu_util_pct": _pct(), "sm_clock_mhz": Column("number", 0, 1e5), "gpu_temp_c": Column("number", -273.15, 1000.0),
    "power_w": Column("number", 0, 1e5), "throttle_reasons": Column("count", 0, float(1 << 62)), "cpu_util_pct": _pct(),
    "change": Column("flag"),
}
EXPERT_RULES = {
    "step": Column("count", 0, MAX_COUNT), "layer": Column("text"), "expert": Column("count", 0, 1 << 20),
    "tokens": Column("count", 0, MAX_COUNT),
}
REQUIRED = {"steps": ("step",), "nvml": ("ts_unix_s",), "experts": contract.EXPERT_COLUMNS, "history": ("first_step",)}
RULES = {"steps": STEP_RULES, "nvml": NVML_RULES, "experts": EXPERT_RULES, "history": HISTORY_RULES}

_NUMBER = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,4})?")
"""A decimal number as a CSV writer prints one: at most 30 digits each side (a 400-digit figure is none)."""
_NONFINITE = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "infinity": math.inf,
              "-infinity": -math.inf, "+infinity": math.inf}


def shown(value: Any, limit: int = 24) -> str:
    """A value from a run as a warning quotes it: escaped, cut to ``limit`` characters."""
    s = printable(str(value))
    return repr(s if len(s) <= limit else s[: limit - 1] + "…") if isinstance(value, str) else s[:limit]


def _check_column(raw: pd.Series, rule: Column) -> tuple[pd.Series, pd.Series | None, dict]:
    """(the column's values, its non-finite marks where kept, {why: (count, first bad raw value)})."""
    text = raw.fillna("").astype(str).str.strip()
    empty = text == ""
    bad: dict[str, tuple[int, str]] = {}

    def note(mask: np.ndarray, why: str) -> None:
        n = int(mask.sum())
        if n:
            bad[why] = (n, str(raw[mask].iloc[0]))

    if rule.kind in ("text", "word"):
        values = text.where(~empty, None)
        if rule.kind == "word":
            off = ~empty & ~text.isin(rule.words)
            note(off.to_numpy(), f"not one of {', '.join(rule.words)}")
            values = values.where(~off, None)
        return values, None, bad
    lowered = text.str.lower()
    nonfinite_word = lowered.isin(_NONFINITE)
    numeric = text.str.fullmatch(_NUMBER).fillna(False) & ~empty
    not_number = ~empty & ~numeric & ~nonfinite_word
    note(not_number.to_numpy(), "not a number")
    values = pd.Series(np.nan, index=raw.index, dtype=float)
    values[numeric] = pd.to_numeric(text[numeric], errors="coerce")
    values[nonfinite_word] = lowered[nonfinite_word].map(_NONFINITE).astype(float)
    finite = np.isfinite(values.to_numpy(float, na_value=np.nan))
    nonfinite = (numeric | nonfinite_word).to_numpy() & ~finite
    marks = None
    if rule.nonfinite_kept:
        marks = pd.Series(nonfinite, index=raw.index)
    else:
        note(nonfinite, "not finite")
        values[nonfinite] = np.nan
    v = values.to_numpy(float, na_value=np.nan)
    in_range = finite & ((v < rule.lo) | (v > rule.hi))
    note(in_range & (v < rule.lo), "negative" if rule.lo == 0 else f"below {rule.lo:g}")
    note(in_range & (v > rule.hi), f"past {rule.hi:.3g}")
    values[in_range] = np.nan
    if rule.kind in ("count", "flag"):
        frac = finite & ~in_range & (np.floor(v) != v)
        note(frac, "not a whole number")
        values[frac] = np.nan
        if rule.kind == "flag":
            off = finite & ~in_range & ~np.isin(v, (0.0, 1.0))
            note(off, "not 0 or 1")
            values[off] = np.nan
    return values, marks, bad


def read_csv(path: Path, kind: str) -> tuple[pd.DataFrame | None, str | None]:
    """A contract CSV (``kind``: steps, nvml, experts or history), checked: (the frame or None, a warning or None).
    Columns the contract does not name are kept as text; a missing required column leaves the file out."""
    name = printable(path.name)
    try:
        if path.stat().st_size > MAX_CSV_BYTES:
            return None, f"{name}: over {MAX_CSV_BYTES >> 20} MiB, not what the capture writes; ignored"
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, on_bad_lines="skip", encoding="utf-8",
                          encoding_errors="replace")  # a crash can leave a half-written last row
    except pd.errors.EmptyDataError:
        return None, None
    except (OSError, pd.errors.ParserError, ValueError) as e:
        return None, f"{name}: unreadable CSV ({printable(type(e).__name__)}); ignored"
    raw.columns = [str(c).strip() for c in raw.columns]
    if missing := [c for c in REQUIRED[kind] if c not in raw.columns]:
        return None, f"{name}: no column {', '.join(map(shown, missing))}: not a {kind} file of the run; ignored"
    out = pd.DataFrame(index=raw.index)
    left_out: list[str] = []
    for col in raw.columns:
        rule = RULES[kind].get(col)
        if rule is None:
            out[col] = raw[col]
            continue
        values, marks, bad = _check_column(raw[col], rule)
        out[col] = values
        if marks is not None:
            out[f"{col}_nonfinite"] = marks
        if bad:
            left_out.append(f"{col} " + ", ".join(f"{shown(first)} ({why}{f', {n} rows' if n > 1 else ''})"
                                                  for why, (n, first) in bad.items()))
    steps = "step" if "step" in out else "first_step" if "first_step" in out else None
    dropped = 0
    if steps:
        keep = out[steps].notna()
        dropped = int((~keep).sum())
        out = out[keep].copy()
        out[steps] = out[steps].astype("int64")
    for col in ("expert", "tokens") if kind == "experts" else ():
        keep = out[col].notna()
        dropped += int((~keep).sum())
        out = out[keep].copy()
        out[col] = out[col].astype("int64")
    out = out.reset_index(drop=True)
    if not left_out:
        return out, None
    rows = f"; {dropped} row{'s' * (dropped != 1)} without a usable {'step' if kind != 'experts' else 'step, expert or count'} dropped" \
        if dropped else ""
    return out, f"{name}: values that cannot be what the capture wrote left out: {'; '.join(left_out[:8])}" \
                f"{f' (and {len(left_out) - 8} columns more)' if len(left_out) > 8 else ''}{rows}"


# ---- JSON records ------------------------------------------------------------------------------------

def read_json(path: Path, limit: int = MAX_SMALL_JSON_BYTES) -> tuple[dict | None, str | None]:
    """A small JSON object the capture wrote beside the traces (at most ``limit`` bytes), or (None, a one-line warning)."""
    name = printable(path.name)
    try:
        if path.stat().st_size > limit:
            return None, f"{name}: over {limit >> 20} MiB, not what the capture writes; ignored"
        text = path.read_bytes().decode("utf-8")
        if text.count("[") + text.count("{") > 64:
            from workbench.format.manifest import json_depth

            if json_depth(text) > 64:
                return None, f"{name}: JSON nested more than 64 levels deep, not what the capture writes; ignored"
        doc = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        return None, f"{name}: unreadable ({type(e).__name__}); ignored"
    if not isinstance(doc, dict):
        return None, f"{name}: not a JSON object; ignored"
    return doc, None


def _is_number(v: Any, lo: float = 0.0, hi: float = MAX_BYTES, whole: bool = True) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, int) and not lo <= v <= hi:
        return False
    f = float(v)
    return math.isfinite(f) and lo <= f <= hi and (not whole or f == math.floor(f))


def _checked(doc: dict, keys: dict, where: str, notes: list[str]) -> dict:
    """``doc`` with each of ``keys`` (key → check, or a dict of the nested object's keys) that does not
    pass its check left out, a note naming it; keys not named are kept."""
    out = dict(doc)
    for key, check in keys.items():
        if key not in out or out[key] is None:
            continue
        v = out[key]
        if isinstance(check, dict):
            if isinstance(v, dict):
                out[key] = _checked(v, check, f"{where}{key}.", notes)
                continue
            ok = False
        else:
            ok = check(v)
        if not ok:
            notes.append(f"{where}{key} {shown(v if not isinstance(v, (dict, list)) else type(v).__name__)}")
            del out[key]
    return out


def _by_dtype(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _is_number(x) for k, x in v.items())


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _allocator(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _is_number(x) for k, x in v.items())


_MEMORY_KEYS = {
    "rank": lambda v: _is_number(v, 0, 1 << 20), "device": _text,
    "first_step": {"optimizer": _text, "params": lambda v: _is_number(v, 0, MAX_COUNT),
                   "params_numel": lambda v: _is_number(v, 0, MAX_COUNT), "params_bytes": _is_number,
                   "params_by_dtype": _by_dtype, "grads_bytes": _is_number, "grads_by_dtype": _by_dtype,
                   "optimizer_bytes": _is_number, "optimizer_by_dtype": _by_dtype,
                   "step": lambda v: _is_number(v, 0, MAX_COUNT), "allocator": _allocator,
                   "walk_ms": lambda v: _is_number(v, 0, MAX_MS, whole=False)},
    "oom": {"device": lambda v: _is_number(v, 0, 1 << 16), "tried_to_allocate_bytes": _is_number,
            "device_total_bytes": _is_number, "device_free_bytes": _is_number, "allocator": _allocator,
            "step": lambda v: _is_number(v, 0, MAX_COUNT), "error": _text},
}


def check_memory(doc: dict, name: str) -> tuple[dict, str | None]:
    """A memory record (workbench.capture.memory) with each figure that is not a byte count (or the
    count it names) left out, and a warning naming them; then allocated ≤ reserved checked."""
    notes: list[str] = []
    for key in ("first_step", "oom"):
        if key in doc and doc[key] is not None and not isinstance(doc[key], dict):
            notes.append(f"{key} {shown(type(doc[key]).__name__)}")
            doc = {**doc, key: None}
    out = _checked(doc, _MEMORY_KEYS, "", notes)
    for part in ("first_step", "oom"):
        stats = (out.get(part) or {}).get("allocator") if isinstance(out.get(part), dict) else None
        if isinstance(stats, dict):
            for a, r in (("allocated_bytes.all.current", "reserved_bytes.all.current"),
                         ("allocated_bytes.all.peak", "reserved_bytes.all.peak")):
                if a in stats and r in stats and stats[a] > stats[r]:
                    notes.append(f"{part}.allocator {a} {stats[a]:,} above {r} {stats[r]:,} (inconsistent: the "
                                 "allocator hands out what it reserved)")
                    out[part] = {**out[part], "allocator": {k: v for k, v in stats.items() if k not in (a, r)}}
    if not notes:
        return out, None
    return out, f"{printable(name)}: figures that cannot be what the capture wrote left out: {'; '.join(notes[:6])}"


_STATUS_KEYS = {
    "rank": lambda v: _is_number(v, 0, 1 << 20), "world_size": lambda v: _is_number(v, 1, 1 << 20),
    "exit_code": lambda v: _is_number(v, -(2**31), 2**31), "error": _text, "signal": _text, "stopped": _text,
    "steps_from": _text, "steps": lambda v: _is_number(v, 0, MAX_COUNT), "error_type": _text, "phase": _text,
    "where": _text, "profiler_phase": _text, "end_unix_s": lambda v: _is_number(v, 0, MAX_UNIX_S, whole=False),
    "trace_written": lambda v: isinstance(v, bool), "trace_complete": lambda v: isinstance(v, bool),
    "write_error": _text, "host": _text, "device_name": _text, "device_memory_bytes": _is_number,
}


def check_status(doc: dict, name: str) -> tuple[dict, str | None]:
    """A rank's status file (workbench.capture.rank) with each field that is not what the capture writes
    left out, and a warning naming them."""
    notes: list[str] = []
    out = _checked(doc, _STATUS_KEYS, "", notes)
    if not notes:
        return out, None
    return out, f"{printable(name)}: fields that cannot be what the capture wrote left out: {'; '.join(notes[:6])}"


__all__ = ["Column", "EXPERT_RULES", "HISTORY_RULES", "MAX_BYTES", "MAX_COUNT", "MAX_MS", "NVML_RULES", "STEP_RULES", "check_memory",
           "check_status", "read_csv", "read_json", "shown"]
