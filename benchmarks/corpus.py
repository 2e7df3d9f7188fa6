"""Public training scripts nobody here wrote, run unmodified under ``workbench profile``.

Each entry of :data:`ENTRIES` names a script in a public repository (repo, path, commit), the
exact arguments it ran with, where it runs (``cpu``: this 2-core machine, gloo; ``gpu``: the H200
machine) and the verdict expected of it. Their code lives only in the git-ignored ``corpus/``
folder; what the repository keeps is the trimmed run directories under ``traces/corpus/`` that
``tests/pipeline/test_corpus.py`` checks.

    python -m benchmarks.corpus extract                         # corpus/ from local mirrors
    python -m benchmarks.corpus run --kind cpu --out runs/corpus [--only NAME]
    python -m benchmarks.corpus check runs/corpus               # verdict vs expectation (here)
    python -m benchmarks.corpus trim runs/corpus traces/corpus  # commit-sized copies
    python -m benchmarks.corpus pack runs/corpus $OUT/corpus_runs.tar.gz

On the GPU machine, with the repository and ``corpus/`` carried and nothing installed:

    PYTHONPATH=. python -m benchmarks.corpus run --kind gpu --out /tmp/corpus \
        && python -m benchmarks.corpus pack /tmp/corpus $OUT/corpus_gpu.tar.gz

``run`` makes the data and tiny model files the scripts read (generated text, a Qwen2 config
with a word-level tokenizer: data, not code, so nothing is downloaded) before it starts them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "corpus"
# where the search tool's `fetch` puts bare mirrors of public repos (override: WORKBENCH_MIRRORS)
MIRRORS = Path(os.environ.get("WORKBENCH_MIRRORS", REPO.parent / ".mirror"))

# Commits the corpus/ copies were taken from (the newest stored snapshot on 2026-12-02).
SOURCES = {
    "pytorch/examples": ("pytorch-examples", "77f55b912142e11fcfdf5b530231fb9c52f181e8"),
    "Lightning-AI/pytorch-lightning": ("lightning", "7f0c3436cd3f6ad3753125672024fc415cbcb414"),
    "huggingface/pytorch-image-models": ("timm", "aa4b5850c1543fa488abf260f18390eda46cf85d"),
    # Too large to mirror here (1.3 GB): the one file was copied from the code index at this commit.
    "huggingface/transformers": ("transformers", "0680b54f24ae809e17f4a554d137f19807611caf"),
    "karpathy/nanoGPT": ("nanogpt", "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"),
    # tag v0.2.2; made by benchmarks/torchtitan_prepare.sh and run by benchmarks/torchtitan_gpu.sh
    "pytorch/torchtitan": ("torchtitan", "73a0e6979dd10b6b1904098eb3c8f62c18ab87ce"),
}
EXTRACT = {
    "pytorch/examples": ["word_language_model/main.py", "word_language_model/data.py", "word_language_model/model.py",
                         "distributed/ddp-tutorial-series/multigpu_torchrun.py",
                         "distributed/ddp-tutorial-series/multigpu.py",
                         "distributed/ddp-tutorial-series/datautils.py", "distributed/FSDP2/example.py",
                         "distributed/FSDP2/checkpoint.py", "distributed/FSDP2/model.py", "distributed/FSDP2/utils.py",
                         "imagenet/main.py"],
    "Lightning-AI/pytorch-lightning": ["examples/pytorch/basics/transformer.py",
                                       "examples/pytorch/bug_report/bug_report_model.py"],
    "huggingface/pytorch-image-models": ["benchmark.py", "timm"],
    "karpathy/nanoGPT": ["train.py", "model.py", "configurator.py", "bench.py"],
}

# Per-entry wall limit: a GPU entry must fit the lead's single 8-minute device call with the others.
GPU_TIMEOUT_S = 60
CPU_TIMEOUT_S = 300


@dataclass(frozen=True, kw_only=True)
class Timer:
    """How a self-timed script prints its own step time, read from its console.

    ``regex`` has two groups, (step, value): the value is that step's own time (``per_step``,
    nanoGPT's ``iter N: … time X ms``), or one group, (value,), the mean over ``steps`` (a
    summary line such as bench.py's ``time per iteration: X ms``). ``unit_ms`` converts the value
    to ms; ``offset`` maps the printed step number to the workbench's 0-based step index."""

    regex: str
    unit_ms: float = 1.0
    offset: int = 0
    steps: tuple[int, int] | None = None
    """(first, last) workbench steps a one-group value covers, inclusive."""
    mfu_regex: str | None = None
    """One group: the script's own MFU in %, against ``mfu_peak_tflops`` and its FLOP formula."""
    mfu_peak_tflops: float | None = None
    mfu_formula: str = ""
    mfu_flops_per_step: float | None = None
    """The FLOPs of one step by the script's own formula (``mfu_formula``), to rescale its MFU."""


