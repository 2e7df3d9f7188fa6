"""A small GPT-style model in a user's own loop under Hugging Face Accelerate, for `workbench profile`:

    workbench profile benchmarks/trainers/accelerate_job.py --mixed-precision bf16 --accumulate 2

CPU or one GPU, synthetic tokens.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator

from ds_zero import GPT  # noqa: E402 - the same model as the DeepSpeed job


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mixed-precision", default="no")
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=4096)
    a = p.parse_args()
    torch.manual_seed(0)
    acc = Accelerator(mixed_precision=a.mixed_precision, gradient_accumulation_steps=a.accumulate)
    model = GPT(a.vocab, a.d, a.layers, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randint(0, a.vocab, (a.batch * a.accumulate * a.steps, a.seq + 1), generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(data), batch_size=a.batch)
    model, opt, loader = acc.prepare(model, opt, loader)
    for (batch,) in loader:
        with acc.accumulate(model):
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
            acc.backward(loss)
            opt.step()
            opt.zero_grad()


if __name__ == "__main__":
    main()
