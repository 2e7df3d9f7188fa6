"""The trace-directory contract between capture and analysis (schema version 1).

A run directory ``traces/<run>/`` holds::

    manifest.json               run id, command, world size, hosts, devices, versions, status
    rank{r}.pt.trace.json.gz    the Kineto (torch.profiler) trace of rank r: standard Chrome
                                trace JSON that Perfetto, chrome://tracing and HTA open
    nvml_rank{r}.csv            timestamped device samples (NVML, or the CPU fallback)
    steps_rank{r}.csv           one row per optimizer step, written as the step ends
    env_rank{r}.json            what rank r saw at start (host, device, versions)
    status_rank{r}.json         how rank r ended (exit code, error, the failure's type, phase and step)
    memory_rank{r}.json         what rank r's memory held: parameters, gradients and optimizer state
                                at the first optimizer step, the allocator at a CUDA out-of-memory
                                error (workbench.capture.memory); newer runs only
    memory_snapshot_rank{r}.pickle  the CUDA allocator's history (``--memory-history N``), for
                                PyTorch's memory viewer
    trainer_rank{r}.json        the trainer recognised in rank r's process and its settings (ZeRO stage,
                                offload, micro-batch, accumulation, precision …; workbench.capture.trainer);
                                optional: newer runs only
    experts_rank{r}.csv         tokens per expert of each mixture-of-experts layer, per profiled
                                step (optional: only MoE jobs whose counts the capture could read)
    history_rank{r}.csv         the whole run's steps, every step while the run is short, older
                                steps aggregated as it grows (bounded), with the device's samples
                                (newer runs only; workbench.capture.history)
    window_request.json         the last window asked of the running job (workbench capture, a
                                signal, a file, a change point): id, first step, steps, ranks, trigger
    windows/<id>/               a window opened while the job ran: rank{r}.pt.trace.json.gz and
                                window_rank{r}.json (its steps and how it went) per rank
    hang_rank{r}.json           what rank r was doing when the job hung (--hang-timeout): its Python
                                stacks and its last collectives (its own record, the Flight Recorder's)
    collectives_rank{r}.jsonl   the capture's ring of rank r's last collectives (--hang-timeout)
    nccl_trace_rank_{r}         NCCL's Flight Recorder dump, written by its watchdog on a timeout
    launch_rank{r}.json         the model at launch, from the live objects: parameters (names, shapes,
                                dtypes, devices, tied), inputs, recomputation, compile, placements,
                                optimizer (workbench.capture.launch); written at the model's first
                                forward, before any trace exists
    fake_step_rank{r}.json      the job's step measured under FakeTensorMode for its layout and the
                                alternatives: memory by category, FLOPs and bytes by op class
                                (workbench.capture.fake_runner); optional

Everything is written incrementally (CSV rows flushed as they come, traces renamed into place
when complete), so a crash loses at most the step in flight. A bare directory of
``*.pt.trace.json[.gz]`` files as ``torch.profiler.tensorboard_trace_handler`` writes them is a
valid run too: the rank of each file comes from its ``distributedInfo``.

This module is the single source of the names and columns; it imports nothing heavy.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

MANIFEST = "manifest.json"
TRACE = "rank{rank}.pt.trace.json.gz"
NVML = "nvml_rank{rank}.csv"
STEPS = "steps_rank{rank}.csv"
ENV = "env_rank{rank}.json"
STATUS = "status_rank{rank}.json"
MEMORY = "memory_rank{rank}.json"
MEMORY_SNAPSHOT = "memory_snapshot_rank{rank}.pickle"
EXPERTS = "experts_rank{rank}.csv"
HISTORY = "history_rank{rank}.csv"
WINDOW_REQUEST = "window_request.json"
WINDOWS = "windows"
WINDOW_RECORD = "window_rank{rank}.json"
HANG = "hang_rank{rank}.json"
COLLECTIVES = "collectives_rank{rank}.jsonl"
NCCL_TRACE_PREFIX = "nccl_trace_rank_"
"""``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` under --hang-timeout: NCCL's watchdog appends the rank."""
WINDOW_TRIGGERS = ("launch", "on_demand", "signal", "file", "change_point")
"""What opened a window: the launch schedule (--schedule), ``workbench capture``, SIGUSR1, a trigger file,
a change point the capture saw (--window-on-change)."""
# manifest.json["status"] of a job that made no progress for --hang-timeout seconds and was ended
STATUS_HUNG = "hung"
HANG_EXIT_CODE = 124
"""``workbench profile``'s exit code for a hung job (as timeout(1) exits when its command timed out)."""
TRAINER = "trainer_rank{rank}.json"
LAUNCH = "launch_rank{rank}.json"
FAKE_STEP = "fake_step_rank{rank}.json"
LAUNCH_SCHEMA_VERSION = 1
"""launch_rank{r}.json's own ``schema_version`` (workbench.capture.launch); a reader takes what it knows."""
FAKE_STEP_SCHEMA_VERSION = 1
"""fake_step_rank{r}.json's own ``schema_version`` (workbench.capture.fake_runner)."""

# Columns of steps_rank{r}.csv, in order. Times in milliseconds, memory in bytes; empty = unknown.
STEP_COLUMNS = (
    "step",  # 0-based optimizer step index
    "start_unix_s",  # wall-clock start of the step (previous optimizer step's end)
    "step_ms",  # wall time from the previous optimizer step's end to this one's
    "data_wait_ms",  # time spent inside DataLoader iterator __next__ during the step
    "profiled",  # 1 when the profiler was recording this step
    "loss",  # reported by the engine (workbench.capture.record_metrics); empty for user scripts
    "grad_norm",
    "tokens",
    "mem_allocated_bytes",  # torch.cuda.memory_allocated at step end (GPU), else empty
    "mem_reserved_bytes",
    "max_mem_allocated_bytes",
    "rss_bytes",  # resident set size of the rank process
    "gpu_step_ms",  # the same step on the GPU's clock (CUDA events at the step edges), else empty
    # newer columns (older runs lack them; readers must not require them):
    "capture_ms",  # the capture's own work at this step's end (row, profiler step, trace export), host
    #                clock; the next step starts after it, so start_unix_s + step_ms + capture_ms = the
    #                next row's start_unix_s, and neither step_ms nor gpu_step_ms holds it
    "profiler",  # the profiler's phase during the step: off, warmup (traced and discarded) or record
    "max_mem_reserved_bytes",  # torch.cuda.max_memory_reserved so far (the allocator's peak), GPU
)
PROFILER_PHASES = ("off", "warmup", "record")

# Columns of nvml_rank{r}.csv. `source` is "nvml" or "cpu" (no GPU: a psutil process sampler).
NVML_COLUMNS = (
    "ts_unix_s",
    "source",
    "device",
    "gpu_util_pct",
    "mem_util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "sm_clock_mhz",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
    "cpu_util_pct",  # whole-machine CPU utilisation
    "proc_cpu_pct",  # this rank process (100 = one core)
    "rss_bytes",
    # newer columns (older runs lack them; readers must not require them):
    "gpu_temp_c",  # the GPU's core temperature (NVML_TEMPERATURE_GPU)
    "throttle_reasons",  # NVML's current clocks event reasons, a bit mask (0: none; 0x1 idle is not a throttle)
)

# Columns of history_rank{r}.csv (optional; older runs have none): one row per block of consecutive
# steps, ``first_step`` .. ``last_step`` (a block of one step while the run is short; older blocks are
# merged as the run grows, never a block that holds a change the capture saw). Times in ms, means over
# the block's steps unless named; empty = unknown or not sampled in the block.
HISTORY_COLUMNS = (
    "first_step",
    "last_step",
    "steps",  # steps in the block
    "start_unix_s",  # the first step's start
    "end_unix_s",  # the last step's end
    "step_ms",  # the block's typical step: the step's own time in a block of one, the mean of the merged
    #             blocks' step_ms (weighted by their steps) in a merged one
    "step_ms_min",  # the fastest and slowest step of the block (empty in a block of one)
    "step_ms_max",
    "data_wait_ms",  # DataLoader wait per step
    "cpu_ms",  # the training thread's CPU time per step
    "gpu_step_ms",  # the step on the GPU's clock (CUDA runs)
    "capture_ms",  # the capture's own work per step
    "profiled",  # steps of the block the profiler recorded
    "gpu_util_pct",  # the device's samples taken during the block (means; empty where none was taken)
    "sm_clock_mhz",
    "gpu_temp_c",
    "power_w",
    "throttle_reasons",  # the reasons seen in the block, OR-ed
    "cpu_util_pct",
    "change",  # 1 where the capture's online detector saw the step time change (capture.change_watch)
)


# Columns of experts_rank{r}.csv (optional; older runs and dense models have none; readers must not
# require it): one row per profiled step, MoE layer and routed expert.
EXPERT_COLUMNS = (
    "step",  # the step's index, as in steps_rank{r}.csv
    "layer",  # the MoE layer's module name in the model (e.g. blocks.1.moe, model.layers.0.mlp.gate)
    "expert",  # routed expert id, 0-based, global (the same under expert parallelism)
    "tokens",  # token copies this rank routed to that expert in that layer during the step (forwards
    #            only: recomputation in backward is not counted again)
)

# manifest.json["status"]
STATUS_RUNNING = "running"
STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUS_INTERRUPTED = "interrupted"


def trace_name(rank: int) -> str:
    return TRACE.format(rank=rank)


def steps_name(rank: int) -> str:
    return STEPS.format(rank=rank)


def nvml_name(rank: int) -> str:
    return NVML.format(rank=rank)


def env_name(rank: int) -> str:
    return ENV.format(rank=rank)


def status_name(rank: int) -> str:
    return STATUS.format(rank=rank)


def memory_name(rank: int) -> str:
    return MEMORY.format(rank=rank)


def memory_snapshot_name(rank: int) -> str:
    return MEMORY_SNAPSHOT.format(rank=rank)


# status_rank{r}.json keys a reader may find (newer runs add the failure's; readers must not require them):
STATUS_KEYS = ("rank", "exit_code", "error", "signal", "stopped", "steps_from", "steps", "trace_written", "trace_complete",
               "write_error", "capture_options", "end_unix_s",
               # how the script ended, when it did not end cleanly:
               "error_type",  # the exception's class, module-qualified (torch.OutOfMemoryError)
               "phase",  # forward, backward, optimizer (from the traceback), or null
               "where",  # the innermost frame: "file.py:LINE in function"
               "profiler_phase",  # what the profiler was doing in the failed step: off, warmup, record
               "steps_from_switched",  # [{"step", "from", "to"}]: auto's time windows gave way to iterations
               "profiler_yielded",  # the script ran its own torch.profiler: ours stood down (why)
               "history",  # the step history: {rows, steps, changes_flagged, cost_us_per_step} (its own work per step)
               )


def experts_name(rank: int) -> str:
    return EXPERTS.format(rank=rank)


def history_name(rank: int) -> str:
    return HISTORY.format(rank=rank)


def window_record_name(rank: int) -> str:
    return WINDOW_RECORD.format(rank=rank)


def hang_name(rank: int) -> str:
    return HANG.format(rank=rank)


def collectives_name(rank: int) -> str:
    return COLLECTIVES.format(rank=rank)


def trainer_name(rank: int) -> str:
    return TRAINER.format(rank=rank)


def launch_name(rank: int) -> str:
    return LAUNCH.format(rank=rank)


def fake_step_name(rank: int) -> str:
    return FAKE_STEP.format(rank=rank)
