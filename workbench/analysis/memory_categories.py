"""Device memory by category: weights, gradients, optimizer state, activations, other.

A rank's peak (the allocator's reserved bytes: at the run's peak, or at the out-of-memory error that
ended it) split into:

- ``weights``, ``gradients``, ``optimizer``: **measured** by the capture at the first optimizer step
  (``memory_rank{r}.json``: the bytes of the tensors the optimizer's parameter groups and state hold,
  workbench.capture.memory), else at the model's first forward (``launch_rank{r}.json``: the live
  parameters, and the gradients and optimizer state that existed then — none, before a first step:
  a job that fails in its first forward still has its weights), else **inferred** from the model the
  trace shows (its trainable parameters × 4 bytes, fp32 as torch.optim keeps them, and the
  optimizer's state per parameter: :data:`OPTIMIZER_STATE_BYTES`);
- ``activations``: the allocator's peak allocated bytes less the three model states — what a step
  allocates on top of them: saved activations and the temporaries alive at the peak; **unknown**
  (null) when a model state is;
- ``other``: reserved but not allocated (the caching allocator's free blocks: its cache and
  fragmentation).

A trainer that keeps model states of its own on the device beside its optimizer's (DeepSpeed: the
module's parameters in the compute precision, a gradient reduction bucket: workbench.trainers'
``device_states``) adds them to ``weights`` and ``gradients`` (kind ``inferred``); with the optimizer
offloaded, what the optimizer holds on the host (fp32 masters, gradients, moments) is ``host``, beside
the device's categories, never in them.

Every category says its ``kind`` (:data:`KINDS`: measured, inferred, unknown) and its ``source``;
an unknown is null, never folded into another category. The known ones add up to the peak
reserved bytes. On CPU there is no caching allocator, and a GPU trace
without steps CSVs or memory records has no peak: the model states are measured (or inferred) and
activations and other are not measured (null, and ``note`` says so).
Where the model states exceed the allocated peak (the peak came before gradients existed, or a
sharded optimizer's state was counted whole), activations are 0 and ``note`` says so.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

GIB = float(1 << 30)
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "other")
OPTIMIZER_STATE_BYTES = {"adamw": 8, "adam": 8, "lion": 4, "sgd": 4, "adafactor": 4}
"""fp32 state per parameter: Adam's two moments, Lion's and SGD-momentum's one, Adafactor's factored
second moment (about one): the planner's table (workbench.calibration.from_run), the analysis' own
copy (a layer below it)."""
PARAM_BYTES = 4
"""torch.optim steps fp32 parameters (mixed precision keeps fp32 masters; autocast casts copies)."""


def _gib(b: float | None) -> float | None:
    return None if b is None else round(float(b) / GIB, 3)


def _int(b: float | None) -> int | None:
    return None if b is None else int(round(b))


def _peaks(steps: pd.DataFrame | None) -> tuple[float | None, float | None]:
    """(peak allocated, peak reserved) bytes from a steps CSV's allocator columns."""
    if steps is None or steps.empty:
        return None, None
    out = []
    for col in ("max_mem_allocated_bytes", "max_mem_reserved_bytes"):
        v = pd.to_numeric(steps[col], errors="coerce").dropna() if col in steps else pd.Series(dtype=float)
        out.append(float(v.max()) if not v.empty and v.max() > 0 else None)
    return out[0], out[1]


MIN_HOST_BYTES = 1 << 20
"""Host bytes below this are no offload: torch's AdamW keeps its step counters, scalars, on the CPU."""


