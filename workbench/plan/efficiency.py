"""How fast each kind of kernel runs on a device: shares of the datasheet peaks (matmuls by size,
fused attention, memory-bound kernels, the optimizer, routed experts), the host's launch cost and
measured collective bandwidth.

The defaults below hold until ``--calibrate`` replaces them by what a run measured
(:mod:`workbench.calibration.calibrate`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field

DEFAULT_GEMM = 0.80
"""Share of the dense peak large matmuls reach: a bf16 8192³ matmul ran at 787 TFLOP/s on the
H200 (docs/measured.md, "The H200": 0.80 of 989), and the engine's matmuls at 78 % in traces/case_gpu_2_preload_shm."""
DEFAULT_ATTENTION = 0.50
"""Fused attention (FlashAttention-2/3, cuDNN) forward + backward: half the peak, as
workbench's attention_math rule assumes."""
DEFAULT_MEMORY = 0.70
"""Share of HBM bandwidth memory-bound kernels (norms, activations, casts, the optimizer) reach."""
GEMM_RANGE_SLACK = 10 ** 0.25
"""A matmul counts as measured within one size bucket (a quarter decade, the calibration's own
resolution: :func:`workbench.calibration.calibrate.gemm_by_size`) beyond the smallest and largest call seen."""
@dataclass(kw_only=True, slots=True)
class Efficiencies:
    """Shares of the datasheet peaks each kind of kernel reaches: the defaults above, or measured."""

    gemm: float = DEFAULT_GEMM
    """Matmuls, share of the dtype's dense peak: every matmul when none was measured, else those
    larger than ``gemm_flops_range`` (a calibration says nothing about sizes it did not see: a tiny
    model's matmuls at 37 % of peak must not slow an 8B model's down). Smaller ones keep the
    smallest measured share (:meth:`below_measured`)."""
    gemm_by_size: tuple[tuple[float, float], ...] = ()
    """Measured (FLOPs per call, share of peak), sorted: interpolated in log(FLOPs)."""
    gemm_flops_range: tuple[float, float] | None = None
    """Smallest and largest FLOPs per call among the measured matmuls; None: all of them
    (``gemm_by_size`` without a range, as hand-made efficiencies give it)."""
    attention: float = DEFAULT_ATTENTION
    """Fused attention kernels, share of the peak."""
    memory_bound: float = DEFAULT_MEMORY
    """Memory-bound kernels (layers and loss), share of HBM bandwidth for the bytes this model counts."""
    optimizer: float = DEFAULT_MEMORY
    """The optimizer's kernels, same convention."""
    expert_gemm: float | None = None
    """Routed experts' (grouped) matmuls, share of the peak, as a run measured them; None: timed like
    any matmul of one expert's size (fewer rows per expert: a smaller share)."""
    host_s_per_kernel: float = 0.0
    """Host time per kernel launched (0: the host never sets the pace)."""
    kernels_per_layer: float = 0.0
    """Kernels one block launches per micro-batch (forward + backward), measured."""
    busbw: dict[str, float] = field(default_factory=dict)
    """Measured collective bus bandwidth by link (intra / inter), bytes/s."""
    source: str = "defaults"
    """defaults | calibrated."""
    runs: tuple[str, ...] = ()
    """Runs measured."""
    notes: tuple[str, ...] = ()
    """What was measured and what stayed a default, one line each."""

    def measured(self, flops: float) -> bool:
        """Whether a matmul of ``flops`` per call lies within the calibrated sizes."""
        if not self.gemm_by_size:
            return False
        if self.gemm_flops_range is None:
            return True
        lo, hi = self.gemm_flops_range
        return lo / GEMM_RANGE_SLACK <= flops <= hi * GEMM_RANGE_SLACK

    def below_measured(self, flops: float) -> bool:
        """A matmul smaller than any the calibration measured: it runs at most at the smallest
        measured size's share (a smaller matmul fills less of the device, and launches cost more
        of it), so that share holds — never the default, which would make it nearly free."""
        return bool(self.gemm_by_size) and self.gemm_flops_range is not None and not self.measured(flops) \
            and flops < self.gemm_flops_range[0]

    def gemm_share(self, flops: float) -> float:
        pts = self.gemm_by_size
        if pts and self.below_measured(flops):
            # smaller than any measured matmul: never faster than the smallest one ran (a matmul's
            # share of peak falls with its size; the default is a large GEMM's)
            return min(pts[0][1], self.gemm)
        if not pts or not self.measured(flops):
            return self.gemm
        xs = [math.log(p[0]) for p in pts]
        x = math.log(max(flops, 1.0))
        i = bisect.bisect_left(xs, x)
        if i == 0:
            return pts[0][1]
        if i == len(pts):
            return pts[-1][1]
        w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        return pts[i - 1][1] * (1 - w) + pts[i][1] * w

    def to_json(self) -> dict:
        d = asdict(self)
        d["gemm_by_size"] = [{"flops_per_call": f, "share_of_peak": round(e, 4)} for f, e in self.gemm_by_size]
        d["busbw_gb_s"] = {k: round(v / 1e9, 2) for k, v in d.pop("busbw").items()}
        d["gemm_flops_range"] = list(self.gemm_flops_range) if self.gemm_flops_range else None
        return d
