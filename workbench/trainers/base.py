"""What a trainer entry is (:class:`Trainer`), the registry (:func:`register`, :func:`get`,
:func:`names`) and recognition (:func:`detect_process`, :func:`detect_trace`, :func:`line`).

Pure Python: no torch, no pandas. Every layer may import it (the ground floor, beside hardware).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, runtime_checkable

SETTINGS: dict[str, str] = {
    "recompute": ("activation recomputation, the planner's modes (workbench.plan.recompute): 'none' | 'selective' "
                  "(the attention core, Korthikanti et al.) | 'op' (torchtitan's op-level policy) | 'layer:N' (every "
                  "N-th block whole) | 'full'"),
    "micro_batch": "samples per device per forward pass (int)",
    "grad_accum": "micro-batches accumulated per optimizer step (int)",
    "zero_stage": "ZeRO stage / FSDP sharding: 0 (replicated), 1 (optimizer), 2 (+ gradients), 3 (+ parameters)",
    "optimizer_offload": "optimizer states (and its step) on the host (bool)",
    "param_offload": "parameters on the host between uses (bool)",
    "precision": "'bf16' | 'fp16' | 'fp32' (mixed precision's compute dtype)",
    "num_workers": "DataLoader worker processes (int)",
    "fused_optimizer": "a fused (one kernel) optimizer step (bool)",
}
"""The settings every trainer renders a line for (:func:`line`): name → what its value is."""

PRECISIONS = ("bf16", "fp16", "fp32")
RECOMPUTE = ("none", "selective", "op", "layer:N", "full")


@runtime_checkable
class Trainer(Protocol):
    """One trainer: how it is recognised, what its step is, how its configuration names a layout."""

    name: str
    """The registry key (``deepspeed``, ``lightning``, ``hf_trainer`` …): the ``trainer`` of a run."""
    title: str
    """How people write it (``DeepSpeed``, ``PyTorch Lightning``)."""
    modules: tuple[str, ...]
    """Modules whose presence in ``sys.modules`` says the process may run it."""
    classes: tuple[str, ...]
    """``module.Class`` of the live objects that say it runs (an instance on the stack or alive)."""
    trace_markers: tuple[str, ...]
    """Regexes of event names (ranges, autograd functions, ``Optimizer.step#X.step``) only it writes."""
    within: tuple[str, ...]
    """Trainers it runs on top of, which it takes precedence over (Lightning over DeepSpeed)."""
    step: str
    """What one of its steps is, in its words."""
    optimizer_step: str
    """What its optimizer step is (where the optimizer's own work runs)."""
    micro_batch: str
    """What one micro-batch is."""
    step_base: int
    """How its log numbers steps: 0 (the first step is step 0) or 1 (step 1)."""
    mfu_convention: str | None
    """The FLOP convention of the MFU it prints (analysis.model.conventions), or None (prints none)."""
    config_names: Mapping[str, str]
    """Setting (:data:`SETTINGS`) → the name of that setting in its configuration."""
    sharding_ranges: tuple[str, ...]
    """Regexes of host ranges that gather or release a sharded layout's parameters (the whole range
    is that work: FSDP2's ``FSDP::pre_forward``, DeepSpeed's ``PreBackwardFunctionForModuleBackward``)."""
    sharding_fetched: tuple[str, ...]
    """Regexes of host events that end a module's pre-forward hook (its parameters gathered; its
    forward runs next: DeepSpeed ZeRO-3's ``PostBackwardFunctionModule``)."""
    sharding_released: tuple[str, ...]
    """Regexes of host events that end a module's post-forward hook (its parameters released:
    DeepSpeed ZeRO-3's ``PreBackwardFunctionForModule``)."""

    def device_states(self, settings: Mapping[str, Any], config: Mapping[str, Any] | None, params: int,
                      dp: int) -> dict[str, Any]:
        """Model states it keeps on the device beside what its optimizer holds (a working copy of the
        parameters in the compute precision, gradient buffers), from its settings, its own
        configuration, the parameter count and the data-parallel degree: ``{"weights": bytes,
        "gradients": bytes, "source": str}``, or {} where it keeps none apart."""

    def render(self, setting: str, value: Any) -> str | None:
        """The line that sets ``setting`` to ``value`` in this trainer, or None if it has none."""

    def read_config(self, obj: Any) -> dict[str, Any]:
        """Settings read off a live object of one of ``classes`` (getattr only; no imports)."""


@dataclass(frozen=True, kw_only=True)
class Spec:
    """A :class:`Trainer` made of values and two functions (what each trainer module registers)."""

    name: str
    title: str
    modules: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    trace_markers: tuple[str, ...] = ()
    within: tuple[str, ...] = ()
    step: str = "one optimizer step"
    optimizer_step: str = "optimizer.step()"
    micro_batch: str = "one forward and backward pass"
    step_base: int = 0
    mfu_convention: str | None = None
    config_names: Mapping[str, str] = field(default_factory=dict)
    sharding_ranges: tuple[str, ...] = ()
    sharding_fetched: tuple[str, ...] = ()
    sharding_released: tuple[str, ...] = ()
    lines: Callable[[str, Any], str | None] = lambda setting, value: None
    reader: Callable[[Any], dict[str, Any]] = lambda obj: {}
    states: Callable[[Mapping[str, Any], Mapping[str, Any] | None, int, int], dict[str, Any]] = lambda s, c, n, dp: {}

    def render(self, setting: str, value: Any) -> str | None:
        return self.lines(setting, value)

    def read_config(self, obj: Any) -> dict[str, Any]:
        return self.reader(obj)

    def device_states(self, settings: Mapping[str, Any], config: Mapping[str, Any] | None, params: int,
                      dp: int) -> dict[str, Any]:
        return self.states(settings, config, params, dp)


_REGISTRY: dict[str, Trainer] = {}


def register(trainer: Trainer) -> Trainer:
    """Add ``trainer`` (each trainer module calls it once, at import)."""
    if trainer.name in _REGISTRY:
        raise ValueError(f"trainer {trainer.name!r} is registered twice")
    if trainer.step_base not in (0, 1):
        raise ValueError(f"trainer {trainer.name!r}: step_base must be 0 or 1")
    _REGISTRY[trainer.name] = trainer
    return trainer


def get(name: str | None) -> Trainer | None:
    """The registered trainer of that name, or None."""
    return _REGISTRY.get(name) if name else None


def names() -> list[str]:
    """Every registered trainer's name, in registration order."""
    return list(_REGISTRY)


def all_trainers() -> list[Trainer]:
    return list(_REGISTRY.values())


def _outermost(found: Iterable[str]) -> list[str]:
    """Order recognised trainers outermost first: one another runs ``within`` comes before it."""
    found = list(dict.fromkeys(found))
    beneath = {w for n in found for w in _REGISTRY[n].within if w in found}
    return [n for n in found if n not in beneath] + [n for n in found if n in beneath]


def detect_process(modules: Iterable[str], classes: Iterable[str] = ()) -> list[str]:
    """Trainers a process runs, outermost first, from the modules it imported (``sys.modules``'
    keys) and the ``module.Class`` names of live objects found on its stack or alive. A trainer is
    recognised by one of its live classes; a module alone recognises it only where no trainer's
    live object was seen (importing a package is not running it: transformers imports accelerate)."""
    mods, cls = set(modules), set(classes)
    by_object = [t.name for t in _REGISTRY.values() if cls & set(t.classes)]
    if by_object:
        return _outermost(by_object)
    by_module = [t.name for t in _REGISTRY.values()
                 if any(m in mods for m in t.modules) and t.modules]
    return _outermost(by_module)


def detect_trace(event_names: Iterable[str]) -> list[str]:
    """Trainers whose own ranges or autograd functions a trace holds, outermost first."""
    names_ = [str(n) for n in event_names]
    found = []
    for t in _REGISTRY.values():
        if not t.trace_markers:
            continue
        # the trainer's markers as one alternation: one search per name, not one per name and marker
        # (a trace of 300k distinct step names by ~10 markers took seconds)
        pat = re.compile("|".join(f"(?:{p})" for p in t.trace_markers))
        if any(pat.search(n) for n in names_):
            found.append(t.name)
    return _outermost(found)


def sharding_ranges() -> tuple[str, ...]:
    """Every registered trainer's :attr:`~Trainer.sharding_ranges` (a trace's names are its own)."""
    return tuple(p for t in _REGISTRY.values() for p in t.sharding_ranges)


def sharding_hooks() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every registered trainer's (:attr:`~Trainer.sharding_fetched`, :attr:`~Trainer.sharding_released`)."""
    return (tuple(p for t in _REGISTRY.values() for p in t.sharding_fetched),
            tuple(p for t in _REGISTRY.values() for p in t.sharding_released))


def line(trainer: str | Trainer | None, setting: str, value: Any) -> str:
    """The line that sets ``setting`` to ``value`` in ``trainer`` (a name or an entry); a plain
    PyTorch line where the trainer is unknown or has no such setting."""
    if setting not in SETTINGS:
        raise KeyError(f"unknown setting {setting!r}; one of {', '.join(SETTINGS)}")
    t = get(trainer) if isinstance(trainer, str) or trainer is None else trainer
    text = t.render(setting, value) if t is not None else None
    if text is None and (plain := get("plain")) is not None and t is not plain:
        text = plain.render(setting, value)
    return text or f"{setting} = {value!r}"


def precision_of(value: Any) -> str | None:
    """A precision as one of :data:`PRECISIONS` from how trainers write it (``bf16-mixed``,
    ``torch.bfloat16``, ``16-mixed``, ``32-true``, ``fp16``)."""
    if value is None:
        return None
    s = str(value).lower()
    if "bf16" in s or "bfloat16" in s:
        return "bf16"
    if "fp16" in s or "float16" in s or s.startswith("16") or s == "half":
        return "fp16"
    if "32" in s or "float" in s or s in ("no", "fp32"):
        return "fp32"
    return None


__all__ = ["PRECISIONS", "RECOMPUTE", "SETTINGS", "Spec", "Trainer", "all_trainers", "detect_process", "detect_trace",
           "get", "line", "names", "precision_of", "register", "sharding_hooks", "sharding_ranges"]
