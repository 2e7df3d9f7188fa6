"""Every op of a fake-tensor step, tallied: FLOPs and bytes by class and phase.

A ``TorchDispatchMode`` under the fake mode sees each aten op the step runs (shapes only). For each it
adds, to its class (``gemm``, ``attention``, ``memory``) and phase (``forward``, ``backward`` —
recomputed forwards included, they run inside backward — and ``optimizer``):

- FLOPs by the formulas of ``torch.utils.flop_counter`` (the ones ``FlopCounterMode`` uses), plus the
  two it lacks: grouped GEMMs (a mixture of experts' ``_grouped_mm``: each row meets one expert) and
  the CPU build's flash attention (``_scaled_dot_product_flash_attention_for_cpu``, counted as CUDA's);
  an attention call its formula rejects (grouped-query attention with fewer key/value heads than
  query heads, which ``flop_counter`` asserts against before PyTorch 2.13) by :func:`attention_flops`;
  causal attention halved (what its kernel executes; the trace's analysis counts it the same way);
- the dtype matmuls and attention run in (their first input's: under autocast the autocast dtype,
  not the parameters'), FLOPs by dtype (``compute_dtypes``): the roofline's peak;
- bytes: every input and output tensor's size (an in-place op's written inputs instead of its
  outputs; views move nothing and are skipped), the traffic a memory-bound kernel makes.

The planner's roofline turns the tally into time (workbench.calibration.fake_alternatives). The mode
also holds the measurement's deadline: past it, the next op raises :class:`Deadline` and the step
unwinds (the thread that runs it can be stopped no other way).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

CLASSES = ("gemm", "attention", "memory")
PHASES = ("forward", "backward", "optimizer")
GEMM = frozenset({"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_grouped_mm", "_scaled_grouped_mm", "convolution",
                  "_convolution", "convolution_backward", "cudnn_convolution", "convolution_overrideable"})
ATTENTION_PREFIXES = ("_scaled_dot_product", "_flash_attention", "_efficient_attention", "flex_attention")
FREE = frozenset({"detach", "alias", "lift_fresh", "_local_scalar_dense", "empty", "empty_strided", "empty_like",
                  "scalar_tensor", "_unsafe_view", "sym_size", "sym_stride", "sym_numel", "is_same_size"})
"""Ops that move no data worth counting (their outputs are filled lazily or are aliases)."""


class Deadline(Exception):
    """The measurement ran past its budget."""


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _bytes(t: torch.Tensor) -> int:
    try:
        return _numel(t.shape) * t.element_size()
    except Exception:
        return 0


def extra_flops(name: str, args: tuple) -> int | None:
    """FLOPs of the ops ``torch.utils.flop_counter`` does not count; None for others."""
    if name in ("_grouped_mm", "_scaled_grouped_mm") and len(args) >= 2:
        a, b = args[0], args[1]
        if a.dim() == 2 and b.dim() == 3:  # [M, K] x [E, K, N]: each row of a meets one expert
            return 2 * a.shape[0] * a.shape[1] * b.shape[2]
        if a.dim() == 2 and b.dim() == 2:  # [K, M] x [M, N] in groups of rows (the weights' gradient)
            return 2 * a.shape[0] * a.shape[1] * b.shape[1]
        if a.dim() == 3 and b.dim() == 2:
            return 2 * a.shape[1] * a.shape[2] * b.shape[1] * a.shape[0]
        return 0
    if name == "_scaled_dot_product_flash_attention_for_cpu" and len(args) >= 3:
        q, k, v = args[:3]
        return 4 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] * q.shape[3]
    if name == "_scaled_dot_product_flash_attention_for_cpu_backward" and len(args) >= 4:
        q, k = args[1], args[2]
        return 8 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] * q.shape[3]
    return None


def attention_flops(name: str, args: tuple) -> int:
    """An attention call's FLOPs from its query and key shapes ([batch, heads, seq, head_dim]; the
    key's heads may be fewer): 4·b·h·s_q·s_k·d forward (two matmuls), twice that backward (four); the
    backward ops take the output's gradient first."""
    q, k = (args[1], args[2]) if name.endswith("_backward") else (args[0], args[1])
    if q.dim() != 4 or k.dim() != 4:
        return 0
    b, h, sq, d = (int(x) for x in q.shape)
    n = 4 * b * h * sq * int(k.shape[2]) * d
    return 2 * n if name.endswith("_backward") else n


