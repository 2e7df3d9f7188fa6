"""What the capture runs beside the profiler, one part per question, at the session's moments.

A part subclasses :class:`Part` and overrides the moments it needs; each runs on the thread that
trains, inside the session, and its time is the capture's own (the row's ``capture_ms``):

- ``started(session)``: the session has started (``env_rank{r}.json`` written, the step source installed).
- ``step_ended(session, row)``: at every step boundary, once the step's row is made and the profiler
  has stepped; ``row`` holds the step's ``contract.STEP_COLUMNS`` (``gpu_step_ms`` comes later, in
  ``row_written``). ``session.step`` is already the next step's index. Runs every step: keep it cheap.
- ``row_written(session, row)``: a step's row as written to ``steps_rank{r}.csv`` (with ``gpu_step_ms``
  once the GPU reached the step's end; rows may come a few steps late on a GPU).
- ``failed(session, error)``: the script raised ``error``; ``stopped`` follows.
- ``stopped(session, failed)``: the session stops (the script's end, ``--max-steps``, a failure, a
  signal, or the rank handed over to the processes the script spawned).

Parts are made at :meth:`~workbench.capture.session.CaptureSession.start` by the factories in
:data:`PARTS`, in order; a factory returns None when its part has nothing to do in this run. A part
that raises is said once on stderr and dropped: the training goes on without it. A module of parts
registers its factory with :func:`register_part` when imported, and is named in :data:`PART_MODULES`
(imported at the first session's start, so that importing the session stays cheap).
"""

from __future__ import annotations

from typing import Any, Callable

CaptureSession = Any
"""A :class:`workbench.capture.session.CaptureSession` (not imported: the session imports this module)."""


class Part:
    """One thing the capture records or does beside the profiler (see the module doc)."""

    name = "part"

    def started(self, session: CaptureSession) -> None:
        pass

    def step_ended(self, session: CaptureSession, row: dict[str, Any]) -> None:
        pass

    def row_written(self, session: CaptureSession, row: dict[str, Any]) -> None:
        pass

    def failed(self, session: CaptureSession, error: BaseException) -> None:
        pass

    def stopped(self, session: CaptureSession, failed: bool) -> None:
        pass


PartFactory = Callable[[CaptureSession], "Part | None"]

PART_MODULES: tuple[str, ...] = ("workbench.capture.history", "workbench.capture.windows", "workbench.capture.hang",
                                 "workbench.capture.trainer", "workbench.capture.model_capture")
"""The modules whose parts every session runs (each registers its factory when imported)."""

PARTS: list[PartFactory] = []
"""The parts every session makes, in order (see :func:`register_part`)."""


def register_part(factory: PartFactory) -> PartFactory:
    """Add ``factory`` to :data:`PARTS` (once); usable as a decorator."""
    if factory not in PARTS:
        PARTS.append(factory)
    return factory


def make_parts(session: CaptureSession, say: Callable[[str], None]) -> list[Part]:
    """The parts of this run, made by :data:`PARTS`; a factory that raises is said and skipped."""
    import importlib

    for module in PART_MODULES:
        importlib.import_module(module)
    parts = []
    for factory in PARTS:
        try:
            part = factory(session)
        except Exception as e:
            say(f"{getattr(factory, '__name__', factory)} could not start ({type(e).__name__}: {e}); "
                "the training goes on without it")
            continue
        if part is not None:
            parts.append(part)
    return parts
