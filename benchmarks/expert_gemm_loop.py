"""Per-expert cost of the two ways trainers run a rank's routed experts on one GPU, for the
planner's grouped-GEMM model (workbench/plan/moe_time.py): one ``torch._grouped_mm`` kernel over all
local experts (torchtitan), and one cuBLAS matmul per expert issued round-robin on several streams
(Transformer Engine's ``GroupedLinear`` in BF16 on Hopper: ``general_grouped_gemm`` loops
cublasLt over its compute streams, as Megatron-Core's ``--moe-grouped-gemm`` runs it).

    python -m benchmarks.expert_gemm_loop --out OUT/expert_gemm_loop.json     # needs a CUDA GPU, ~2 min

For each (local experts, rows per expert) of Qwen3-235B-A22B's SwiGLU experts (fc1 4096 -> 2 x 1536,
fc2 1536 -> 4096) it times forward + both backward GEMMs (input and weight gradients) of fc1 and fc2:
GPU time from CUDA events, and the host's time to issue them; prints one JSON line per case and writes
them all to --out. A cost per expert and call is the slope of time against experts at fixed FLOPs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _cases():
    for experts in (1, 4, 16):
        for rows in (512, 1024, 4096):
            yield experts, rows


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m benchmarks.expert_gemm_loop --out /tmp/egl.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev, bf = "cuda", torch.bfloat16
    h, f = 4096, 1536
    streams = [torch.cuda.Stream() for _ in range(a.streams)]
    results = []
    for experts, rows in _cases():
        x = torch.randn(experts * rows, h, device=dev, dtype=bf)
        w1 = torch.randn(experts, h, 2 * f, device=dev, dtype=bf)
        w2 = torch.randn(experts, f, h, device=dev, dtype=bf)
        g = torch.randn(experts * rows, h, device=dev, dtype=bf)
        offs = torch.arange(rows, experts * rows + 1, rows, device=dev, dtype=torch.int32)

        def grouped():
            y1 = torch._grouped_mm(x, w1, offs=offs)
            a1 = y1[:, :f] * y1[:, f:]
            torch._grouped_mm(a1, w2, offs=offs)
            # backward: input and weight gradients of both (weight gradients as per-expert GEMMs of
            # transposed slices, what autograd of _grouped_mm launches as one kernel each)
            da = torch._grouped_mm(g, w2.transpose(1, 2), offs=offs)
            torch._grouped_mm(a1.t(), g, offs=offs)
            dx = torch.cat([da, da], 1)
            torch._grouped_mm(dx, w1.transpose(1, 2), offs=offs)
            torch._grouped_mm(x.t(), dx, offs=offs)

        xs, gs = x.split(rows), g.split(rows)

        def loop():
            cur = torch.cuda.current_stream()
            for s in streams:
                s.wait_stream(cur)
            for e in range(experts):
                with torch.cuda.stream(streams[e % len(streams)]):
                    y1 = xs[e] @ w1[e]
                    a1 = y1[:, :f] * y1[:, f:]
                    a1 @ w2[e]
                    da = gs[e] @ w2[e].t()
                    a1.t() @ gs[e]
                    dx = torch.cat([da, da], 1)
                    dx @ w1[e].t()
                    xs[e].t() @ dx
            for s in streams:
                cur.wait_stream(s)

        for name, fn in (("grouped_mm", grouped), ("cublas_loop", loop)):
            try:
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                t0, start, end = time.perf_counter(), torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(a.iters):
                    fn()
                host = (time.perf_counter() - t0) / a.iters
                end.record()
                torch.cuda.synchronize()
                gpu = start.elapsed_time(end) / 1e3 / a.iters
            except (RuntimeError, TypeError) as err:  # _grouped_mm missing or unsupported here
                print(f"{name} experts {experts} rows {rows}: {err}", file=sys.stderr)
                continue
            flops = experts * rows * 2.0 * (h * 2 * f + f * h) * 3
            r = {"impl": name, "experts": experts, "rows_per_expert": rows, "gpu_s": gpu, "host_s": host,
                 "tflops": flops / gpu / 1e12}
            results.append(r)
            print(json.dumps(r))
    with open(a.out, "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "streams": a.streams,
                   "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
