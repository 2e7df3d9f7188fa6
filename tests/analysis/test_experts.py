"""analysis.experts on counts written by hand: ranks added per layer, MaxVio, the chance level."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workbench.analysis.experts import ep_rank_imbalance, expert_load, layer_load, noise_maxvio

pytestmark = pytest.mark.unit


def rows(step, layer, tokens):
    return pd.DataFrame({"step": step, "layer": layer, "expert": range(len(tokens)), "tokens": tokens})


def test_ranks_are_added_before_maxvio():
    # rank 0 sends everything to expert 0, rank 1 to expert 1: each rank alone is maximally uneven,
    # the step's batch is balanced
    per = {0: rows(5, "l0", [8, 0]), 1: rows(5, "l0", [0, 8])}
    load = expert_load(per)
    assert load[["tokens", "max_tokens", "maxvio", "ranks"]].values.tolist() == [[16, 8, 0.0, 2]]
    # [8, 0] + [4, 4] = [12, 4]: mean 8, max 12
    load = expert_load({0: rows(5, "l0", [8, 0]), 1: rows(5, "l0", [4, 4])})
    assert load[["tokens", "max_tokens", "maxvio"]].values.tolist() == [[16, 12, 0.5]]


def test_maxvio_per_step_then_the_mean_over_steps():
    per = {0: pd.concat([rows(1, "a", [30, 10, 10, 10]), rows(2, "a", [10, 10, 10, 10]), rows(1, "b", [5, 5, 5, 5])])}
    load = expert_load(per)
    assert load.set_index(["step", "layer"])["maxvio"].to_dict() == {(1, "a"): 1.0, (2, "a"): 0.0, (1, "b"): 0.0}
    layers = layer_load(per).set_index("layer")
    assert list(layers.index) == ["a", "b"]  # the order the model runs them
    assert layers.loc["a", "maxvio"] == pytest.approx(0.5) and layers.loc["a", "maxvio_max"] == pytest.approx(1.0)
    assert layers.loc["a", "hottest_experts"][0] == 0
    assert layers.loc["a", "hottest_share_pct"] == pytest.approx(100 * (40 + 20 + 20) / 100)


def test_pipeline_stages_keep_their_own_layers():
    per = {0: rows(0, "blocks.0.moe", [4, 4]), 1: rows(0, "blocks.1.moe", [6, 2])}
    got = layer_load(per).set_index("layer")["maxvio"].to_dict()
    assert got == {"blocks.0.moe": 0.0, "blocks.1.moe": pytest.approx(0.5)}


def test_the_chance_level_of_a_balanced_router():
    assert noise_maxvio(8, 256) == pytest.approx(math.sqrt(2 * math.log(8) / 256))
    assert noise_maxvio(1, 100) == 0.0 and noise_maxvio(8, 0) == 0.0


def test_no_counts_no_rows():
    assert expert_load({0: None}).empty and layer_load({}).empty


def test_ep_rank_imbalance_groups_consecutive_experts_per_rank():
    """8 experts on 2 ranks (0-3, 4-7): a step whose tokens all go to rank 0's experts runs it at twice
    the mean; a balanced one at 1; the mean over (step, layer) is 1.5. On 3 ranks: 8 is not divisible."""
    rows = [(1, "l0", e, 10) for e in range(4)] + [(1, "l0", e, 0) for e in range(4, 8)]
    rows += [(2, "l0", e, 5) for e in range(8)]
    df = pd.DataFrame(rows, columns=["step", "layer", "expert", "tokens"])
    assert ep_rank_imbalance({0: df}, 2) == pytest.approx(1.5)
    assert ep_rank_imbalance({0: df}, 1) == pytest.approx(1.0)
    assert ep_rank_imbalance({0: df}, 3) is None
    assert ep_rank_imbalance({0: None}, 2) is None
