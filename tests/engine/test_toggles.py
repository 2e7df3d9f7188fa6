"""Each toggle changes the trace as it should: `workbench train --profile` on 2 gloo ranks, then
the loaded trace (3 profiled steps) is asserted against the baseline run.

The baseline is launched as a user would (`workbench train --nproc-per-node 2 --profile`); the
toggled runs are `workbench train --profile` run in turn inside the ranks of one torchrun job, each
rank capturing itself into a run directory per run (tests/engine/conftest.py's profiled_rounds):
torch starts once per rank instead of once per run."""

from __future__ import annotations

import pytest

from tests.engine.conftest import profiled, profiled_rounds
from workbench.analysis.comm import _nelems_from_dims

pytestmark = [pytest.mark.slow, pytest.mark.live]
CFG = "ddp_tiny.toml"
SLOW_DATA = ("data.sample_latency_ms=10", "data.batch_size=4")  # 40 ms of waiting per batch
TOGGLED = {
    "small_buckets": (CFG, "parallel.bucket_cap_mb=0.02"),
    "fp16": (CFG, "parallel.comm_hook=fp16"),
    "sign": (CFG, "parallel.comm_hook=sign"),
    "zero2": (CFG, "parallel.mode=zero2", "parallel.mixed_precision=fp32"),
    "zero3": (CFG, "parallel.mode=zero3", "parallel.mixed_precision=fp32"),
    "redundant": (CFG, "faults.redundant_allgather=true"),
    "w0": (CFG, *SLOW_DATA, "data.num_workers=0"),
    "w4": (CFG, *SLOW_DATA, "data.num_workers=4", "data.prefetch_factor=4"),
    "straggler": (CFG, "faults.straggler_rank=1", "faults.straggler_ms=150"),
}
RECOMPUTE = ("none", "selective", "full")


def _steps(trace) -> int:
    n = int(trace.events["name"].astype(str).str.startswith("ProfilerStep#").sum())
    assert n == 3
    return n


def _per_step(trace, name_prefix: str) -> float:
    """Collectives whose c10d op name starts with ``name_prefix``, per profiled step."""
    c = trace.comms
    return int(c["name"].astype(str).str.startswith(name_prefix).sum()) / _steps(trace)


def _dur_ms(trace, names: tuple[str, ...]) -> float:
    ev = trace.events
    return float(ev.loc[ev["name"].astype(str).str.startswith(names), "dur_us"].sum()) / 1e3


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return profiled(tmp_path_factory.mktemp("base"), "ddp", CFG)


@pytest.fixture(scope="module")
def toggled(tmp_path_factory) -> dict:
    """name -> Run of each of TOGGLED, profiled on 2 ranks."""
    return profiled_rounds(tmp_path_factory.mktemp("toggled"), TOGGLED, nproc=2)


@pytest.fixture(scope="module")
def recomputed(tmp_path_factory) -> dict:
    """train.recompute mode -> Run, profiled on one rank."""
    runs = {mode: (CFG, f"train.recompute={mode}") for mode in RECOMPUTE}
    return profiled_rounds(tmp_path_factory.mktemp("recompute"), runs, nproc=1)


def test_bucket_size_sets_all_reduces_per_step(baseline, toggled):
    small = toggled["small_buckets"]
    # one 0.46 MB bucket (+ the loss all-reduce for the log line) vs ~0.02 MB buckets
    assert _per_step(baseline.traces[0], "c10d::allreduce_") == 2
    assert _per_step(small.traces[0], "c10d::allreduce_") >= 6


def test_fp16_compression_sends_half(baseline, toggled):
    fp16 = toggled["fp16"]

    def biggest_dtype(run):
        c = run.traces[0].comms
        g = c[c["name"].astype(str) == "gloo:all_reduce"]
        return str(g.loc[g["input_dims"].str.len().idxmax(), "dtype"])

    assert biggest_dtype(baseline) == "float"
    assert biggest_dtype(fp16) == "c10::Half"


