"""One way to build big traces for benchmarks: from a committed run, never in the repository.

- :func:`build`: one Kineto-layout trace of at least N events / M MB, the source's profiled steps
  replicated (each copy the CPU events of the steps and the GPU events they launched, shifted by
  the steps' span, ``ProfilerStep#N`` and correlation ids renumbered).
- :func:`minify`: the same trace as minified JSON (another layout the loader streams).
- :func:`make_run`: a run directory around a built trace (the source's manifest, NVML and steps files).
- :func:`build_ranks`: a run of N ranks, each the source's trace with its own ``distributedInfo``,
  written as gzip members that share one compressed body (256 files in seconds).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def source_file(path: Path) -> Path:
    if path.is_file():
        return path
    files = sorted(path.glob("rank0.pt.trace.json*")) or sorted(path.glob("*.pt.trace.json*"))
    if not files:
        sys.exit(f"no *.pt.trace.json[.gz] under {path}")
    return files[0]


GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
ID_OFFSET = 10_000_000  # per copy, added to correlation / External id / flow ids to keep them unique


def build(src: Path, out_dir: Path, min_events: int, min_mb: float) -> tuple[Path, int, int]:
    """Replicate ``src``'s profiled steps into ``out_dir/rank0.pt.trace.json`` (Kineto's layout).

    One copy = the CPU events inside the ProfilerStep windows plus the GPU events *launched* by
    them (matched on ``correlation``), wherever those run. Copies are shifted by the steps' span.
    Cutting the GPU side by time instead is wrong when the GPU lags the CPU (on
    traces/gpu_fixed_data the last step's kernels run 11.9 ms past its end, and the first 8.0 ms
    of the window run kernels launched before the profiler started): each copy then holds
    kernels with no launch and lacks kernels whose launch it holds. HTA keeps only kernels whose
    launch it sees, so it found an 8 ms GPU gap per copy (~16 points of fake idle) that
    workbench, which counts every kernel in a step window, did not.
    """
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and STEP.match(e.get("name", "")) and e.get("cat") != "gpu_user_annotation"]
    if not steps:
        sys.exit(f"{src}: no ProfilerStep annotations to replicate")
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    nums = [int(STEP.match(e["name"]).group(1)) for e in steps]
    span, nsteps = hi - lo, max(nums) - min(nums) + 1

    def in_window(e: dict) -> bool:
        return lo <= float(e["ts"]) < hi

    def corr(e: dict):
        return (e.get("args") or {}).get("correlation")

    launched = {corr(e) for e in events if e.get("ph") == "X" and e.get("cat") not in GPU_CATS
                and corr(e) is not None and in_window(e)}
    body = []
    for e in events:
        if e.get("ph") == "M" or "ts" not in e:
            continue
        if e.get("cat") in GPU_CATS:
            keep = corr(e) in launched
        elif e.get("ph") == "f" and e.get("cat") == "ac2g":  # flow arrow ending on a kernel
            keep = e.get("id") in launched
        else:
            keep = in_window(e)
        if keep:
            body.append(e)
    meta = [e for e in events if e.get("ph") == "M"]
    one = (len(json.dumps(body)) + 12 * len(body)) / 1e6
    copies = max(-(-min_events // max(len(body), 1)), int(-(-min_mb // max(one, 1e-9))), 1)
    out = out_dir / "rank0.pt.trace.json"
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    # Kineto's layout (one event per "  {" … "  }" block) so that workbench's sliced loader sees
    # what it sees on real traces; json.dumps keeps each event's nested values on one line.
    with open(out, "w") as f:
        f.write("{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items()) + '  "traceEvents": [')
        first = True

        def put(e: dict) -> None:
            nonlocal first
            f.write(("" if first else ",") + "\n  {\n    " + json.dumps(e)[1:-1] + "\n  }")
            first = False

        for e in meta:
            put(e)
        for k in range(copies):
            shift = k * span
            for e in body:
                e2 = dict(e)
                e2["ts"] = float(e["ts"]) + shift
                if k and STEP.match(e.get("name", "")):
                    e2["name"] = f"ProfilerStep#{int(STEP.match(e['name']).group(1)) + k * nsteps}"
                if k and isinstance(e.get("id"), int) and e.get("ph") in ("s", "f"):
                    e2["id"] = e["id"] + k * ID_OFFSET
                a = e.get("args")
                if k and isinstance(a, dict) and ("correlation" in a or "External id" in a):
                    a = dict(a)
                    for key in ("correlation", "External id"):
                        if key in a and isinstance(a[key], int):
                            a[key] += k * ID_OFFSET
                    e2["args"] = a
                put(e2)
        f.write("\n  ]\n}\n")
    return out, len(meta) + copies * len(body), copies * nsteps


def minify(kineto: Path, out: Path) -> None:
    """Re-write a trace in the layout ``build`` writes (one ``  "key": value,`` line per header
    key, each event's fields on one line at four spaces) as minified JSON, one event at a time."""
    compact = {"separators": (",", ":")}
    with open(kineto) as f, open(out, "w") as o:
        o.write("{")
        first = True
        for line in f:
            if line.startswith("    "):  # one event's fields
                o.write(("" if first else ",") + json.dumps(json.loads("{" + line.strip() + "}"), **compact))
                first = False
            elif line.startswith('  "traceEvents"'):
                o.write('"traceEvents":[')
            elif line.startswith('  "'):  # a header key
                o.write(json.dumps(json.loads("{" + line.strip().rstrip(",") + "}"), **compact)[1:-1] + ",")
        o.write("]}")


def gzip_file(src: Path) -> Path:
    out = src.with_name(src.name + ".gz")
    with open(src, "rb") as f, gzip.open(out, "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g, 1 << 20)
    return out


def make_run(source: Path, dst: Path, min_mb: float, min_events: int = 0) -> tuple[Path, int, int]:
    """A run directory ``dst`` whose rank-0 trace is :func:`build` of ``source``'s (plain JSON, at
    least ``min_mb``), with ``source``'s other files (manifest, steps, NVML). Returns (trace path,
    bytes, events)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in source.iterdir():
        if f.is_file() and not f.name.endswith((".pt.trace.json.gz", ".pt.trace.json")):
            shutil.copy(f, dst / f.name)
    out, events, _ = build(source_file(source), dst, min_events, min_mb)
    return out, out.stat().st_size, events


def _gzip_header() -> bytes:
    return b"\x1f\x8b\x08\x00" + struct.pack("<I", int(time.time())) + b"\x00\xff"


def _deflate(data: bytes, final: bool, level: int = 6) -> bytes:
    """Raw deflate blocks of ``data``. Not final: ends at a sync flush (byte-aligned, not the last
    block), so more blocks may follow; back-references stay inside ``data``, so the blocks are
    valid after any preceding output."""
    c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)


def _split_trace(text: bytes) -> tuple[bytes, bytes, bytes]:
    """(header up to the events, the events, the tail after them) of a Kineto JSON text."""
    m = re.search(rb'"traceEvents"\s*:\s*\[', text)
    if not m:
        sys.exit("source trace has no traceEvents array")
    k = text.rfind(b'"traceName"')
    k = k if k > m.end() else len(text)
    return text[:m.start()], text[m.start():k], text[k:]


def _rank_header(head: bytes, rank: int, world: int) -> bytes:
    """``head`` with distributedInfo saying rank/world (and its process groups spanning the world)."""
    line = re.search(rb'"distributedInfo"\s*:\s*(\{.*\}),\s*\n', head)
    info: dict[str, Any] = {"backend": "nccl"}
    if line:
        info = json.loads(line.group(1))
        head = head[:line.start()] + head[line.end():]
    info.update(rank=rank, world_size=world)
    for g in info.get("pg_config") or []:
        if isinstance(g, dict) and g.get("pg_size") == 1:
            g.update(pg_size=world, ranks=list(range(world)))
    return head + b'"distributedInfo": ' + json.dumps(info).encode() + b",\n  "


def source_text(src_dir: Path, min_mb: float, work: Path) -> tuple[bytes, str]:
    """The decompressed rank-0 trace of ``src_dir``; replicated with the builder up to ``min_mb``
    when smaller."""
    f = sorted(src_dir.glob("rank0.pt.trace.json*"))[0]
    text = gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
    if len(text) >= min_mb * 1e6:
        return text, f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f} as captured"
    tmp = work / "replicated-source"
    tmp.mkdir(parents=True, exist_ok=True)
    out, n, steps = build(f, tmp, 0, min_mb)
    text = out.read_bytes()
    shutil.rmtree(tmp)
    return text, f"{f.name} replicated to {steps} steps"


MARKER = ".scale-built.json"


def _built(out: Path, params: dict) -> dict | None:
    """What a previous ``--keep`` run built at ``out`` with the same ``params`` (its info); else
    None, and ``out`` is emptied for a new build."""
    marker = out / MARKER
    if marker.exists() and json.loads(marker.read_text()).get("params") == params:
        return json.loads(marker.read_text())["info"]
    if out.is_symlink() or out.is_file():
        out.unlink()  # rmtree refuses a link: a folder linked from another checkout is left as it is
    else:
        shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return None


def _source_key(src_dir: Path) -> str:
    """The source as a path inside the repository where it is one, so that another checkout's build is reused."""
    try:
        return Path(src_dir).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(src_dir)


def build_ranks(src_dir: Path, out: Path, world: int, *, min_mb: float = 20.0, bare: bool = False,
                text: bytes | None = None) -> dict[str, Any]:
    """Write a ``world``-rank run directory at ``out`` (see the module docstring). Reuses a
    directory a previous ``--keep`` run built with the same parameters."""
    params = {"source": _source_key(src_dir), "world": world, "min_mb": min_mb, "bare": bare, "v": 1}
    if (info := _built(out, params)) is not None:
        return info
    t0 = time.perf_counter()
    if text is None:
        text, how = source_text(src_dir, min_mb, out.parent)
    else:
        how = "given"
    head, body, tail = _split_trace(text)
    body_z = _deflate(body, final=False)
    for r in range(world):
        h = _rank_header(head, r, world)
        t = re.sub(rb"rank\d+\.pt\.trace", f"rank{r}.pt.trace".encode(), tail)
        crc = zlib.crc32(t, zlib.crc32(body, zlib.crc32(h)))
        with open(out / f"rank{r}.pt.trace.json.gz", "wb") as f:
            f.write(_gzip_header())
            f.write(_deflate(h, final=False))
            f.write(body_z)
            f.write(_deflate(t, final=True))
            f.write(struct.pack("<II", crc & 0xFFFFFFFF, (len(h) + len(body) + len(t)) & 0xFFFFFFFF))
    if not bare:
        manifest = json.loads((src_dir / "manifest.json").read_text()) if (src_dir / "manifest.json").exists() else {}
        if manifest:
            entry = dict(manifest.get("ranks", {}).get("0", {}))
            manifest.update(world_size=world, nproc_per_node=world, run_id=out.name,
                            ranks={str(r): {**entry, "rank": r, "world_size": world, "local_rank": r} for r in range(world)})
            (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
        for kind in ("steps", "nvml"):
            csv = src_dir / f"{kind}_rank0.csv"
            if csv.exists():
                for r in range(world):
                    shutil.copyfile(csv, out / f"{kind}_rank{r}.csv")
    info = {"ranks": world, "rank_mb": round((len(head) + len(body) + len(tail)) / 1e6, 2),
            "rank_gz_mb": round((out / "rank0.pt.trace.json.gz").stat().st_size / 1e6, 2),
            "total_gz_mb": round(sum(f.stat().st_size for f in out.glob("*.gz")) / 1e6, 1),
            "events_per_rank": body.count(b'"ph"'), "source": how, "manifest": (out / "manifest.json").exists(),
            "build_s": round(time.perf_counter() - t0, 1)}
    (out / MARKER).write_text(json.dumps({"params": params, "info": info}))
    return info


def build_big(src: Path, out: Path, min_events: int, min_mb: float) -> dict[str, Any]:
    """One replicated single-rank trace at ``out/rank0.pt.trace.json`` (reused when a ``--keep``
    run built it with the same parameters)."""
    params = {"source": str(src), "min_events": min_events, "min_mb": min_mb, "v": 1}
    if (info := _built(out, params)) is not None:
        return info
    t0 = time.perf_counter()
    f = sorted(src.glob("rank0.pt.trace.json*"))[0] if src.is_dir() else src
    trace, n_events, n_steps = build(f, out, min_events, min_mb)
    info = {"events": n_events, "steps": n_steps, "mb": round(trace.stat().st_size / 1e6, 1),
            "source": str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f),
            "build_s": round(time.perf_counter() - t0, 1)}
    (out / MARKER).write_text(json.dumps({"params": params, "info": info}))
    return info
