"""Synthetic token data with a real per-sample CPU cost, and a deterministic batch order.

Sample ``i`` is the same tokens whatever the parallel layout, number of workers or preload:
the dataset seeds a generator with (seed, i). The sampler hands data-parallel rank ``r`` of
``D`` the indices ``first + r + D*j``, so the union of all ranks' micro-batch equals the
single-process batch of ``D`` times the size: that is what makes losses comparable across modes.
"""

from __future__ import annotations

import time
from typing import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from workbench.engine.config import Config

# faults.slow_data: every sample at least this slow (the dataloader_stall reproduction of case_studies/utilisation_30_to_85)
SLOW_DATA_COST = 8
SLOW_DATA_LATENCY_MS = 2.0


def make_tokens(i: int, seq_len: int, vocab: int, seed: int) -> torch.Tensor:
    """Sample ``i``: seq_len + 1 token ids (inputs and the next-token targets)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + i)
    return torch.randint(0, vocab, (seq_len + 1,), generator=g)


class SyntheticTokens(Dataset):
    """Random token sequences; each one costs ``cost`` rounds of real CPU work (a 128x128 matmul
    + tanh, ~4 MFLOP: decoding / tokenizing) plus ``latency_ms`` of waiting (slow storage).

    With ``preload_shm`` all samples are built once into one shared-memory tensor before the
    workers fork; a worker then only indexes it (the cost was paid offline, as a preprocessed
    dataset in /dev/shm would have it).
    """

    def __init__(self, n: int, seq_len: int, vocab: int, seed: int, cost: int = 0, latency_ms: float = 0.0,
                 preload_shm: bool = False) -> None:
        self.n, self.seq_len, self.vocab, self.seed = n, seq_len, vocab, seed
        self.cost, self.latency_s = cost, latency_ms / 1e3
        self.table: torch.Tensor | None = None
        if preload_shm:
            self.table = torch.stack([make_tokens(i, seq_len, vocab, seed) for i in range(n)]).share_memory_()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.table is not None:
            t = self.table[i]
        else:
            t = make_tokens(i, self.seq_len, self.vocab, self.seed)
            if self.latency_s:
                time.sleep(self.latency_s)
            if self.cost:
                m = torch.randn(128, 128, generator=torch.Generator().manual_seed(i))
                for _ in range(self.cost):
                    m = torch.tanh(m @ m.T / 11.0)
                # use the result (|tanh| <= 1, so this never fires) so the work cannot be skipped
                if m.abs().max() > 1.0:
                    raise AssertionError("tanh out of range")
        return t[:-1], t[1:]


class StepSampler(Sampler[int]):
    """Indices for steps ``start_step..steps-1``: micro-batch ``m`` of step ``s`` on data-parallel
    rank ``r`` of ``D`` is ``first + r + D*j`` for j < batch, first = (s*accum + m) * batch * D."""

    def __init__(self, *, batch: int, dp_rank: int, dp_size: int, accum: int, start_step: int, steps: int) -> None:
        self.batch, self.r, self.D, self.accum = batch, dp_rank, dp_size, accum
        self.start, self.steps = start_step, steps

    def __iter__(self) -> Iterator[int]:
        for s in range(self.start, self.steps):
            for m in range(self.accum):
                first = (s * self.accum + m) * self.batch * self.D
                yield from (first + self.r + self.D * j for j in range(self.batch))

    def __len__(self) -> int:
        return (self.steps - self.start) * self.accum * self.batch


def build_loader(cfg: Config, *, dp_rank: int, dp_size: int, start_step: int, device: torch.device) -> DataLoader:
    d, m, t = cfg.data, cfg.model, cfg.train
    cost, latency = d.sample_cost, d.sample_latency_ms
    if cfg.faults.slow_data:
        cost, latency = max(cost, SLOW_DATA_COST), max(latency, SLOW_DATA_LATENCY_MS)
    n = t.steps * t.grad_accum * d.batch_size * dp_size
    ds = SyntheticTokens(n, m.seq_len, m.vocab, t.seed, cost, latency, d.preload_shm)
    sampler = StepSampler(batch=d.batch_size, dp_rank=dp_rank, dp_size=dp_size, accum=t.grad_accum,
                          start_step=start_step, steps=t.steps)
    kw = {}
    if d.num_workers > 0:
        kw = {"prefetch_factor": d.prefetch_factor, "persistent_workers": d.persistent_workers}
    return DataLoader(ds, batch_size=d.batch_size, sampler=sampler, num_workers=d.num_workers,
                      pin_memory=d.pin_memory and device.type == "cuda", **kw)
