"""The kernel rates a failed run's fake-step roofline uses (workbench.calibration.fake_efficiency), measured
again on the committed one-GPU runs it names:

    python -m benchmarks.fake_step_efficiency

For each run (workbench.calibration.calibrate's measurement of its traced kernels): the matmuls'
FLOPs over their kernels' time as a share of the dense peak of the run's dtype, the same for fused
attention and the optimizer's share of HBM bandwidth; then the pooled figures over all of them
(FLOPs at peak over seconds, summed over the runs), which fake_efficiency.CALIBRATED holds.
"""

from __future__ import annotations

import sys
from pathlib import Path

from workbench.calibration.calibrate import calibrate, gemm_calls
from workbench.calibration.fake_efficiency import CALIBRATED, RUNS


def main(argv: list[str] | None = None) -> int:
    from workbench.hardware.peaks import device_peak
    from workbench.pipeline import analyze

    root = Path(__file__).resolve().parents[1]
    g = [0.0, 0.0]
    effs = []
    for name in RUNS:
        run = root / name
        res = analyze(run).result
        peak = device_peak(res.run.device)
        calls = gemm_calls(run)
        at_peak = sum(f for f, _ in calls) / (peak.tflops["bf16"] * 1e12)
        secs = sum(s for _, s in calls)
        g[0] += at_peak
        g[1] += secs
        e = calibrate([run], results={str(run): res})
        effs.append(e)
        print(f"{name:45s} {res.run.device:28s} matmuls {at_peak / secs:6.1%}  attention {e.attention:6.1%}  "
              f"optimizer {e.optimizer:6.1%}")
    pooled = calibrate([root / n for n in RUNS])
    print(f"{'pooled':45s} {'':28s} matmuls {g[0] / g[1]:6.1%}  attention {pooled.attention:6.1%}  "
          f"optimizer {pooled.optimizer:6.1%}")
    print(f"{'committed (fake_efficiency.CALIBRATED)':45s} {'':28s} matmuls {CALIBRATED.gemm:6.1%}  "
          f"attention {CALIBRATED.attention:6.1%}  optimizer {CALIBRATED.optimizer:6.1%}  "
          f"memory-bound {CALIBRATED.memory_bound:6.1%} (the planner's default)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
