"""Kineto's header fields, checked once here so that analysis can trust their types.

Readers: workbench.load.jobs comparing pg_config across ranks, analysis.comm taking the first
group's size, the device name looked up in workbench.hardware.peaks. A foreign, edited or corrupt
trace may put anything there (fuzzing found a string rank, a null device, a group's ranks given as
a number); the events are still good, so a field that does not fit is dropped, never the trace.
Keys not named below are kept as they are: nothing reads them (a reader that starts to adds its
key here).
"""

from __future__ import annotations

from typing import Any

from workbench.load.columns import as_int, as_name

MAX_RANK = 2**31 - 1  # torch ranks are C ints


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _ranks(v: Any) -> list[int] | None:
    if not isinstance(v, list):
        return None
    out = [as_int(r, hi=MAX_RANK) for r in v]
    return None if None in out else out


# key → check (the value as analysis may read it, or None when it does not fit)
_DIST_KEYS = {
    "backend": _str,
    "rank": lambda v: as_int(v, hi=MAX_RANK),
    "world_size": lambda v: as_int(v, lo=1, hi=MAX_RANK),
    "pg_count": as_int,
    "nccl_version": _str,
}
_PG_KEYS = {
    "pg_name": as_name,  # torch writes a str ("0"); jobs and comm read it as one
    "pg_desc": _str,
    "backend_config": _str,
    "pg_size": lambda v: as_int(v, lo=1, hi=MAX_RANK),
    "ranks": _ranks,
}
# The device properties Kineto writes on CUDA (as in traces/gpu_fixed_data).
_DEVICE_KEYS: dict = {"name": _str} | dict.fromkeys(
    ["id", "totalGlobalMem", "computeMajor", "computeMinor", "maxThreadsPerBlock", "maxThreadsPerMultiprocessor",
     "regsPerBlock", "regsPerMultiprocessor", "warpSize", "sharedMemPerBlock", "sharedMemPerBlockOptin",
     "sharedMemPerMultiprocessor", "numSms"], as_int)


def _checked(d: dict, keys: dict) -> tuple[dict, bool]:
    """(``d`` with the known keys checked and coerced, the ones that do not fit left out; whether
    every known key fitted)."""
    out, ok = {}, True
    for k, v in d.items():
        if k in keys:
            v = keys[k](v)
            if v is None:
                ok = False
                continue
        out[k] = v
    return out, ok


def distributed_info(raw: Any) -> dict[str, Any]:
    """``distributedInfo`` with every key analysis reads of the right type: ``rank`` and
    ``world_size`` ints (int-like strings and integral floats coerced; a negative rank, a world
    size below 1 or anything else left out), ``backend`` a str, and ``pg_config`` a list of groups
    whose ``pg_name`` is a str, ``pg_size`` an int and ``ranks`` a list of ints. A group with a
    known key that does not fit is dropped whole: ``workbench.load.jobs`` compares groups across
    ranks, and half a group would read as a disagreement."""
    if not isinstance(raw, dict):
        return {}
    dist, _ = _checked(raw, _DIST_KEYS)
    if "pg_config" in dist:
        cfg = dist["pg_config"]
        groups = [_checked(g, _PG_KEYS) for g in cfg if isinstance(g, dict)] if isinstance(cfg, list) else []
        dist["pg_config"] = [g for g, ok in groups if ok]
    return dist


def device_properties(raw: Any) -> list[dict[str, Any]]:
    """``deviceProperties`` as a list of dicts: entries that are not objects are dropped, ``name``
    must be a str and every other known (numeric) property a non-negative int, else that key is
    left out (the device and its other properties are kept)."""
    if not isinstance(raw, list):
        return []
    return [_checked(d, _DEVICE_KEYS)[0] for d in raw if isinstance(d, dict)]

