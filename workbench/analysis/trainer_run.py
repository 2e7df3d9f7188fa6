"""The trainer behind a run: what the capture recognised in the process (``trainer_rank{r}.json``:
workbench.capture.trainer) first, the trace's own marks second (workbench.trainers.detect_trace:
DeepSpeed ZeRO-3's autograd functions, torchtitan's ``OptimizersContainer``), and what that changes
in the model: the layout takes the trainer's settings (ZeRO stage, offload, micro-batch,
accumulation, precision) over what the trace suggests, the headline MFU is the trainer's own
convention where it prints one, and steps are numbered as its log numbers them (``step_base``).

``run_trainer`` returns the run's ``trainer`` block (``model.trainer`` in ``workbench analyze --json``)::

    {"name": "deepspeed", "title": "DeepSpeed", "stack": [...], "source": "...",
     "settings": {SETTING: value}, "step_base": 0 | 1, "mfu_convention": NAME | null,
     "step": "...", "optimizer_step": "..."}
"""

from __future__ import annotations

from typing import Any

from workbench import trainers
from workbench.analysis.model import CONVENTIONS, flops_per_token


def trace_trainers(names) -> list[str]:
    """Trainers whose own ranges a trace's event names hold (the ``trainer_trace`` frame)."""
    return trainers.detect_trace(names)


def run_trainer(doc: dict | None, traced: dict[int, list[str]] | None = None,
                launch: dict | None = None) -> dict[str, Any] | None:
    """The run's trainer (module docstring), or None when neither the capture nor the trace names one.
    ``launch``: the launch record (launch_rank{r}.json), which names the trainer from the process's
    modules at the first forward: what a job that fails before ``trainer_rank{r}.json`` is written has."""
    settings = trainers.settings_of(doc)
    ours = isinstance(doc, dict) and doc.get("schema") == trainers.SCHEMA
    stack = [str(t) for t in doc.get("stack") or [] if trainers.get(str(t))] if ours else []
    name = doc.get("trainer") if ours else None
    source = f"the capture: {doc.get('detected_by')} (trainer_rank{{r}}.json)" if name else None
    if name is None and isinstance(launch, dict) and trainers.get(str(launch.get("trainer"))):
        name = str(launch["trainer"])
        stack = [str(t) for t in launch.get("trainers") or [name] if trainers.get(str(t))]
        source = "the capture: the process's modules at the first forward (launch_rank{r}.json)"
        if not settings and isinstance(launch.get("trainer_settings"), dict):
            settings = dict(launch["trainer_settings"])
    seen = [t for ts in (traced or {}).values() for t in (ts or [])]
    if name is None and seen:
        stack = list(dict.fromkeys(seen))
        name, source = stack[0], "the trace: " + ", ".join(trainers.get(t).title for t in stack) + "'s own ranges"
    t = trainers.get(name)
    if t is None:
        return None
    return {"name": t.name, "title": t.title, "stack": stack or [t.name], "source": source, "settings": settings,
            "step_base": t.step_base, "mfu_convention": t.mfu_convention, "step": t.step, "optimizer_step": t.optimizer_step}


def apply_trainer(model: dict, trainer: dict | None) -> dict:
    """``model`` (analysis.model_run.run_model's) with the trainer's settings in its layout, its
    headline FLOPs in the trainer's convention, and ``model["trainer"]``; unchanged without one."""
    if not trainer:
        return model
    model["trainer"] = trainer
    fields = model.setdefault("fields", {})
    s = trainer.get("settings") or {}
    lay = fields.get("layout")
    if lay is not None and s:
        value = dict(lay["value"])
        read = []
        if isinstance(s.get("zero_stage"), int):
            value["zero"] = s["zero_stage"]
            read.append(f"ZeRO stage {s['zero_stage']}")
        for key in ("optimizer_offload", "param_offload"):
            if isinstance(s.get(key), bool):
                value[key] = s[key]
                read.append(f"{key.replace('_', ' ')} {'on' if s[key] else 'off'}")
        for key in ("micro_batch", "grad_accum", "precision"):
            if s.get(key) is not None:
                value[key] = s[key]
        lay = {"value": value, "source": f"{trainer['title']}'s configuration ({', '.join(read) or 'read'}); "
                                         + lay["source"], "confidence": "high"}
        fields["layout"] = lay
    conv = trainer.get("mfu_convention")
    if conv in CONVENTIONS and model.get("kind") == "transformer":
        fpt = flops_per_token(fields, conv)
        if fpt is not None:
            fields["model_flops_per_token"] = fpt
            model["convention"] = f"{trainer['title']}'s own: {CONVENTIONS[conv]}"
    return model


def logged_step(step: int | None, trainer: dict | None) -> int | None:
    """A step index of the steps CSV (0-based) as the trainer's log numbers it."""
    if step is None:
        return None
    return int(step) + int((trainer or {}).get("step_base") or 0)
