"""A tiny training that writes to stdout and stderr and exits with code 3 (passthrough test)."""
import sys

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("hello from stdout", sys.argv[1:])
print("hello from stderr", file=sys.stderr)
sys.exit(3)
