"""The pandas tables of one trace, built from its folded :class:`~workbench.load.columns.Columns`.

Apart from the fold so that decoding (:mod:`workbench.load.slicing`, :mod:`workbench.load.early`)
needs msgspec and numpy only: a process that decodes a trace's text never imports pandas.
"""

from __future__ import annotations

from array import array

import numpy as np
import pandas as pd

from workbench.format import kineto
from workbench.load.columns import COMM_COLUMNS, MEMORY_COLUMNS, Columns


def _categorical(codes: array, table: dict[str, int]) -> pd.Categorical:
    """Codes in first-seen order → a Categorical with sorted categories, as pd.Categorical(values)
    would infer them (same categories, same dtype), without materialising one str per event."""
    labels = list(table)
    order = sorted(range(len(labels)), key=labels.__getitem__)
    remap = np.empty(len(labels), dtype=np.int32)
    remap[order] = np.arange(len(labels), dtype=np.int32)
    return pd.Categorical.from_codes(remap[np.frombuffer(codes, dtype=np.int32)],
                                     categories=pd.Index([labels[i] for i in order]))


def _on_streams(tid: pd.Categorical, on_stream: np.ndarray, stream: np.ndarray) -> pd.Categorical:
    """``tid`` where GPU events (``on_stream``) live on their stream (``stream {s}``), not on the CPU
    thread id Kineto files them under; the streams' labels follow the threads' (in stream order)."""
    if not on_stream.any():
        return tid
    cats = list(tid.categories)
    streams = np.unique(stream[on_stream])
    have = set(cats)
    all_cats = cats + [f"stream {s}" for s in streams if f"stream {s}" not in have]
    pos = {c: i for i, c in enumerate(all_cats)}
    stream_code = np.array([pos[f"stream {s}"] for s in streams], dtype=np.int64)
    codes = tid.codes.astype(np.int64)
    codes[on_stream] = stream_code[np.searchsorted(streams, stream[on_stream])]
    return pd.Categorical.from_codes(codes, categories=pd.Index(all_cats, dtype=tid.categories.dtype))


def tables(cols: Columns) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(events, memory, comms) as documented in :mod:`workbench.load.trace`."""
    n = len(cols.ts)
    cat = _categorical(cols.cat_code, cols.cats)
    gpu_cat = np.array([c in kineto.GPU_CATS for c in cat.categories], dtype=bool)
    is_gpu = gpu_cat[cat.codes] if len(gpu_cat) else np.zeros(n, dtype=bool)
    stream = np.full(n, -1, dtype=np.int64)
    nbytes = np.zeros(n, dtype=np.int64)
    rows = np.frombuffer(cols.gpu_row, dtype=np.int64)
    stream[rows] = np.frombuffer(cols.gpu_stream, dtype=np.int64)
    nbytes[rows] = np.frombuffer(cols.gpu_bytes, dtype=np.int64)
    correlation = np.full(n, -1, dtype=np.int64)
    correlation[np.frombuffer(cols.corr_row, dtype=np.int64)] = np.frombuffer(cols.corr_val, dtype=np.int64)
    op_args = np.full(n, None, dtype=object)
    if cols.shape_args:
        # fromiter: a plain assignment would let numpy look inside each struct
        op_args[np.frombuffer(cols.shape_row, dtype=np.int64)] = np.fromiter(cols.shape_args, dtype=object, count=len(cols.shape_args))
    events = pd.DataFrame(
        {
            "name": _categorical(cols.name_code, cols.names),
            "cat": cat,
            "ts_us": np.frombuffer(cols.ts, dtype=np.float64).copy(),
            "dur_us": np.frombuffer(cols.dur, dtype=np.float64).copy(),
            "tid": _on_streams(_categorical(cols.tid_code, cols.tids), is_gpu & (stream >= 0), stream),
            "stream": stream,
            "is_gpu": is_gpu,
            "bytes": nbytes,
            "correlation": correlation,
            "op_args": op_args,
        }
    )
    events = events.sort_values("ts_us", kind="stable", ignore_index=True)
    if len(cols.mem_ts):
        memory = pd.DataFrame(dict(zip(MEMORY_COLUMNS, (np.frombuffer(c, dtype=d).copy() for c, d in (
            (cols.mem_ts, np.float64), (cols.mem_allocated, np.int64), (cols.mem_reserved, np.int64),
            (cols.mem_device, np.int64))))))
    else:  # as a frame of no rows was made before: columns of no dtype
        memory = pd.DataFrame([], columns=MEMORY_COLUMNS)
    comms = pd.DataFrame(cols.comm_rows, columns=COMM_COLUMNS).sort_values("ts_us", ignore_index=True)
    return events, memory, comms
