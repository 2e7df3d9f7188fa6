"""Where this process stands in the job and what it runs on: ``env_rank{r}.json``."""

from __future__ import annotations

import json
import os
import platform
import socket
from pathlib import Path
from typing import Any

import torch

from workbench.format.atomic import write_atomic


def dist_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's variables, else SLURM's, else a local rank
    alone (Lightning's launcher for ``devices=N`` sets ``LOCAL_RANK`` and ``WORLD_SIZE`` in the
    processes it starts), else (0, 1, 0). The world size is corrected from the process group once
    the script has one (:meth:`~workbench.capture.session.CaptureSession._note_process_group`)."""
    env = os.environ
    if "RANK" in env:
        return int(env["RANK"]), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0))
    if "SLURM_PROCID" in env:
        return int(env["SLURM_PROCID"]), int(env.get("SLURM_NTASKS", 1)), int(env.get("SLURM_LOCALID", 0))
    if "LOCAL_RANK" in env:
        return int(env["LOCAL_RANK"]), int(env.get("WORLD_SIZE", 1)), int(env["LOCAL_RANK"])
    return 0, 1, 0


def environment_info(rank: int, world_size: int, local_rank: int) -> dict[str, Any]:
    info: dict[str, Any] = {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": "cpu",
        "device_name": platform.processor() or platform.machine(),
        "device_memory_bytes": None,
        "nccl": None,
        "cpu_count": os.cpu_count(),
    }
    if torch.cuda.is_available():
        idx = local_rank % torch.cuda.device_count()
        props = torch.cuda.get_device_properties(idx)
        info.update(device=f"cuda:{idx}", device_name=props.name, device_memory_bytes=props.total_memory)
        try:
            info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:
            pass
    return info


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, default=str))


def process_group_place() -> tuple[int | None, int | None] | None:
    """(world size, rank) of the script's default process group; None while it has none,
    (None, None) when the group cannot say."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        return dist.get_world_size(), dist.get_rank()
    except (RuntimeError, ValueError):
        return None, None
