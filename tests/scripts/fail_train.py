"""A small CPU training loop that fails where it is told to (tests/capture/test_failures.py).

--fail-at N      the iteration that fails (0-based); -1: none
--phase P        where in it: forward (a module's forward hook), backward (a gradient hook), optimizer
                 (an optimizer step pre-hook) or data (the loop's own code, before the forward)
--oom            the failure is torch.OutOfMemoryError carrying PyTorch 2.x's CUDA message (the text
                 c10/cuda/CUDACachingAllocator.cpp formats, figures of an 8B model on one H200);
                 otherwise a RuntimeError
--first-step-s S sleep S seconds before the first iteration (a long compile or data pipeline)
--iters N        iterations (default 12); --sleep S per iteration
--hang-rank R    (under torchrun, gloo, a 5 s collective timeout) rank R stops joining the gradient
                 all-reduce at --fail-at (it sleeps 60 s): the other ranks time out waiting for it
"""
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--fail-at", type=int, default=-1)
p.add_argument("--phase", choices=["forward", "backward", "optimizer", "data"], default="forward")
p.add_argument("--oom", action="store_true")
p.add_argument("--first-step-s", type=float, default=0.0)
p.add_argument("--iters", type=int, default=12)
p.add_argument("--sleep", type=float, default=0.02)
p.add_argument("--hang-rank", type=int, default=None)
args = p.parse_args()

dist = None
if args.hang_rank is not None:
    import datetime
    import os

    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    rank = dist.get_rank()

OOM_TEXT = ("CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 139.80 GiB of which 1.12 GiB "
            "is free. Including non-PyTorch memory, this process has 138.67 GiB memory in use. Of the allocated memory "
            "134.41 GiB is allocated by PyTorch, and 3.59 GiB is reserved by PyTorch but unallocated. If reserved but "
            "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
state = {"i": 0}


def fail():
    if args.hang_rank is not None:  # the failure is the hang, not a raise
        return
    raise torch.OutOfMemoryError(OOM_TEXT) if args.oom else RuntimeError(f"planted failure in {args.phase}")


def forward_hook(module, inputs, output):
    if state["i"] == args.fail_at and args.phase == "forward":
        fail()


def optimizer_pre_hook(optimizer, a, kw):
    if state["i"] == args.fail_at and args.phase == "optimizer":
        fail()


model[2].register_forward_hook(forward_hook)
opt.register_step_pre_hook(optimizer_pre_hook)
time.sleep(args.first_step_s)
for i in range(args.iters):
    state["i"] = i
    if i == args.fail_at and args.phase == "data":
        fail()
    x = torch.randn(32, 64)
    out = model(x)
    if i == args.fail_at and args.phase == "backward":
        out.register_hook(lambda g: fail())
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    if dist is not None:
        if i == args.fail_at and rank == args.hang_rank:
            time.sleep(60)
        for q in model.parameters():
            dist.all_reduce(q.grad)
    opt.step()
    time.sleep(args.sleep)
print("trained", args.iters, "iterations")
