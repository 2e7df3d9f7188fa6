"""What the rank's memory holds, recorded where it is cheap: ``memory_rank{r}.json``.

- **At the first optimizer step** (a global ``optimizer.step()`` post hook; one check per step after it):
  the bytes of the parameters, their gradients and the optimizer's state, walking the optimizer's
  parameter groups and ``optimizer.state`` (each storage counted once: views of one flat buffer,
  tied weights, FSDP's shards as their local tensor), per dtype; and on CUDA the allocator's own
  statistics (:data:`ALLOCATOR_KEYS`). A walk over the parameter list: well under a millisecond for
  hundreds of tensors, once per run.
- **On a CUDA out-of-memory error** (``torch._C._cuda_attach_out_of_memory_observer``, CUDA only):
  the allocator's statistics at the failure and what the observer is told (device, the allocation,
  the device's total and free bytes), bounded to those numbers; with ``--memory-history N``, the
  allocator's history is dumped to ``memory_snapshot_rank{r}.pickle`` there and then.
- **``--memory-history N``** (CUDA only): ``torch.cuda.memory._record_memory_history`` with at most
  N entries and Python-only stacks (C++ stacks made one dump take 461 s instead of 4 s:
  docs/measured.md), written at the failure and when the rank ends; the file opens in PyTorch's
  memory viewer (https://pytorch.org/memory_viz).

On CPU the parameter, gradient and optimizer bytes are measured the same way; there is no caching
allocator, so ``allocator`` is null and activations are not measured.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from workbench.capture.quiet import muted
from workbench.format import contract
from workbench.format.atomic import write_atomic

ALLOCATOR_KEYS = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                  "reserved_bytes.all.peak", "active_bytes.all.peak", "inactive_split_bytes.all.current",
                  "requested_bytes.all.peak", "num_alloc_retries", "num_ooms")
"""The allocator statistics kept (``torch.cuda.memory_stats`` keys): a bounded record."""
MAX_ERROR_CHARS = 4000


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank (FSDP2, tensor parallel); the tensor itself otherwise."""
    return getattr(t, "_local_tensor", t)


class _Bytes:
    """Bytes of tensors, each storage counted once."""

    def __init__(self, seen: set) -> None:
        self.seen = seen
        self.total = 0
        self.count = 0
        self.by_dtype: dict[str, int] = {}
        self.by_device: dict[str, int] = {}

    def add(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor):
            return
        t = _local(t)
        try:
            storage = t.untyped_storage()
            key, n = (storage.device.type, storage.data_ptr()), storage.nbytes()
        except (RuntimeError, NotImplementedError):  # a tensor without storage (meta, some subclasses)
            key, n = ("id", id(t)), t.numel() * t.element_size()
        if key in self.seen or key[1] == 0:
            return
        self.seen.add(key)
        self.total += n
        self.count += 1
        name = str(t.dtype).removeprefix("torch.")
        self.by_dtype[name] = self.by_dtype.get(name, 0) + n
        self.by_device[t.device.type] = self.by_device.get(t.device.type, 0) + n


def model_state_bytes(optimizer) -> dict[str, Any]:
    """Bytes of the parameters, gradients and optimizer state ``optimizer`` holds on this rank."""
    seen: set = set()
    params, grads, state = _Bytes(seen), _Bytes(seen), _Bytes(seen)
    numel = 0
    plist = [p for g in getattr(optimizer, "param_groups", ()) for p in g.get("params", ())]
    for p in plist:
        if isinstance(p, torch.Tensor):
            params.add(p)
            numel += _local(p).numel()
    for p in plist:
        if isinstance(p, torch.Tensor):
            grads.add(p.grad)
    for s in getattr(optimizer, "state", {}).values():
        if isinstance(s, dict):
            for v in s.values():
                state.add(v)
    return {"optimizer": type(optimizer).__name__, "params": len(plist), "params_numel": numel,
            "params_bytes": params.total, "params_by_dtype": params.by_dtype, "params_by_device": params.by_device,
            "grads_bytes": grads.total, "grads_by_dtype": grads.by_dtype, "grads_by_device": grads.by_device,
            "optimizer_bytes": state.total, "optimizer_by_dtype": state.by_dtype, "optimizer_by_device": state.by_device}