@dataclass(frozen=True, kw_only=True)
class Entry:
    name: str
    """Run directory name; also the fixture's name under traces/corpus/."""
    repo: str
    """owner/name on GitHub; the commit is SOURCES[repo]."""
    path: str
    """The script, relative to the repository root."""
    kind: str
    """cpu (this machine, gloo) or gpu (the H200 machine)."""
    args: tuple[str, ...] = ()
    """The script's own arguments, exactly as run."""
    nproc: int | None = None
    """Ranks started as torchrun does (``workbench profile --nproc-per-node``); None: the script
    runs as ``python SCRIPT`` would."""
    world: int | None = None
    """The job's ranks when the script starts them itself (torch.multiprocessing.spawn, Lightning's
    launcher); default ``nproc``, else 1."""
    gpus: int = 0
    """GPUs the script needs; ``run`` skips it on a machine with fewer."""
    profile_args: tuple[str, ...] = ()
    """Extra ``workbench profile`` options (schedule, step source)."""
    env: dict = field(default_factory=dict)
    """Environment for the script (offline switches; never a change to its code)."""
    expect: tuple[str, ...] = ()
    """Diagnosis ids that must be in the verdict."""
    expect_absent: tuple[str, ...] = ()
    """Diagnosis ids that must not be."""
    steps_from: str | None = "optimizer"
    """The step source the ranks resolved (status_rank*.json); None: the script never stepped."""
    traced: bool = True
    """False: the run ends before the profiler's window completes, so there is no trace and
    analysis must refuse it with its one-line 'no trace' error rather than crash."""
    timer: Timer | None = None
    """The script's own timer printout (self-timed scripts)."""
    timeout_s: int | None = None
    """Wall limit (default GPU_TIMEOUT_S / CPU_TIMEOUT_S): compiled runs need longer."""
    max_steps: int | None = None
    """``--max-steps N`` instead of ``--stop-after-profile``; self-timed scripts run past the
    profiled window (their unprofiled steps are the comparison), or to their own end (0)."""
    why: str = ""
    made_by: str | None = None
    """Another script makes this run (its inputs need more than the script's own folder): ``run``
    skips it and names that script."""

    @property
    def cwd(self) -> Path:
        """Where it runs: the script's folder, as its README runs it (relative data paths)."""
        return CORPUS / SOURCES[self.repo][0] / Path(self.path).parent

    @property
    def commit(self) -> str:
        return SOURCES[self.repo][1]

    @property
    def ranks(self) -> int:
        """The ranks the run has."""
        return self.world or self.nproc or 1


_HF_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
_HF_ARGS = ("--output_dir", "hf_out", "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1")
# nanoGPT's GPT-2 124M as the issue ran it: batch 12 x 1024, 4 micro-steps per optimizer step; one
# evaluation (2 batches) at iteration 0, no checkpoint, no wandb; data = random GPT-2 tokens
_NANOGPT_ARGS = ("--batch_size=12", "--gradient_accumulation_steps=4", "--max_iters=40", "--eval_iters=2",
                 "--log_interval=1", "--always_save_checkpoint=False")
