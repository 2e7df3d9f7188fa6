"""Expert load: how many tokens each expert of each mixture-of-experts layer got, per profiled step.

The job exposes the counts in one of two ways, found without changing the script:

- a module with a ``tokens_per_expert`` buffer (torchtitan's MoE, the engine's): the counts this
  step are what the buffer grew by across the module's forwards (it may be a running sum, or be
  zeroed by the job's own optimizer hook: the growth within each forward is what is counted);
- a router module (``top_k`` and ``num_experts`` attributes, as Hugging Face transformers 5.x's
  ``*TopKRouter`` classes of Mixtral, Qwen3-MoE, OLMoE and DeepSeek-V3 have) whose output holds
  its top-k expert ids, an integer tensor (tokens, top_k): each id is one token routed there.
  A router inside a module with the buffer is not counted twice.

How: while the profiler records (and only then: outside the window nothing is installed), a global
module forward pre-hook (``torch.nn.modules.module.register_module_forward_pre_hook``) names the
modules of each new root it meets (its ``named_modules()``; ``layer`` is that qualified name, a
DDP/compile wrapper's prefix removed) and puts forward hooks on the MoE layers. The hooks add the
counts into a per-layer tensor on the device (no host sync inside a step); at each recorded step's
end the counts are copied to the host asynchronously and written once the copy is done (a CUDA
event query, never a wait; all are written at the end). Forwards run inside backward (activation
recomputation) are skipped: they route the same tokens again.

The rows go to ``experts_rank{r}.csv`` (workbench.format.contract.EXPERT_COLUMNS): step, layer,
expert, tokens; no file when no MoE layer ran in the window.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.capture.quiet import muted
from workbench.format import contract

_WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


def _clean(name: str) -> str:
    """A module's name as the model names it: wrappers' prefixes (DDP, compile, checkpoint) removed."""
    for p in _WRAPPER_PREFIXES:
        name = name.replace(p, "")
    return name


def _compiled_anything() -> bool:
    """Whether torch.compile has compiled a frame in this process (dynamo's own counters)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None) or {}
    return bool(counters.get("frames", {}).get("ok", 0) or counters.get("stats", {}).get("unique_graphs", 0))


def _compiling() -> bool:
    """Whether torch.compile is tracing the caller (then a hook must leave no trace in the graph)."""
    return torch.compiler.is_compiling()


def _in_backward() -> bool:
    """Inside autograd's backward (a recomputed forward under activation checkpointing)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


def _router_experts(m: nn.Module) -> int | None:
    """The experts a router module picks among, or None when ``m`` is not one."""
    e, k = getattr(m, "num_experts", None), getattr(m, "top_k", None)
    if isinstance(e, int) and isinstance(k, int) and 0 < k <= e:
        return e
    return None


def _top_k_ids(out: Any, k: int) -> torch.Tensor | None:
    """The integer (tokens, k) tensor in a router's output, or None."""
    for t in out if isinstance(out, (tuple, list)) else (out,):
        if isinstance(t, torch.Tensor) and not t.is_floating_point() and t.dim() == 2 and t.shape[-1] == k:
            return t
    return None


class _Layer:
    """One MoE layer's counts this step, on the module's device."""

    def __init__(self, name: str, experts: int) -> None:
        self.name, self.experts = name, experts
        self.counts: torch.Tensor | None = None
        self.before: torch.Tensor | None = None

    def add(self, delta: torch.Tensor) -> None:
        delta = delta.detach().to(torch.int64)
        self.counts = delta if self.counts is None else self.counts + delta


class ExpertLoad:
    """Records per-expert token counts of one rank during the profiled steps (see the module doc)."""

    def __init__(self, out_dir: Path, rank: int) -> None:
        self.path = Path(out_dir) / contract.experts_name(rank)
        self._named: dict[int, str] = {}
        """id(module) → its name, for every module of every root met."""
        self._layers: dict[int, _Layer] = {}
        self._handles: list = []
        self._global = None
        self._pending: list[tuple[int, Any, list[tuple[_Layer, torch.Tensor]]]] = []
        self._file = None
        self._writer = None
        self.failed: OSError | None = None

    @property
    def recording(self) -> bool:
        return self._global is not None

    # ---- the window ----------------------------------------------------------------------------
    def step_ended(self, step: int | None, recorded: bool, record_next: bool) -> None:
        """At a step boundary: take the step's counts (``recorded``: it was profiled), install or
        remove the hooks for the next step, write what has reached the host."""
        if recorded and self.recording and step is not None:
            self._take(step)
        if record_next and not self.recording:
            self._install()
        elif not record_next and self.recording:
            self._remove()
        self._write(wait=False)

    def close(self) -> None:
        self._remove()
        self._write(wait=True)
        if self._file is not None:
            self._file.close()
            self._file = None

    def _install(self) -> None:
        if _compiled_anything():  # a new global hook would make dynamo recompile every compiled region
            return                # inside the recorded window: the capture's cost, not the job's
        self._global = nn.modules.module.register_module_forward_pre_hook(self._meet)

    def _remove(self) -> None:
        for h in [self._global, *self._handles]:
            if h is not None:
                h.remove()
        self._global, self._handles = None, []
        self._named.clear()  # modules may be rebuilt between windows: meet them again
        for layer in self._layers.values():
            layer.counts = layer.before = None
        self._layers.clear()

    # ---- hooks -------------------------------------------------------------------------------
    def _meet(self, module: nn.Module, args) -> None:
        # one dict lookup per module call inside the window; a module never met is a new root.
        # Inside a region torch.compile traces (torchtitan compiles each block, fullgraph=True) the
        # hooks do nothing: traced, the lookup would guard on each module's id and recompile every
        # block past dynamo's limit, a hard failure of the user's job; compiled experts go uncounted
        if _compiling() or id(module) in self._named or muted():  # muted: the capture's own fake-tensor step
            return
        owners: list[str] = []
        for name, m in module.named_modules():
            if id(m) in self._named:
                continue
            name = _clean(name)
            self._named[id(m)] = name
            buf = getattr(m, "tokens_per_expert", None)  # the module's own attribute, never a child's
            if isinstance(buf, torch.Tensor) and buf.dim() == 1:
                owners.append(name + ".")
                self._watch_buffer(m, _Layer(name, buf.numel()))
            elif (experts := _router_experts(m)) is not None and not any(name.startswith(o) for o in owners):
                self._watch_router(m, _Layer(name, experts))

    def _watch_buffer(self, m: nn.Module, layer: _Layer) -> None:
        self._layers[id(m)] = layer

        def pre(mod, args):
            if not _compiling() and not _in_backward():
                layer.before = mod.tokens_per_expert.detach().clone()

        def post(mod, args, out):
            if not _compiling() and layer.before is not None and not _in_backward():
                layer.add(mod.tokens_per_expert.detach() - layer.before)
                layer.before = None

        self._handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]

    def _watch_router(self, m: nn.Module, layer: _Layer) -> None:
        self._layers[id(m)] = layer

        def post(mod, args, out):
            if _compiling() or _in_backward():
                return
            ids = _top_k_ids(out, mod.top_k)
            if ids is None:
                return
            flat = ids.reshape(-1).to(torch.int64)
            counts = torch.zeros(layer.experts, dtype=torch.int64, device=flat.device)
            layer.add(counts.scatter_add_(0, flat, torch.ones_like(flat)))  # no sync, unlike bincount on a GPU

        self._handles.append(m.register_forward_hook(post))

    # ---- the counts to the file ----------------------------------------------------------------
    def _take(self, step: int) -> None:
        """Start the copies of this step's counts to the host; the layers start from zero again."""
        taken, event = [], None
        for layer in self._layers.values():
            if layer.counts is None:
                continue
            c = layer.counts
            if c.device.type == "cuda":
                host = c.to("cpu", non_blocking=True)  # into pinned memory: asynchronous
                event = torch.cuda.Event()
                event.record()
            else:
                host = c
            taken.append((layer, host))
            layer.counts = None
        if taken:
            self._pending.append((step, event, taken))

    def _write(self, wait: bool) -> None:
        while self._pending:
            step, event, taken = self._pending[0]
            if event is not None and not event.query():
                if not wait:
                    return
                event.synchronize()
            self._pending.pop(0)
            self._rows(step, taken)

    def _rows(self, step: int, taken: list[tuple[_Layer, torch.Tensor]]) -> None:
        if self.failed is not None:
            return
        try:
            if self._file is None:
                self._file = open(self.path, "w", newline="")
                self._writer = csv.writer(self._file)
                self._writer.writerow(contract.EXPERT_COLUMNS)
            for layer, counts in taken:
                for expert, tokens in enumerate(counts.tolist()):
                    self._writer.writerow((step, layer.name, expert, int(tokens)))
            self._file.flush()
        except OSError as e:  # disk full: the training goes on without the file
            self.failed = e
