"""Which trainer runs this process and how it is configured: ``trainer_rank{r}.json``.

Read once, at the first step's end (the trainer's own frames are on the stack then: Lightning's
``Trainer.fit``, DeepSpeed's ``engine.step``, Hugging Face's ``Trainer._inner_training_loop``,
Accelerate's ``AcceleratedOptimizer.step``), else when the rank ends (its live objects, found among
the objects the garbage collector tracks, only for trainers whose modules were imported). Each
trainer's entry (:mod:`workbench.trainers`) says which live objects recognise it and reads its
settings off them with getattr alone; the document is bounded (settings, not the objects).

Schema (``workbench.trainers.SCHEMA``)::

    {"schema": "workbench.trainer/1", "rank": 0,
     "trainer": "deepspeed" | null,      # the outermost trainer recognised (workbench.trainers.names())
     "stack": ["lightning", "deepspeed"],  # every trainer recognised, outermost first
     "detected_by": "live object deepspeed.runtime.engine.DeepSpeedEngine" | "modules imported: …",
     "settings": {SETTING: value},       # workbench.trainers.SETTINGS names, plus e.g. strategy, optimizer
     "config": {…} | null}               # DeepSpeed's own JSON config where the engine holds it (≤ 16 KiB)
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Any

from workbench import trainers
from workbench.capture.parts import Part, register_part
from workbench.format import contract
from workbench.format.atomic import write_atomic

MAX_CONFIG_CHARS = 16 << 10
MAX_GC_OBJECTS = 5_000_000
"""Objects scanned for a trainer's live object when the rank ends (a few hundred ms at most)."""


def _names(obj: Any) -> list[str]:
    return [f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__]


def _live_on_stack(wanted: set[str]) -> dict[str, Any]:
    """``module.Class`` → a live object of it among the locals of the frames on this thread's stack."""
    found: dict[str, Any] = {}
    f = sys._getframe(1)
    while f is not None:
        for v in list(f.f_locals.values()):
            for n in _names(v) if not isinstance(v, (int, float, str, bytes, list, dict, tuple)) else ():
                if n in wanted and n not in found:
                    found[n] = v
        f = f.f_back
    return found


def _live_in_heap(wanted: set[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    objs = gc.get_objects()
    for o in objs[:MAX_GC_OBJECTS]:
        cls = type(o)
        if cls.__module__.split(".")[0] not in _roots(wanted):
            continue
        for n in _names(o):
            if n in wanted and n not in found:
                found[n] = o
    return found


def _roots(wanted: set[str]) -> set[str]:
    return {w.split(".")[0] for w in wanted}


def detect(stack: bool = True) -> dict[str, Any]:
    """The trainer document (module docstring) for this process, from its stack (``stack``) or heap."""
    mods = set(sys.modules)
    wanted = {c for t in trainers.all_trainers() if any(m in mods for m in t.modules) for c in t.classes}
    live = _live_on_stack(wanted) if stack else {}
    if not live and wanted:
        live = _live_in_heap(wanted)
    stack_ = trainers.detect_process(mods, live)
    doc: dict[str, Any] = {"schema": trainers.SCHEMA, "trainer": stack_[0] if stack_ else None, "stack": stack_,
                           "detected_by": None, "settings": {}, "config": None}
    if live:
        doc["detected_by"] = "live object " + ", ".join(sorted(live))
    elif stack_:
        doc["detected_by"] = "modules imported: " + ", ".join(m for t in stack_ for m in trainers.get(t).modules if m in mods)
    settings: dict[str, Any] = {}
    for name in reversed(stack_):  # the outermost trainer's reading wins where two read one setting
        t = trainers.get(name)
        for cls, obj in live.items():
            if cls in t.classes:
                try:
                    settings.update({k: v for k, v in t.read_config(obj).items() if _plain(v)})
                except Exception as e:  # a trainer's attribute that raises: the rest is still read
                    settings.setdefault("read_errors", []).append(f"{name}: {type(e).__name__}")
                if name == "deepspeed" and isinstance(getattr(obj, "config", None), dict):
                    text = json.dumps(obj.config, default=str)
                    doc["config"] = json.loads(text) if len(text) <= MAX_CONFIG_CHARS else None
    doc["settings"] = settings
    return doc


def _plain(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str)) or (isinstance(v, list) and all(isinstance(x, str) for x in v))


class TrainerRecord(Part):
    """Writes ``trainer_rank{r}.json`` once: at the first step's end, else when the rank ends (a part
    of the capture: workbench.capture.parts)."""

    name = "trainer record"

    def __init__(self, out: Path, rank: int) -> None:
        self.path = Path(out) / contract.trainer_name(rank)
        self.rank = rank
        self.tried = False
        self.written = False
        self.error: str | None = None

    def step_ended(self, session: Any = None, row: Any = None) -> None:
        """The first step looks at the stack (once; a plain loop costs one walk)."""
        if not self.tried:
            self.tried = True
            self._write(stack=True, found_only=True)

    def stopped(self, session: Any = None, failed: bool = False) -> None:
        """What the first step did not find, looked for among the live objects; nothing for a
        process that handed its rank over to the ones it spawned (they write their own)."""
        if getattr(session, "handed_over", False):
            self.path.unlink(missing_ok=True)
        elif not self.written:
            self._write(stack=False, found_only=False)

    def _write(self, stack: bool, found_only: bool) -> None:
        try:
            doc = detect(stack=stack)
        except Exception as e:  # never let recognition stop the training
            self.error = f"{type(e).__name__}: {e}"
            return
        if doc["trainer"] is None and found_only:
            return
        self.written = True
        doc["rank"] = self.rank
        try:
            write_atomic(self.path, json.dumps(doc, indent=2, default=str))
        except OSError as e:
            self.error = f"could not write {self.path.name}: {e.strerror or e}"


@register_part
def trainer_record(session: Any) -> TrainerRecord:
    return TrainerRecord(session.out, session.rank)
