"""The instrumented training loop: a GPT on synthetic tokens, parallelized as the config says.

One rank (CPU or one GPU; a process group of one is created so FSDP2/ZeRO run too):

    python workbench/engine/train.py --config case_studies/engine/ddp_tiny.toml --set parallel.mode=\"single\"

One node, N ranks (gloo on CPU, NCCL on GPUs: same code):

    python -m torch.distributed.run --nproc-per-node 2 workbench/engine/train.py \\
        --config case_studies/engine/ddp_tiny.toml --set data.num_workers=2
    workbench train --config case_studies/engine/zero3_tiny.toml --nproc-per-node 2 --profile

Several nodes under SLURM (one torchrun per node, torchrun starts the per-GPU ranks; the c10d
rendezvous runs on the first node of the allocation, any free port):

    #SBATCH --nodes=4 --ntasks-per-node=1 --gpus-per-node=8 --cpus-per-task=64
    head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
    srun python -m torch.distributed.run --nnodes "$SLURM_NNODES" --nproc_per_node 8 \\
        --rdzv_backend c10d --rdzv_endpoint "$head:29500" --rdzv_id "$SLURM_JOB_ID" \\
        --max-restarts 1 workbench/engine/train.py --config case_studies/engine/gpt370m_fsdp.toml
    # profiled: the same line with `-m workbench train --profile --out traces/run-$SLURM_JOB_ID
    # --config …` in place of `workbench/engine/train.py --config …` (each rank captures itself)

Rendezvous: every node must reach ``--rdzv_endpoint`` (TCP); ``--rdzv_id`` must be the same on
all nodes and unique per job; NCCL picks its network from ``NCCL_SOCKET_IFNAME`` /
``NCCL_IB_HCA`` when the default interface is wrong. With ``--max-restarts`` on gloo set
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (restarted workers otherwise fail connectFullMesh) and
``checkpoint.dir`` / ``checkpoint.every`` so the restarted job resumes from the last DCP save.

Test hook: ``WORKBENCH_TEST_KILL_AT_STEP=RANK:STEP`` kills that rank with ``os._exit`` after
step STEP of the first attempt (torchrun then restarts the job).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):  # run as a file (torchrun workbench/engine/train.py): find the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist

import workbench.capture as capture
from workbench.engine import checkpoint
from workbench.engine.config import Config, load_config
from workbench.engine.data import build_loader
from workbench.engine.faults import host_sync, straggle
from workbench.engine.model import GPT, loss_fn
from workbench.engine.moe import update_expert_bias
from workbench.engine.optim import clip_grads, grad_norm, optimizer_class_and_kwargs
from workbench.engine.parallel import parallelize

KILL_ENV = "WORKBENCH_TEST_KILL_AT_STEP"


def init_distributed() -> torch.device:
    """Join the job torchrun/srun started, or make a process group of one (FSDP2 and ZeRO need one)."""
    if "RANK" not in os.environ:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if torch.cuda.is_available():
        device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}")
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=timedelta(seconds=300))
    else:
        device = torch.device("cpu")
        # a short timeout: a mismatched collective fails in a minute instead of hanging 30
        dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    return device


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    from workbench.hardware.peaks import peak_flops as device_peak

    return device_peak(torch.cuda.get_device_name(device))


def should_die(rank: int, step: int) -> bool:
    spec = os.environ.get(KILL_ENV)
    if not spec or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return False
    r, s = (int(v) for v in spec.split(":"))
    return r == rank and s == step


def train(cfg: Config) -> list[float]:
    """Run ``cfg.train.steps`` optimizer steps; returns the global mean loss of each step run."""
    device = init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg.check_world(world, gpu=device.type == "cuda")
    torch.manual_seed(cfg.train.seed)  # same weights on every rank before they are split
    with torch.device(device):
        model = GPT(cfg.model)
    flops_per_token = model.flops_per_token()
    n_params, n_active = model.num_params(), model.num_params(active=True)
    par = parallelize(model, cfg, device)
    tp = cfg.degrees(world)[1]
    params = [p for p in par.model.parameters() if p.requires_grad]
    opt_cls, opt_kw = optimizer_class_and_kwargs(cfg, device, mixed_tensor_types=tp > 1)
    if cfg.parallel.mode == "zero1":
        from workbench.engine.parallel.zero import apply_zero1

        opt = apply_zero1(params, opt_cls, **opt_kw)
    else:
        opt = opt_cls(params, **opt_kw)

    ck = cfg.checkpoint
    start = 0
    if ck.dir and ck.resume and (last := checkpoint.latest_step(ck.dir)) is not None:
        checkpoint.load(ck.dir, last, par.model, opt)
        start = last
        if rank == 0:
            print(f"resumed from {ck.dir}/step_{last}", flush=True)
    loader = build_loader(cfg, dp_rank=par.dp_rank, dp_size=par.dp_size, start_step=start, device=device)
    if rank == 0:
        moe = (f", MoE {cfg.model.moe_layers} x {cfg.model.moe_experts} experts top-{cfg.model.moe_top_k} "
               f"({n_active / 1e6:.1f}M active), ep {cfg.parallel.ep}") if cfg.model.moe_experts else ""
        print(f"model {n_params / 1e6:.1f}M params{moe}, mode {cfg.parallel.mode}, world {world} "
              f"(dp {par.dp_size}, tp {tp}, pp {par.pp_size}), device {device}", flush=True)

    accum, mode = cfg.train.grad_accum, cfg.parallel.mode
    tokens_per_rank_step = cfg.data.batch_size * cfg.model.seq_len * accum
    batches = iter(loader)
    losses: list[float] = []
    t_timed, timed_steps = None, 0
    for step in range(start, cfg.train.steps):
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        if par.schedule is not None:
            x, y = (t.to(device, non_blocking=True) for t in next(batches))
            loss_sum = _pipeline_step(par, x, y, device)
        for micro in range(accum if par.schedule is None else 0):
            x, y = (t.to(device, non_blocking=True) for t in next(batches))
            last = micro == accum - 1
            with _grad_sync(par.model, mode, enabled=last or not cfg.parallel.no_sync):
                with torch.autocast(device.type, dtype=par.autocast_dtype or torch.float32, enabled=par.autocast_dtype is not None):
                    loss = loss_fn(par.model(x), y) / accum
                if cfg.faults.host_sync_every_step:
                    host_sync(device, loss)
                loss.backward()
                if cfg.faults.host_sync_every_step:
                    host_sync(device, loss)
            loss_sum += loss.detach().float()
        par.after_backward()  # expert-parallel gradients (what DDP left alone)
        if rank == cfg.faults.straggler_rank:
            straggle(cfg.faults.straggler_ms, device)
        norm = grad_norm(params, par.pp_group)
        if cfg.train.grad_clip:
            clip_grads(params, norm, cfg.train.grad_clip)
        global_loss = _mean_over_data(loss_sum, par)
        # tokens: this rank's share of the step's tokens (TP and PP ranks share their batch), so
        # the sum over ranks of steps_rank{r}.csv is what the job trained
        capture.record_metrics(loss=global_loss, grad_norm=norm, tokens=tokens_per_rank_step * par.dp_size / world)
        with _lr_scaled(opt, cfg.faults.lr_spike_factor if step == cfg.faults.lr_spike_step else 1.0):
            opt.step()
        opt.zero_grad(set_to_none=True)
        if cfg.model.moe_balance_coeff:
            update_expert_bias(par.model, cfg.model.moe_balance_coeff, par.dp_group, par.dp_size)
        loss_value = global_loss.item()  # note: a host sync point, once per step, for the log line
        losses.append(loss_value)
        dt_ms = (time.perf_counter() - t0) * 1e3
        if rank == 0:
            print(f"step {step} loss {loss_value:.9g} grad_norm {norm.item():.6g} step_ms {dt_ms:.1f}", flush=True)
        if step == start:  # the first step pays for warm-up (allocator, kernels, buckets): not timed
            t_timed = time.perf_counter()
        else:
            timed_steps += 1
        done = step + 1
        if ck.every and done % ck.every == 0:
            checkpoint.save(ck.dir, done, par.model, opt)
        if should_die(rank, step):
            print(f"rank {rank}: {KILL_ENV}: dying after step {step}", flush=True)
            os._exit(17)

    if rank == 0 and timed_steps:
        _report_throughput(cfg, device, world, par, tokens_per_rank_step, flops_per_token,
                           timed_steps, time.perf_counter() - t_timed)
    # Drop everything that holds the group or tensors its async work touched (ZeroRedundancyOptimizer,
    # DDP's reducer, FSDP states, the pipeline schedule) and collect cycles *before* the group goes:
    # a gloo group that outlives destroy_process_group is torn down during interpreter finalization,
    # and the process then aborts ("terminate called without an active exception", seen with ZeRO-1)
    del opt, par, params, model, batches, loader
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return losses


@contextlib.contextmanager
def _lr_scaled(opt: torch.optim.Optimizer, factor: float):
    """The learning rate times ``factor`` inside the block (the lr_spike fault), restored exactly after."""
    saved = [group["lr"] for group in opt.param_groups]
    for group in opt.param_groups:
        group["lr"] *= factor
    try:
        yield
    finally:
        for group, lr in zip(opt.param_groups, saved):
            group["lr"] = lr


def _grad_sync(model: torch.nn.Module, mode: str, enabled: bool):
    """DDP's no_sync / FSDP2's requires_gradient_sync for accumulation micro-batches."""
    if enabled:
        if hasattr(model, "set_requires_gradient_sync"):
            model.set_requires_gradient_sync(True)
        return contextlib.nullcontext()
    if hasattr(model, "no_sync"):
        return model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(False)
    return contextlib.nullcontext()


def _pipeline_step(par, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> torch.Tensor:
    """One GPipe / 1F1B step: the first stage feeds tokens, the last computes the loss."""
    first, last = par.pp_rank == 0, par.pp_rank == par.pp_size - 1
    losses: list[torch.Tensor] = []
    with torch.autocast(device.type, dtype=par.autocast_dtype or torch.float32, enabled=par.autocast_dtype is not None):
        if first:
            par.schedule.step(x)
        elif last:
            par.schedule.step(target=y, losses=losses)
        else:
            par.schedule.step()
    return torch.stack(losses).float().mean().detach() if last else torch.zeros((), device=device)


def _mean_over_data(loss: torch.Tensor, par) -> torch.Tensor:
    """The step's loss averaged over data-parallel ranks (gloo has no AVG: SUM then divide);
    pipeline: the last stage's loss handed to every stage."""
    loss = loss.clone()
    if par.pp_size > 1:
        dist.all_reduce(loss, group=par.pp_group)  # only the last stage holds a non-zero loss
    if par.dp_size > 1:
        dist.all_reduce(loss, group=par.dp_group)
        loss /= par.dp_size
    return loss


def _report_throughput(cfg, device, world, par, tokens_per_rank_step, flops_per_token, steps, seconds) -> None:
    # ranks of one tensor/pipeline group share their tokens: count each data-parallel replica once
    tokens_s = tokens_per_rank_step * par.dp_size * steps / seconds
    per_device = tokens_s / world
    peak = peak_flops(device)
    # MFU, PaLM appendix B: achieved model FLOP/s (6N + 12LHQT per token) over the device peak
    mfu = f"{100 * per_device * flops_per_token / peak:.1f}%" if peak else "n/a (no known peak for this device)"
    if device.type == "cpu":
        mfu = "n/a (CPU)"
    print(f"throughput: {tokens_s:,.0f} tokens/s ({per_device:,.0f} per device), "
          f"{seconds / steps * 1e3:.1f} ms/step over {steps} steps, MFU {mfu}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Train the workbench GPT engine (see the module docstring).")
    p.add_argument("--config", default=None, help="TOML config (default: all defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one field, e.g. data.num_workers=8 (repeatable)")
    args = p.parse_args(argv)
    from workbench.format.errors import WorkbenchError

    try:
        cfg = load_config(args.config, args.overrides)
        train(cfg)
    except WorkbenchError as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
