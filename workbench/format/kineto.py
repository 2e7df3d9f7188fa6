"""The vocabulary of a Kineto trace: what torch.profiler's files, event categories and names mean.

Every name pattern and category workbench reads a trace with is defined here, once, beside
:mod:`workbench.format.contract` (the files workbench itself writes). The loader (which events' args it
decodes), the analysis (:mod:`workbench.analysis.events` classifies each trace's events with these
once, for the breakdown, the overlap, the collectives and the timeline alike) and the rules read
the same definitions. Standard library only: the cache's key reads :func:`trace_files` before
pandas could be imported.

Where the names come from (docs/measured.md, "What torch.profiler traces contain"): ``ProfilerStep#N``
annotations from the profiler's schedule, ``enumerate(DataLoader)#…__next__`` from the DataLoader
iterator, ``record_param_comms`` and NCCL kernels on NCCL, ``c10d::*`` dispatcher ops and
``gloo:<op>`` annotations on gloo, ``FSDP::…`` from FSDP2, ``Forward i``/``Backward i``/``PP:…``
from ``torch.distributed.pipelining``. Kernel families (GEMM, attention, norms …) are a model of
their own, in :mod:`workbench.analysis.kernel_classes`; the ops whose FLOPs are counted, in
:mod:`workbench.analysis.flops`.
"""

from __future__ import annotations

import re
from pathlib import Path

# ---- files ------------------------------------------------------------------------------------
TRACE_GLOBS = ("*.pt.trace.json.gz", "*.pt.trace.json")
"""What ``tensorboard_trace_handler`` and ``workbench profile`` name a trace."""
RANK_FILE = re.compile(r"^rank(\d+)\.pt\.trace\.json(\.gz)?$")
"""``workbench profile``'s own name for rank r's trace."""


def trace_files(path: Path) -> list[Path]:
    """The trace files of a run directory: ``*.pt.trace.json[.gz]`` and any other ``*.json[.gz]``
    that holds a trace (:func:`workbench.format.discover.trace_files`), sorted."""
    from workbench.format.discover import trace_files as found

    return found(path)


# ---- event kinds (``ph``) and instant events ----------------------------------------------------
COMPLETE = "X"
INSTANT = "i"
METADATA = "M"
MEMORY_EVENT = "[memory]"
"""``profile_memory=True``: the allocator's running totals, one instant event per (de)allocation."""
THREAD_NAME = "thread_name"

# ---- categories (``cat``) -----------------------------------------------------------------------
KERNEL_CATS = frozenset({"kernel", "Kernel"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})
GPU_CATS = KERNEL_CATS | MEMCPY_CATS
"""Events that ran on the device (a stream), not on a CPU thread."""
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
"""Host-side launches (cudaLaunchKernel, cudaMemcpyAsync, cuLaunchKernel …): their ``correlation``
arg names the GPU event they started, which puts each GPU event in the step that launched it."""
CPU_OP = "cpu_op"
"""A dispatcher op (``aten::mm``, ``c10d::allreduce_``) on a CPU thread."""
GPU_ANNOTATION = "gpu_user_annotation"
"""The device's copy of a ``record_function`` range: it spans the kernels, not the host's time."""

# ---- names: steps, input, host syncs -----------------------------------------------------------
PROFILER_STEP = re.compile(r"^ProfilerStep#([0-9]{1,18})$")
"""One step of the profiler's schedule; int64: a longer number is not a step."""
DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
"""The main process waiting for the next batch (DataLoader workers are not traced)."""
BACKWARD_NODE = "autograd::engine::evaluate_function"
OPTIMIZER_STEP = "Optimizer.step#"
SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream")
"""Host calls that wait for the GPU (``.item()``, ``.cpu()``, printing a tensor end in one)."""
ITEM = "aten::item"
PAGEABLE = "Pageable"
"""In a memcpy's name (``Memcpy HtoD (Pageable -> Device)``): staged through a bounce buffer."""
GRAPH_LAUNCH = "cudaGraphLaunch"

# ---- names: communication -----------------------------------------------------------------------
COMM_KERNEL = re.compile(r"nccl|rccl|nvshmem|mscclpp|multimem|cross_device_reduce|all_?reduce|all_?gather|"
                         r"reduce_?scatter|all_?to_?all|send_?recv", re.IGNORECASE)
"""Communication kernels on any stream: NCCL/RCCL collectives and point-to-point ``SendRecv``,
symmetric-memory and NVSHMEM kernels, custom all-reduce kernels (vLLM's cross_device_reduce)."""
CPU_COMM_OP = re.compile(r"^(c10d::|_?c10d_functional::|record_param_comms)")
"""Dispatcher ops that issue (and, for blocking calls, wait on) communication."""
ISSUED_COLLECTIVE = re.compile(r"^(c10d::|_c10d_functional::)")
"""The ops that issue a collective on gloo (no ``record_param_comms`` there)."""
COLLECTIVE_WAIT = re.compile(r"wait_tensor|wait$")
RECORD_PARAM_COMMS = "record_param_comms"
COMM_SPAN = re.compile(r"^(gloo|nccl|ucc|mpi|xccl|hccl):")
"""A backend's Work annotation (ProcessGroup profiling title): posted → completed."""
GLOO_SPAN = "gloo:"
COMM_NAME = re.compile(r"^(record_param_comms|c10d::|_c10d_functional::|nccl:|ncclKernel|ncclDevKernel|gloo:)")
"""Events that carry collective metadata (their args are decoded into the ``comms`` table):
NCCL's record_param_comms, the c10d dispatcher ops seen on gloo, functional collectives, and the
NCCL kernels themselves."""
COMM_THREAD_WORDS = ("gloo", "nccl")
"""Thread names of a backend's own threads (gloo's runloop)."""
P2P_OP = re.compile(r"^c10d::(?:send|recv_\w*)$|^(?:gloo|nccl|ucc|mpi|xccl|hccl):(?:send|recv)\b|send_?recv", re.IGNORECASE)
"""Point-to-point ops, their backend annotations (ProcessGroupNCCL titles them "nccl:recv 0<-1")
and NCCL's SendRecv kernels: pipeline stages and ring attention send activations this way."""
LIST_TYPES = ("TensorList", "Tensor", "Tensor[]")
"""``Input type`` values that name a container, not an element type."""

