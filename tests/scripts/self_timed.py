"""A training loop that times itself, for checking the workbench's step time against the script's own.

Many small layers, so that each step is mostly per-op host work: the case a profiler slows most
(every op recorded, shapes copied). Prints one line per step, as nanoGPT does::

    step 12: loss 0.9871, time 4.93 ms

The time is the wall clock between consecutive optimizer steps (``time.perf_counter``); with
``--device cuda`` the loop syncs on the loss each step (``.item()``), so the host's clock is the
GPU's. Runs unmodified under ``workbench profile``:

    workbench profile --max-steps 40 --schedule 5,2,5 tests/scripts/self_timed.py --steps 60
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # per-op work, not a thread pool's, sets the pace
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width), torch.nn.LayerNorm(a.width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(a.width, 1)).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)  # a kernel per parameter
    x = torch.randn(a.batch, a.width, device=a.device)
    y = torch.randn(a.batch, 1, device=a.device)
    t0 = time.perf_counter()
    for step in range(a.steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        lossf = loss.item()
        t1 = time.perf_counter()
        print(f"step {step}: loss {lossf:.4f}, time {(t1 - t0) * 1e3:.2f} ms", flush=True)
        t0 = t1


if __name__ == "__main__":
    main()
