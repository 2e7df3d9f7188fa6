"""The fake step's op tally: the dtype its matmuls run in (the autocast dtype, not the parameters'),
and attention counted from its shapes where PyTorch's FLOP formula rejects the call."""

from __future__ import annotations

import pytest
import torch

from workbench.capture.fake_tally import OpTally, attention_flops

pytestmark = pytest.mark.unit


def test_matmuls_under_autocast_are_counted_in_the_autocast_dtype():
    layer = torch.nn.Linear(64, 64)  # float32 parameters
    x = torch.randn(8, 64)
    with OpTally() as tally, torch.autocast("cpu", dtype=torch.bfloat16):
        layer(x).sum().backward()
    dtypes = tally.to_json()["compute_dtypes"]
    assert max(dtypes, key=dtypes.get) == "bfloat16"
    with OpTally() as plain:
        layer(x).sum().backward()
    assert set(plain.to_json()["compute_dtypes"]) == {"float32"}


def test_grouped_query_attention_is_counted_from_its_shapes():
    q, k = torch.empty(2, 32, 128, 64, device="meta"), torch.empty(2, 8, 128, 64, device="meta")
    forward = attention_flops("_scaled_dot_product_flash_attention", (q, k, k))
    assert forward == 4 * 2 * 32 * 128 * 128 * 64  # every query head meets the keys of its group
    grad = torch.empty_like(q)
    assert attention_flops("_scaled_dot_product_flash_attention_backward", (grad, q, k, k)) == 2 * forward


def test_an_attention_call_whose_formula_raises_is_counted_from_its_shapes(monkeypatch):
    import workbench.capture.fake_tally as ft

    q, k = torch.randn(1, 4, 16, 8), torch.randn(1, 4, 16, 8)
    monkeypatch.setattr(ft, "extra_flops", lambda name, args: None)  # the CPU kernel through the registry
    tally = OpTally()
    tally.registry = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: lambda *a, **kw: 1 / 0}
    with tally:
        torch.nn.functional.scaled_dot_product_attention(q, k, k)
    att = tally.to_json()["attention"]["forward"]
    assert att["ops"] == 1 and att["flops"] == 4 * 4 * 16 * 16 * 8 and att["bytes"] > 0