_OPS = [  # (pattern on the lower-cased raw name, normalised op); first match wins
    (r"reduce_?scatter", "reduce_scatter"),
    (r"all_?gather|allgather", "all_gather"),
    (r"all_?reduce", "all_reduce"),
    (r"all_?to_?all", "all_to_all"),
    (r"broadcast", "broadcast"),
    (r"barrier", "barrier"),
    (r"^recv|recv_any|recv$", "recv"),
    (r"^send|send$", "send"),
    (r"scatter", "scatter"),
    (r"gather", "gather"),
    (r"reduce", "reduce"),
]
COLLECTIVE_OPS = frozenset(op for _, op in _OPS)
_OPS_RE = [(re.compile(p), op) for p, op in _OPS]


def normalise_op(name: str) -> str:
    """``c10d::_allgather_base_`` → ``all_gather``; ``ncclDevKernel_AllReduce_Sum_f32`` → ``all_reduce``."""
    raw = str(name).split("::")[-1].split(":")[-1].strip("_").lower()
    raw = raw.replace("ncclkernel_", "").replace("nccldevkernel_", "")
    for pat, op in _OPS_RE:
        if pat.search(raw):
            return op
    return raw or "unknown"


# ---- names: sharding and pipelines --------------------------------------------------------------
FSDP_PREFIX = "FSDP::"
FSDP_LABEL = re.compile(r"^FSDP::(?:all_gather|pre_forward|pre_backward|post_backward\w*|reduce_scatter)\s*\((.*)\)$")
"""FSDP2's annotations name the module they work for: ``FSDP::all_gather (blocks.0)``."""
PP_ACTION = re.compile(r"^(Forward|Backward) (\d+)$|^PP:")
"""torch.distributed.pipelining stage actions: ``Forward i``/``Backward i`` of the single-stage
schedules, ``PP:…`` actions of the multi-stage runtime."""
PP_FORWARD = re.compile(r"^Forward (\d+)$")

# ---- names: the ops whose shapes the loader keeps -----------------------------------------------
SHAPE_OP = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|_scaled_mm|_grouped_mm|_scaled_grouped_mm|convolution|convolution_backward"
                      r"|scaled_dot_product_attention|_scaled_dot_product_\w+|_flash_attention_\w+"
                      r"|_efficient_attention_\w+|_cudnn_attention_\w+)$")
"""Operators whose FLOPs workbench.analysis.flops counts from their shapes. Only these cpu_ops get
their args decoded (into the events' ``op_args`` column): decoding every op's args is what makes a
500k-event trace slow. Container ops (aten::linear, aten::matmul, aten::conv2d) are left out on
purpose: their children carry the FLOPs with the dtype that really ran (under autocast
aten::linear sees fp32 weights, its aten::addmm bf16 ones). ``aten::_grouped_mm`` (a mixture of
experts' expert GEMMs, ``[[M, D], [E, D, H], [E]]``) counts once: a CPU backend's per-expert
``aten::mm`` children are nested in it."""
MODEL_OP = re.compile(r"^(?:aten::embedding|torch::autograd::AccumulateGrad|flash_attn::_flash_attn_(?:varlen_)?forward"
                      r"|aten::topk|aten::histc|aten::rms_norm|aten::_fused_rms_norm|aten::layer_norm|aten::pow"
                      r"|aten::neg|aten::cat)$")
"""Operators whose shapes describe the model rather than count FLOPs (analysis.model): an
embedding's ``Input Dims`` are ``[[vocab, hidden], [batch, seq], …]`` (the tokens of a forward
pass), the autograd engine's ``AccumulateGrad`` runs once per trainable parameter and backward
pass with that parameter's gradient shape (the parameter count, tied tables counted once), and the
flash-attn package's own ops (``flash_attn::_flash_attn_forward``: q ``[batch, seq, heads, dim]``;
Hugging Face's ``flash_attention_2``) give the attention's shape where no aten attention op runs;
norms and ``aten::pow`` (an eager RMSNorm's square) over ``[batch, seq, heads, head_dim]`` show a
per-head query/key norm (Qwen3); ``aten::neg`` and ``aten::cat`` are the rotary embedding's
``rotate_half`` over ``[batch, seq, heads, head_dim / 2]``, the query's and key's heads where the
attention itself runs as no op (a compiled FlexAttention). All are few (one embedding per table and forward; one AccumulateGrad per parameter tensor and backward:
~400 per step on a 24-layer GPT, against ~80k events), so decoding them costs little. Their args
land in the same ``op_args`` column; analysis.flops counts only the :data:`SHAPE_OP` ones."""
WEIGHT_OPS = ("aten::addmm", "aten::mm", "aten::convolution", "aten::_scaled_mm")
"""Counted ops whose last matrix (or second input) is a weight (analysis.memory.weight_shapes)."""