def nanogpt_flops_per_token(n_layer: int = 12, n_head: int = 12, n_embd: int = 768, vocab: int = 50304,
                            block: int = 1024) -> float:
    """nanoGPT's ``estimate_mfu`` FLOPs per token, 6N + 12·L·H·Q·T (PaLM appendix B), N its
    ``get_num_params()``: every parameter (bias=False, the embedding tied to the head) but the
    position embedding."""
    per_layer = 2 * n_embd + 4 * n_embd * n_embd + 8 * n_embd * n_embd  # 2 LayerNorms, attention, MLP
    n = vocab * n_embd + n_layer * per_layer + n_embd
    return 6 * n + 12 * n_layer * n_head * (n_embd // n_head) * block


# (row tag, model directory family, what it is): benchmarks/corpus_hf.py builds each model
# (row tag, model directory family, the script's and the Trainer's own extra arguments, what it is):
# benchmarks/corpus_hf.py builds each model
_HF_AC = ("--attn_implementation", "eager", "--gradient_accumulation_steps", "2", "--gradient_checkpointing")
_HF_FAMILIES = (("qwen3_moe", "qwen3-moe", (), "a Qwen3-MoE (16 routed experts, top-4, no shared expert, GQA)"),
                ("deepseek_v3", "deepseek-v3", (), "a DeepSeek-V3 (latent attention, one shared expert, a dense first "
                                                   "layer, 16 routed experts top-4 in 4 groups)"),
                ("olmoe", "olmoe", (), "an OLMoE (64 experts, top-8, MHA)"),
                ("qwen3", "qwen3", (), "a dense Qwen3 at Qwen3-0.6B's proportions (heads x head_dim = 2 x hidden, "
                                       "tied embeddings)"),
                ("qwen3_eager_ac", "qwen3", _HF_AC, "the dense Qwen3 with eager (matmul) attention, 2 accumulated "
                                                    "micro-batches and the Trainer's gradient checkpointing"),
                ("deepseek_v3_eager_ac", "deepseek-v3", _HF_AC, "the DeepSeek-V3 with eager (matmul) attention, 2 "
                 "accumulated micro-batches and the Trainer's gradient checkpointing"))
# timm's benchmark.py prints the mean of its 20 timed steps after 5 warm-up steps ("Train benchmark of
# resnet50 done. X samples/sec, Y ms/sample", Y per step): its committed runs stop after the profiled
# window (--stop-after-profile) and have no timed steps, so they carry no Timer.
_NANOGPT_TIMER = Timer(regex=r"iter (\d+): loss [\d.]+, time ([\d.]+)ms", mfu_regex=r"mfu (-?[\d.]+)%",
                       mfu_peak_tflops=312.0, mfu_flops_per_step=nanogpt_flops_per_token() * 12 * 1024 * 4, mfu_formula="6N + 12LHQT per token (PaLM), N without position embeddings; "
                       "a running mean (0.9/0.1) from iteration 5")

ENTRIES: list[Entry] = [
    # --- this CPU machine (torch 2.13 CPU, gloo) ---
    Entry(name="word_lm_cpu", repo="pytorch/examples", path="word_language_model/main.py", kind="cpu",
          args=("--epochs", "1", "--emsize", "64", "--nhid", "64", "--log-interval", "50"),
          expect_absent=("dataloader_stall", "exposed_communication", "straggler_rank"), steps_from="backward",
          why="a loop without torch.optim (p.data.add_): steps must come from backward()"),
    Entry(name="lightning_transformer_cpu", repo="Lightning-AI/pytorch-lightning",
          path="examples/pytorch/basics/transformer.py", kind="cpu",
          expect_absent=("exposed_communication", "straggler_rank"),
          why="PyTorch Lightning Trainer.fit, DataLoader without workers, one process"),
    Entry(name="lightning_bug_report_cpu", repo="Lightning-AI/pytorch-lightning",
          path="examples/pytorch/bug_report/bug_report_model.py", kind="cpu", traced=False,
          why="a script that trains one step (limit_train_batches=1): fewer steps than the schedule"),
    Entry(name="hf_trainer_ddp_cpu", repo="huggingface/transformers",
          path="tests/trainer/distributed/scripts/train.py", kind="cpu", nproc=2,
          args=("--model_name", "../../../../models/qwen2-tiny", "--per_device_train_batch_size", "4",
                "--max_steps", "16", "--ddp_backend", "gloo", *_HF_ARGS),
          env=_HF_OFFLINE, expect_absent=("dataloader_stall", "exposed_communication", "straggler_rank"),
          why="Hugging Face Trainer under torchrun, 2 gloo ranks. transformers 5 on CPU does not wrap the model "
              "in DDP (it warns 'parallel_mode != DISTRIBUTED', with or without workbench): the trace has no "
              "collective, each rank trains alone"),
    # The Trainer on models of today's families (benchmarks/corpus_hf.py), one process as `python train.py`
    # runs it; truth.json beside each run is the model's, counted from the model object that was saved.
    *(Entry(name=f"hf_trainer_{tag}_cpu", repo="huggingface/transformers",
            path="tests/trainer/distributed/scripts/train.py", kind="cpu",
            args=("--model_name", f"../../../../models/{family}-tiny", "--per_device_train_batch_size", "4",
                  "--max_steps", "16", *extra, *_HF_ARGS),
            env=_HF_OFFLINE, expect=("expert_imbalance",) if family != "qwen3" else (),
            expect_absent=("dataloader_stall", "exposed_communication", "straggler_rank",
                           *(("expert_imbalance",) if family == "qwen3" else ())),
            why=f"Hugging Face Trainer, one CPU process, {what} built from a config (batch 4 x 128 tokens): "
                "held-out evidence for the model block" + ("" if family == "qwen3" else
                ". About half of each sample is padding of one token id, which the untrained router sends to the "
                "same few experts: the expert load is really uneven"))
      for tag, family, extra, what in _HF_FAMILIES),
    Entry(name="fsdp2_example_cpu", repo="pytorch/examples", path="distributed/FSDP2/example.py", kind="cpu",
          nproc=2, steps_from=None, traced=False, why="the FSDP2 example refuses to run without 2 accelerators: a run with no training step"),
    # --- the GPU machine (torch 2.11 + CUDA 13, one or two H200) ---
    Entry(name="ddp_torchrun_gpu", repo="pytorch/examples", path="distributed/ddp-tutorial-series/multigpu_torchrun.py",
          kind="gpu", gpus=1, nproc=1, args=("2", "10", "--batch_size", "32"),
          expect=("host_bound",),
          why="plain DDP over NCCL as torchrun runs it (reads LOCAL_RANK: --nproc-per-node 1); Linear(20, 1) keeps the "
              "GPU ~1% busy with kernels < 10 us: host_bound (the tiny-kernel form of low_gpu_utilization)"),
    Entry(name="ddp_spawn_gpu", repo="pytorch/examples", path="distributed/ddp-tutorial-series/multigpu.py",
          kind="gpu", gpus=1, args=("2", "10", "--batch_size", "32"),
          expect=("host_bound",),
          why="the same DDP in the tutorial's torch.multiprocessing.spawn form: no torchrun, one process spawned "
              "per GPU (world size = torch.cuda.device_count()); each spawned process is captured as a rank"),
    Entry(name="imagenet_resnet50_gpu", repo="pytorch/examples", path="imagenet/main.py", kind="gpu", gpus=1,
          args=("-a", "resnet50", "--dummy", "-b", "128", "-j", "4", "--epochs", "1", "--print-freq", "10"),
          profile_args=("--schedule", "5,1,3"),
          expect=("fp32_matmul", "layout_conversion", "unfused_elementwise"), expect_absent=("dataloader_stall",),
          why="torchvision ResNet-50, fp32 NCHW: fp32 convolutions, cuDNN nchwToNhwc conversions and fp32 batch "
              "norm (the autocast bf16 + channels_last case). 4 workers kept up on the H200's 16 cores "
              "(data wait 0.1 ms of ~65 ms steps), so no stall, unlike the earlier -j 4 run in docs/measured.md"),
    Entry(name="imagenet_spawn_gpu", repo="pytorch/examples", path="imagenet/main.py", kind="gpu", gpus=1,
          args=("-a", "resnet50", "--dummy", "-b", "128", "-j", "4", "--epochs", "1", "--print-freq", "10",
                "--multiprocessing-distributed", "--dist-url", "tcp://127.0.0.1:29561", "--world-size", "1",
                "--rank", "0"),
          profile_args=("--schedule", "5,1,3"),
          expect=("fp32_matmul", "layout_conversion", "unfused_elementwise"), expect_absent=("dataloader_stall",),
          why="imagenet_resnet50_gpu launched as the README's multi-GPU recipe does: --multiprocessing-distributed "
              "spawns one DDP process per GPU (torch.multiprocessing.spawn), each captured as a rank: the same "
              "verdict as the single-process run, now under DDP over NCCL"),
    Entry(name="timm_bench_train_gpu", repo="huggingface/pytorch-image-models", path="benchmark.py", kind="gpu",
          gpus=1, args=("--bench", "train", "-m", "resnet50", "-b", "64", "--amp", "--num-warm-iter", "5",
                        "--num-bench-iter", "20"),
          expect=("unfused_elementwise",), expect_absent=("dataloader_stall", "fp32_matmul"),
          why="timm's own train benchmark (synthetic input, AMP, timm optimizer factory): bf16 convolutions; "
              "batch norm and activations are the memory-bound share torch.compile would fuse"),
    Entry(name="hf_trainer_gpu", repo="huggingface/transformers", path="tests/trainer/distributed/scripts/train.py",
          kind="gpu", gpus=1,
          args=("--model_name", "../../../../models/qwen2-small", "--per_device_train_batch_size", "8",
                "--max_steps", "16", "--bf16", *_HF_ARGS),
          env=_HF_OFFLINE, expect=("host_bound",), expect_absent=("dataloader_stall",),
          why="Hugging Face Trainer, one GPU, bf16, a tiny Qwen2 built from a config: kernels of a few us, the "
              "host cannot keep the GPU busy (6%)"),
    Entry(name="lightning_transformer_gpu", repo="Lightning-AI/pytorch-lightning",
          path="examples/pytorch/basics/transformer.py", kind="gpu", gpus=1, expect=("host_bound",),
          why="PyTorch Lightning on one GPU (accelerator auto): a small transformer, host_bound (GPU busy 7%)"),
    Entry(name="word_lm_gpu", repo="pytorch/examples", path="word_language_model/main.py", kind="gpu", gpus=1,
          args=("--accel", "--epochs", "1", "--log-interval", "50"), steps_from="backward", expect=("host_bound",),
          why="the loop without torch.optim on a GPU: steps from backward(), a small LSTM, host_bound (GPU busy 18%)"),
    # GPU twins of the Trainer rows on today's families: 4x the widths, batch 8, bf16 autocast (not run yet)
    *(Entry(name=f"hf_trainer_{tag}_gpu", repo="huggingface/transformers",
            path="tests/trainer/distributed/scripts/train.py", kind="gpu", gpus=1,
            args=("--model_name", f"../../../../models/{family}-small", "--per_device_train_batch_size", "8",
                  "--max_steps", "16", "--bf16", *extra, *_HF_ARGS),
            env=_HF_OFFLINE, expect_absent=("dataloader_stall",),
            why=f"hf_trainer_{tag}_cpu on one GPU: {what} at 4x the widths, bf16 autocast")
      for tag, family, extra, what in _HF_FAMILIES),
    # --- fixed twins: the one change a user would make after the verdict above ---
    Entry(name="timm_bench_train_cl_gpu", repo="huggingface/pytorch-image-models", path="benchmark.py", kind="gpu",
          gpus=1, args=("--bench", "train", "-m", "resnet50", "-b", "64", "--amp", "--num-warm-iter", "5",
                        "--num-bench-iter", "20", "--channels-last"),
          expect_absent=("layout_conversion", "dataloader_stall"),
          why="timm_bench_train_gpu with --channels-last, the fix layout_conversion names"),
    Entry(name="hf_trainer_b64_gpu", repo="huggingface/transformers", path="tests/trainer/distributed/scripts/train.py",
          kind="gpu", gpus=1,
          args=("--model_name", "../../../../models/qwen2-small", "--per_device_train_batch_size", "64",
                "--max_steps", "16", "--bf16", *_HF_ARGS),
          env=_HF_OFFLINE, expect_absent=("dataloader_stall",),
          why="hf_trainer_gpu with 8x the batch, the fix host_bound names (more work per launch)"),
    Entry(name="word_lm_b160_gpu", repo="pytorch/examples", path="word_language_model/main.py", kind="gpu", gpus=1,
          args=("--accel", "--epochs", "1", "--log-interval", "50", "--batch_size", "160"), steps_from="backward",
          why="word_lm_gpu with 8x the batch (default 20), the fix host_bound names"),
    # --- self-timed scripts: they print their own step time (and MFU) ---
    *(Entry(name=f"nanogpt_{tag}_gpu", repo="karpathy/nanoGPT", path="train.py", kind="gpu", gpus=1,
            args=(*_NANOGPT_ARGS, *extra), timer=_NANOGPT_TIMER, timeout_s=timeout, max_steps=0,
            why=f"nanoGPT's train.py, GPT-2 124M, batch 12 x 1024, 4 micro-steps, {what}; it prints its own "
                "iteration time and an MFU against the A100's 312 TFLOP/s")
      for tag, extra, timeout, what in (("bf16", ("--compile=False",), 90, "bf16 autocast, eager"),
                                        ("fp32", ("--compile=False", "--dtype=float32"), 120, "fp32 (the script allows tf32 matmuls), eager"),
                                        ("compile", ("--compile=True",), 240, "bf16 autocast, torch.compile"))),
    Entry(name="nanogpt_bench_gpu", repo="karpathy/nanoGPT", path="bench.py", kind="gpu", gpus=1,
          args=("--compile=False",), timeout_s=90, max_steps=0,
          timer=Timer(regex=r"time per iteration: ([\d.]+)ms", steps=(10, 29), mfu_regex=r"MFU: ([\d.]+)%",
                      mfu_peak_tflops=312.0, mfu_flops_per_step=nanogpt_flops_per_token() * 12 * 1024, mfu_formula="6N + 12LHQT per token (PaLM), N without position embeddings"),
          why="nanoGPT's bench.py: 10 burn-in steps, then the mean of 20 (steps 10-29) and their MFU"),
    Entry(name="imagenet_j1_gpu", repo="pytorch/examples", path="imagenet/main.py", kind="gpu", gpus=1,
          args=("-a", "resnet50", "--dummy", "-b", "128", "-j", "1", "--epochs", "1", "--print-freq", "1"),
          timer=Timer(regex=r"Epoch: \[\d+\]\[\s*(\d+)/\d+\]\s+Time\s+([\d.]+)", unit_ms=1000.0, offset=-1),
          expect=("dataloader_stall",), timeout_s=90, max_steps=40,
          why="ResNet-50 with one DataLoader worker: FakeData + ToTensor per sample cannot keep up"),
    Entry(name="imagenet_j8_gpu", repo="pytorch/examples", path="imagenet/main.py", kind="gpu", gpus=1,
          args=("-a", "resnet50", "--dummy", "-b", "128", "-j", "8", "--epochs", "1", "--print-freq", "1"),
          timer=Timer(regex=r"Epoch: \[\d+\]\[\s*(\d+)/\d+\]\s+Time\s+([\d.]+)", unit_ms=1000.0, offset=-1),
          expect_absent=("dataloader_stall",), timeout_s=90, max_steps=40,
          why="imagenet_j1_gpu with 8 workers, the fix dataloader_stall names"),
    # --- torchtitan: a Llama 3 trainer that prints its own MFU and tokens/s (traces/README.md) ---
    *(Entry(name=f"torchtitan_{tag}_gpu", repo="pytorch/torchtitan", path="torchtitan/train.py", kind="gpu", gpus=1,
            args=("--model.flavor", flavor, "--activation_checkpoint.mode", mode, *extra),
            profile_args=("--schedule", "6,2,3"), expect=expect, expect_absent=("dataloader_stall", "fp32_matmul"),
            made_by="benchmarks/torchtitan_gpu.sh",
            why=f"torchtitan v0.2.2, Llama {flavor} shape, batch 1 x 8192, recomputation {mode}; its log prints "
                "MFU (6N + 12Lhs per token, 989 TFLOP/s) and tokens/s")
      for tag, flavor, mode, extra, expect in (
          ("3b_none", "3B", "none", (), ("low_mfu",)),
          ("3b_selective", "3B", "selective", ("--activation_checkpoint.selective_ac_option", "op"), ("low_mfu",)),
          ("3b_full", "3B", "full", (), ("low_mfu",)),
          ("8b_full", "8B", "full", (), ("oom_risk", "low_mfu")),
          ("8b_selective", "8B", "selective", ("--activation_checkpoint.selective_ac_option", "op"), ("oom_risk",)))),
    # the same trainer on today's families (torchtitan's own qwen3 / deepseek_v3 models; the MoE flavors
    # shortened to 6 layers by benchmarks/torchtitan_prepare.sh's wb_moe_flavors): its log prints MFU
    # from the active parameters (get_moe_model_nparams_and_flops), a tied table left out
    *(Entry(name=f"torchtitan_{tag}_gpu", repo="pytorch/torchtitan", path="torchtitan/train.py", kind="gpu", gpus=1,
            nproc=1, args=("--model.name", family, "--model.flavor", flavor, "--activation_checkpoint.mode", "none",
                           *extra, "--training.seq_len", "4096", "--training.local_batch_size", str(batch)),
            profile_args=("--schedule", "6,2,3"), expect=expect, expect_absent=("fp32_matmul",),
            made_by="benchmarks/torchtitan_gpu.sh",
            why=f"torchtitan v0.2.2, {family} {flavor}, batch {batch} x 4096, no recomputation; its log prints MFU "
                "(6·N_active + 6·L·heads·(qk + v head dims)·s per token, 989 TFLOP/s) and tokens/s")
      for tag, family, flavor, extra, batch, expect in (
          ("qwen3_moe", "qwen3", "30B-A3B-6L", ("--experimental.custom_import", "wb_moe_flavors"), 2,
           ("expert_imbalance", "low_mfu")),
          ("dsv3_16b", "deepseek_v3", "16B-6L", ("--experimental.custom_import", "wb_moe_flavors"), 2,
           ("expert_imbalance", "low_mfu")),
          ("qwen3_1p7b", "qwen3", "1.7B", (), 4, ("low_mfu",)),
          ("qwen3_0p6b", "qwen3", "0.6B", (), 4, ("low_mfu",)))),
    # Llama 3.2 3B compiled block by block with max-autotune: a first step of 144 s
    Entry(name="torchtitan_3b_compiled_gpu", repo="pytorch/torchtitan", path="torchtitan/train.py", kind="gpu", gpus=1,
          nproc=1, args=("--model.flavor", "3B", "--activation_checkpoint.mode", "none", "--compile.enable"),
          env={"TORCHINDUCTOR_MAX_AUTOTUNE": "1"}, profile_args=("--schedule", "6,2,3"), expect=("low_mfu",),
          expect_absent=("fp32_matmul", "unfused_elementwise"), made_by="benchmarks/torchtitan_gpu.sh",
          why="torchtitan v0.2.2, Llama 3.2 3B shape, batch 1 x 8192, torch.compile of each block and the loss with "
              "inductor's max-autotune: its first step (compilation and autotuning) takes 144 s"),
    # Llama 3 8B without recomputation at 8192 tokens: out of memory in its second step
    Entry(name="torchtitan_8b_none_oom_gpu", repo="pytorch/torchtitan", path="torchtitan/train.py", kind="gpu", gpus=1,
          nproc=1, args=("--model.flavor", "8B", "--activation_checkpoint.mode", "none"),
          profile_args=("--schedule", "0,0,2", "--memory-history", "100000"), expect=("out_of_memory",),
          made_by="benchmarks/torchtitan_gpu.sh",
          why="torchtitan v0.2.2, Llama 3 8B, batch 1 x 8192, no recomputation: CUDA out of memory in step 1's "
              "forward (138.41 GiB of 139.80 allocated); its first step recorded"),
    Entry(name="fsdp2_example_gpu", repo="pytorch/examples", path="distributed/FSDP2/example.py", kind="gpu",
          gpus=2, nproc=2, args=("--mixed-precision",),
          why="FSDP2 fully_shard + MixedPrecisionPolicy over NCCL; needs 2 GPUs (nvidia-h200-x2)"),
]
BY_NAME = {e.name: e for e in ENTRIES}


# --------------------------------------------------------------------------------------------
# Data and model files the scripts read (generated, deterministic: never downloaded)

_WORDS = 6000


def _text(n_words: int, seed: int) -> str:
    """Zipf-distributed pseudo-words in lines of ~20: LM scripts tokenize by whitespace."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(_WORDS)]
    weights = [1.0 / (i + 1) for i in range(_WORDS)]
    words = rng.choices(vocab, weights=weights, k=n_words)
    return "\n".join(" ".join(words[i:i + 20]) for i in range(0, n_words, 20)) + "\n"


def prepare(entries: list[Entry]) -> None:
    repos = {e.repo for e in entries}
    if "pytorch/examples" in repos:
        d = CORPUS / "pytorch-examples/word_language_model/data/wikitext-2"
        d.mkdir(parents=True, exist_ok=True)
        for split, n, seed in (("train", 400_000, 1), ("valid", 40_000, 2), ("test", 40_000, 3)):
            if not (d / f"{split}.txt").exists():
                (d / f"{split}.txt").write_text(_text(n, seed))
    if "Lightning-AI/pytorch-lightning" in repos:
        f = CORPUS / "lightning/examples/pytorch/basics/data/wikitext-2.txt"
        f.parent.mkdir(parents=True, exist_ok=True)
        if not f.exists():  # WikiText2 downloads only when the file is missing
            f.write_text(_text(400_000, 4))
    if "karpathy/nanoGPT" in repos:
        d = CORPUS / "nanogpt/data/openwebtext"
        d.mkdir(parents=True, exist_ok=True)
        import numpy as np

        for split, n in (("train", 4_000_000), ("val", 400_000)):
            if not (d / f"{split}.bin").exists():  # random GPT-2 token ids, as prepare.py's uint16 layout
                np.random.default_rng(len(split)).integers(0, 50257, n, dtype=np.uint16).tofile(d / f"{split}.bin")
    for e in entries:
        if (d := model_dir(e)) is not None:
            from benchmarks.corpus_hf import hf_model

            hf_model(d)


def model_dir(e: Entry) -> Path | None:
    """The model directory a Hugging Face Trainer row loads (``--model_name``; benchmarks/corpus_hf.py
    makes it), or None."""
    if e.repo != "huggingface/transformers" or "--model_name" not in e.args:
        return None
    return (e.cwd / e.args[e.args.index("--model_name") + 1]).resolve()


def _write_truth(e: Entry, run_dir: Path) -> None:
    """truth.json beside the run: the model directory's truth with what the row's Trainer arguments
    make of a step (micro-batch, accumulated micro-batches, gradient checkpointing)."""
    from benchmarks.corpus_hf import run_truth

    def arg(name: str, default: int) -> int:
        return int(e.args[e.args.index(name) + 1]) if name in e.args else default

    doc = run_truth(model_dir(e), arg("--per_device_train_batch_size", 8), arg("--gradient_accumulation_steps", 1),
                    "--gradient_checkpointing" in e.args)
    (run_dir / "truth.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


# --------------------------------------------------------------------------------------------
# Steps


def extract() -> None:
    """corpus/ from the local mirrors (the ``fetch`` tool's bare git directories)."""
    for repo, paths in EXTRACT.items():
        folder, commit = SOURCES[repo]
        git_dir = MIRRORS / repo.replace("/", "+") / "repo"
        if not git_dir.is_dir():
            print(f"{repo}: no mirror at {git_dir} (fetch github:{repo} first); skipped")
            continue
        dest = CORPUS / folder
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", commit, *paths], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        print(f"{repo}@{commit[:12]} -> {dest}")
    hf = CORPUS / "transformers" / BY_NAME["hf_trainer_ddp_cpu"].path
    if not hf.exists():
        print(f"missing {hf}: copy huggingface/transformers@{SOURCES['huggingface/transformers'][1][:12]}:"
              f"{BY_NAME['hf_trainer_ddp_cpu'].path} there by hand (the repo is too large to mirror)")


def _gpu_count() -> int:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


def command(e: Entry, run_dir: Path) -> list[str]:
    stop = (["--max-steps", str(e.max_steps)] if e.max_steps else []) if e.max_steps is not None else ["--stop-after-profile"]
    return [sys.executable, "-m", "workbench", "profile", *stop, "--out", str(run_dir),
            *(["--nproc-per-node", str(e.nproc)] if e.nproc else []), *e.profile_args,
            Path(e.path).name, *e.args]


def run(kind: str, out: Path, only: list[str] | None) -> list[dict]:
    entries = [e for e in ENTRIES if e.kind == kind and (not only or e.name in only)]
    prepare(entries)
    gpus = _gpu_count() if kind == "gpu" else 0
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for e in entries:
        run_dir = (out / e.name).resolve()
        if e.made_by:
            results.append({"name": e.name, "skipped": f"made by {e.made_by}"})
            print(f"== {e.name}: skipped (made by {e.made_by})", flush=True)
            continue
        if e.gpus > gpus:
            results.append({"name": e.name, "skipped": f"needs {e.gpus} GPUs, {gpus} here"})
            print(f"== {e.name}: skipped (needs {e.gpus} GPUs, {gpus} here)", flush=True)
            continue
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = command(e, run_dir)
        env = dict(os.environ, **e.env, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        print(f"== {e.name}: (cd {e.cwd.relative_to(REPO)} && {' '.join(cmd[1:])})", flush=True)
        log = out / f"{e.name}.log"
        t0 = time.monotonic()
        with log.open("w") as fh:
            # Own session so a timeout ends torchrun and every rank, not just the launcher.
            proc = subprocess.Popen(cmd, cwd=e.cwd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            timeout = e.timeout_s or (GPU_TIMEOUT_S if kind == "gpu" else CPU_TIMEOUT_S)
            try:
                code, timed_out = proc.wait(timeout=timeout), False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    code = proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    code = proc.wait()
                timed_out = True
        wall = round(time.monotonic() - t0, 1)
        if run_dir.is_dir():
            shutil.copy(log, run_dir / "console.log")
            if model_dir(e) is not None:
                _write_truth(e, run_dir)
        results.append({"name": e.name, "exit_code": code, "timed_out": timed_out, "wall_s": wall})
        print(f"   exit {code}{' (timed out)' if timed_out else ''} in {wall} s; tail of {log}:", flush=True)
        print("   " + "\n   ".join(log.read_text(errors="replace").splitlines()[-6:]), flush=True)
    (out / f"summary_{kind}.json").write_text(json.dumps(results, indent=2))
    return results


# Trimmed fixtures stay small: traces are kept gzipped whole (analysis needs every event of the
# profiled steps); CSVs keep their head (but WHOLE_CSV); console logs their tail.
KEEP_CSV_ROWS = 60
WHOLE_CSV = ("experts_rank",)
"""CSVs kept whole: the expert load of the recorded steps (every layer × expert row) is read as a whole."""
KEEP_LOG_LINES = 40
MAX_TRACE_BYTES = 6 * 2**20


def _no_machine_paths(text: str) -> str:
    """Committed fixtures carry no machine paths: the repo, site-packages and temp dirs are named."""
    text = re.sub(r"/\S*/(site|dist)-packages/", "<site-packages>/", text)
    text = text.replace(str(REPO) + "/", "").replace(str(REPO), ".")
    return re.sub(r"/(tmp|root|home/[^/\s]+)/\S*", "<path>", text)


def trim(src: Path, dest: Path, only: list[str] | None = None) -> None:
    for run_dir in sorted(p for p in src.iterdir() if (p / "manifest.json").exists()):
        if only and run_dir.name not in only:
            continue
        out = dest / run_dir.name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for f in sorted(run_dir.iterdir()):
            if f.name.endswith(".json.gz"):
                if f.stat().st_size > MAX_TRACE_BYTES:
                    print(f"   {f} is {f.stat().st_size / 2**20:.1f} MiB (> {MAX_TRACE_BYTES / 2**20:.0f}): kept anyway")
                shutil.copy(f, out / f.name)
            elif f.name.endswith(".pt.trace.json"):
                with f.open("rb") as i, gzip.open(out / (f.name + ".gz"), "wb") as o:
                    shutil.copyfileobj(i, o)
            elif f.name.startswith(WHOLE_CSV):
                shutil.copy(f, out / f.name)
            elif f.suffix == ".csv":
                lines = f.read_text().splitlines(keepends=True)
                (out / f.name).write_text("".join(lines[:KEEP_CSV_ROWS + 1]))
            elif f.name == "console.log":
                lines = f.read_text(errors="replace").splitlines(keepends=True)
                e = BY_NAME.get(run_dir.name)
                # a self-timed script's own timer lines are kept whole: the tests read them
                keep = [ln for ln in lines[:-KEEP_LOG_LINES] if e and e.timer and _timer_line(e.timer, ln)]
                (out / f.name).write_text(_no_machine_paths("".join(keep + lines[-KEEP_LOG_LINES:])))
            elif f.suffix == ".json" and f.is_file():
                shutil.copy(f, out / f.name)
        size = sum(p.stat().st_size for p in out.iterdir())
        print(f"{out}: {size / 1024:.0f} KiB")


def _timer_line(t: Timer, line: str) -> bool:
    return bool(re.search(t.regex, line) or (t.mfu_regex and re.search(t.mfu_regex, line)))


def own_times(e: Entry, console: str) -> dict[str, object]:
    """The script's own timing from its console: ``per_step`` {step: ms} or ``mean_ms`` over
    ``steps``, and ``mfu_pct`` (the last figure it printed), per its :class:`Timer`."""
    t = e.timer
    out: dict[str, object] = {}
    if t is None:
        return out
    rx = re.compile(t.regex)
    per: dict[int, float] = {}
    for line in console.splitlines():
        m = rx.search(line)
        if m and rx.groups == 2:
            per[int(m.group(1)) + t.offset] = float(m.group(2)) * t.unit_ms
        elif m:
            out["mean_ms"], out["steps"] = float(m.group(1)) * t.unit_ms, t.steps
    if per:
        out["per_step"] = per
    if t.mfu_regex:
        found = re.findall(t.mfu_regex, console)
        if found:
            out["mfu_pct"] = float(found[-1])
    return out


def pack(src: Path, dest: Path) -> None:
    """One .tar.gz of every run directory and log (the GPU machine returns at most 8 files)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(src, arcname=src.name)
    print(f"{dest}: {dest.stat().st_size / 2**20:.1f} MiB")


def check(src: Path) -> int:
    """Analyse each run and compare with its entry's expectation; prints one line per run."""
    bad = 0
    for run_dir in sorted(p for p in src.iterdir() if (p / "manifest.json").exists()):
        e = BY_NAME.get(run_dir.name)
        res = subprocess.run([sys.executable, "-m", "workbench", "analyze", str(run_dir), "--json"],
                             capture_output=True, text=True, cwd=REPO)
        if res.returncode != 0:
            print(f"{run_dir.name}: analyze exit {res.returncode}: {res.stderr.strip()[-300:]}")
            bad += 1
            continue
        doc = json.loads(res.stdout)
        ids = [d["id"] for d in doc["diagnoses"]]
        missing = [i for i in (e.expect if e else ()) if i not in ids]
        extra = [i for i in (e.expect_absent if e else ()) if i in ids]
        bad += bool(missing or extra)
        print(f"{run_dir.name}: world {doc['run']['world_size']}, steps {doc['summary'].get('steps')}, "
              f"{doc['verdict']} | diagnoses {ids}" + (f" | MISSING {missing}" if missing else "")
              + (f" | UNEXPECTED {extra}" if extra else ""))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="step", required=True)
    sub.add_parser("extract")
    r = sub.add_parser("run")
    r.add_argument("--kind", choices=("cpu", "gpu"), required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--only", nargs="*")
    t = sub.add_parser("trim")
    t.add_argument("src", type=Path)
    t.add_argument("dest", type=Path)
    t.add_argument("--only", nargs="*")
    k = sub.add_parser("pack")
    k.add_argument("src", type=Path)
    k.add_argument("dest", type=Path)
    c = sub.add_parser("check")
    c.add_argument("src", type=Path)
    a = p.parse_args(argv)
    if a.step == "extract":
        extract()
    elif a.step == "run":
        run(a.kind, a.out, a.only)
    elif a.step == "trim":
        trim(a.src, a.dest, a.only)
    elif a.step == "pack":
        pack(a.src, a.dest)
    elif a.step == "check":
        return check(a.src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
