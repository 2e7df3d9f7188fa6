"""Trains a tiny model until it is stopped (signal tests). Under torchrun: DDP over gloo.

``--handle-sigterm`` installs the script's own SIGTERM handler (it prints and exits 7), which
workbench must leave in place; ``--ignore-sigterm`` ignores SIGTERM (a hung job: only SIGKILL ends it).
"""

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

if "--handle-sigterm" in sys.argv:
    def _own(signum, frame):
        print("script handled SIGTERM", flush=True)
        sys.exit(7)

    signal.signal(signal.SIGTERM, _own)
if "--ignore-sigterm" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

torch.manual_seed(0)
model = nn.Linear(32, 1)
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 32), torch.randn(64, 1)
step = 0
while True:
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.05)
    step += 1
