"""One training step of the job's own model, measured under ``FakeTensorMode``: memory and FLOPs,
no device memory touched.

:func:`measure` copies the live model with ``copy.deepcopy`` under ``FakeCopyMode`` (parameters
become fake tensors of the same shapes, dtypes and devices, tied ones stay tied: 0.13 s for a
4 B-parameter model after a real out-of-memory error, allocating nothing), puts it in the layout
asked for (:mod:`workbench.capture.fake_layouts`), builds an optimizer of the job's class over the
fake parameters (the job's parameter groups and ``defaults`` filtered by the constructor's
signature: AdamW's defaults hold keys its constructor refuses), makes its state with one untracked
step, and then tracks one step with PyTorch's ``MemTracker`` (``torch.distributed._tools``): forward
under the job's autocast, the loss, backward, the optimizer's step. The loss is the model's own when
it returns one (Hugging Face with ``labels``); when it returns logits over the vocabulary, a float32
cross-entropy over them (what torchtitan's and Hugging Face's trainers compute outside / inside the
model); otherwise the mean of its output (said in ``loss``).

What runs are the kernels' shape functions of the build at hand: on a CUDA build fake ``cuda``
tensors (its flash / efficient attention), on a CPU build the CPU's; no allocator rounding, no
fragmentation, no cuBLAS workspace: the peak is the allocated floor, not the reserved figure.
"""

from __future__ import annotations

import copy
import inspect
import time
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn

from workbench.capture import fake_layouts
from workbench.capture.fake_tally import OpTally

CATEGORIES = {"Parameter": "weights", "Buffer": "buffers", "Gradient": "gradients", "Activation": "activations",
              "Temp": "temporaries", "Optstate": "optimizer", "Other": "other"}
"""MemTracker's reference types, in the run's category names."""


def _tracker():
    """PyTorch's ``MemTracker``, with its per-module peaks left out: after every op it walks every
    module it tracks to update their peaks (thousands of modules × tens of thousands of ops on a large
    model), and only the step's peak is read here. Where its private fields differ (another torch),
    the tracker as shipped."""
    from torch.distributed._tools import mem_tracker as mt_mod

    base = mt_mod.MemTracker
    total = getattr(mt_mod, "_TOTAL_KEY", None)
    probe = base()
    if total is None or not all(hasattr(probe, a) for a in ("_curr_mem_snap", "_peak_mem", "_peak_mem_snap")):
        return probe

    class PeakOnly(base):
        def _update_peak_stats(self, peak_state) -> None:
            for dev, snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < snap[total]:
                    self._peak_mem[dev] = snap[total]
                    self._peak_mem_snap[dev] = dict(snap)

    return PeakOnly()


def _tracked(mode, out) -> None:
    """What PyTorch's ``MemTracker`` does with an op's outputs (their memory, by reference type, and the
    peak), for a higher-order op (FlexAttention) it has no rule for and the tally stepped it over for."""
    from torch.distributed._tools import mem_tracker as mt_mod
    from torch.utils._pytree import tree_map_only

    if not isinstance(mode, mt_mod.MemTracker):
        return
    try:
        ref = mt_mod._MemRefType
        bw = mode._mod_tracker.is_bw
        kind = ref.OPT if mode._in_opt else ref.TEMP if bw and not mode._in_ac else ref.ACT
        tree_map_only(torch.Tensor, lambda t: mode._track(kind, t), out)
        mode._update_peak_stats(mt_mod._ModState.PEAK_BW if bw else mt_mod._ModState.PEAK_FW)
    except AttributeError:  # another torch's private fields: these outputs go uncounted
        pass


def _strip_capture_hooks(model: nn.Module) -> None:
    """A deep copy carries the live modules' hooks along: the capture's own are dropped from it."""
    for m in model.modules():
        for attr in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            hooks = getattr(m, attr, None)
            if not hooks:
                continue
            for k, fn in list(hooks.items()):
                if str(getattr(fn, "__module__", "")).startswith("workbench."):
                    hooks.pop(k, None)


