"""A script written for torchrun, as pytorch/examples' ddp-tutorial-series/multigpu_torchrun.py:
it reads LOCAL_RANK etc. from the environment and calls init_process_group() with no address."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
seen = {k: os.environ[k] for k in NAMES}  # KeyError when not started as torchrun would
dist.init_process_group("gloo")
local_rank = int(os.environ["LOCAL_RANK"])
model = nn.parallel.DistributedDataParallel(nn.Linear(20, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
    loss = model(torch.randn(8, 20)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("PARITY " + json.dumps(dict(seen, world=dist.get_world_size(), rank=dist.get_rank())), flush=True)
dist.destroy_process_group()
