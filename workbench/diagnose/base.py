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


Rule = Callable[..., "Diagnosis | None"]
