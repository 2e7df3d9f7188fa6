"""The one reader of a run's ``manifest.json``: every command, the cache key and the planner call it.

A run directory can come from anyone (a copy, an upload, a hand edit), so nothing in the file is
trusted: it must be a regular file of at most :data:`MAX_MANIFEST_BYTES`, UTF-8, JSON nested at most
:data:`MAX_DEPTH` levels deep (Python's own parser recurses, and a 100k-deep file raised
``RecursionError`` where it was read), and an object. ``schema_version`` must be an integer no newer
than :data:`workbench.format.contract.SCHEMA_VERSION`: without it the fields cannot be read, so a bad one is
an error. Every other key analysis reads is checked for its type (:data:`_KEYS`); one that does not
fit is left out with a warning that names it, as a trace's header fields are
(``workbench.load.trace``): the traces still analyse, and the manifest only adds to them.

Ground floor: imports nothing of workbench but the contract and the errors (the planner reads
manifests too).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from workbench.format import contract
from workbench.format.errors import TraceError

__all__ = ["MAX_COUNT", "MAX_DEPTH", "MAX_MANIFEST_BYTES", "MAX_WORLD", "read", "read_manifest"]

MAX_MANIFEST_BYTES = 16 << 20  # a manifest is a few KB; this bounds what a hostile one costs
MAX_DEPTH = 64  # workbench writes 4 levels (config.model.…); checked before json.loads recurses


MAX_COUNT = 10**9  # a step or rank count beyond this is no real run: bounds what arithmetic on it costs
MAX_WORLD = 1 << 20  # more ranks than any job runs; a larger world_size would size per-rank tables
MAX_BYTES = 1 << 60  # an exbibyte: no device or host holds more


def _int(lo: int = 0, hi: int = MAX_COUNT):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _opt(check):
    return lambda v: v is None or check(v)


# key → (what it must be, in the warning's words; check). Keys not named are kept as they are:
# nothing in analysis reads them (a reader that starts to adds its key here).
_KEYS = {
    "run_id": ("text", _opt(_str)),
    "world_size": (f"a rank count 1..{MAX_WORLD}", _opt(_int(1, MAX_WORLD))),
    "device_name": ("text", _opt(_str)),
    "device_memory_bytes": ("a byte count", _opt(_int(0, MAX_BYTES))),
    "status": ("text", _opt(_str)),
    "exit_code": ("an integer", _opt(_int(-(2**31), 2**31))),
    "error": ("text", _opt(_str)),
    "signal": ("text", _opt(_str)),
    "stopped": ("text", _opt(_str)),
    "steps_from": ("text", _opt(_str)),
    "start_utc": ("text", _opt(_str)),
    "end_utc": ("text", _opt(_str)),
    "command": ("text or a list of text", _opt(lambda v: _str(v) or isinstance(v, list) and all(map(_str, v)))),
    "hosts": ("a list", _opt(lambda v: isinstance(v, list))),
    "ranks_died": ("a list of ranks", _opt(lambda v: isinstance(v, list) and all(map(_int(0, MAX_WORLD), v)))),
    "config": ("an object", _opt(lambda v: isinstance(v, dict))),
    "versions": ("an object", _opt(lambda v: isinstance(v, dict))),
    "schedule": ("an object", _opt(lambda v: isinstance(v, dict))),
    "capture": ("an object", _opt(lambda v: isinstance(v, dict))),
    "capture_overhead": ("an object", _opt(lambda v: isinstance(v, dict))),
    "ranks": ("an object", _opt(lambda v: isinstance(v, (dict, list)))),
}

# keys inside an object of _KEYS that analysis does arithmetic with: (object, key) → (words, check).
# The profiler's schedule counts steps (range(), slices); the capture's overhead is milliseconds.
_finite_ms = _opt(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12)
_NESTED = {
    **{("schedule", k): (f"a step count 0..{MAX_COUNT:.0e}", _opt(_int(0)))
       for k in ("wait", "warmup", "active", "repeat", "skip_first")},
    **{("capture_overhead", k): ("a non-negative number of milliseconds", _finite_ms)
       for k in ("warmup_step_ms", "export_ms", "capture_ms_per_step")},
}


def json_depth(text: str) -> int:
    """How deep ``text``'s brackets nest, outside strings: an iterative scan, so that a file nested
    100k deep costs one pass and no recursion."""
    depth = deepest = 0
    in_str = escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in "]}":
            depth -= 1
    return deepest


def read(path: Path | str) -> tuple[dict[str, Any], list[str]]:
    """(the manifest of run directory ``path``, warnings about keys left out); ({}, []) when there is
    none. A file that cannot be a manifest is a one-line :class:`TraceError` naming it."""
    f = Path(path) / contract.MANIFEST
    try:
        st = os.stat(f)
    except FileNotFoundError:
        return {}, []
    except OSError as e:
        raise TraceError(f, f"cannot read: {e.strerror or e}") from None
    fix = "fix or remove it (the traces alone still analyse)"
    if not stat.S_ISREG(st.st_mode):
        raise TraceError(f, f"not a regular file (a {'directory' if stat.S_ISDIR(st.st_mode) else 'special file'}); {fix}")
    if st.st_size > MAX_MANIFEST_BYTES:
        raise TraceError(f, f"larger than {MAX_MANIFEST_BYTES >> 20} MiB: not a workbench manifest; {fix}")
    try:
        raw = f.read_bytes()[: MAX_MANIFEST_BYTES + 1]
    except OSError as e:
        raise TraceError(f, f"cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(f, f"not UTF-8 text (byte {e.start}); {fix}") from None
    # the cheap test first: a real manifest is short, and only a long text can nest deep
    if text.count("[") + text.count("{") > MAX_DEPTH and json_depth(text) > MAX_DEPTH:
        raise TraceError(f, f"JSON nested more than {MAX_DEPTH} levels deep: not a workbench manifest; {fix}")
    try:
        m = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise TraceError(f, f"invalid JSON ({e})") from None
    if not isinstance(m, dict):
        raise TraceError(f, f"not a JSON object; {fix}")
    version = m.get("schema_version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, (int, str)) or not str(version).strip().isascii() \
                or not str(version).strip().isdigit():
            raise TraceError(f, f"schema_version {json.dumps(version)[:40]} is not a version number; {fix}")
        version = m["schema_version"] = int(version)
        if version > contract.SCHEMA_VERSION:
            raise TraceError(f, f"schema_version {version} is newer than this workbench ({contract.SCHEMA_VERSION}); upgrade workbench")
    notes = []
    for key, (what, ok) in _KEYS.items():
        if key in m and not ok(m[key]):
            notes.append(f"{f.name}: {key} is {json.dumps(m.pop(key))[:40]}, not {what}: left out")
    for (outer, key), (what, ok) in _NESTED.items():
        inner = m.get(outer)
        if isinstance(inner, dict) and key in inner and not ok(inner[key]):
            notes.append(f"{f.name}: {outer}.{key} is {json.dumps(inner.pop(key))[:40]}, not {what}: left out")
    return m, notes


def read_manifest(path: Path | str) -> dict[str, Any]:
    """:func:`read` without its warnings (for readers that show none: the planner, the cache key)."""
    return read(path)[0]
