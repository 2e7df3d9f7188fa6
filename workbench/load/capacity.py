"""The device's memory, checked against every other witness of it before any figure is set against it.

A manifest can be edited (``device_memory_bytes: 1024``), a run copied beside another GPU's: a capacity
that is wrong makes every memory share wrong (a peak "13,043,916,800 % of capacity"). The driver's own
word is the trace's ``deviceProperties.totalGlobalMem``, and the run's measured memory (the allocator's
peaks in the steps CSVs and memory records) cannot be more than the device holds. So the manifest's
capacity stands only where the trace agrees within :data:`AGREE` and no measured peak passes it; otherwise
the trace's is taken (or none, where there is no trace to ask), and a warning names the disagreement as
inconsistent evidence. Host memory is not bounded by it, nor a prediction of a layout that does not fit.
"""

from __future__ import annotations

import math
from typing import Any

AGREE = 0.10
"""Capacities within 10 % are one device (the manifest's and the driver's figures round differently)."""
GIB = float(1 << 30)


def _gib(b: float) -> str:
    return f"{b / GIB:,.1f} GiB" if b >= GIB / 10 else f"{b / 1024:,.0f} KiB"


def measured_peak(run: Any) -> float | None:
    """The largest device memory the run measured: the steps CSVs' allocator columns and the memory records'
    allocator statistics (bytes), or None."""
    peaks = []
    for d in run.ranks.values():
        df = d.steps
        if df is not None:
            for c in ("max_mem_reserved_bytes", "mem_reserved_bytes", "max_mem_allocated_bytes", "mem_allocated_bytes"):
                if c in df:
                    v = df[c].max()
                    if v == v and v is not None:
                        peaks.append(float(v))
        rec = d.memory if isinstance(d.memory, dict) else {}
        for part in ("first_step", "oom"):
            stats = (rec.get(part) or {}).get("allocator") if isinstance(rec.get(part), dict) else None
            if isinstance(stats, dict):
                peaks += [float(v) for k, v in stats.items() if k.startswith(("reserved_bytes", "allocated_bytes"))
                          and isinstance(v, (int, float)) and math.isfinite(v)]
    return max(peaks) if peaks else None


def check(run: Any) -> list[str]:
    """Set aside a manifest capacity the other evidence contradicts (in ``run.manifest``, the copy analysis
    reads); the warnings that say so."""
    m = run.manifest
    said = m.get("device_memory_bytes")
    if not isinstance(said, (int, float)) or isinstance(said, bool) or not said > 0:
        return []
    trace = next((int(t.devices[0]["totalGlobalMem"]) for t in run.rank_info.values()
                  if t.devices and isinstance(t.devices[0].get("totalGlobalMem"), (int, float))
                  and t.devices[0]["totalGlobalMem"] > 0), None)
    peak = measured_peak(run)
    why = None
    if trace is not None and abs(trace - said) > AGREE * trace:
        why = f"the trace's deviceProperties say {_gib(trace)}"
    elif peak is not None and peak > said * (1 + AGREE / 10):
        why = f"the run measured {_gib(peak)} on it"
    if why is None:
        return []
    m.pop("device_memory_bytes")
    took = f"the trace's {_gib(trace)} is used" if trace is not None else "no capacity is used"
    return [f"inconsistent evidence: manifest.json says the device holds {_gib(said)}, but {why}: {took}"]


__all__ = ["AGREE", "check", "measured_peak"]
