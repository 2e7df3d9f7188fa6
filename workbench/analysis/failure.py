"""What a failed job's error says: PyTorch's out-of-memory messages and collective timeouts, parsed.

The texts are PyTorch's own (``c10/cuda/CUDACachingAllocator.cpp``, ``c10/core/impl/alloc_cpu.cpp``,
``ProcessGroupNCCL.cpp``, gloo's TCP transport), in every form a release printed:

- torch ≥ 2.1 (CUDA; ROCm prints ``HIP out of memory``)::

      CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which
      46.50 MiB is free. Including non-PyTorch memory, this process has 79.13 GiB memory in use. Of the
      allocated memory 77.91 GiB is allocated by PyTorch, and 648.28 MiB is reserved by PyTorch but
      unallocated. If reserved but unallocated memory is large try setting ...

  2.1 printed ``Process 414660 has 13.09 GiB memory in use.`` (and spelt "capacty"); every other
  process on the GPU is listed the same way; ``X allowed;`` follows the free memory when the process
  set a memory fraction, and ``with X allocated in private pools (e.g., CUDA Graphs),`` follows
  "allocated by PyTorch" when CUDA graphs hold memory.
- torch 1.x::

      CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 4.00 GiB total capacity; 3.40 GiB already
      allocated; 0 bytes free; 3.46 GiB reserved in total by PyTorch)

  (before 1.5: ``...; 2.56 MiB free; 44.76 MiB cached)``).
- the CPU allocator: ``DefaultCPUAllocator: can't allocate memory: you tried to allocate 2359296
  bytes. Error code 12 (Cannot allocate memory)``.
- NCCL's watchdog: ``[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1,
  OpType=BROADCAST, NumelIn=…, NumelOut=…, Timeout(ms)=600000) ran for 600081 milliseconds before
  timing out.``; gloo: ``Timed out waiting 30000ms for recv operation to complete``; a peer that
  died: ``Connection closed by peer`` / ``Connection reset by peer``.

Sizes are c10's ``format_size``: ``N bytes``, then KiB, MiB, GiB with two decimals (so a figure is
known to ±0.005 of its unit). No torch here: these are strings from the run's status files.

Parsing takes time linear in the text, whatever it holds: a message is cut to its first and last
:data:`KEEP_CHARS` characters (:func:`clipped`: the kind of failure is said at the head, an
out-of-memory's figures at the tail of a traceback; a real NCCL watchdog message carries every
rank's collective list, a MiB on one line), and every pattern is anchored on literal words with
bounded repeats, so no pattern backtracks over what it scanned (a lazy ``.*?`` before a word that
never comes made a 256 KiB watchdog text take 4 s, a 1 MiB one minutes). A figure of more digits
than any real one (a 400-digit GiB, a timeout of 10^400 ms) is not read: the message still says
what kind of failure it was, without that number.
"""

from __future__ import annotations

import re
from typing import Any

_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}
_SIZE = r"(?<![0-9.])([0-9]{1,20}(?:\.[0-9]{1,6})?) (bytes|KiB|MiB|GiB|TiB|PiB)"
"""A size as c10 prints it; a number that starts inside another or runs past 20 digits is none (and
the look-behind keeps a search from restarting at every digit of a long run of them)."""
_INT = r"(?<![0-9])([0-9]{1,18})(?![0-9])"
"""A whole number as PyTorch prints ranks, pids, sequence numbers and milliseconds: 1-18 digits."""

KEEP_CHARS = 32 << 10
"""Characters of a failure message read from each end: a traceback's first lines say where it
started, its last lines what failed (an out-of-memory's figures are its last line)."""


def clipped(text: str) -> str:
    """``text`` as parsed: whole up to 2 × :data:`KEEP_CHARS` characters, else its head and tail
    with a marker between (so that no figure is read across the cut)."""
    if len(text) <= 2 * KEEP_CHARS:
        return text
    return text[:KEEP_CHARS] + f"\n… [{len(text) - 2 * KEEP_CHARS:,} characters left out] …\n" + text[-KEEP_CHARS:]

FRAGMENTED_FRACTION = 0.10
"""Reserved but unallocated memory above this share of the device is named as fragmentation: the
allocator held it in blocks too small for the failed request (PyTorch's own message suggests
``expandable_segments`` when it "is large"; 10 % of an 80 GiB GPU is 8 GiB, many times a typical
failed request)."""


def size_bytes(number: str, unit: str) -> int:
    """``("20.00", "MiB")`` → bytes (c10's format_size, read back)."""
    return int(round(float(number) * _UNITS[unit]))


def _find(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return size_bytes(m.group(1), m.group(2)) if m else None


_MODERN = re.compile(r"(CUDA|HIP) out of memory\. Tried to allocate " + _SIZE + r"\. GPU " + _INT + r" has a total "
                     r"capac(?:i)?ty of " + _SIZE + r" of which " + _SIZE + r" is free\.")
_LEGACY = re.compile(r"(CUDA|HIP) out of memory\. Tried to allocate " + _SIZE + r" \(GPU " + _INT + r"; " + _SIZE
                     + r" total capacity; " + _SIZE + r" already allocated; " + _SIZE + r" free;")
_CPU = re.compile(r"DefaultCPUAllocator: can't allocate memory: you tried to allocate ([0-9]{1,20}) bytes")
_GENERIC = re.compile(r"(CUDA|HIP) out of memory|CUDA error: out of memory|OutOfMemoryError")


def parse_oom(text: str | None) -> dict[str, Any] | None:
    """The figures of a PyTorch out-of-memory message in ``text`` (an error line, a traceback), or
    None when it holds none. Keys (bytes; absent when the message did not say):
    ``device_kind`` (cuda, hip, cpu), ``device`` (GPU index), ``format`` (``torch>=2.1``,
    ``torch 1.x``, ``torch<1.5``, ``cpu``, ``unparsed``), ``tried_to_allocate_bytes``,
    ``capacity_bytes``, ``free_bytes``, ``allowed_bytes``, ``process_bytes`` (this process, PyTorch
    and not), ``other_processes`` ([{pid, bytes}]), ``allocated_bytes`` (by PyTorch),
    ``private_pools_bytes``, ``reserved_unallocated_bytes``, ``reserved_bytes`` (allocated +
    reserved but unallocated), ``non_pytorch_bytes`` (this process's memory outside the allocator:
    the CUDA context, NCCL's buffers, cuBLAS workspaces)."""
    if not text:
        return None
    text = clipped(text)
    m = _MODERN.search(text)
    if m:
        out: dict[str, Any] = {"device_kind": m.group(1).lower(), "format": "torch>=2.1",
                               "tried_to_allocate_bytes": size_bytes(m.group(2), m.group(3)), "device": int(m.group(4)),
                               "capacity_bytes": size_bytes(m.group(5), m.group(6)),
                               "free_bytes": size_bytes(m.group(7), m.group(8))}
        rest = text[m.end():]
        allowed = _find(_SIZE + r" allowed;", rest)
        if allowed is not None:
            out["allowed_bytes"] = allowed
        own = _find(r"this process has " + _SIZE + r" memory in use", rest)
        others = [{"pid": int(p), "bytes": size_bytes(n, u)}
                  for p, n, u in re.findall(r"Process " + _INT + r" has " + _SIZE + r" memory in use", rest)]
        if own is not None:
            out["process_bytes"] = own
        if others:
            out["other_processes"] = others
        alloc = _find(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch", rest)
        pools = _find(r"with " + _SIZE + r" allocated in private pools", rest)
        unalloc = _find(_SIZE + r" is reserved by PyTorch but unallocated", rest)
        if alloc is not None:
            out["allocated_bytes"] = alloc
        if pools is not None:
            out["private_pools_bytes"] = pools
        if unalloc is not None:
            out["reserved_unallocated_bytes"] = unalloc
        if alloc is not None and unalloc is not None:
            out["reserved_bytes"] = alloc + unalloc
            if own is not None:
                out["non_pytorch_bytes"] = max(0, own - alloc - unalloc)
        return consistent(out)
    m = _LEGACY.search(text)
    if m:
        out = {"device_kind": m.group(1).lower(), "format": "torch 1.x",
               "tried_to_allocate_bytes": size_bytes(m.group(2), m.group(3)), "device": int(m.group(4)),
               "capacity_bytes": size_bytes(m.group(5), m.group(6)), "allocated_bytes": size_bytes(m.group(7), m.group(8)),
               "free_bytes": size_bytes(m.group(9), m.group(10))}
        rest = text[m.end():]
        reserved = _find(_SIZE + r" reserved in total by PyTorch", rest)
        cached = _find(_SIZE + r" cached\)", rest)
        if reserved is not None:
            out["reserved_bytes"] = reserved
        elif cached is not None:  # before 1.5: "cached" is what is reserved but not allocated
            out["format"] = "torch<1.5"
            out["reserved_bytes"] = out["allocated_bytes"] + cached
        if "reserved_bytes" in out:
            out["reserved_unallocated_bytes"] = max(0, out["reserved_bytes"] - out["allocated_bytes"])
        return consistent(out)
    m = _CPU.search(text)
    if m:
        return {"device_kind": "cpu", "format": "cpu", "tried_to_allocate_bytes": int(m.group(1))}
    m = _GENERIC.search(text)
    if m:
        kind = "hip" if "HIP" in m.group(0) else "cuda"
        return {"device_kind": kind, "format": "unparsed"}
    return None


_BOUNDS = (("free_bytes", "capacity_bytes", "free", "the capacity"), ("allowed_bytes", "capacity_bytes", "allowed", "the capacity"),
           ("process_bytes", "capacity_bytes", "in use by this process", "the capacity"),
           ("reserved_bytes", "capacity_bytes", "reserved", "the capacity"),
           ("allocated_bytes", "capacity_bytes", "allocated", "the capacity"),
           ("allocated_bytes", "reserved_bytes", "allocated", "what is reserved"),
           ("reserved_unallocated_bytes", "capacity_bytes", "reserved but unallocated", "the capacity"))
"""(figure, bound, words): what a device's allocator can state. A request larger than the device is
possible (that is the error); memory free, held or handed out beyond the device is not."""


def consistent(oom: dict[str, Any]) -> dict[str, Any]:
    """``oom`` (:func:`parse_oom`) with each figure past its bound (:data:`_BOUNDS`) left out and named in
    ``inconsistent`` (a list of one-line reasons): an edited or garbled message states no impossible
    figure as fact."""
    out = dict(oom)
    why = []
    for fig, bound, words, bound_words in _BOUNDS:
        a, b = out.get(fig), out.get(bound)
        if a is not None and b is not None and a > b:
            why.append(f"{a / (1 << 30):,.2f} GiB {words} is more than {bound_words} ({b / (1 << 30):,.2f} GiB)")
            del out[fig]
    if why:
        out["inconsistent"] = why
        out.pop("non_pytorch_bytes", None)
    return out


def fragmented(oom: dict[str, Any]) -> bool:
    """Whether the failure is fragmentation's: the memory the allocator reserved but did not hand out
    is over :data:`FRAGMENTED_FRACTION` of the device and more than the request that failed (had it
    been one block, the request would have fit)."""
    unalloc, cap, want = oom.get("reserved_unallocated_bytes"), oom.get("capacity_bytes"), oom.get("tried_to_allocate_bytes")
    if unalloc is None or not cap:
        return False
    return unalloc >= FRAGMENTED_FRACTION * cap and (want is None or unalloc >= want)


_WATCHDOG = re.compile(r"\[Rank " + _INT + r"\] Watchdog caught collective operation timeout: (\w{1,64})"
                       r"\(((?:[^()\n]|\([^()\n]{0,16}\)){0,1024})\) ran for " + _INT + r" milliseconds")
"""The work's fields between its parentheses (``Timeout(ms)=…`` holds a pair of its own), at most
1,024 characters: each start scans to the next bracket at most, so the search stays linear."""
_GLOO_TIMEOUT = re.compile(r"Timed out waiting " + _INT + r"ms for (\w{1,64}) operation")
_PEER = re.compile(r"Connection (?:closed|reset) by peer|Broken pipe|ProcessGroupNCCL[^\n]{0,512}?abort|"
                   r"NCCL communicator was aborted|DistNetworkError|DistBackendError")


def parse_timeout(text: str | None) -> dict[str, Any] | None:
    """A collective that timed out, from ``text``: ``{"backend", "rank"?, "op"?, "timeout_ms"?,
    "ran_ms"?, "seq"?}``, or None. NCCL's watchdog names the rank and the operation; gloo says how
    long it waited and for which transfer."""
    if not text:
        return None
    text = clipped(text)
    m = _WATCHDOG.search(text)
    if m:
        fields = dict(kv.split("=", 1) for kv in m.group(3).split(", ") if "=" in kv)
        out: dict[str, Any] = {"backend": "nccl", "rank": int(m.group(1)), "ran_ms": int(m.group(4))}
        if "OpType" in fields:
            out["op"] = fields["OpType"]
        for key, name in (("SeqNum", "seq"), ("Timeout(ms)", "timeout_ms")):
            if re.fullmatch(r"[0-9]{1,18}", fields.get(key, "")):
                out[name] = int(fields[key])
        return out
    m = _GLOO_TIMEOUT.search(text)
    if m:
        return {"backend": "gloo", "timeout_ms": int(m.group(1)), "op": m.group(2)}
    # the same messages with a figure past any real one: a timeout still, its numbers not read
    if "Watchdog caught collective operation timeout" in text:
        return {"backend": "nccl"}
    if "Timed out waiting " in text and " operation" in text:
        return {"backend": "gloo"}
    return None


def classify(text: str | None) -> str:
    """What kind of failure an error line is: ``out_of_memory``, ``collective_timeout``,
    ``peer_failure`` (a connection a dead or aborted rank closed), or ``error`` (anything else)."""
    if parse_oom(text):
        return "out_of_memory"
    if parse_timeout(text):
        return "collective_timeout"
    if text and _PEER.search(clipped(text)):
        return "peer_failure"
    return "error"


def gib(b: float | None) -> float | None:
    return None if b is None else round(b / (1 << 30), 3)




def run_failure(manifest: dict | None) -> dict[str, Any] | None:
    """How a failed run ended, from its manifest (the ranks' status files folded in): None unless
    ``status`` is ``failed``. Keys: ``exit_code``, ``error`` (the first failing rank's, as the
    manifest says it), ``signal``, ``ranks_died``, ``ranks`` (each rank that failed, first to fail
    first: ``rank``, ``error``, ``kind`` (:func:`classify`), ``error_type``, ``phase``, ``where``,
    ``step`` (the step in flight: steps completed before it), ``profiler_phase``, ``exit_code``,
    ``oom`` (:func:`parse_oom`), ``timeout`` (:func:`parse_timeout`))."""
    m = manifest or {}
    if m.get("status") != "failed":
        return None
    ranks = m.get("ranks") if isinstance(m.get("ranks"), dict) else {}
    failed = []
    for key, info in ranks.items():
        if not isinstance(info, dict):
            continue
        error = clipped(info["error"]) if isinstance(info.get("error"), str) else None
        code = info.get("exit_code")
        if not error and (not isinstance(code, int) or code == 0):
            continue
        try:
            rank = int(info.get("rank", key))
        except (TypeError, ValueError):
            continue
        steps = info.get("steps")
        entry = {"rank": rank, "error": error, "kind": classify(error), "exit_code": code,
                 "step": steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
                 **{k: info.get(k) for k in ("error_type", "phase", "where", "profiler_phase", "device") if isinstance(info.get(k), str)}}
        if (oom := parse_oom(error)) is not None:
            entry["oom"] = oom
        if (timeout := parse_timeout(error)) is not None:
            entry["timeout"] = timeout
        end = info.get("end_unix_s")
        entry["_end"] = float(end) if isinstance(end, (int, float)) and not isinstance(end, bool) else float("inf")
        failed.append(entry)
    failed.sort(key=lambda e: (e["_end"], e["rank"]))
    for e in failed:
        del e["_end"]
    died = [int(r) for r in m.get("ranks_died") or [] if isinstance(r, int) and not isinstance(r, bool)]
    error = clipped(m["error"]) if isinstance(m.get("error"), str) else None
    if not failed and error:  # an older manifest, or a launcher that saw the error itself
        failed = [{"rank": None, "error": error, "kind": classify(error), "step": None}]
        if (oom := parse_oom(error)) is not None:
            failed[0]["oom"] = oom
        if (timeout := parse_timeout(error)) is not None:
            failed[0]["timeout"] = timeout
    return {"exit_code": m.get("exit_code"), "error": error, "signal": m.get("signal"), "ranks_died": died, "ranks": failed}


__all__ = ["FRAGMENTED_FRACTION", "KEEP_CHARS", "classify", "clipped", "consistent", "fragmented", "gib", "parse_oom", "parse_timeout", "run_failure", "size_bytes"]
