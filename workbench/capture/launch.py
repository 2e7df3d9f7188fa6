"""The model at launch: ``launch_rank{r}.json``, what the live objects say before any trace exists.

Written three times, each time whole (a job that dies in its first forward keeps the first):

- **at the model's first training forward**, before it runs (a global module pre-hook, installed when
  the capture starts, meets the first module called with gradients on, in training mode, that holds
  trainable parameters: the job's model, or the DDP / compile wrapper around it): the parameters
  (:mod:`workbench.capture.launch_model`), the forward's inputs (shapes, dtypes, devices), autocast,
  the recomputation the module tree shows (:mod:`workbench.capture.launch_recompute`), torch.compile,
  DDP / FSDP / DTensor placements, and the optimizers built so far whose parameters are the model's
  (``torch.optim.Optimizer.__init__`` is wrapped while the capture runs, to know them before their
  first step);
- **when that forward returns or raises**: the recomputation seen inside it (which modules ran
  inside ``torch.utils.checkpoint``), the output's shapes; the global hook is then removed (it is
  removed at once, without the dynamic evidence, when the model is compiled: dynamo would trace it);
- **at the first optimizer step**: the optimizer's state, by dtype.

``cost_ms`` holds what each write cost the job (a walk over the parameters: milliseconds).
The record is bounded: :data:`workbench.capture.launch_model.MAX_PARAM_ROWS` parameter rows, inputs
and outputs to :data:`MAX_ITEMS` entries. It holds shapes and names, never values.
"""

from __future__ import annotations

import json
import time
import weakref
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from workbench.capture import launch_model, launch_recompute
from workbench.capture.quiet import muted
from workbench.format import contract
from workbench.format.atomic import write_atomic

MAX_ITEMS = 64
"""Inputs / outputs described (positional and keyword, nested one level)."""