def fake_copy(model: nn.Module, mode) -> tuple[nn.Module, dict]:
    """A fake copy of ``model`` and the deepcopy memo (live tensor id → fake tensor)."""
    from torch._subclasses.fake_tensor import FakeCopyMode

    memo: dict = {}
    with FakeCopyMode(mode):
        fm = copy.deepcopy(model, memo)
    _strip_capture_hooks(fm)
    return fm, memo


def fake_optimizer(opt, model: nn.Module, memo: dict) -> tuple[torch.optim.Optimizer, str | None]:
    """An optimizer of ``opt``'s class over the fake parameters (call under the fake mode), and a
    note when another stood in (AdamW when the job's class cannot be rebuilt, or none was found)."""
    fake_ps = list({id(p): p for p in model.parameters() if p.requires_grad}.values())
    if opt is not None:
        groups = []
        for g in opt.param_groups:
            ps = [memo[id(p)] for p in g["params"] if id(p) in memo]
            if ps:
                groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": ps})
        try:
            sig = inspect.signature(type(opt).__init__).parameters
            kw = {k: v for k, v in getattr(opt, "defaults", {}).items() if k in sig and k != "params"}
            return type(opt)(groups, **kw), None
        except Exception as e:
            note = f"the job's {type(opt).__name__} could not be rebuilt over the fake copy ({type(e).__name__}): AdamW stands in"
    else:
        note = "no optimizer of the model's parameters was seen before its first forward: AdamW stands in"
    return torch.optim.AdamW(fake_ps, lr=1e-4, foreach=False), note


def _tensors(out: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    if hasattr(out, "to_tuple"):  # a transformers ModelOutput
        out = out.to_tuple()
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def loss_of(out: Any, vocab: int | None) -> tuple[torch.Tensor, str]:
    """The step's loss from the model's output, and how it was taken (see the module docstring)."""
    loss = out.get("loss") if isinstance(out, dict) or hasattr(out, "keys") else None
    if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad:
        return loss, "the model's own loss"
    ts = [t for t in _tensors(out) if t.is_floating_point() and t.requires_grad]
    scalars = [t for t in ts if t.numel() == 1]
    if scalars:
        return scalars[0], "the model's own loss"
    if not ts:
        raise ValueError("the model's output holds no tensor that needs a gradient")
    big = max(ts, key=lambda t: t.numel())
    if vocab and big.dim() >= 2 and big.shape[-1] == vocab:
        flat = big.flatten(0, -2).float()
        target = torch.zeros(flat.shape[0], dtype=torch.long, device=flat.device)
        return (torch.nn.functional.cross_entropy(flat, target),
                f"cross-entropy over the {vocab:,}-token vocabulary in float32 (the output {list(big.shape)} is logits)")
    return big.float().mean(), f"the mean of the output {list(big.shape)} (no loss and no logits over a known vocabulary)"


def _warm(model: nn.Module, opt) -> None:
    """The optimizer's state, as the job's first step made it (untracked)."""
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)


def _unfused(opt):
    """``opt`` rebuilt without its fused / foreach kernels, or None when it has neither."""
    groups = [{**g, "fused": False, "foreach": False} if ("fused" in g or "foreach" in g) else None for g in opt.param_groups]
    if any(g is None for g in groups):
        return None
    try:
        return type(opt)(groups)
    except Exception:
        return None


def _autocast(autocast: dict | None, device: str):
    if not autocast:
        return nullcontext()
    dev = "cuda" if device.startswith("cuda") and "cuda" in autocast else "cpu" if "cpu" in autocast else None
    if dev is None:
        return nullcontext()
    return torch.autocast(dev, dtype=getattr(torch, autocast[dev]))


def _gib_dict(snap: dict) -> dict[str, int]:
    """MemTracker's snapshot of one device as ``{category: bytes}`` plus ``total``."""
    out: dict[str, int] = {}
    for k, v in snap.items():
        key = getattr(k, "value", str(k))
        out[CATEGORIES.get(key, "total" if key == "Total" else key)] = int(v)
    return out


