"""The Diagnosis record and the rule registry."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

SEVERITIES = ("info", "warning", "critical")


@dataclass(kw_only=True, slots=True)
class Diagnosis:
    """One named finding. ``evidence`` holds numbers with units in their keys."""

    id: str
    """Stable rule id, e.g. ``dataloader_stall``."""
    severity: str
    """info | warning | critical."""
    title: str
    """One line with the headline number: "DataLoader waits 34% of each step"."""
    evidence: dict[str, Any]
    """Numbers with units in the key (``dataloader_ms_per_step``, ``share_pct``) and where they
    come from (ranks, steps, time range in trace microseconds)."""
    recommendation: str
    """What to change, in the user's words."""
    estimated_gain: dict[str, Any]
    """Upper bound of the gain if the cause is removed: ``{"step_time_saved_pct", "speedup_max",
    "formula"}``."""
    fix: list[str] = field(default_factory=list)
    """Engine toggle keys that address it (``data.num_workers`` …)."""
    ranks: list[int] = field(default_factory=list)
    """Ranks where it was found."""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    @property
    def rank_order(self) -> int:
        return SEVERITIES.index(self.severity)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def severity_for(value: float, bands: tuple[tuple[float, str], ...]) -> str | None:
    """The severity of the highest band whose threshold ``value`` reaches, or None."""
    found = None
    for threshold, severity in bands:
        if value >= threshold:
            found = severity
    return found


@dataclass(kw_only=True)
class Context:
    """Everything a rule may read, built once per run (``workbench.verdict.analyze_run``).

    Frames the rules share are computed on first use and cached in ``cache``, so a rule that
    does not apply (no GPU, one rank) costs nothing.
    """

    breakdown: Any
    """analysis.steps.run_breakdown (BREAKDOWN_COLUMNS)."""
    run_config: dict | None = None
    traces: dict = field(default_factory=dict)
    """rank → workbench.load.Trace."""
    windows: dict = field(default_factory=dict)
    """rank → analysis.steps.step_windows."""
    steps: dict = field(default_factory=dict)
    """rank → steps_rank{r}.csv frame (contract.STEP_COLUMNS) or None."""
    capacity_bytes: int | None = None
    world_size: int = 1
    cache: dict = field(default_factory=dict)
    missed: list = field(default_factory=list)
    """(key, rank) of frames computed from a re-read trace (see :meth:`frame`)."""

    def frame(self, key: str, rank: int, fn: Callable):
        """``fn(trace, windows)`` for ``rank``, computed once.

        In a run analysed from per-rank summaries (:mod:`workbench.reduce`) the frames were
        computed next to each trace and ``cache`` holds them; ``traces`` then holds
        :class:`~workbench.reduce.RankSummary` objects. A frame no summary holds is computed
        from the rank's trace, read again on demand (``RankSummary.load``), with a note in
        ``missed``: the reducer's frame list should name it (the tests check none is missed).
        """
        k = (key, rank)
        if k not in self.cache:
            t = self.traces[rank]
            if not hasattr(t, "events"):
                self.missed.append(k)
                t = t.load()
            self.cache[k] = fn(t, self.windows[rank])
        return self.cache[k]

    def rank_has_gpu(self, rank: int) -> bool:
        """The rank's trace holds GPU events (kernels, copies)."""
        return self.frame("has_gpu", rank, lambda t, w: bool(t.events["is_gpu"].any()))

    @property
    def has_gpu(self) -> bool:
        return any(self.rank_has_gpu(r) for r in self.traces)

    def step_ms(self) -> float:
        return float(self.breakdown["step_ms"].mean()) if len(self.breakdown) else 0.0


def speedup(step_ms: float, saved_ms: float) -> float:
    """Upper-bound speed-up when ``saved_ms`` of each ``step_ms`` step disappears."""
    return round(step_ms / max(step_ms - saved_ms, 1e-9), 2) if step_ms > 0 else 1.0


def gain(step_ms: float, saved_ms: float, formula: str) -> dict[str, Any]:
    return {"step_time_saved_pct": round(100.0 * saved_ms / step_ms, 1) if step_ms > 0 else 0.0,
            "speedup_max": speedup(step_ms, saved_ms), "formula": formula}


Rule = Callable[..., "Diagnosis | None"]
