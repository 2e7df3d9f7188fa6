"""The 1-bit sign hook's bit packing (the hook itself trains in test_equivalence and sends one bit
per gradient entry in test_toggles)."""

from __future__ import annotations

import pytest
import torch

from workbench.engine.parallel.ddp import pack_signs, unpack_signs

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1000, 12345])
def test_signs_round_trip_in_ceil_n_over_8_bytes(n):
    t = torch.randn(n, generator=torch.Generator().manual_seed(n))
    t[0] = 0.0  # zero counts as +1, as in the hook's scale * sign
    packed = pack_signs(t)
    assert packed.dtype == torch.uint8 and packed.numel() == (n + 7) // 8
    assert torch.equal(unpack_signs(packed, n, torch.float32), torch.where(t >= 0, 1.0, -1.0))
