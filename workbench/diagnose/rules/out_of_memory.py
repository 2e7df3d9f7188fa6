"""``out_of_memory``: the job ended because a rank ran out of memory.

Signal: a failing rank's error (its ``status_rank{r}.json``, folded into the manifest) is one of
PyTorch's out-of-memory messages (workbench.analysis.failure.parse_oom: CUDA and ROCm in every
format since torch 1.x, and the CPU allocator's). Always critical: the run is over. The evidence is
the message's own figures (what was asked for, the device's capacity and free memory, what PyTorch
had allocated and reserved, the memory outside PyTorch, other processes), the step and the phase
(forward, backward or optimizer: the traceback) where the rank failed, and the memory by category
(workbench.analysis.memory_categories). Fragmentation is named when the memory reserved but not
allocated is over ``FRAGMENTED_FRACTION`` of the device and more than the request (PyTorch's own
message suggests ``expandable_segments`` when it "is large").
"""

from __future__ import annotations

from workbench.analysis import frames
from workbench.analysis.failure import FRAGMENTED_FRACTION, fragmented, gib
from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.memory import memory_fixes
from workbench.diagnose.registry import rule
from workbench.analysis.trainer_run import logged_step

FIGURES = ("tried_to_allocate", "capacity", "free", "allowed", "allocated", "reserved", "reserved_unallocated",
           "private_pools", "process", "non_pytorch")


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _where(e: dict) -> str:
    parts = []
    if e.get("step") is not None:
        parts.append(f"in step {e['step']}")
    if e.get("phase"):
        parts.append(f"({e['phase']})")
    return " ".join(parts)


@rule("out_of_memory", reads=(frames.MODEL,), group="failure",
      summary="the job ended out of memory: PyTorch's message parsed (CUDA, ROCm, CPU; torch 1.x and 2.x), the step and "
              "phase, fragmentation named",
      threshold=f"always critical; fragmentation: reserved but unallocated ≥ {100 * FRAGMENTED_FRACTION:g} % of the device",
      source="PyTorch's CUDACachingAllocator message")
def out_of_memory(ctx: Context) -> Diagnosis | None:
    f = ctx.failure
    if not f:
        return None
    ooms = [e for e in f["ranks"] if e.get("kind") == "out_of_memory"]
    if not ooms:
        return None
    e = ooms[0]
    shown = {**e, "step": logged_step(e.get("step"), ctx.trainer)}  # the step as the trainer's log numbers it
    oom = e.get("oom") or {}
    rank = e.get("rank")
    evidence = {"rank": rank, "ranks": [x["rank"] for x in ooms if x.get("rank") is not None],
                "step": e.get("step"), "step_as_logged": shown["step"], "phase": e.get("phase"), "profiler_phase": e.get("profiler_phase"),
                "error_type": e.get("error_type"), "where": e.get("where"), "device": oom.get("device_kind"),
                "message_format": oom.get("format")}
    for k in FIGURES:
        if oom.get(f"{k}_bytes") is not None:
            evidence[f"{k}_gib"] = gib(oom[f"{k}_bytes"])
    if oom.get("other_processes"):
        evidence["other_processes"] = [{"pid": p["pid"], "gib": gib(p["bytes"])} for p in oom["other_processes"]]
    frag = fragmented(oom)
    evidence["fragmentation"] = frag
    if ctx.memory_by_category:
        evidence["memory_by_category"] = {k: v["gib"] for k, v in ctx.memory_by_category["by_category"].items()}
        evidence["memory_by_category_source"] = {k: v["source"] for k, v in ctx.memory_by_category["by_category"].items()}
    evidence["error"] = (e.get("error") or "")[:600]
    if oom.get("inconsistent"):
        evidence["inconsistent"] = oom["inconsistent"]
    gpu_message_on_cpu = e.get("device") == "cpu" and oom.get("device_kind") in ("cuda", "hip")
    who = f"rank {rank}" if rank is not None else "a rank"
    if oom.get("device_kind") == "cpu":
        title = f"host memory exhausted on {who} {_where(shown)}".rstrip() + (
            f": the CPU allocator could not get {oom['tried_to_allocate_bytes'] / 2**30:.2f} GiB"
            if oom.get("tried_to_allocate_bytes") else "")
    else:
        figs = []
        if oom.get("tried_to_allocate_bytes") is not None:
            figs.append(f"tried to allocate {oom['tried_to_allocate_bytes'] / 2**30:.2f} GiB")
        if oom.get("free_bytes") is not None and oom.get("capacity_bytes"):
            figs.append(f"{oom['free_bytes'] / 2**30:.2f} GiB free of {oom['capacity_bytes'] / 2**30:.1f} GiB")
        if gpu_message_on_cpu:  # the figures are the message's, not this run's device: said, not stated as its own
            figs = ["a GPU's message from a rank that ran on the CPU" + (f" ({', '.join(figs)}: the message's figures, "
                                                                       "not this run's device)" if figs else "")]
            evidence["inconsistent"] = [*evidence.get("inconsistent", []), "a GPU's out-of-memory message from a rank on the CPU"]
        if oom.get("inconsistent"):
            figs.append(f"its figures disagree ({'; '.join(oom['inconsistent'])}): left out")
        title = f"out of memory on {who} {_where(shown)}".replace("  ", " ").rstrip() + (": " + ", ".join(figs) if figs else "")
    fixes = memory_fixes(ctx.model())
    rec = "make the step fit: " + _or(fixes)
    if frag:
        rec = (f"the allocator held {oom['reserved_unallocated_bytes'] / 2**30:.1f} GiB reserved but unallocated "
               "(fragmentation): set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; else " + _or(fixes))
    others = sum(p["bytes"] for p in oom.get("other_processes") or [])
    if others >= FRAGMENTED_FRACTION * (oom.get("capacity_bytes") or float("inf")):
        rec = f"other processes hold {others / 2**30:.1f} GiB of this GPU: free it first; " + rec
    return Diagnosis(
        id="out_of_memory", severity="critical", title=title, evidence=evidence, recommendation=rec,
        estimated_gain={"step_time_saved_pct": 0.0, "speedup_max": None,
                        "protects": "the run itself: it ended" + (f" in step {shown['step']}" if shown.get("step") is not None else ""),
                        "formula": "no time gain: the gain is a run that completes"},
        fix=["data.batch_size", "train.activation_checkpointing", "parallel.mode", "parallel.cpu_offload"],
        ranks=evidence["ranks"] or ([rank] if rank is not None else []),
    )
