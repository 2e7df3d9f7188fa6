"""mid_run_slowdown on histories written by the test: its bands, its cause from the history, and from a
window opened after the change where the history does not say."""

from __future__ import annotations

import pytest

from workbench.diagnose.base import Context
from workbench.diagnose.rules.mid_run_slowdown import mid_run_slowdown


def _history(pct, kind="unknown", ranks=(0, 1)):
    after = round(5.0 * (1 + pct / 100), 3)
    return {"ranks": [0, 1], "steps": 2000, "method": "m",
            "change_points": [{"step": 1000, "before_ms": 5.0, "after_ms": after, "change_pct": pct, "ranks": list(ranks),
                               "cause": {"kind": kind, "ranks": [1] if kind != "unknown" else [], "detail": {}}}]}


def _window(first, comm_ms):
    vs = {"step_ms": {"launch": 5.0, "window": 7.0, "change_pct": 40.0},
          "compute_ms": {"launch": 3.0, "window": 3.1, "change_pct": 3.3},
          "communication_ms": {"launch": 1.0, "window": comm_ms, "change_pct": None}}
    return {"id": "w1", "trigger": "on_demand", "ranks": {"0": {"first_step": first, "last_step": first + 2}}, "vs_launch": vs}


@pytest.mark.unit
@pytest.mark.parametrize(("pct", "severity"), [(12.0, "warning"), (49.0, "warning"), (50.0, "critical")])
def test_bands(pct, severity):
    d = mid_run_slowdown(Context(breakdown=None, history=_history(pct, "data_wait")))
    assert d.severity == severity and d.ranks == [1]
    assert d.title.startswith(f"steps {pct:.0f}% slower from step 1,000") and "DataLoader wait rose on rank 1" in d.title


@pytest.mark.unit
def test_a_window_after_the_change_says_what_grew():
    launch = {"id": "launch", "ranks": {"0": {"first_step": 2, "last_step": 4}}}
    d = mid_run_slowdown(Context(breakdown=None, history=_history(40.0), opened_windows=[launch, _window(900, 9.0), _window(1200, 2.9)]))
    assert d.evidence["window"] == {"id": "w1", "category": "communication", "delta_ms": 1.9, "first_step": 1200}
    assert "window w1 (after it) against the launch window: communication +1.90 ms per step" in d.title


@pytest.mark.unit
def test_no_window_after_it_asks_for_one_and_a_speed_up_is_no_slowdown():
    d = mid_run_slowdown(Context(breakdown=None, history=_history(40.0), opened_windows=[_window(900, 9.0)]))
    assert "workbench capture RUN --steps 5" in d.recommendation and d.evidence["window"] is None
    assert mid_run_slowdown(Context(breakdown=None, history=_history(-30.0))) is None
    assert mid_run_slowdown(Context(breakdown=None)) is None
