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


def test_flex_attention_a_higher_order_op_is_tallied_and_its_memory_tracked():
    # torchtitan's gpt-oss runs FlexAttention: a higher-order op, for which PyTorch's MemTracker has no rule
    # (it raises). The tally runs it past the tracker, counts its FLOPs, and the tracker still holds its outputs.
    # Eager, as the fake step runs (workbench.capture.fake_runner: no compile while the job waits).
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.attention.flex_attention import flex_attention

    from workbench.capture.fake_step import _tracked, _tracker

    b, h, s, d = 2, 4, 256, 64
    with FakeTensorMode(allow_non_fake_inputs=True), warnings.catch_warnings(), torch.compiler.set_stance("force_eager"):
        warnings.simplefilter("ignore")  # flex attention run eagerly says it is slow
        q, k, v = (torch.randn(b, h, s, d) for _ in range(3))
        with pytest.raises(NotImplementedError, match="no rule registered for HigherOrderOperator"), _tracker():
            flex_attention(q, k, v)
        tracker, tally = _tracker(), OpTally(stepped_over=_tracked)
        with tracker, tally:
            out = flex_attention(q, k, v)
    assert tuple(out.shape) == (b, h, s, d)
    assert tally.to_json()["attention"]["forward"]["flops"] == 4 * b * h * s * s * d
    peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    assert peak["Total"] >= b * h * s * d * 4  # the output's float32 activations at least