def allocator_stats() -> dict[str, int] | None:
    """The CUDA caching allocator's statistics (:data:`ALLOCATOR_KEYS`), or None without CUDA."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    stats = torch.cuda.memory_stats()
    return {k: int(stats[k]) for k in ALLOCATOR_KEYS if k in stats}


class MemoryRecorder:
    """Writes ``memory_rank{r}.json`` for one rank (see the module docstring)."""

    def __init__(self, out: Path, rank: int, history_entries: int = 0, say=None) -> None:
        self.path = Path(out) / contract.memory_name(rank)
        self.snapshot = Path(out) / contract.memory_snapshot_name(rank)
        self.rank = rank
        self.history_entries = history_entries
        self.doc: dict[str, Any] = {"rank": rank, "device": "cuda" if torch.cuda.is_available() else "cpu",
                                    "first_step": None, "oom": None, "memory_history": None}
        self._hook = None
        self._say = say or (lambda text: None)
        self.step = lambda: None  # the session's step counter, for the failure's step
        self.error: str | None = None

    def start(self) -> "MemoryRecorder":
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._hook = register_optimizer_step_post_hook(self._first_step)
        if torch.cuda.is_available() and hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
            torch._C._cuda_attach_out_of_memory_observer(self._on_oom)
        if self.history_entries:
            self._start_history()
        return self

    def _start_history(self) -> None:
        if not torch.cuda.is_available():
            self._say("--memory-history records the CUDA allocator's history: this rank has no GPU, nothing is recorded")
            self.doc["memory_history"] = {"entries": self.history_entries, "recorded": False, "why": "no CUDA device"}
            return
        t = time.perf_counter()
        torch.cuda.memory._record_memory_history(max_entries=self.history_entries, stacks="python")
        self.doc["memory_history"] = {"entries": self.history_entries, "stacks": "python", "recorded": True,
                                      "start_ms": round((time.perf_counter() - t) * 1e3, 3), "snapshot": None}

    def _first_step(self, optimizer, args, kwargs) -> None:
        # Left registered until stop(): removing a global hook while torch iterates its hooks raises.
        if self.doc["first_step"] is not None or muted():  # muted: the capture's own fake-tensor step
            return
        t = time.perf_counter()
        record = model_state_bytes(optimizer)
        record.update(step=self.step(), allocator=allocator_stats())
        record["walk_ms"] = round((time.perf_counter() - t) * 1e3, 3)
        self.doc["first_step"] = record
        self.write()

    def _on_oom(self, device: int, alloc: int, device_total: int, device_free: int) -> None:
        # Called by the allocator before it raises torch.OutOfMemoryError (its lock released, the GIL held).
        self.doc["oom"] = {"device": int(device), "tried_to_allocate_bytes": int(alloc), "device_total_bytes": int(device_total),
                           "device_free_bytes": int(device_free), "step": self.step(), "allocator": allocator_stats()}
        self.dump_history("oom")
        self.write()

    def dump_history(self, when: str) -> None:
        hist = self.doc.get("memory_history")
        if not hist or not hist.get("recorded"):
            return
        t = time.perf_counter()
        try:
            torch.cuda.memory._dump_snapshot(str(self.snapshot))
        except Exception as e:  # never in the way of the script's own error
            hist["error"] = f"{type(e).__name__}: {e}"[:MAX_ERROR_CHARS]
            return
        hist.update(snapshot=self.snapshot.name, written_at=when, dump_ms=round((time.perf_counter() - t) * 1e3, 3))

    def stop(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        hist = self.doc.get("memory_history")
        if hist and hist.get("recorded"):
            if hist.get("written_at") != "oom":
                self.dump_history("end")
            try:
                torch.cuda.memory._record_memory_history(enabled=None)
            except Exception:
                pass
        if self.doc["first_step"] is not None or self.doc["oom"] is not None or hist:
            self.write()

    def write(self) -> None:
        try:
            write_atomic(self.path, json.dumps(self.doc, indent=2))
        except OSError as e:
            if self.error is None:
                self.error = f"could not write {self.path.name} ({e.strerror or e})"
                self._say(self.error)


def failure_phase(exc: BaseException) -> str | None:
    """Where in the iteration ``exc`` was raised, from its traceback's innermost frame that says:
    ``backward`` (autograd's engine: torch/autograd), ``optimizer`` (torch/optim), ``communication``
    (a collective: torch.distributed's c10d or functional collectives), ``forward`` (a module's call),
    or None (elsewhere: data loading, the script's own code). Innermost first: a trainer's entry
    point wrapped by torch.distributed.elastic's ``@record`` (torchtitan's, torchrun scripts') is on
    every traceback and says nothing of where the step was."""
    tb = exc.__traceback__
    seen = []
    while tb is not None:
        seen.append(tb.tb_frame.f_code.co_filename.replace(os.sep, "/"))
        tb = tb.tb_next
    for f in reversed(seen):
        for marker, phase in _PHASES:
            if marker in f:
                return phase
    return None


_PHASES = (("/torch/autograd/", "backward"), ("/torch/optim/", "optimizer"),
           ("/torch/distributed/distributed_c10d.py", "communication"),
           ("/torch/distributed/_functional_collectives", "communication"),
           ("/torch/nn/modules/module.py", "forward"))


def describe_exit(exc: BaseException) -> dict[str, Any]:
    """The failure's type (module-qualified), phase and message, bounded."""
    t = type(exc)
    mod = t.__module__
    return {"type": t.__name__ if mod in ("builtins", "__main__") else f"{mod}.{t.__qualname__}",
            "phase": failure_phase(exc)}


def say(text: str) -> None:
    """One line on stderr; nothing (and no error) when the script closed stderr."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


__all__ = ["ALLOCATOR_KEYS", "MemoryRecorder", "allocator_stats", "describe_exit", "failure_phase", "model_state_bytes", "say"]
