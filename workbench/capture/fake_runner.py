"""When and how the job's own model is measured without a GPU: ``fake_step_rank{r}.json``.

:func:`workbench.capture.fake_step.measure` runs one fake-tensor step of a copy of the live model.
This module decides when, in which layouts, and within what time:

- **when**: outside the steps the capture times — at the model's first training forward, before it
  runs (the launch record's hook; the job waits), and once the job has failed out of memory (while
  its traceback still holds the model). ``WORKBENCH_FAKE_STEP`` (:data:`MODES`): ``auto`` (the
  default) measures the job's layout at the first forward on a CUDA rank, and the alternatives there
  when the job's peak is predicted at :data:`RISK_FRACTION` of the device or more, or after an
  out-of-memory failure; a CPU rank (no device memory to run out of) only after an out-of-memory
  failure. ``on`` treats a CPU rank as a CUDA one; ``all`` measures the alternatives every time;
  ``off`` never measures. Rank 0 measures (the other ranks of a data-parallel job run the same step).
- **layouts**: the job's own; then each recomputation mode that recomputes more than the job's, then
  less (:data:`workbench.capture.fake_layouts.RECOMPUTE_MODES`), and the job's layout at half and a
  quarter of its micro-batch.
- **within**: ``WORKBENCH_FAKE_BUDGET_S`` seconds in all (:data:`BUDGET_S`), each measurement in a
  thread the job waits for, stopped at the budget by the fake step itself (its next op raises).
  A model whose code cannot run under fake tensors (data-dependent shapes: a per-expert loop that
  calls ``nonzero``; sharded parameters) is skipped with the error as the note.

The thread is muted (workbench.capture.quiet): its forward, backward and optimizer step are not the
job's, for the capture's hooks; its ops are kept out of the profiler's trace.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from workbench.capture import fake_layouts
from workbench.capture.quiet import mute, set_process_muted
from workbench.format import contract

BUDGET_S = 90.0
"""Seconds all of one rank's measurements may take (a 4 B model at 8,192 tokens: ~20 s a layout on a
2-core machine)."""
RISK_FRACTION = 0.85
"""A job predicted at this share of its device or more gets its alternatives measured at once (oom_risk
warns from 85 %)."""
MODES = ("auto", "on", "all", "off")
PARTS = (2, 4)
"""Micro-batch alternatives: the job's micro-batch divided by these."""
GRACE_S = 5.0
"""Past the budget, how long the job waits for a measurement to unwind before going on without it."""


def mode_from_env() -> str:
    v = (os.environ.get("WORKBENCH_FAKE_STEP") or "auto").strip().lower()
    return v if v in MODES else "auto"


