"""DDP whose extra ranks the script starts by running itself again, as Lightning's and Fabric's
launcher does for ``Trainer(devices=N, strategy="ddp")`` (``_SubprocessScriptLauncher``): rank 0 sets
``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``LOCAL_RANK`` in its environment, starts
``[sys.executable, SCRIPT, *argv]`` with ``LOCAL_RANK`` = 1 … N−1, and trains as rank 0 itself.

    workbench profile tests/scripts/relaunch_ddp.py --world-size 2 --steps 12
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    a = p.parse_args()
    children = []
    if "LOCAL_RANK" not in os.environ:  # the first process: start the others as Lightning does
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NODE_RANK="0", LOCAL_RANK="0",
                          WORLD_SIZE=str(a.world_size))
        for local_rank in range(1, a.world_size):
            env = dict(os.environ, LOCAL_RANK=str(local_rank))
            children.append(subprocess.Popen([sys.executable, os.path.abspath(sys.argv[0])] + sys.argv[1:], env=env))
    rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=a.world_size)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(a.steps):
        x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print(f"rank {rank} trained {a.steps} steps", flush=True)
    dist.destroy_process_group()
    sys.exit(max([c.wait() for c in children], default=0))


if __name__ == "__main__":
    main()
