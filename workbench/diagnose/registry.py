"""The rule registry: each rule registers itself where it is defined, with what the docs say of it.

A rule is a function ``rule(ctx: Context) -> Diagnosis | None`` in its own module under
``workbench/diagnose/rules/``, decorated with :func:`rule`::

    @rule("host_sync", reads=(SYNC_GAPS, frames.WINDOWS), group="host",
          summary="GPU idle after `cudaStreamSynchronize`/`.item()` inside steps",
          threshold="5 / 10 / 20 % of step", source="as dataloader_stall")
    def host_sync(ctx: Context) -> Diagnosis | None: ...

The registry keeps the order the rules registered in (``workbench.diagnose.rules`` imports their
modules in one list): the order they run in, which the final sort by severity and gain keeps for
ties. ``workbench.diagnose.RULES`` / ``READS``, the app's efficiency page and docs/diagnoses.md's rule table
(:func:`markdown_table`, ``python -m workbench.diagnose --table``) all read it, so nothing lists the
rules by hand.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from workbench.analysis.frames import Frame
from workbench.diagnose.base import Context, Diagnosis, reads as declare_reads

GROUPS = {
    "failure": "the job ended with an error: out of memory, a collective timeout, a crash",
    "input": "the device waits on the input pipeline",
    "distributed": "ranks wait on communication or on each other",
    "memory": "device memory against its capacity",
    "host": "GPU time lost to the host: launches, syncs, pageable copies",
    "stability": "the training itself goes wrong: loss and gradient spikes",
    "efficiency": "the busy GPU does slow or needless work (the app's Efficiency page)",
}
"""What a rule is about: ``group`` of :func:`rule`."""

TABLE_HEADER = ("| id | signal | info / warning / critical | sources |", "|---|---|---|---|")


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One registered rule and what the docs say of it."""

    id: str
    """The rule's id: the function's name and the ``Diagnosis.id`` it emits."""
    fn: Callable[[Context], Diagnosis | None]
    """The rule itself: ``fn(ctx) -> Diagnosis | None``."""
    reads: tuple[Frame, ...]
    """The per-rank frames it reads (what workbench.pipeline.reduce computes for it)."""
    group: str
    """One of :data:`GROUPS`."""
    summary: str
    """The signal, one line (docs/diagnoses.md's rule table)."""
    threshold: str
    """Its info / warning / critical levels, one line."""
    source: str
    """Where the thresholds come from, one line (the module docstring says more)."""
    also: tuple[str, ...] = ()
    """Other ids its diagnoses may carry (``low_gpu_utilization`` names itself ``host_bound``
    when small kernels set the pace)."""
    residual: bool = False
    """It measures the device's idle that no other finding explains: it runs after the others and
    reads ``Context.explained`` (workbench.diagnose.explained)."""

    @property
    def emits(self) -> tuple[str, ...]:
        """Every ``Diagnosis.id`` the rule may return."""
        return (self.id, *self.also)

    @property
    def module(self) -> str:
        return self.fn.__module__


_RULES: dict[str, Rule] = {}


def rule(id: str, *, reads: tuple[Frame, ...] = (), group: str, summary: str, threshold: str, source: str,
         also: tuple[str, ...] = (), residual: bool = False) -> Callable:
    """Register the decorated function as rule ``id``: it reads only the frames in ``reads``
    (``ctx.reading`` names any other it reads) and takes the one argument every rule takes, the
    run's Context; ``residual``: it runs after the others, on the idle they do not explain.
    Registering an id again from another function is an error; from the same module and name (a
    module imported again) replaces the entry in place."""
    if group not in GROUPS:
        raise ValueError(f"rule {id!r}: group must be one of {tuple(GROUPS)}, got {group!r}")
    for name, text in (("summary", summary), ("threshold", threshold), ("source", source)):
        if not text or "|" in text or "\n" in text:
            raise ValueError(f"rule {id!r}: {name} must be one non-empty line without '|' (a table cell)")

    def register(fn: Callable) -> Callable:
        params = list(inspect.signature(fn).parameters.values())
        if len(params) != 1 or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
            raise TypeError(f"rule {id!r}: a rule takes one argument, the run's Context (rule(ctx)); "
                            f"{fn.__qualname__} takes {inspect.signature(fn)}")
        if fn.__name__ != id:
            raise ValueError(f"rule {id!r}: the function must be named as its id, not {fn.__name__!r}")
        old = _RULES.get(id)
        if old is not None and (old.fn.__module__, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"rule {id!r} is already registered by {old.module}")
        taken = {e: r.id for r in _RULES.values() if r.id != id for e in r.emits}
        if clash := [e for e in (id, *also) if e in taken]:
            raise ValueError(f"rule {id!r}: ids {clash} are already emitted by {[taken[e] for e in clash]}")
        declare_reads(*reads)(fn)  # fn.reads: what Context.reading checks
        _RULES[id] = Rule(id=id, fn=fn, reads=tuple(reads), group=group, summary=summary, threshold=threshold,
                          source=source, also=tuple(also), residual=residual)
        return fn
    return register


def registered() -> tuple[Rule, ...]:
    """Every registered rule, in the order they registered (the order they run in)."""
    return tuple(_RULES.values())


def get(id: str) -> Rule:
    return _RULES[id]


def unregister(id: str) -> Rule:
    """Remove rule ``id`` (a rule a test registered for a while); returns its entry."""
    return _RULES.pop(id)


def group_ids(group: str) -> tuple[str, ...]:
    """The diagnosis ids the rules of ``group`` may emit, in registry order."""
    if group not in GROUPS:
        raise ValueError(f"group must be one of {tuple(GROUPS)}, got {group!r}")
    return tuple(e for r in _RULES.values() if r.group == group for e in r.emits)


def markdown_table() -> str:
    """docs/diagnoses.md's rule table: one row per registered rule, in registry order."""
    rows = [f"| {' / '.join(f'`{e}`' for e in r.emits)} | {r.summary} | {r.threshold} | {r.source} |"
            for r in _RULES.values()]
    return "\n".join((*TABLE_HEADER, *rows)) + "\n"
