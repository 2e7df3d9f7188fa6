"""The step sources that follow iterations: an optimizer's step, a backward call, a
``record_function`` range. :mod:`workbench.capture.steps` says what each means and picks one."""

from __future__ import annotations

import functools
import sys
import threading
from typing import Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from workbench.capture.quiet import muted

OnStep = Callable[[], None]
OnResolved = Callable[[str], None]


class StepSource:
    """Installs hooks that call ``on_step`` at each step boundary; :meth:`remove` undoes them."""

    spec: str = ""

    def __init__(self, on_step: OnStep, on_resolved: OnResolved) -> None:
        self.on_step, self.on_resolved = on_step, on_resolved

    def install(self) -> "StepSource":
        self.on_resolved(self.spec)
        return self

    def remove(self) -> None:
        pass

    def why_no_step(self) -> str:
        return f"no step boundary came from {self.spec}"


class OptimizerSteps(StepSource):
    spec = "optimizer"

    def __init__(self, on_step: OnStep, on_resolved: OnResolved) -> None:
        super().__init__(on_step, on_resolved)
        self.optimizer_id: int | None = None
        self._handle = None

    def install(self) -> "OptimizerSteps":
        self._handle = register_optimizer_step_post_hook(self._hook)
        return super().install()

    def _hook(self, optimizer, args, kwargs) -> None:
        if muted():  # the capture's own fake-tensor step (workbench.capture.quiet)
            return
        if self.optimizer_id is None:
            self.optimizer_id = id(optimizer)
        elif id(optimizer) != self.optimizer_id:
            return
        self.on_step()

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def why_no_step(self) -> str:
        return ("the script never called a torch.optim optimizer's step() (--steps-from optimizer); "
                "for a loop that updates weights by hand use --steps-from backward")


class BackwardSteps(StepSource):
    spec = "backward"

    def __init__(self, on_step: OnStep, on_resolved: OnResolved) -> None:
        super().__init__(on_step, on_resolved)
        self.calls = 0
        self._depth = 0
        self._lock = threading.Lock()
        self._orig = None

    def install(self) -> "BackwardSteps":
        self._orig = orig = torch.autograd.backward
        source = self

        @functools.wraps(orig)
        def backward(*args, **kwargs):
            if muted():  # the capture's own fake-tensor step (workbench.capture.quiet)
                return orig(*args, **kwargs)
            with source._lock:
                source._depth += 1
                outer = source._depth == 1
            try:
                orig(*args, **kwargs)
            finally:
                with source._lock:
                    source._depth -= 1
            # A backward inside a backward (reentrant checkpointing re-runs one per segment) is part
            # of the outer one, and create_graph=True builds a graph for a later backward (double
            # backward): neither ends a step. autograd.grad is another function and never counts.
            create_graph = args[3] if len(args) > 3 else kwargs.get("create_graph", False)
            if outer and not create_graph:
                source.calls += 1
                source.on_backward()

        torch.autograd.backward = backward
        return super().install()

    def on_backward(self) -> None:
        self.on_step()

    def remove(self) -> None:
        if self._orig is not None:
            torch.autograd.backward = self._orig
            self._orig = None

    def why_no_step(self) -> str:
        return "the script never called backward() (--steps-from backward); try annotation:NAME or time:SEC"


class AnnotationSteps(StepSource):
    """Wraps the profiler ops themselves, not the ``record_function`` class: the context manager,
    the decorator, direct ``torch.ops.profiler._record_function_enter_new`` calls and compiled graphs
    all go through them. The ``_op`` of each op object is swapped in place, so the objects that
    torch.compile compares against keep their identity."""

    def __init__(self, name: str, on_step: OnStep, on_resolved: OnResolved) -> None:
        super().__init__(on_step, on_resolved)
        self.name = name
        self.spec = f"annotation:{name}"
        self._open: dict[int, object] = {}
        self._patched: list[tuple[object, object]] = []

    def _patch(self, op, make) -> None:
        orig = op._op
        op._op = make(orig)
        self._patched.append((op, orig))

    def install(self) -> "AnnotationSteps":
        ops = torch.ops.profiler

        def enter(orig):
            def wrapped(*args, **kwargs):
                handle = orig(*args, **kwargs)
                if (args[0] if args else kwargs.get("name")) == self.name and not muted():
                    self._open[id(handle)] = handle  # kept alive so its id is not reused before exit
                return handle
            return wrapped

        def exit_(orig):
            def wrapped(*args, **kwargs):
                out = orig(*args, **kwargs)
                handle = args[0] if args else next(iter(kwargs.values()), None)
                if self._open.pop(id(handle), None) is not None:
                    self.on_step()
                return out
            return wrapped

        for packet in (ops._record_function_enter_new, ops._record_function_enter):
            for op in (packet, *(getattr(packet, o) for o in packet.overloads())):
                self._patch(op, enter)
        packet = ops._record_function_exit
        for op in (packet, *(getattr(packet, o) for o in packet.overloads())):
            self._patch(op, exit_)
        return super().install()

    def remove(self) -> None:
        for op, orig in reversed(self._patched):
            op._op = orig
        self._patched.clear()
        self._open.clear()

    def why_no_step(self) -> str:
        return f"no record_function({self.name!r}) range ended (--steps-from {self.spec}); check the name"


def _say(text: str) -> None:
    """One line on stderr; nothing when the script closed stderr."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass
