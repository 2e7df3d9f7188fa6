"""PyTorch's out-of-memory messages across versions, and collective timeouts, parsed
(workbench/analysis/failure.py). Each text is PyTorch's own format (c10/cuda/CUDACachingAllocator.cpp
at the versions named, ROCm's hipified build, c10's CPU allocator, ProcessGroupNCCL's watchdog,
gloo's TCP transport), with figures as users posted them."""

from __future__ import annotations

import pytest

from workbench.analysis.failure import classify, fragmented, parse_oom, parse_timeout, run_failure

pytestmark = pytest.mark.unit

GiB, MiB = 1 << 30, 1 << 20

# torch >= 2.2: "Including non-PyTorch memory, this process has …"
TORCH_2_2 = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 192.00 MiB. GPU 0 has a total capacity of "
             "79.19 GiB of which 46.50 MiB is free. Including non-PyTorch memory, this process has 79.13 GiB memory in use. "
             "Of the allocated memory 77.91 GiB is allocated by PyTorch, and 648.28 MiB is reserved by PyTorch but "
             "unallocated. If reserved but unallocated memory is large try setting "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
             "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
# torch 2.1: "capacty", another process listed by pid
TORCH_2_1 = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacty of 14.75 GiB of "
             "which 1.66 GiB is free. Process 414660 has 13.09 GiB memory in use. Of the allocated memory 10.09 GiB is "
             "allocated by PyTorch, and 1.92 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
             "memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory "
             "Management and PYTORCH_CUDA_ALLOC_CONF")
# a memory fraction set, CUDA graphs' private pools
TORCH_2_FRACTION = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 39.49 GiB of which "
                    "10.00 GiB is free. 20.00 GiB allowed; Including non-PyTorch memory, this process has 19.50 GiB memory "
                    "in use. Of the allocated memory 17.00 GiB is allocated by PyTorch, with 1.00 GiB allocated in private "
                    "pools (e.g., CUDA Graphs), and 1.50 GiB is reserved by PyTorch but unallocated.")
# torch 1.x (1.5 to 2.0)
TORCH_1 = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 4.00 GiB total capacity; 3.40 GiB "
           "already allocated; 0 bytes free; 3.46 GiB reserved in total by PyTorch) If reserved memory is >> allocated "
           "memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
           "PYTORCH_CUDA_ALLOC_CONF")
# torch < 1.5: "cached"
TORCH_1_OLD = ("RuntimeError: CUDA out of memory. Tried to allocate 32.12 MiB (GPU 0; 7.93 GiB total capacity; 7.25 GiB "
               "already allocated; 2.56 MiB free; 44.76 MiB cached)")
ROCM = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 978.00 MiB. GPU 0 has a total capacity of 15.98 GiB "
        "of which 630.00 MiB is free. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
CPU = ("RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
       "to allocate 1125899906842624 bytes. Error code 12 (Cannot allocate memory)")
NCCL = ("[rank1]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran "
        "for 600088 milliseconds before timing out.")
GLOO = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
        "5000ms for recv operation to complete")


def test_torch_2_2_message_figures():
    o = parse_oom(TORCH_2_2)
    assert o["format"] == "torch>=2.1" and o["device_kind"] == "cuda" and o["device"] == 0
    assert o["tried_to_allocate_bytes"] == 192 * MiB
    assert o["capacity_bytes"] == round(79.19 * GiB) and o["free_bytes"] == round(46.50 * MiB)
    assert o["process_bytes"] == round(79.13 * GiB)
    assert o["allocated_bytes"] == round(77.91 * GiB) and o["reserved_unallocated_bytes"] == round(648.28 * MiB)
    assert o["reserved_bytes"] == o["allocated_bytes"] + o["reserved_unallocated_bytes"]
    # outside PyTorch's allocator: 79.13 − 77.91 − 0.633 GiB ≈ 0.587 GiB (the CUDA context, cuBLAS, NCCL)
    assert o["non_pytorch_bytes"] / GiB == pytest.approx(79.13 - 77.91 - 648.28 / 1024, abs=0.01)
    assert not fragmented(o)  # 0.63 GiB of 79 GiB


def test_torch_2_1_message_and_another_process():
    o = parse_oom(TORCH_2_1)
    assert o["capacity_bytes"] == round(14.75 * GiB) and o["free_bytes"] == round(1.66 * GiB)
    assert o["other_processes"] == [{"pid": 414660, "bytes": round(13.09 * GiB)}]
    assert "process_bytes" not in o and o["reserved_unallocated_bytes"] == round(1.92 * GiB)
    # 1.92 GiB reserved but unallocated is 13 % of the device, but less than the 1.95 GiB asked for: had it
    # been one block, the request still would not have fit; for 1.5 GiB it would have
    assert not fragmented(o)
    assert fragmented({**o, "tried_to_allocate_bytes": round(1.5 * GiB)})


def test_fraction_and_private_pools():
    o = parse_oom(TORCH_2_FRACTION)
    assert o["device"] == 1 and o["allowed_bytes"] == 20 * GiB and o["private_pools_bytes"] == 1 * GiB
    assert o["allocated_bytes"] == 17 * GiB and o["reserved_unallocated_bytes"] == round(1.5 * GiB)


def test_torch_1_formats():
    o = parse_oom(TORCH_1)
    assert o["format"] == "torch 1.x" and o["tried_to_allocate_bytes"] == 20 * MiB and o["free_bytes"] == 0
    assert o["allocated_bytes"] == round(3.40 * GiB) and o["reserved_bytes"] == round(3.46 * GiB)
    assert o["reserved_unallocated_bytes"] == round(3.46 * GiB) - round(3.40 * GiB)
    old = parse_oom(TORCH_1_OLD)
    assert old["format"] == "torch<1.5" and old["reserved_unallocated_bytes"] == round(44.76 * MiB)


def test_rocm_and_cpu():
    o = parse_oom(ROCM)
    assert o["device_kind"] == "hip" and o["allocated_bytes"] == 0 and o["tried_to_allocate_bytes"] == 978 * MiB
    c = parse_oom(CPU)
    assert c == {"device_kind": "cpu", "format": "cpu", "tried_to_allocate_bytes": 1125899906842624}


def test_what_is_not_an_oom():
    assert parse_oom("RuntimeError: shape mismatch") is None and parse_oom(None) is None
    assert parse_oom("CUDA error: an illegal memory access was encountered") is None
    assert parse_oom("torch.OutOfMemoryError: something new")["format"] == "unparsed"


def test_timeouts_name_the_rank_and_collective():
    t = parse_timeout(NCCL)
    assert t == {"backend": "nccl", "rank": 1, "ran_ms": 600088, "op": "BROADCAST", "seq": 1, "timeout_ms": 600000}
    assert parse_timeout(GLOO) == {"backend": "gloo", "timeout_ms": 5000, "op": "recv"}
    assert [classify(x) for x in (TORCH_2_2, NCCL, "Connection closed by peer [127.0.0.1]:123", "ValueError: x")] == \
        ["out_of_memory", "collective_timeout", "peer_failure", "error"]


def test_run_failure_orders_ranks_by_when_they_failed():
    m = {"status": "failed", "exit_code": 1, "error": "rank 1: …",
         "ranks": {"0": {"rank": 0, "error": "RuntimeError: Connection closed by peer", "exit_code": 1, "end_unix_s": 20.0, "steps": 4},
                   "1": {"rank": 1, "error": "torch.OutOfMemoryError: " + TORCH_2_2, "exit_code": 1, "end_unix_s": 10.0,
                         "steps": 4, "phase": "backward"},
                   "2": {"rank": 2, "error": None, "exit_code": 0}}}
    f = run_failure(m)
    assert [e["rank"] for e in f["ranks"]] == [1, 0]
    assert f["ranks"][0]["kind"] == "out_of_memory" and f["ranks"][0]["phase"] == "backward" and f["ranks"][0]["step"] == 4
    assert f["ranks"][1]["kind"] == "peer_failure"
    assert run_failure({**m, "status": "ok"}) is None and run_failure({**m, "status": "interrupted"}) is None


# ---- hostile texts: linear time, figures past any real one, figures that contradict each other ------

def _fill(piece, size: int) -> str:
    out, n, i = [], 0, 0
    while n < size:
        out.append(piece(i))
        n += len(out[-1])
        i += 1
    return "".join(out)[:size]


LONG = {
    # what real ones carry: every rank's collective, on one line
    "watchdog": lambda: _fill(lambda i: f"[Rank {i % 4096}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={i}, "
                                        "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ", 1 << 20),
    "process_group": lambda: _fill(lambda i: f"[PG ID 0 PG GUID 0(default_pg) Rank {i % 4096}] ProcessGroupNCCL's watchdog "
                                             "got stuck for 480 seconds without making progress. ", 1 << 20),
    "digits": lambda: "CUDA out of memory. Tried to allocate " + "9" * (1 << 20) + " GiB",
}
ORDINARY = "Traceback (most recent call last):\n" + _fill(
    lambda i: f'  File "/opt/train/model.py", line {i}, in forward\n    x = self.layers[{i}](x)\n', 1 << 20)


@pytest.mark.parametrize("name", sorted(LONG))
def test_a_mib_of_error_text_parses_in_linear_time(name):
    """A MiB on one line (the watchdog's, a process group's error listing every rank; a run of digits) is
    read in about the time of a MiB of ordinary traceback: under 2 s on a CI machine. The lazy patterns
    these replaced took 4 s on a quarter of the watchdog text and minutes on all of it."""
    import time

    text = LONG[name]()
    t = time.perf_counter()
    kind = classify(text)
    took = time.perf_counter() - t
    t = time.perf_counter()
    classify(ORDINARY)
    ordinary = time.perf_counter() - t
    assert took < 2.0 and ordinary < 2.0, (name, took, ordinary)
    assert kind == {"watchdog": "collective_timeout", "process_group": "error", "digits": "out_of_memory"}[name]


def test_the_head_and_tail_of_a_long_message_are_read():
    """An out-of-memory message at the end of a MiB of traceback, a watchdog line at its head: both read."""
    oom = ORDINARY + "\n" + TORCH_2_2
    assert parse_oom(oom)["capacity_bytes"] == round(79.19 * GiB)
    head = "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=1, " \
           "NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n" + ORDINARY
    assert parse_timeout(head) == {"backend": "nccl", "rank": 3, "ran_ms": 600081, "op": "BROADCAST", "seq": 7, "timeout_ms": 600000}


def test_figures_past_any_real_one_are_not_read():
    """A 400-digit size or timeout is no figure: the kind of failure is still said, the number is not."""
    oom = parse_oom("CUDA out of memory. Tried to allocate " + "9" * 400 + ".00 GiB. GPU 0 has a total capacity of 79.19 GiB "
                    "of which 46.50 MiB is free.")
    assert oom == {"device_kind": "cuda", "format": "unparsed"}
    assert parse_timeout("Timed out waiting " + "9" * 400 + "ms for recv operation to complete") == {"backend": "gloo"}
    assert classify("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
                    "Timeout(ms)=" + "9" * 5000 + ") ran for " + "9" * 5000 + " milliseconds") == "collective_timeout"


def test_figures_that_contradict_the_device_are_left_out_and_named():
    """500 GiB free of a 10 GiB device, more allocated than reserved: the message is garbled or edited; its
    impossible figures are not stated, ``inconsistent`` says why."""
    oom = parse_oom("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 10.00 GiB of which "
                    "500.00 GiB is free. Including non-PyTorch memory, this process has 9.00 GiB memory in use. Of the "
                    "allocated memory 8.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.")
    assert "free_bytes" not in oom and oom["capacity_bytes"] == 10 * GiB and oom["allocated_bytes"] == 8 * GiB
    assert oom["inconsistent"] == ["500.00 GiB free is more than the capacity (10.00 GiB)"]
    assert "inconsistent" not in parse_oom(TORCH_2_2)