def host_states(record: dict | None) -> dict[str, float]:
    """{weights, gradients, optimizer} bytes the optimizer held in host memory on a GPU rank
    (offloaded: DeepSpeed's ``offload_optimizer``, FSDP's ``CPUOffloadPolicy``), from the record's
    ``*_by_device``; empty on a CPU rank or an older record."""
    first = (record or {}).get("first_step") if isinstance(record, dict) else None
    if not isinstance(first, dict) or (record or {}).get("device") != "cuda":
        return {}
    out = {}
    for name, key in (("weights", "params"), ("gradients", "grads"), ("optimizer", "optimizer")):
        dev = first.get(f"{key}_by_device")
        if isinstance(dev, dict) and isinstance(dev.get("cpu"), (int, float)) and dev["cpu"] >= MIN_HOST_BYTES:
            out[name] = float(dev["cpu"])
    return out


KINDS = ("measured", "inferred", "unknown")
"""What each category's figure rests on (``kind``): measured by the capture or the allocator,
inferred from the model and optimizer, or unknown (``gib`` null: never folded into another)."""


def _device_bytes(by_device: dict | None, total: float) -> float:
    """Of the parameters' bytes, those on an accelerator (a CPU-offloaded copy is not device memory);
    all of them on a CPU run."""
    by = {k: float(v) for k, v in (by_device or {}).items() if isinstance(v, (int, float))}
    acc = sum(v for k, v in by.items() if not k.startswith("cpu"))
    return acc if acc > 0 else total


def _model_states(record: dict | None, model_fields: dict, launch: dict | None = None,
                  failure: dict | None = None) -> tuple[dict[str, tuple[float | None, str, str]], str | None]:
    """{weights, gradients, optimizer: (bytes or None, kind, source)} and a note.

    Measured at the first optimizer step (memory_rank{r}.json) where there was one; else at the
    model's first forward (launch_rank{r}.json: the live parameters, and the gradients and optimizer
    state that existed then — none before the first step); else inferred from the model the traces
    show. At an out-of-memory error in a forward after the first step, the gradients are those
    ``zero_grad`` left: none (``set_to_none``, torch's default), inferred."""
    first = (record or {}).get("first_step") if isinstance(record, dict) else None
    phase = (failure or {}).get("phase")
    step = (failure or {}).get("step")
    if isinstance(first, dict) and isinstance(first.get("params_bytes"), (int, float)):
        host = host_states(record)
        src = f"measured at the first optimizer step ({first.get('optimizer', 'optimizer')}'s parameter groups and state)"
        if host:
            src += ", device memory only: " + ", ".join(f"{k} {v / GIB:.2f} GiB" for k, v in host.items()) + \
                " in host memory (offloaded)"
        dev = {k: float(first.get(f) or 0) - host.get(k, 0.0)
               for k, f in (("weights", "params_bytes"), ("gradients", "grads_bytes"), ("optimizer", "optimizer_bytes"))}
        grads = (dev["gradients"], "measured", src)
        if failure and phase == "forward" and isinstance(step, int) and step > 0:
            grads = (0.0, "inferred", "none at a forward after the first step: zero_grad frees them (set_to_none, "
                                      f"torch's default); {float(first.get('grads_bytes') or 0) / GIB:.2f} GiB at the "
                                      "first optimizer step")
        return ({"weights": (dev["weights"], "measured", src), "gradients": grads,
                 "optimizer": (dev["optimizer"], "measured", src)}, None)
    model = (launch or {}).get("model") if isinstance(launch, dict) else None
    if isinstance(model, dict) and isinstance(model.get("params_bytes"), (int, float)):
        w = _device_bytes(model.get("params_by_device"), float(model["params_bytes"]))
        src = ("measured at the model's first forward (launch_rank{r}.json: the live parameters, "
               f"{int(model.get('params_numel') or 0):,} of them, each storage once)")
        opt = (launch or {}).get("optimizer") or {}
        state = opt.get("state_bytes")
        g = float(model.get("grads_bytes") or 0)
        out = {"weights": (w, "measured", src),
               "gradients": (g, "measured", "measured at the model's first forward: " +
                             ("none existed yet" if not g else f"{g / GIB:.2f} GiB held then")),
               "optimizer": ((float(state), "measured", "measured at the model's first forward: " +
                              ("no state yet (torch's optimizers make it at their first step)" if not state
                               else f"{opt.get('class', 'the optimizer')}'s state held then"))
                             if isinstance(state, (int, float)) else
                             (None, "unknown", "the optimizer's state was not recorded"))}
        return out, None
    n = model_fields.get("params_total")
    if not isinstance(n, (int, float)) or isinstance(n, bool) or n <= 0:
        none = (None, "unknown", "not measured, and no model to infer it from")
        return {"weights": none, "gradients": none, "optimizer": none}, None
    opt = str(model_fields.get("optimizer") or "").lower()
    per = next((b for k, b in OPTIMIZER_STATE_BYTES.items() if k in opt), None)
    note = None if per is not None else "optimizer not inferred: AdamW's 8 bytes per parameter assumed"
    per = 8 if per is None else per
    src = f"inferred: {int(n):,} parameters × {PARAM_BYTES} B (fp32)"
    return ({"weights": (n * PARAM_BYTES, "inferred", src), "gradients": (n * PARAM_BYTES, "inferred", src),
             "optimizer": (n * per, "inferred", f"inferred: {int(n):,} parameters × {per} B of optimizer state")}, note)