class FakeRunner:
    """Measures rank 0's model in fake steps (see the module docstring) and writes the results."""

    def __init__(self, out: Path, rank: int, *, device_bytes: int | None, recording: Callable[[], bool],
                 say: Callable[[str], None] | None = None) -> None:
        self.path = Path(out) / contract.fake_step_name(rank)
        self.rank = rank
        self.mode = mode_from_env()
        try:
            self.budget = float(os.environ.get("WORKBENCH_FAKE_BUDGET_S") or BUDGET_S)
        except ValueError:
            self.budget = BUDGET_S
        self.device_bytes = device_bytes
        self.recording = recording
        self._say = say or (lambda text: None)
        self.spent = 0.0
        self.launch = None
        self.inputs: tuple | None = None
        self.doc: dict[str, Any] = {"schema_version": contract.FAKE_STEP_SCHEMA_VERSION, "rank": rank, "mode": self.mode,
                                    "budget_s": self.budget, "device_bytes": device_bytes, "measurements": [],
                                    "notes": [], "spent_s": 0.0}

    # ---- when --------------------------------------------------------------------------------
    def enabled(self, cuda: bool) -> bool:
        return self.rank == 0 and self.mode != "off" and (cuda or self.mode in ("on", "all"))

    def at_first_forward(self, launch, args: tuple, kwargs: dict) -> None:
        """The launch record's first-forward hook: remember the inputs' shapes; measure the job's
        layout (and the alternatives when it is predicted near the device's capacity)."""
        self.launch = launch
        self.inputs = (fake_layouts.spec_of(list(args)), fake_layouts.spec_of(dict(kwargs)))
        cuda = any(str(d).startswith("cuda") for d in (launch.doc["model"] or {}).get("params_by_device", {}))
        if not self.enabled(cuda):
            return
        if self.recording():  # the profiler records this step: our ops would be in its trace
            self.doc["notes"].append("the profiler recorded the first step: measured after the job instead")
            return
        self.doc["when"] = "first forward"
        job = self._measure("job", None, 1)
        if self.mode == "all" or (job and self._at_risk(job)):
            self._alternatives()

    def after(self, failed: bool, error: BaseException | None) -> None:
        """The job ended: after an out-of-memory failure, measure what was not measured yet."""
        oom = error is not None and _is_oom(error)
        if self.launch is None or self.inputs is None or not oom:
            self.write()
            return
        cuda = any(str(d).startswith("cuda") for d in (self.launch.doc["model"] or {}).get("params_by_device", {}))
        if self.rank != 0 or self.mode == "off":
            return
        self.doc.setdefault("after", "out of memory")
        if not any(m["layout"] == "job" for m in self.doc["measurements"]):
            self._measure("job", None, 1)
        self._alternatives()
        if not cuda:
            self.doc["notes"].append("a CPU rank: measured on the CPU build's kernels")
        self.write()

    def _at_risk(self, job: dict) -> bool:
        return bool(self.device_bytes) and job.get("peak_bytes", 0) >= RISK_FRACTION * self.device_bytes

    # ---- what --------------------------------------------------------------------------------
    def _alternatives(self) -> None:
        rec = (self.launch.doc.get("recompute") or {}).get("mode")
        order = [m for m in reversed(fake_layouts.RECOMPUTE_MODES) if m != rec]
        if rec in fake_layouts.RECOMPUTE_MODES:  # more recomputation first: the likelier to fit
            i = fake_layouts.RECOMPUTE_MODES.index(rec)
            order = list(reversed(fake_layouts.RECOMPUTE_MODES[i + 1:])) + list(reversed(fake_layouts.RECOMPUTE_MODES[:i]))
        done = {(m["layout"], m.get("part")) for m in self.doc["measurements"]}
        for mode in order:
            if (f"recompute {mode}", 1) not in done:
                self._measure(f"recompute {mode}", mode, 1)
        batch = fake_layouts.batch_of(self.inputs[0]) or fake_layouts.batch_of(self.inputs[1])
        for part in PARTS:
            if batch and batch % part == 0 and (f"micro-batch {batch // part}", part) not in done:
                self._measure(f"micro-batch {batch // part}", None, part)

    def _measure(self, layout: str, recompute: str | None, part: int) -> dict | None:
        left = self.budget - self.spent
        if left <= 1.0:
            self.doc["notes"].append(f"{layout}: not measured, the {self.budget:g} s budget is spent")
            return None
        model = self.launch.model_ref()
        if model is None:
            self.doc["notes"].append(f"{layout}: not measured, the model no longer exists")
            return None
        blocks = (self.launch.doc["model"] or {}).get("blocks") or {}
        vocab = _vocab(self.launch.doc["model"] or {})
        kw = dict(recompute=recompute, part=part, autocast=self.launch.doc.get("autocast"), vocab=vocab,
                  blocks_path=blocks.get("path"))
        box: dict[str, Any] = {}
        t0 = time.perf_counter()
        deadline = t0 + left
        thread = threading.Thread(target=_run, args=(box, model, self.launch.optimizer_ref(), self.inputs, kw, deadline),
                                  name="workbench-fake-step", daemon=True)
        set_process_muted(True)
        try:
            with _eager():
                thread.start()
                thread.join(left + GRACE_S)
            if thread.is_alive():  # past the budget outside any op: stop it at its next bytecode
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(SystemExit))
                thread.join(GRACE_S)
        finally:
            set_process_muted(False)
            del model
        took = time.perf_counter() - t0
        self.spent += took
        self.doc["spent_s"] = round(self.spent, 3)
        row: dict[str, Any] = {"layout": layout, "recompute": recompute or (self.launch.doc.get("recompute") or {}).get("mode"),
                               "part": part, "seconds": round(took, 3)}
        if "result" in box:
            row.update(box["result"])
            row.pop("device", None)
        else:
            row["error"] = box.get("error") or "did not finish within the budget"
        self.doc["measurements"].append(row)
        self.write()
        if "error" in row:
            self._say(f"workbench: the fake-tensor step ({layout}) was skipped: {row['error']}")
            return None
        return row

    def write(self) -> None:
        if not self.doc["measurements"] and not self.doc["notes"]:
            return
        tmp = self.path.with_suffix(".json.tmp")
        try:
            tmp.write_text(json.dumps(self.doc, default=str))
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)


def _eager():
    """While the job waits for a measurement, ``torch.compile`` runs nothing compiled
    (``set_stance("force_eager")``, process-wide): the measurement's forward is eager, as under the modes it
    runs in, so no compile in its thread fills the job's compile caches or tunes kernels for minutes
    (torchtitan compiles FlexAttention with max-autotune). Nothing changes where this torch has no stance
    or the job is inside a compiled region."""
    stance = getattr(torch.compiler, "set_stance", None)
    if stance is None or torch.compiler.is_compiling():
        return contextlib.nullcontext()
    try:
        return stance("force_eager")
    except Exception:  # noqa: BLE001 - a stance this torch refuses: the measurement runs as it would
        return contextlib.nullcontext()


def _run(box: dict, model, optimizer, inputs, kw: dict, deadline: float) -> None:
    """The measurement thread: muted, kept out of the profiler, its error kept as the note."""
    from workbench.capture.fake_step import measure

    try:
        with mute(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the copy's eager run (FlexAttention: "called without torch.compile")
            if hasattr(torch._C._autograd, "_enable_record_function"):
                torch._C._autograd._enable_record_function(False)  # this thread only
            box["result"] = measure(model, optimizer, inputs, deadline=deadline, **kw)
    except BaseException as e:  # noqa: BLE001 - any failure is a note, never the job's
        box["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}".rstrip(": ")
    finally:
        model = optimizer = None


def _vocab(model: dict) -> int | None:
    """The vocabulary: the config's, else the largest embedding table's rows."""
    cfg = model.get("config") or {}
    v = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
    if isinstance(v, int) and v > 0:
        return v
    rows = [r[1][0] for r in model.get("params", []) if r[4] == "Embedding" and len(r[1]) == 2]
    return max(rows) if rows else None


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


__all__ = ["BUDGET_S", "FakeRunner", "MODES", "RISK_FRACTION", "mode_from_env"]
