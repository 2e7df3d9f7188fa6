"""A small GPT-style model trained by PyTorch Lightning (automatic optimization: the optimizer steps
with a closure that runs the training step), for `workbench profile`:

    workbench profile benchmarks/trainers/lightning_job.py --precision bf16-mixed --accumulate 2
    workbench profile benchmarks/trainers/lightning_job.py --sample-ms 20     # data-bound: a slow dataset

CPU or one GPU (``accelerator="auto"``), synthetic tokens; ``--sample-ms`` sleeps in each sample's
``__getitem__`` (a slow input pipeline, ``--num-workers 0``).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import lightning.pytorch as pl

from ds_zero import GPT  # noqa: E402 - the same model as the DeepSpeed job


class Tokens(Dataset):
    def __init__(self, n: int, seq: int, vocab: int, sample_ms: float) -> None:
        self.n, self.seq, self.vocab, self.sample_ms = n, seq, vocab, sample_ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.sample_ms:
            time.sleep(self.sample_ms / 1e3)
        return torch.randint(0, self.vocab, (self.seq + 1,), generator=torch.Generator().manual_seed(i))


class Module(pl.LightningModule):
    def __init__(self, a) -> None:
        super().__init__()
        self.a = a
        self.model = GPT(a.vocab, a.d, a.layers, a.heads)

    def training_step(self, batch, _):
        logits = self.model(batch[:, :-1])
        return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4, fused=self.a.fused or None)

    def train_dataloader(self):
        return DataLoader(Tokens(self.a.batch * self.a.accumulate * self.a.steps, self.a.seq, self.a.vocab, self.a.sample_ms),
                          batch_size=self.a.batch, num_workers=self.a.num_workers)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--precision", default="32-true")
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--sample-ms", type=float, default=0.0)
    p.add_argument("--fused", action="store_true")
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=4096)
    a = p.parse_args()
    torch.manual_seed(0)
    trainer = pl.Trainer(max_steps=a.steps, precision=a.precision, accumulate_grad_batches=a.accumulate, devices=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Module(a))


if __name__ == "__main__":
    main()
