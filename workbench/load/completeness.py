"""Is the run whole, and one kind of device? Said, never assumed; and what else a reader must
know about how its traces were read (:func:`notes`).

A manifest for 8 ranks beside one rank's trace, or one public trace of a 128-rank job, is analysed
as what it is: the verdict is those ranks', and the run says which ranks it lacks. Ranks on
different GPU models (an A100 beside an H200) share one device's peaks in MFU and the roofline: the
run says so. Both land in ``run.warnings`` (one line each), in ``--json`` (``run.partial``,
``run.devices``) and at the end of the verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.hardware import devices

NAMED = 8
"""Ranks named in a line before "…"."""


def expected_world(run) -> int | None:
    """The job's world size as the run states it: the manifest's, else the largest its traces'
    ``distributedInfo`` states; None where nothing says."""
    m = run.manifest.get("world_size")
    if isinstance(m, int) and not isinstance(m, bool) and m > 0:
        return m
    sizes = [t.world_size for t in run.rank_info.values() if isinstance(getattr(t, "world_size", None), int)]
    return max(sizes) if sizes else None


def spans(ranks: list[int]) -> str:
    """``[1, 2, 3, 5, 7, 8]`` as ``1–3, 5, 7–8`` (at most :data:`NAMED` pieces, then how many more)."""
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}–{ranks[j]}")
        i = j + 1
    more = len(parts) - NAMED
    return ", ".join(parts[:NAMED]) + (f" and {more} more spans" if more > 0 else "")


def partial(run) -> dict[str, Any] | None:
    """``{"world_size", "ranks_analysed", "ranks_missing"}`` when traces of fewer ranks than the
    job had are analysed (``ranks_missing`` as :func:`spans` words), else None."""
    world = expected_world(run)
    have = sorted(r for r in run.rank_info)
    if not world or not have or len(have) >= world:
        return None
    missing = [r for r in range(world) if r not in set(have)]
    return {"world_size": world, "ranks_analysed": have, "ranks_missing": spans(missing)}


def device_names(run) -> dict[int, str]:
    """rank → the device it ran on, as its trace's properties or the manifest's rank entry name it."""
    out: dict[int, str] = {}
    ranks = run.manifest.get("ranks") if isinstance(run.manifest.get("ranks"), dict) else {}
    for r, t in run.rank_info.items():
        props = t.devices[0] if getattr(t, "devices", None) else None
        entry = ranks.get(str(r)) if isinstance(ranks.get(str(r)), dict) else {}
        name = entry.get("device_name") if entry.get("device") not in (None, "cpu") else None
        label = devices.label(name if isinstance(name, str) else None, props if isinstance(props, dict) else None)
        if label:
            out[r] = label
    return out


def _kind(name: str) -> str:
    found = devices.resolve(name)
    return found.gpu.key if found is not None else name


def mixed_devices(run) -> dict[str, list[int]] | None:
    """device → its ranks, when the ranks ran on more than one GPU model; else None."""
    names = device_names(run)
    kinds: dict[str, list[int]] = {}
    shown: dict[str, str] = {}
    for r, name in sorted(names.items()):
        k = _kind(name)
        shown.setdefault(k, name)
        kinds.setdefault(k, []).append(r)
    if len(kinds) < 2:
        return None
    return {shown[k]: rs for k, rs in kinds.items()}


NO_STEP_MARKERS = ("no ProfilerStep#N marker in the trace (torch.autograd.profiler, or torch.profiler without a "
                   "schedule's prof.step()): the whole trace is analysed as one step")


def notes(run, whole: bool = True) -> list[str]:
    """What a reader must know about the run as loaded, one line each: what the loader set right
    in each trace (workbench.load.sanity), the device when its name did not say which GPU it is (or
    nothing did: then MFU needs ``--peak-tflops``), a trace with no step markers (analysed whole);
    then, where ``whole`` (all its ranks were asked for), a partial run and mixed devices."""
    info = run.rank_info
    p = partial(run) if whole else None
    mixed = mixed_devices(run) if whole else None
    device = None
    if run.has_gpu:
        device = devices.describe(run.manifest.get("device_name"), next((t.devices[0] for t in info.values() if t.devices), None))
    out = [f"{Path(t.path).name}: {n}" for t in info.values() for n in getattr(t, "notes", ())]
    if device:
        out.append(device)
    if info and all(t.first_step is None for t in info.values()):
        out.append(NO_STEP_MARKERS)
    if p:
        n, w = len(p["ranks_analysed"]), p["world_size"]
        out.append(f"partial run: traces of {n} of the job's {w} ranks (rank{'s' * (n != 1)} "
                   f"{spans(p['ranks_analysed'])}); no trace of rank{'s' * (w - n != 1)} {p['ranks_missing']}: "
                   "the verdict is of the ranks analysed")
    if mixed:
        first = next(iter(mixed))
        out.append("mixed devices: " + "; ".join(f"{d} (rank{'s' * (len(rs) != 1)} {spans(rs)})" for d, rs in mixed.items())
                   + f": MFU and the roofline use {first}'s peaks for every rank")
    return out


def verdict_suffix(partial_info: dict | None, mixed: dict | None) -> str:
    """What the verdict line adds for a partial or mixed run ("" for a whole, uniform one)."""
    parts = []
    if partial_info:
        parts.append(f"from {len(partial_info['ranks_analysed'])} of {partial_info['world_size']} ranks' traces")
    if mixed:
        parts.append(f"ranks on {len(mixed)} GPU models")
    return f" ({'; '.join(parts)})" if parts else ""


__all__ = ["device_names", "expected_world", "mixed_devices", "notes", "partial", "spans", "verdict_suffix"]
