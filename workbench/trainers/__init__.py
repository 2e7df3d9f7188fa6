"""The trainers people run, one registry entry each: how each is recognised, what its step,
optimizer step and micro-batch are, its configuration's names for a layout, and the line that sets
a setting in it. Pure Python (no torch): every layer may import it, as it may ``hardware``.

One module per trainer registers a :class:`~workbench.trainers.base.Trainer` at import (as
torchtitan's models register their train specs); nothing lists them by hand:
:mod:`.hf_trainer`, :mod:`.lightning`, :mod:`.deepspeed`, :mod:`.torchtitan`, :mod:`.accelerate`,
:mod:`.engine` (``workbench train``), :mod:`.plain` (a plain PyTorch loop, and every trainer's
fallback for a setting it does not own).

The API::

    from workbench import trainers

    trainers.line("deepspeed", "zero_stage", 2)
    #   'DeepSpeed config: "zero_optimization": {"stage": 2}'
    trainers.line("lightning", "precision", "bf16")     # 'Trainer(precision="bf16-mixed")'
    trainers.line(None, "recompute", "full")             # plain PyTorch: torch.utils.checkpoint…
    t = trainers.get("torchtitan")                       # the entry, or None
    t.step_base, t.mfu_convention                        # 1, 'torchtitan'
    trainers.detect_process(sys.modules, ["deepspeed.runtime.engine.DeepSpeedEngine"])   # ['deepspeed']
    trainers.detect_trace(event_names)                   # e.g. ['deepspeed'] from ZeRO-3's autograd functions
    trainers.settings_of(run_trainer_doc)                # the settings a capture read (trainer_rank{r}.json)

- :func:`line(trainer, setting, value) <workbench.trainers.base.line>`: ``setting`` is one of
  :data:`SETTINGS` (recompute 'none'|'selective'|'op'|'layer:N'|'full', micro_batch int, grad_accum int, zero_stage
  0-3 — FSDP's sharding as its ZeRO stage —, optimizer_offload bool, param_offload bool, precision
  'bf16'|'fp16'|'fp32', num_workers int, fused_optimizer bool); ``trainer`` a registry name, an entry
  or None. Always a string: the trainer's own line, else plain PyTorch's.
- :func:`get(name)`, :func:`names()`, :func:`all_trainers()`, :func:`register(trainer)`.
- A :class:`Trainer` has ``name``, ``title``, ``modules``, ``classes`` (live objects that say it
  runs), ``trace_markers`` (event-name regexes only it writes), ``within`` (trainers it runs on top
  of), ``step``, ``optimizer_step``, ``micro_batch`` (in its words), ``step_base`` (0 or 1: how its
  log numbers steps), ``mfu_convention`` (the FLOP convention of the MFU it prints, or None),
  ``config_names`` (setting → its configuration's name), ``sharding_ranges``, ``sharding_fetched``,
  ``sharding_released`` (event-name regexes of its parameter gathers and releases: whole ranges, and the
  events that end a module's pre- and post-forward hooks),
  ``render(setting, value)``, ``read_config(live_object)`` (settings read off a live object with
  getattr only) and ``device_states(settings, config, params)`` (model states it keeps on the device
  beside its optimizer's: a working copy of the parameters, gradient buffers).
- :func:`sharding_ranges()`, :func:`sharding_hooks()`: every trainer's, for a trace whatever ran it.
"""

from __future__ import annotations

from typing import Any

from workbench.trainers.base import (PRECISIONS, RECOMPUTE, SETTINGS, Spec, Trainer, all_trainers, detect_process,
                                     detect_trace, get, line, names, precision_of, register, sharding_hooks,
                                     sharding_ranges)
from workbench.trainers import hf_trainer, lightning, deepspeed, torchtitan, accelerate, engine, plain  # noqa: F401,E402 - they register

SCHEMA = "workbench.trainer/1"
"""The ``schema`` of ``trainer_rank{r}.json`` (workbench.format.contract)."""


def settings_of(doc: dict | None) -> dict[str, Any]:
    """The settings a ``trainer_rank{r}.json`` document holds (empty for None or another schema)."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("settings"), dict):
        return {}
    return dict(doc["settings"])


__all__ = ["PRECISIONS", "RECOMPUTE", "SCHEMA", "SETTINGS", "Spec", "Trainer", "all_trainers", "detect_process",
           "detect_trace", "get", "line", "names", "precision_of", "register", "settings_of", "sharding_hooks",
           "sharding_ranges"]