def measure(model: nn.Module, optimizer, inputs: Any, *, recompute: str | None = None, part: int = 1,
            autocast: dict | None = None, vocab: int | None = None, blocks_path: str | None = None,
            deadline: float | None = None) -> dict[str, Any]:
    """One fake step of ``model`` (the live one: it is copied) with ``optimizer``'s class over
    ``inputs`` (the forward's ``(args, kwargs)`` as :class:`~workbench.capture.fake_layouts.TensorSpec`
    trees). ``recompute``: a mode of :data:`~workbench.capture.fake_layouts.RECOMPUTE_MODES`, or None
    for the job's own; ``part``: the micro-batch as a part of the job's. Returns ``peak_bytes``,
    ``by_category`` (bytes at the peak), ``tally`` (:class:`~workbench.capture.fake_tally.OpTally`),
    ``loss``, ``notes``, ``seconds``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    t0 = time.perf_counter()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fm, memo = fake_copy(model, mode)
    out = measure_fake(fm, mode, optimizer, memo, inputs, recompute=recompute, part=part, autocast=autocast, vocab=vocab,
                       blocks_path=blocks_path, deadline=deadline)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


def measure_fake(fm: nn.Module, mode, optimizer, memo: dict, inputs: Any, *, recompute: str | None = None, part: int = 1,
                 autocast: dict | None = None, vocab: int | None = None, blocks_path: str | None = None,
                 deadline: float | None = None) -> dict[str, Any]:
    """:func:`measure` on a model already made of ``mode``'s fake tensors (``memo``: live tensor id →
    fake tensor, for the optimizer's groups; ``optimizer`` None: AdamW stands in)."""
    t0 = time.perf_counter()
    notes: list[str] = []
    if recompute is not None:
        if note := fake_layouts.set_recompute(fm, blocks_path, recompute):
            notes.append(note)
    fm.train()
    args_spec, kwargs_spec = inputs
    batch = fake_layouts.batch_of(args_spec) or fake_layouts.batch_of(kwargs_spec)
    device = str(next((p.device for p in fm.parameters()), "cpu"))
    tally = OpTally(deadline, stepped_over=_tracked)
    with mode:
        opt, note = fake_optimizer(optimizer, fm, memo)
        if note and optimizer is not None:
            notes.append(note)
        try:
            _warm(fm, opt)
        except Exception as e:  # a fused or foreach kernel the fake mode cannot run: the plain loop stands in
            opt = _unfused(opt)
            if opt is None:
                raise
            notes.append(f"the job's optimizer step could not run under fake tensors ({type(e).__name__}): its "
                         "per-parameter loop stands in (the same state, more temporaries)")
            _warm(fm, opt)
        args = fake_layouts.shrink(args_spec, batch, part)
        kwargs = fake_layouts.shrink(kwargs_spec, batch, part)
        mt = _tracker()
        mt.track_external(fm, opt)
        with mt, tally:
            with _autocast(autocast, device):
                out = fm(*args, **kwargs)
                loss, how = loss_of(out, vocab)
            del out  # the output is freed before backward, as training loops do (torchtitan's `del pred`)
            loss.backward()
            del loss
            tally.optimizer = True
            opt.step()
            opt.zero_grad(set_to_none=True)
            tally.optimizer = False
        snap = mt.get_tracker_snapshot("peak")
    dev_snap = next(iter(snap.values())) if snap else {}
    cats = _gib_dict(dev_snap)
    return {"peak_bytes": cats.pop("total", sum(cats.values())), "by_category": cats, "tally": tally.to_json(),
            "loss": how, "notes": notes, "seconds": round(time.perf_counter() - t0, 3),
            "micro_batch": None if batch is None else batch // part, "device": device,
            "optimizer": type(opt).__name__}


__all__ = ["CATEGORIES", "fake_copy", "fake_optimizer", "loss_of", "measure", "measure_fake"]
