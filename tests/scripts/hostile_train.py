"""A small CPU training loop that does what a hostile (or merely unusual) script does to its capture
(tests/hostile_corpus.py, class "hostile scripts"):

--fork          os.fork() at step 3: the child trains two more steps on its own (a forked data
                worker gone wrong), then blocks on a lock the parent held when it forked, forever;
                the parent trains on and exits 0
--trace-exit N  its own torch.profiler whose on_trace_ready calls sys.exit(N) (exit 9 by default)
--close-std     closes stdout and stderr at step 2 (sys.stdout.close(), sys.stderr.close() and their
                descriptors, as a daemonising script does), trains on, exits 0
--exit N        exit code at the end (0 by default)
"""
import argparse
import os
import sys
import threading
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--fork", action="store_true")
p.add_argument("--trace-exit", type=int, default=None)
p.add_argument("--close-std", action="store_true")
p.add_argument("--steps", type=int, default=8)
p.add_argument("--exit", type=int, default=0)
args = p.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
lock = threading.Lock()


def step():
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def on_trace_ready(prof):
    sys.exit(args.trace_exit)


own = None
if args.trace_exit is not None:
    own = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                 schedule=torch.profiler.schedule(wait=0, warmup=0, active=2, repeat=1),
                                 on_trace_ready=on_trace_ready)
    own.start()

for i in range(args.steps):
    step()
    if own is not None:
        own.step()
    if args.close_std and i == 2:
        sys.stdout.close()
        sys.stderr.close()
        os.close(1)
        os.close(2)
    if args.fork and i == 3:
        lock.acquire()
        pid = os.fork()
        if pid == 0:  # the child: two steps of its own, then a deadlock on the lock it inherited held
            step()
            step()
            lock.acquire()
            os._exit(0)
        lock.release()
    time.sleep(0.01)
print("done", flush=True) if not args.close_std else None
sys.exit(args.exit)
