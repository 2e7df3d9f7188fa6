"""The one place the property-based tests take their hypothesis settings from.

CI runs a fixed, derandomised set of examples: the same commit draws the same inputs on every
machine (with the pinned hypothesis of ``pyproject.toml``'s ``test`` extra). Deeper fuzzing runs on
demand, with fresh random inputs and ten times the examples::

    WORKBENCH_FUZZ=deep python -m pytest tests/format/test_manifest.py tests/load -k fuzz

A failure found that way is reduced by hand and added as an ``@example`` of its test.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

__all__ = ["DEEP", "fuzz"]

DEEP = os.environ.get("WORKBENCH_FUZZ", "").lower() == "deep"
_SCALE = 10 if DEEP else 1


def fuzz(max_examples: int, *, shrink: bool = False, **kw) -> settings:
    """Settings for a property test of ``max_examples`` examples in CI (×10 and random under
    ``WORKBENCH_FUZZ=deep``). No deadline (CI machines are loaded) and no example database (the
    result may not depend on what an earlier run saw); no shrinking unless asked (a shrink re-runs
    an analysis hundreds of times)."""
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink or DEEP else [])
    checks = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
    return settings(derandomize=not DEEP, max_examples=max_examples * _SCALE, deadline=None, database=None,
                    suppress_health_check=checks, phases=phases, **kw)
