"""A source checkout without ``ruptures`` (a GPU box running workbench from its tree) still analyses a run
with a step history: the history is shown, its change points are said not to be searched."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from workbench.analysis.history import summarise

pytestmark = pytest.mark.unit


def _history(n: int = 200, slow_from: int = 120) -> pd.DataFrame:
    ms = np.where(np.arange(n) < slow_from, 10.0, 14.0) + np.random.default_rng(0).normal(0, 0.1, n)
    return pd.DataFrame({"first_step": np.arange(n), "last_step": np.arange(n), "steps": 1, "step_ms": ms})


def test_change_points_found_with_ruptures():
    out = summarise({0: _history()})
    assert [p["step"] for p in out["change_points"]] == [120] and "note" not in out


def test_without_ruptures_the_history_stays_and_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "ruptures", None)  # import ruptures raises ImportError
    out = summarise({0: _history()})
    assert out["change_points"] == [] and out["steps"] == 200
    assert "ruptures is not installed" in out["note"]