def describe_value(v: Any, depth: int = 0) -> Any:
    """A forward's argument or output as shapes: tensors ``{shape, dtype, device}``, containers one
    level deep, anything else its type's name."""
    if isinstance(v, torch.Tensor):
        return {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch."), "device": str(v.device)}
    if depth < 2 and isinstance(v, (list, tuple)):
        return [describe_value(x, depth + 1) for x in list(v)[:MAX_ITEMS]]
    if depth < 2 and isinstance(v, dict):
        return {str(k): describe_value(x, depth + 1) for k, x in list(v.items())[:MAX_ITEMS]}
    if depth < 2 and hasattr(v, "keys") and hasattr(v, "__getitem__"):  # a ModelOutput
        try:
            return {str(k): describe_value(v[k], depth + 1) for k in list(v.keys())[:MAX_ITEMS]}
        except Exception:
            pass
    if isinstance(v, (bool, int, float)) or v is None:
        return v
    return type(v).__name__


def autocast_state() -> dict[str, str]:
    """Devices with autocast on, and the dtype it casts to."""
    out = {}
    for dev in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(dev):
                out[dev] = str(torch.get_autocast_dtype(dev)).removeprefix("torch.")
        except (TypeError, AttributeError, RuntimeError):  # an older torch: the cuda-only form
            if dev == "cuda" and torch.is_autocast_enabled():
                out[dev] = str(torch.get_autocast_gpu_dtype()).removeprefix("torch.")
    return out


def optimizer_block(opt, state: bool = False) -> dict[str, Any]:
    """The optimizer's class, defaults and groups; with ``state`` its state's bytes by dtype."""
    defaults = {k: v for k, v in getattr(opt, "defaults", {}).items()
                if isinstance(v, (bool, int, float, str)) or v is None
                or (isinstance(v, tuple) and all(isinstance(x, (int, float)) for x in v))}
    groups = []
    for g in getattr(opt, "param_groups", [])[:MAX_ITEMS]:
        ps = [p for p in g.get("params", []) if isinstance(p, torch.Tensor)]
        opts = {k: v for k, v in g.items() if k != "params" and (isinstance(v, (bool, int, float, str)) or v is None)}
        groups.append({"params": len(ps), "numel": sum(p.numel() for p in ps), **opts})
    out: dict[str, Any] = {"class": launch_model.qualname(opt), "defaults": defaults, "groups": groups}
    if state:
        by: dict[str, int] = {}
        seen = set()
        for s in getattr(opt, "state", {}).values():
            for v in (s.values() if isinstance(s, dict) else ()):
                if isinstance(v, torch.Tensor) and launch_model.storage_key(v) not in seen:
                    seen.add(launch_model.storage_key(v))
                    loc = getattr(v, "_local_tensor", v)
                    d = str(v.dtype).removeprefix("torch.")
                    by[d] = by.get(d, 0) + loc.numel() * loc.element_size()
        out["state_by_dtype"] = by
        out["state_bytes"] = sum(by.values())
    return out


class LaunchRecorder:
    """Writes ``launch_rank{r}.json`` for one rank (see the module docstring)."""

    def __init__(self, out: Path, rank: int, say: Callable[[str], None] | None = None) -> None:
        self.path = Path(out) / contract.launch_name(rank)
        self.rank = rank
        self._say = say or (lambda text: None)
        self.doc: dict[str, Any] = {"schema_version": contract.LAUNCH_SCHEMA_VERSION, "rank": rank, "written": [],
                                    "cost_ms": {}, "model": None, "inputs": None, "outputs": None, "autocast": None,
                                    "grad_enabled": None, "recompute": None, "optimizer": None}
        self.model_ref: Callable[[], nn.Module | None] = lambda: None
        self.root_ref: Callable[[], nn.Module | None] = lambda: None
        self.optimizer_ref: Callable[[], Any] = lambda: None
        self.inputs: tuple | None = None
        """The first forward's (args, kwargs) as fake-able shapes: held only as weak descriptions."""
        self._optimizers: list = []
        self._orig_init = None
        self._global = None
        self._root_hook = None
        self._count_hook = None
        self._forwards = [0]
        self._watch: launch_recompute.Watch | None = None
        self._static: dict = {}
        self.on_first_forward: list[Callable[["LaunchRecorder", tuple, dict], None]] = []
        """Called at the first forward, before it runs, with the real (args, kwargs): the fake-tensor
        measurement starts there (workbench.capture.fake_runner)."""
        self.error: str | None = None

    # ---- hooks -------------------------------------------------------------------------------
    def start(self) -> "LaunchRecorder":
        recorder = self
        orig = torch.optim.Optimizer.__init__

        def __init__(opt, *args, **kwargs):  # noqa: N807 - the wrapped dunder
            orig(opt, *args, **kwargs)
            if not muted():
                recorder._optimizers.append(weakref.ref(opt))

        self._orig_init = orig
        torch.optim.Optimizer.__init__ = __init__
        self._global = nn.modules.module.register_module_forward_pre_hook(self._pre)
        return self

    def stop(self) -> None:
        self._remove_global()
        if self._watch is not None:
            self._watch.remove()
            self._watch = None
        for h in (self._root_hook, self._count_hook):
            if h is not None:
                h.remove()
        self._root_hook = self._count_hook = None
        if self._orig_init is not None:
            torch.optim.Optimizer.__init__ = self._orig_init
            self._orig_init = None

    def _remove_global(self) -> None:
        if self._global is not None:
            self._global.remove()
            self._global = None

    def _pre(self, module: nn.Module, args) -> None:
        if torch.compiler.is_compiling() or muted():
            return
        if self._watch is not None:
            self._watch.see(module)
            return
        if self.doc["model"] is not None or not (torch.is_grad_enabled() and module.training):
            return
        if not any(p.requires_grad for p in module.parameters()):
            return
        try:
            self._first_forward(module, args)
        except Exception as e:  # never in the way of the job
            self._remove_global()
            self._note(f"the launch record could not describe the model ({type(e).__name__}: {e})")

    def _first_forward(self, root: nn.Module, args) -> None:
        t = time.perf_counter()
        model, _ = launch_model.unwrap(root)
        self.model_ref, self.root_ref = weakref.ref(model), weakref.ref(root)
        desc = launch_model.describe(root)
        self._static = launch_recompute.static(model, desc["blocks"])
        kwargs = _pending_kwargs(root)
        self.doc.update(model=desc, inputs={"args": describe_value(list(args)), "kwargs": describe_value(kwargs or {})},
                        autocast=autocast_state(), grad_enabled=torch.is_grad_enabled(),
                        recompute={**launch_recompute.mode(self._static, None, desc["blocks"]), "static": self._static})
        self.doc.update(_trainer())
        opt = self._optimizer_of(model)
        if opt is not None:
            self.optimizer_ref = weakref.ref(opt)
            self.doc["optimizer"] = optimizer_block(opt, state=True)  # none before its first step, unless loaded
        self._cost("first_forward", t)
        self.write("first_forward")
        if desc["compile"]["compiled"]:
            self._remove_global()  # dynamo would trace a global hook inside every compiled region
        else:
            self._watch = launch_recompute.Watch(model).install()
        self._root_hook = root.register_forward_hook(_end_hook(weakref.ref(self)), always_call=True)
        self._forwards = [1]  # this call, then each of the root's forwards until the first optimizer step
        self._count_hook = root.register_forward_pre_hook(_counter(self._forwards))
        for fn in self.on_first_forward:
            fn(self, tuple(args), kwargs or {})

    def _forward_ended(self, output) -> None:
        t = time.perf_counter()
        self._remove_global()
        if self._root_hook is not None:
            self._root_hook.remove()
            self._root_hook = None
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.remove()
        dynamic = watch.summary(self.doc["model"]["blocks"]) if watch is not None else None
        self.doc["recompute"] = {**launch_recompute.mode(self._static, dynamic, self.doc["model"]["blocks"]),
                                 "static": self._static, "dynamic": dynamic}
        if output is not None:
            self.doc["outputs"] = describe_value(output)
        self._cost("first_forward_end", t)
        self.write("first_forward_end")

    def first_step(self, optimizer) -> None:
        """At the first optimizer step (the capture's optimizer-step post hook): the state's dtypes."""
        if muted() or "first_step" in self.doc["written"]:
            return
        t = time.perf_counter()
        model = self.model_ref()
        if model is None or self.optimizer_ref() is None:
            self.optimizer_ref = weakref.ref(optimizer)
        if self.optimizer_ref() is optimizer:
            self.doc["optimizer"] = optimizer_block(optimizer, state=True)
        if model is not None and self.doc["model"] is not None:
            grads = launch_model.parameters(model)
            self.doc["model"].update(grads_bytes=grads["grads_bytes"], grads_by_dtype=grads["grads_by_dtype"])
        if self._count_hook is not None:
            self._count_hook.remove()
            self._count_hook = None
            self.doc["forwards_before_first_step"] = self._forwards[0]
        self._cost("first_step", t)
        self.write("first_step")

    def _optimizer_of(self, model: nn.Module):
        """The live optimizer holding most of the model's parameters, or None."""
        ids = {id(p) for p in model.parameters()}
        best, best_n = None, 0
        for ref in self._optimizers:
            opt = ref()
            if opt is None:
                continue
            n = sum(1 for g in opt.param_groups for p in g["params"] if id(p) in ids)
            if n > best_n:
                best, best_n = opt, n
        return best

    # ---- writing -----------------------------------------------------------------------------
    def _cost(self, what: str, t: float) -> None:
        self.doc["cost_ms"][what] = round((time.perf_counter() - t) * 1e3, 3)

    def _note(self, text: str) -> None:
        self.doc.setdefault("notes", []).append(text)
        self._say(text)
        self.write("note")

    def write(self, when: str) -> None:
        if when not in self.doc["written"]:
            self.doc["written"].append(when)
        self.doc["unix_s"] = time.time()
        try:
            write_atomic(self.path, json.dumps(self.doc, default=str))
        except OSError as e:
            if self.error is None:
                self.error = f"could not write {self.path.name} ({e.strerror or e})"
                self._say(self.error)


def _end_hook(ref):
    """The root's forward hook (a plain function: a copy of the model made by deepcopy shares it
    and must not carry the recorder along)."""
    def hook(module, args, output):
        rec = ref()
        if rec is not None and not muted():
            try:
                rec._forward_ended(output)
            except Exception as e:
                rec._note(f"the launch record could not finish the first forward ({type(e).__name__}: {e})")
    return hook


def _trainer(depth: int = 64) -> dict[str, Any]:
    """The trainer running the job (workbench.trainers), from the modules imported and the live
    objects on the stack of the model's first forward (each frame's ``self``, its classes' names),
    and the settings its live object holds."""
    import sys

    from workbench import trainers

    objs, classes = [], []
    f = sys._getframe(1)
    for _ in range(depth):
        if f is None:
            break
        obj = f.f_locals.get("self")
        if obj is not None and not isinstance(obj, (nn.Module, torch.Tensor)):
            objs.append(obj)
            classes += [f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__[:6]]
        f = f.f_back
    found = trainers.detect_process(list(sys.modules), classes)
    out: dict[str, Any] = {"trainer": found[0] if found else None, "trainers": found}
    t = trainers.get(found[0]) if found else None
    if t is not None:
        for obj in objs:
            if any(f"{c.__module__}.{c.__qualname__}" in t.classes for c in type(obj).__mro__):
                try:
                    out["trainer_settings"] = {k: v for k, v in t.read_config(obj).items()
                                               if isinstance(v, (bool, int, float, str)) or v is None}
                except Exception:
                    pass
                break
    return out


def _counter(box: list):
    """The root's forward pre-hook counting its forwards before the first optimizer step (a plain
    function, for the same reason as :func:`_end_hook`)."""
    def hook(module, args):
        if not muted():
            box[0] += 1
    return hook


def _pending_kwargs(root: nn.Module) -> dict | None:
    """A global pre-hook sees the positional arguments only: the keyword arguments of the call in
    progress are read from the caller's frame (``Module._call_impl(*args, **kwargs)``)."""
    import sys

    f = sys._getframe(1)
    for _ in range(8):
        if f is None:
            break
        if f.f_code.co_name in ("_call_impl", "_wrapped_call_impl") and f.f_locals.get("self") is root:
            kw = f.f_locals.get("kwargs")
            return dict(kw) if isinstance(kw, dict) else None
        f = f.f_back
    return None


__all__ = ["LaunchRecorder", "autocast_state", "describe_value", "optimizer_block"]