def _causal(func, args: tuple, kwargs: dict) -> bool:
    """The attention call's ``is_causal`` argument, wherever its schema puts it."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == "is_causal":
            return bool(args[i] if i < len(args) else kwargs.get("is_causal", False))
    return False


def run_higher_order(func, args: tuple, kwargs: dict, stepped_over: Callable[[Any, Any], None]) -> Any:
    """A higher-order op (FlexAttention's forward and backward) run under the modes below the caller's,
    as PyTorch dispatches it, except that a mode with no rule for it (PyTorch's ``MemTracker``, where
    PyTorch would raise) is stepped over and ``stepped_over(mode, out)`` is told of the outputs."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode_temporarily

    mode = _get_current_dispatch_mode()
    if mode is None or type(mode) in func.python_key_table or getattr(mode, "supports_higher_order_operators", False):
        return func(*args, **kwargs)
    with _pop_mode_temporarily() as popped:
        out = run_higher_order(func, args, kwargs, stepped_over)
    stepped_over(popped, out)
    return out


class OpTally(TorchDispatchMode):
    """FLOPs, bytes and op counts by (class, phase); ``phase`` is set to ``optimizer`` by the caller.
    Higher-order ops (FlexAttention) pass through it too (:func:`run_higher_order`; ``stepped_over``:
    what a mode below that takes none of them is told of their outputs)."""

    supports_higher_order_operators = True

    def __init__(self, deadline: float | None = None,
                 stepped_over: Callable[[Any, Any], None] | None = None) -> None:
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.registry = flop_registry
        self.stepped_over = stepped_over or (lambda mode, out: None)
        self.deadline = deadline
        self.optimizer = False
        self.flops = {(c, p): 0 for c in CLASSES for p in PHASES}
        self.bytes = {(c, p): 0 for c in CLASSES for p in PHASES}
        self.ops = {(c, p): 0 for c in CLASSES for p in PHASES}
        self.dtypes: dict[str, int] = {}

    def _phase(self) -> str:
        if self.optimizer:
            return "optimizer"
        task = getattr(torch._C, "_current_graph_task_id", None)
        return "backward" if task is not None and task() != -1 else "forward"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise Deadline("the fake-tensor step ran past its time budget")
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            out = run_higher_order(func, args, kwargs, self.stepped_over)
            try:
                self._count_higher_order(func, args, kwargs, out)
            except Exception:  # a formula that does not fit this call: its bytes and FLOPs are left out
                pass
            return out
        out = func(*args, **kwargs)
        try:
            self._count(func, args, kwargs, out)
        except Deadline:
            raise
        except Exception:  # a formula that does not fit this call: its bytes and FLOPs are left out
            pass
        return out

    def _count_higher_order(self, func, args, kwargs, out) -> None:
        """FlexAttention's forward and backward: the dense attention FLOPs of PyTorch's formula (its mask's
        sparsity is not known from shapes), class ``attention``; another higher-order op: its bytes."""
        name = getattr(func, "_name", "") or getattr(func, "__name__", "")
        flops = self.registry[func](*args, **kwargs, out_val=out) if func in self.registry else 0
        cls = "attention" if name.startswith(ATTENTION_PREFIXES) else "memory"
        self._add(cls, int(flops or 0), args, kwargs, out)

    def _add(self, cls: str, flops: int, args, kwargs, out, moved: int | None = None) -> None:
        if moved is None:
            moved = sum(_bytes(t) for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor))
        key = (cls, self._phase())
        self.flops[key] += int(flops or 0)
        self.bytes[key] += int(moved)
        self.ops[key] += 1
        if cls != "memory" and flops and args and isinstance(args[0], torch.Tensor):
            dt = str(args[0].dtype).removeprefix("torch.")
            self.dtypes[dt] = self.dtypes.get(dt, 0) + int(flops)

    def _count(self, func, args, kwargs, out) -> None:
        packet = func.overloadpacket
        name = packet.__name__
        if name in FREE or func.namespace == "prim" or getattr(func, "is_view", False) or any(
                r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns):
            return  # metadata (prim.device), views and aliases (_unsafe_view) move no data
        if name in GEMM:
            cls = "gemm"
        elif name.startswith(ATTENTION_PREFIXES):
            cls = "attention"
        else:
            cls = "memory"
        flops = extra_flops(name, args)
        if flops is None and packet in self.registry:
            try:
                flops = self.registry[packet](*args, **kwargs, out_val=out)
            except Exception:  # a formula that rejects this call: attention counted from its shapes, else none
                flops = attention_flops(name, args) if cls == "attention" else 0
        if cls == "attention" and flops and _causal(func, args, kwargs):
            flops //= 2  # a causal kernel skips the masked half (the executed count, as the trace's analysis)
        moved = sum(_bytes(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor))
        if func._schema.is_mutable:  # in place (a fused optimizer step, add_): the mutated inputs are written back
            for i, a in enumerate(func._schema.arguments):
                if a.alias_info is not None and a.alias_info.is_write:
                    v = args[i] if i < len(args) else kwargs.get(a.name)
                    moved += sum(_bytes(t) for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor))
        else:
            moved += sum(_bytes(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        self._add(cls, int(flops or 0), args, kwargs, out, moved)

    def to_json(self) -> dict[str, Any]:
        """``{class: {phase: {"flops", "bytes", "ops"}}}`` and the totals."""
        out: dict[str, Any] = {c: {p: {"flops": self.flops[(c, p)], "bytes": self.bytes[(c, p)], "ops": self.ops[(c, p)]}
                                   for p in PHASES} for c in CLASSES}
        out["flops_total"] = sum(self.flops.values())
        out["flops_forward"] = sum(v for (c, p), v in self.flops.items() if p == "forward")
        out["compute_dtypes"] = dict(self.dtypes)
        return out


__all__ = ["CLASSES", "Deadline", "OpTally", "PHASES", "attention_flops", "extra_flops"]