def test_sign_compression_sends_one_bit_per_gradient_entry(baseline, toggled):
    sign = toggled["sign"]

    def sizes(run, op):
        """(elements of the op's input, dtype) for every gloo `op` of rank 0's trace (a scalar: 0)."""
        c = run.traces[0].comms
        c = c[c["name"].astype(str) == op]
        n = [_nelems_from_dims(d) for d in c["input_dims"]]
        return [(int(k), str(t)) for k, t in zip(n, c["dtype"]) if k == k]  # k != k: no dims recorded

    grads = max(n for n, _ in sizes(baseline, "gloo:all_reduce"))  # the fp32 gradient bucket
    assert grads > 100_000
    assert max(sizes(sign, "gloo:all_gather")) == ((grads + 7) // 8, "unsigned char")  # 1/32 of the bytes
    assert max((n for n, _ in sizes(sign, "gloo:all_reduce")), default=0) == 0  # only the scalar loss (no element count)


def test_zero3_all_gathers_more_than_zero2(toggled):
    z2, z3 = toggled["zero2"], toggled["zero3"]
    g2, g3 = (_per_step(r.traces[0], "c10d::_allgather_base_") for r in (z2, z3))
    # ZeRO-2: root + 2 blocks gathered once (forward); ZeRO-3 gathers the 2 blocks again in backward
    assert g2 == 3 and g3 == 5


def test_redundant_allgather_adds_gathers(baseline, toggled):
    bad = toggled["redundant"]
    assert _per_step(baseline.traces[0], "c10d::_allgather_base_") == 0
    assert _per_step(bad.traces[0], "c10d::_allgather_base_") == 2  # one per block per micro-batch


def test_workers_hide_dataloader_wait(toggled):
    w0, w4 = toggled["w0"], toggled["w4"]
    waits = [_dur_ms(r.traces[0], ("enumerate(DataLoader)",)) / 3 for r in (w0, w4)]
    assert waits[0] > 30  # every step waits for its 4 samples
    assert waits[0] > 3 * waits[1], waits


def test_straggler_rank_computes_longer(toggled):
    run = toggled["straggler"]
    t0, t1 = run.traces[0], run.traces[1]
    ops = ("aten::mm", "aten::tanh")
    # rank 1 does 150 ms of extra matmuls per step; rank 0 waits for it inside the all-reduce
    assert _dur_ms(t1, ops) - _dur_ms(t0, ops) > 0.3 * 150 * 3
    wait = ("gloo:all_reduce",)
    assert _dur_ms(t0, wait) > _dur_ms(t1, wait) + 0.3 * 150 * 3


def _attention_forwards(trace) -> tuple[int, int]:
    """SDPA forward ops per profiled step: (outside backward, inside a backward node's span)."""
    ev = trace.events
    names = ev["name"].astype(str)
    main = ev[names.str.startswith("ProfilerStep#")]
    fwd = ev[names == "aten::scaled_dot_product_attention"]
    bwd = ev[names.str.startswith("autograd::engine::evaluate_function: ")]
    spans = list(zip(bwd["ts_us"], bwd["ts_us"] + bwd["dur_us"], bwd["tid"]))
    inside = sum(any(lo <= t < hi and tid == k for lo, hi, k in spans) for t, tid in zip(fwd["ts_us"], fwd["tid"]))
    assert len(main) == 3
    return (len(fwd) - inside) // 3, inside // 3


@pytest.mark.parametrize("mode, rerun", [("none", 0), ("selective", 1), ("full", 1)])
def test_recompute_reruns_attention_in_backward(recomputed, mode, rerun):
    # the tiny config has 2 layers: each layer's attention runs once forward, and once more in
    # backward when recomputed (selective: only the attention core; full: the whole block)
    run = recomputed[mode]
    layers = 2
    assert _attention_forwards(run.traces[0]) == (layers, rerun * layers)
