"""The recomputation in force, from the live model: the launch record's ``recompute`` block.

Two kinds of evidence, both cheap:

- **static**, from the module tree: ``checkpoint_wrapper`` modules (torch.distributed's
  ``CheckpointWrapper``: torchtitan's, FSDP recipes') and the arguments they call
  ``torch.utils.checkpoint`` with (``use_reentrant``, a ``context_fn``); Hugging Face's
  ``gradient_checkpointing`` flags; compile's ``activation_memory_budget``. A ``context_fn`` made with
  ``create_selective_checkpoint_contexts`` is called once (a fresh context, so the job's own counters
  are not touched) and its policy asked about a list of ops (:data:`PROBE_OPS`), four ``mm`` calls in a
  row among them: what the policy saves (torchtitan's saves every other ``mm``, the attention kernels'
  outputs, reduce-scatters and ``max``).
- **dynamic**, during the model's first forward: a global module pre-hook asks, for each module
  called, whether it runs inside ``torch.utils.checkpoint`` — non-reentrant (its saved-tensors hook
  is on top), selective (its ``_CachingTorchDispatchMode`` is on the dispatch stack) or reentrant
  (gradients off inside a forward that has them on). This sees checkpoints a model calls in its own
  ``forward`` (nanoGPT variants, the bundled engine) that no wrapper shows.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from workbench.capture.launch_model import qualname

PROBE_OPS = ("aten.mm.default", "aten.mm.default", "aten.mm.default", "aten.mm.default", "aten.addmm.default",
             "aten.bmm.default", "aten._scaled_dot_product_flash_attention.default",
             "aten._scaled_dot_product_efficient_attention.default", "aten._scaled_dot_product_cudnn_attention.default",
             "aten._scaled_dot_product_flash_attention_for_cpu.default", "aten._grouped_mm.default", "aten.max.default",
             "aten.silu.default", "aten.gelu.default", "aten.mul.Tensor", "aten.add.Tensor", "aten._to_copy.default",
             "aten.native_layer_norm.default", "aten.embedding.default",
             "_c10d_functional.reduce_scatter_tensor.default")
"""The ops a selective policy is asked about (missing ones are skipped)."""
CHECKPOINT_HOOK = "_checkpoint_hook"
"""The class torch.utils.checkpoint's non-reentrant saved-tensors hooks belong to."""


def _op(name: str):
    ns, rest = name.split(".", 1)
    packet, _, overload = rest.rpartition(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), packet), overload)
    except (AttributeError, RuntimeError):
        return None


def probe_policy(context_fn) -> dict[str, Any] | None:
    """What a selective checkpoint policy saves: ``{"policy": qualname, "saves": [...], "recomputes": [...],
    "mm": "saves 2 of 4"}``; None when ``context_fn`` does not make selective contexts."""
    try:
        ctx = context_fn()
        mode = ctx[0] if isinstance(ctx, (tuple, list)) else None
        policy = getattr(mode, "policy_fn", None)
    except Exception:
        return None
    if policy is None:
        return None
    from torch.utils.checkpoint import CheckpointPolicy, SelectiveCheckpointContext

    out: dict[str, Any] = {"policy": getattr(policy, "__qualname__", qualname(policy)), "saves": [], "recomputes": []}
    mm = []
    arg = torch.empty(4, 4, device="meta")
    for name in PROBE_OPS:
        op = _op(name)
        if op is None:
            continue
        try:
            d = policy(SelectiveCheckpointContext(is_recompute=False), op, arg, arg)
        except Exception:
            continue
        if isinstance(d, bool):  # the older boolean policies: True saves
            saved = d
        else:
            saved = d in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)
        if name == "aten.mm.default":
            mm.append(saved)
            continue
        out["saves" if saved else "recomputes"].append(name)
    if mm:
        out["mm"] = f"saves {sum(mm)} of {len(mm)}"
        if any(mm):
            out["saves"].insert(0, "aten.mm.default" + ("" if all(mm) else f" ({sum(mm)} of {len(mm)})"))
        else:
            out["recomputes"].insert(0, "aten.mm.default")
    return out


def _kwargs(fn) -> dict:
    """The keyword arguments a ``functools.partial`` (checkpoint_wrapper's ``checkpoint_fn``, Hugging
    Face's ``_gradient_checkpointing_func``) binds."""
    return dict(getattr(fn, "keywords", None) or {})


