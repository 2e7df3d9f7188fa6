"""Change points of the step history (workbench.analysis.history): a committed real run that slows by
~40 % from step 1,000, synthetic series with a known change, and the cause of a change per rank."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import DATA
from workbench.analysis.history import rank_changes, summarise

SLOWDOWN = DATA / "history" / "slowdown_1500_rank0.csv.gz"
"""`workbench profile tests/scripts/long_job.py --steps 1500 --slow-from 1000 --slowdown 0.4 --base-ms 20`
on this 2-core machine while other jobs loaded it (load average ~12): the script's own medians were
23.382 ms before step 1,000 and 31.846 ms from it (its printout, ``long_job: before_ms=… after_ms=…``)."""
OWN_BEFORE_MS, OWN_AFTER_MS = 23.382, 31.846


def _rows(step_ms, **cols) -> pd.DataFrame:
    n = len(step_ms)
    df = pd.DataFrame({"first_step": np.arange(n), "last_step": np.arange(n), "steps": 1, "step_ms": step_ms,
                       "profiled": 0})
    for k, v in cols.items():
        df[k] = v
    return df


def _noisy(n, at, before, after, seed=0, noise=0.05):
    rng = np.random.default_rng(seed)
    base = np.where(np.arange(n) >= at, after, before)
    return base * (1 + rng.uniform(-noise, noise, n))


@pytest.mark.committed
def test_a_real_run_that_slows_from_step_1000_has_its_change_there():
    s = summarise({0: pd.read_csv(SLOWDOWN)})
    cps = s["change_points"]
    assert len(cps) == 1, cps
    c = cps[0]
    assert abs(c["step"] - 1000) <= 2
    own = 100 * (OWN_AFTER_MS / OWN_BEFORE_MS - 1)
    assert abs(c["change_pct"] - own) <= 0.10 * own, (c, own)
    assert s["steps"] == 1500 and s["rows"] == 1500 and not s["aggregated"]


@pytest.mark.unit
@pytest.mark.parametrize("seed", range(5))
def test_a_known_change_is_found_at_its_step_with_its_size(seed):
    ms = _noisy(1500, 1000, 5.0, 7.0, seed)
    ms[[200, 640, 1200]] *= 8  # stalled steps (a checkpoint, an export) are no change
    (c,) = rank_changes(_rows(ms))
    assert abs(c["step"] - 1000) <= 2 and abs(c["change_pct"] - 40) <= 4


@pytest.mark.unit
@pytest.mark.parametrize("seed", range(5))
def test_steady_noise_has_no_change(seed):
    assert rank_changes(_rows(_noisy(3000, 10**9, 5.0, 5.0, seed, noise=0.15))) == []


@pytest.mark.unit
def test_a_change_smaller_than_ten_percent_is_not_reported():
    assert rank_changes(_rows(_noisy(2000, 1000, 5.0, 5.3, 1, noise=0.01))) == []


@pytest.mark.unit
def test_a_rank_whose_data_wait_rose_is_the_cause_of_the_jobs_slowdown():
    n, at = 800, 500
    ranks = {}
    for r in range(4):
        wait = np.where((np.arange(n) >= at) & (r == 2), 3.0, 0.1)
        ranks[r] = _rows(_noisy(n, at, 5.0, 8.0, r), data_wait_ms=wait, cpu_ms=1.0)
    (c,) = summarise(ranks)["change_points"]
    assert abs(c["step"] - at) <= 2 and c["ranks"] == [0, 1, 2, 3]
    assert c["cause"]["kind"] == "data_wait" and c["cause"]["ranks"] == [2]


@pytest.mark.unit
def test_a_gpu_whose_clocks_fell_is_the_cause():
    n, at = 800, 300
    ranks = {r: _rows(_noisy(n, at, 5.0, 6.5, r), sm_clock_mhz=np.where((np.arange(n) >= at) & (r == 1), 1410.0, 1980.0),
                      gpu_temp_c=np.where((np.arange(n) >= at) & (r == 1), 88.0, 70.0), throttle_reasons=1)
             for r in range(2)}
    (c,) = summarise(ranks)["change_points"]
    assert c["cause"]["kind"] == "gpu_clocks" and c["cause"]["ranks"] == [1]
    assert c["cause"]["detail"]["hotter_ranks"] == [1]


@pytest.mark.unit
def test_one_rank_alone_slower_is_a_straggler_onset_on_that_rank():
    n, at = 800, 400
    ranks = {r: _rows(_noisy(n, at if r == 3 else 10**9, 5.0, 7.5, r)) for r in range(4)}
    (c,) = summarise(ranks)["change_points"]
    assert c["ranks"] == [3] and c["cause"] == {"kind": "rank", "ranks": [3], "detail": c["cause"]["detail"]}


@pytest.mark.unit
def test_profiled_blocks_and_the_first_steps_are_left_out():
    ms = _noisy(600, 10**9, 5.0, 5.0, 3)
    ms[:3] = 900.0  # start-up
    df = _rows(ms)
    df.loc[100:104, "step_ms"] *= 3  # the profiler's window
    df.loc[100:104, "profiled"] = 1
    assert rank_changes(df) == []