def _with_trainer(states: dict, extra: dict | None) -> dict:
    """``states`` with the trainer's own device states (workbench.trainers' ``device_states``) added to
    weights and gradients, their source said; unchanged where it keeps none apart."""
    if not isinstance(extra, dict) or not extra.get("source"):
        return states
    out = dict(states)
    for name in ("weights", "gradients"):
        b, kind, src = states[name]
        add = float(extra.get(name) or 0)
        if b is not None and add > 0:
            out[name] = (b + add, "inferred", f"{src}; {extra['source']}")
    return out


def rank_categories(record: dict | None, steps: pd.DataFrame | None, model_fields: dict | None = None,
                    oom: dict | None = None, launch: dict | None = None, failure: dict | None = None,
                    trainer_states: dict | None = None) -> dict[str, Any] | None:
    """One rank's memory by category (the module docstring), or None when nothing is known.

    ``oom``: the figures of the out-of-memory error that ended the rank (workbench.analysis.failure.
    parse_oom, or the capture's allocator record at the failure): the split is then of the memory held
    at the failure. ``launch``: the rank's launch record (the model at its first forward); ``failure``:
    the rank's failure entry (its ``phase`` and ``step``); ``trainer_states``: the trainer's own device
    states (module docstring). Keys: ``at`` ("peak" | "out of memory"),
    ``peak_allocated_gib``, ``peak_reserved_gib``, ``by_category`` ({category: {"gib", "bytes", "kind",
    "source"}}), ``sum_gib``, ``note``."""
    model_fields = model_fields or {}
    states, note = _model_states(record, model_fields, launch, failure if oom or failure else None)
    states = _with_trainer(states, trainer_states)
    alloc, reserved = _peaks(steps)
    at, peak_source = "peak", "the allocator's peak (steps_rank{r}.csv max_mem_*_bytes)"
    oom_alloc = (record or {}).get("oom", {}) if isinstance((record or {}).get("oom"), dict) else {}
    stats = oom_alloc.get("allocator") if isinstance(oom_alloc.get("allocator"), dict) else None
    if stats and stats.get("allocated_bytes.all.current") is not None:
        alloc, reserved = float(stats["allocated_bytes.all.current"]), float(stats.get("reserved_bytes.all.current") or 0) or None
        at, peak_source = "out of memory", "the allocator at the out-of-memory error (memory_rank{r}.json)"
    elif oom and oom.get("allocated_bytes") is not None:
        alloc = float(oom["allocated_bytes"])
        reserved = float(oom["reserved_bytes"]) if oom.get("reserved_bytes") is not None else None
        at, peak_source = "out of memory", "the out-of-memory error's own figures (PyTorch's message)"
    if all(v[0] is None for v in states.values()) and alloc is None:
        return None
    cats: dict[str, dict] = {}
    for name in ("weights", "gradients", "optimizer"):
        b, kind, src = states[name]
        cats[name] = {"gib": _gib(b), "bytes": _int(b), "kind": kind, "source": src}
    known = [v[0] for v in states.values()]
    if alloc is None:
        # a CPU run has no caching allocator; a GPU trace without steps CSVs or memory records has no peak
        missing = "not measured: no allocator peak in the run (a CPU run, or a trace without memory records)"
        cats["activations"] = {"gib": None, "bytes": None, "kind": "unknown", "source": missing}
        cats["other"] = {"gib": None, "bytes": None, "kind": "unknown", "source": missing}
        note = "; ".join(x for x in (note, "only the model states are known: no allocator peak to split") if x)
    elif any(b is None for b in known):
        unknown = [n for n in ("weights", "gradients", "optimizer") if states[n][0] is None]
        cats["activations"] = {"gib": None, "bytes": None, "kind": "unknown",
                               "source": f"not split: the {', '.join(unknown)} at this point are unknown"}
        note = "; ".join(x for x in (note, f"{_gib(alloc)} GiB allocated: activations not split from the unknown "
                                           f"{', '.join(unknown)}") if x)
    else:
        act = alloc - sum(known)
        if act < 0:
            note = "; ".join(x for x in (note, f"the model states ({sum(known) / GIB:.2f} GiB) exceed the allocated peak "
                                                 f"({alloc / GIB:.2f} GiB): activations taken as 0") if x)
            act = 0.0
        kind = "measured" if all(states[n][1] == "measured" for n in states) else "inferred"
        cats["activations"] = {"gib": _gib(act), "bytes": _int(act), "kind": kind,
                               "source": f"{peak_source}: allocated less the model states (saved activations and temporaries)"}
    if alloc is not None:
        rest = (reserved - alloc) if reserved is not None and reserved >= alloc else None
        cats["other"] = {"gib": _gib(rest), "bytes": _int(rest), "kind": "measured" if rest is not None else "unknown",
                         "source": "reserved but not allocated (the allocator's cache and fragmentation)"
                         if rest is not None else "not measured: no reserved figure"}
    total = sum(c["bytes"] for c in cats.values() if c["bytes"] is not None) / GIB
    host = host_states(record)
    if host:  # offloaded states live in host memory: beside the device's categories, not in them
        cats["host"] = {"gib": _gib(sum(host.values())), "bytes": _int(sum(host.values())), "kind": "measured",
                        "source": "host memory (offloaded): " + ", ".join(f"{k} {v / GIB:.3f} GiB" for k, v in host.items())}
    return {"at": at, "peak_allocated_gib": _gib(alloc), "peak_reserved_gib": _gib(reserved),
            "by_category": cats, "sum_gib": round(total, 3), "note": note or None}


def run_categories(per_rank: dict[int, dict | None]) -> dict[str, Any] | None:
    """The run's ``memory`` block: the rank whose peak (reserved, else the model states) is highest,
    with every rank's figures in ``per_rank``; None when no rank has any."""
    ranks = {r: c for r, c in per_rank.items() if c}
    if not ranks:
        return None

    def size(c: dict) -> float:
        return c["peak_reserved_gib"] or c["peak_allocated_gib"] or c["sum_gib"] or 0.0

    worst = max(ranks, key=lambda r: (size(ranks[r]), -r))
    out = {"rank": int(worst), **ranks[worst]}
    if len(ranks) > 1:
        out["per_rank"] = [{"rank": int(r), "at": c["at"], "peak_reserved_gib": c["peak_reserved_gib"],
                            **{k: v["gib"] for k, v in c["by_category"].items()}} for r, c in sorted(ranks.items())]
    return out


__all__ = ["CATEGORIES", "KINDS", "OPTIMIZER_STATE_BYTES", "rank_categories", "run_categories"]