def static(model: nn.Module, blocks: dict | None) -> dict[str, Any]:
    """What the module tree says (see the module docstring)."""
    wrapped, reentrant, context_fns = [], set(), {}
    hf_layers = hf_on = 0
    hf_kwargs: dict = {}
    # Hugging Face's checkpointed layers (GradientCheckpointingLayer); the model class holds the flag too
    layered = any(c.__name__ == "GradientCheckpointingLayer" for m in model.modules() for c in type(m).__mro__)
    for name, m in model.named_modules():
        if type(m).__name__ == "CheckpointWrapper":
            wrapped.append(name)
            kw = _kwargs(getattr(m, "checkpoint_fn", None))
            reentrant.add(bool(kw.get("use_reentrant", False)))
            cf = kw.get("context_fn")
            if cf is not None:
                context_fns.setdefault(getattr(cf, "__qualname__", qualname(cf)), cf)
        if isinstance(getattr(m, "gradient_checkpointing", None), bool) and (
                not layered or any(c.__name__ == "GradientCheckpointingLayer" for c in type(m).__mro__)):
            hf_layers += 1
            hf_on += bool(m.gradient_checkpointing)
            if m.gradient_checkpointing and not hf_kwargs:
                fn = getattr(m, "_gradient_checkpointing_func", None)
                hf_kwargs = {k: v for k, v in _kwargs(fn).items() if isinstance(v, (bool, int, str))}
                if fn is not None and _kwargs(fn).get("context_fn") is not None:
                    cf = _kwargs(fn)["context_fn"]
                    context_fns.setdefault(getattr(cf, "__qualname__", qualname(cf)), cf)
    out: dict[str, Any] = {"checkpoint_wrappers": len(wrapped)}
    if wrapped:
        out["wrapped"] = wrapped[:8] + ([f"… {len(wrapped) - 8} more"] if len(wrapped) > 8 else [])
        out["use_reentrant"] = sorted(reentrant)
    if hf_layers:
        out["hf_gradient_checkpointing"] = {"layers": hf_layers, "on": hf_on, **hf_kwargs}
    if context_fns:
        name, fn = next(iter(context_fns.items()))
        out["context_fn"] = name
        probe = probe_policy(fn)
        if probe:
            out["selective"] = probe
    return out


class Watch:
    """The dynamic evidence: which modules of the first forward ran inside a checkpoint, and every
    ``torch.utils.checkpoint`` call it made (a function checkpointed inside a module's forward —
    an attention core — runs no module of its own: the call is counted where checkpoint looks up
    its implementation, ``_checkpoint_without_reentrant_generator`` and ``CheckpointFunction``)."""

    def __init__(self, model: nn.Module) -> None:
        self.names = {id(m): n for n, m in model.named_modules()}
        self.inside: dict[str, str] = {}
        """module name → how it was checkpointed (non-reentrant, selective, reentrant)."""
        self.grad_root = torch.is_grad_enabled()
        self.calls = 0
        self.functions: dict[str, int] = {}
        """What was checkpointed (the function's qualified name) → calls."""
        self._patched: list = []

    def install(self) -> "Watch":
        import torch.utils.checkpoint as cp

        watch = self
        gen = cp._checkpoint_without_reentrant_generator

        def generator(fn, *args, **kwargs):
            watch._called(fn, selective=len(args) > 1 and args[1] is not cp.noop_context_fn
                          or kwargs.get("context_fn", cp.noop_context_fn) is not cp.noop_context_fn)
            return gen(fn, *args, **kwargs)

        fwd = cp.CheckpointFunction.__dict__["forward"]

        def forward(ctx, run_function, *args):
            watch._called(run_function, selective=False)
            return fwd.__func__(ctx, run_function, *args)

        cp._checkpoint_without_reentrant_generator = generator
        cp.CheckpointFunction.forward = staticmethod(forward)
        self._patched = [(cp, "_checkpoint_without_reentrant_generator", gen), (cp.CheckpointFunction, "forward", fwd)]
        return self

    def remove(self) -> None:
        for owner, name, orig in reversed(self._patched):
            setattr(owner, name, orig)
        self._patched = []

    def _called(self, fn, selective: bool) -> None:
        from workbench.capture.quiet import muted

        if muted():
            return
        inner = getattr(fn, "func", fn)  # a functools.partial (Hugging Face's, checkpoint_wrapper's)
        name = getattr(inner, "__qualname__", type(inner).__name__)
        if isinstance(inner, nn.Module) or getattr(inner, "__self__", None) is not None and isinstance(inner.__self__, nn.Module):
            owner = inner if isinstance(inner, nn.Module) else inner.__self__
            name = type(owner).__name__
        key = name + (" (selective)" if selective else "")
        self.functions[key] = self.functions.get(key, 0) + 1

    def see(self, module: nn.Module) -> None:
        name = self.names.get(id(module))
        if name is None:
            return
        self.calls += 1
        how = None
        top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
        hooks = top(False) if top is not None else None
        if hooks and CHECKPOINT_HOOK in getattr(hooks[0], "__qualname__", ""):
            how = "non-reentrant"
            from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

            if any(type(m).__name__ == "_CachingTorchDispatchMode" for m in _get_current_dispatch_mode_stack()):
                how = "selective"
        elif self.grad_root and not torch.is_grad_enabled():
            how = "reentrant"
        if how is not None:
            self.inside[name] = how

    def summary(self, blocks: dict | None) -> dict[str, Any]:
        hows = sorted(set(self.inside.values()))
        out: dict[str, Any] = {"modules_seen": self.calls, "modules_under_checkpoint": len(self.inside), "how": hows,
                               "checkpoint_calls": dict(list(self.functions.items())[:16])}
        if blocks:
            path = blocks["path"]
            prefix = f"{path}." if path else ""
            idx = set()
            for n in self.inside:
                if n.startswith(prefix):
                    head = n[len(prefix):].split(".", 1)[0]
                    idx.add(head)
            out["blocks_under_checkpoint"] = len(idx)
            out["blocks"] = blocks["count"]
            out["block_ids"] = sorted(idx, key=lambda s: (len(s), s))[:64]
        return out


