"""A small CPU training loop in the shapes --steps-from must handle (tests/capture/test_steps_from.py).

--update manual: weights updated by hand, ``p.data.add_(p.grad, alpha=-lr)`` (no torch.optim), as
pytorch/examples word_language_model does; --update optim: torch.optim.SGD, ``--accum K`` backward
calls per ``opt.step()``; --update none: no backward at all (an inference-like loop).
The forward uses reentrant checkpointing, whose backward calls torch.autograd.backward inside the
outer one; ``--double`` adds a create_graph=True backward before the real one.
``--annotate NAME`` wraps iteration i in record_function(NAME) as a context manager, a decorator or
the raw profiler ops, in turn.
"""
import argparse
import time

import torch
from torch.utils.checkpoint import checkpoint

p = argparse.ArgumentParser()
p.add_argument("--iters", type=int, default=20)
p.add_argument("--update", choices=["manual", "optim", "none"], default="manual")
p.add_argument("--accum", type=int, default=1)
p.add_argument("--annotate", default="")
p.add_argument("--double", action="store_true")
p.add_argument("--sleep", type=float, default=0.0)
args = p.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01) if args.update == "optim" else None


def forward(x):
    h = checkpoint(model[0], x, use_reentrant=True)
    return model[2](model[1](h)).pow(2).mean()


def iteration(i):
    x = torch.randn(8, 16, requires_grad=True)
    if args.update == "none":
        with torch.no_grad():
            forward(x)
        time.sleep(args.sleep)
        return
    for _ in range(args.accum):
        loss = forward(x)
        if args.double:  # a gradient-norm penalty through double backward
            loss.backward(create_graph=True)
            sum(q.grad.pow(2).sum() for q in model.parameters()).backward()
        else:
            loss.backward()
    torch.autograd.grad(model(x).sum(), x)  # an input gradient: never a step
    if opt is not None:
        opt.step()
        opt.zero_grad()
    else:
        with torch.no_grad():
            for q in model.parameters():
                q.data.add_(q.grad, alpha=-0.01)
                q.grad = None
    time.sleep(args.sleep)


@torch.profiler.record_function(args.annotate or "unused")
def decorated(i):
    iteration(i)


try:
    for i in range(args.iters):
        if not args.annotate:
            iteration(i)
        elif i % 3 == 0:
            with torch.autograd.profiler.record_function(args.annotate):
                iteration(i)
        elif i % 3 == 1:
            decorated(i)
        else:
            handle = torch.ops.profiler._record_function_enter_new(args.annotate, None)
            iteration(i)
            torch.ops.profiler._record_function_exit._RecordFunction(handle)
    print("loop done")
finally:
    print("script finally ran", flush=True)
