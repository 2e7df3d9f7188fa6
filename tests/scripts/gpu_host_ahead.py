"""A GPU-bound loop whose host runs ahead of the GPU: its step time is on the GPU's clock.

Nothing in the loop syncs (no ``.item()``, no prints of tensors), so the host launches step after
step while the GPU is still busy: the host's step time is the launch time, not the GPU's.
``--mode graphs`` compiles the model with ``torch.compile(mode="reduce-overhead")`` (CUDA
graphs), the case a user met: steps CSV 7–9 ms, the GPU ~17 ms per step.

    workbench profile --out runs/host_ahead_eager tests/scripts/gpu_host_ahead.py --mode eager
    workbench profile --out runs/host_ahead_graphs tests/scripts/gpu_host_ahead.py --mode graphs
"""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["eager", "graphs"], default="eager")
p.add_argument("--steps", type=int, default=30)
p.add_argument("--dim", type=int, default=4096)
p.add_argument("--batch", type=int, default=8192)
p.add_argument("--layers", type=int, default=4)
args = p.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(args.dim, args.dim, bias=False) for _ in range(args.layers)])
model = model.cuda().to(torch.bfloat16)
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
x = torch.randn(args.batch, args.dim, device="cuda", dtype=torch.bfloat16)
fwd = torch.compile(model, mode="reduce-overhead") if args.mode == "graphs" else model

for step in range(args.steps):
    if args.mode == "graphs":
        torch.compiler.cudagraph_mark_step_begin()
    loss = fwd(x).float().square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print(f"done: {args.steps} steps ({args.mode})")