def mode(static_: dict, dynamic: dict | None, blocks: dict | None) -> dict[str, Any]:
    """The recomputation in force, in the planner's words: ``none``, ``full`` (every block),
    ``selective-op`` (a policy saves some ops' outputs), ``selective-layer`` (every n-th block whole),
    ``partial`` (some modules, not whole blocks) or ``unknown``; ``basis`` says from what."""
    n = (blocks or {}).get("count") or 0
    sel = static_.get("selective")
    if dynamic and dynamic.get("modules_seen"):
        k = dynamic.get("blocks_under_checkpoint", 0)
        calls = dynamic.get("checkpoint_calls") or {}
        if dynamic.get("modules_under_checkpoint", 0) == 0 and not calls:
            return {"mode": "none", "basis": "no torch.utils.checkpoint call and no module inside one in the first forward"}
        if dynamic.get("modules_under_checkpoint", 0) == 0:
            what = ", ".join(f"{n} × {c}" for n, c in calls.items())
            return {"mode": "partial", "basis": f"torch.utils.checkpoint around functions, not modules: {what}"}
        if "selective" in dynamic.get("how", []) or sel:
            return {"mode": "selective-op", "blocks": k, "of": n, "basis": "the first forward's blocks ran under a "
                    "selective checkpoint policy (create_selective_checkpoint_contexts)"}
        if n and k == n:
            return {"mode": "full", "blocks": k, "of": n, "basis": "every block of the first forward ran inside torch.utils.checkpoint"}
        if n and k:
            every = n // k if k else None
            return {"mode": "selective-layer", "blocks": k, "of": n, "every": every,
                    "basis": f"{k} of {n} blocks of the first forward ran inside torch.utils.checkpoint"}
        return {"mode": "partial", "basis": f"{dynamic['modules_under_checkpoint']} modules (not whole blocks) ran inside "
                                            "torch.utils.checkpoint"}
    wrappers = static_.get("checkpoint_wrappers", 0)
    hf = static_.get("hf_gradient_checkpointing") or {}
    if sel:
        return {"mode": "selective-op", "blocks": wrappers, "of": n, "basis": "checkpoint_wrapper with a selective policy"}
    if wrappers and n:
        if wrappers >= n:
            return {"mode": "full", "blocks": wrappers, "of": n, "basis": "every block in a checkpoint_wrapper"}
        return {"mode": "selective-layer", "blocks": wrappers, "of": n, "every": n // wrappers,
                "basis": f"{wrappers} of {n} blocks in a checkpoint_wrapper"}
    if hf.get("on"):
        return {"mode": "full", "blocks": hf["on"], "of": n, "basis": "Hugging Face gradient checkpointing on"}
    if (hf and not hf.get("on")) or wrappers == 0:
        return {"mode": "none", "basis": "no checkpoint wrapper or gradient-checkpointing flag (the first forward not seen: "
                                         "a checkpoint called inside forward would not show)", "confidence": "medium"}
    return {"mode": "unknown", "basis": "checkpoint wrappers but no repeated blocks"}


__all__ = ["PROBE_OPS", "Watch", "mode", "probe_policy", "static"]
