"""Tables as a person reads them: every number rounded to what the figure deserves, and no more
columns than a 1280-pixel window shows. Shared by the app's pages and the HTML report; no streamlit.

The frames behind them keep full precision (``--json`` and the cache do); these are for the eye:
a millisecond figure to 0.1 ms, a share to 0.1 %, memory to 0.01 GiB, anything else to three
significant digits of its column's largest value ("1.3333" calls per step is 1.33, "4202500"
bytes stays whole).
"""

from __future__ import annotations

import math

import pandas as pd

DECIMALS_BY_UNIT = (("_ms", 1), ("(ms)", 1), (" ms", 1), ("_pct", 1), ("(%)", 1), ("%", 1), ("gib", 2), ("(GiB)", 2),
                    ("GiB", 2), ("_bytes", 0), ("tokens/s", 0), ("tflops", 1), ("TFLOP", 1))
"""A column whose name ends in (or holds) the unit gets these decimals; the first match wins."""
SIGNIFICANT = 3


def decimals_for(name: str, values: pd.Series) -> int:
    """How many decimals a float column is shown with (see the module docstring)."""
    low = str(name).lower()
    for unit, d in DECIMALS_BY_UNIT:
        if low.endswith(unit.lower()) or unit.lower() in low:
            return d
    finite = pd.to_numeric(values, errors="coerce").abs()
    finite = finite[finite.notna() & (finite != float("inf"))]
    top = float(finite.max()) if len(finite) else 0.0
    if top == 0.0:
        return 0
    return max(0, SIGNIFICANT - 1 - math.floor(math.log10(top)))


def rounded(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each float column rounded (:func:`decimals_for`); whole-number floats become
    integers where no value is missing. Other columns are left as they are."""
    out = df.copy()
    for c in out.columns:
        col = out[c]
        if not pd.api.types.is_float_dtype(col):
            if col.dtype == object and col.map(lambda v: isinstance(v, float)).any():
                d = decimals_for(c, col[col.map(lambda v: isinstance(v, float))])
                out[c] = col.map(lambda v: round(v, d) if isinstance(v, float) and math.isfinite(v) else v)
            continue
        d = decimals_for(c, col)
        col = col.round(d)
        if d == 0 and col.notna().all() and (col.abs() < 2**53).all():
            col = col.astype("int64")
        out[c] = col
    return out


MEMORY_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def memory_unit(values_bytes) -> tuple[str, float]:
    """The unit a column of byte counts reads best in: GiB unless its largest value is under 1 GiB
    (a small model's 0.000493 GiB is 0.48 MiB), and the bytes per unit."""
    top = pd.to_numeric(pd.Series(list(values_bytes), dtype=float), errors="coerce").abs().max()
    for name, size in MEMORY_UNITS:
        if not top == top or top >= size:
            return name, float(size)
    return MEMORY_UNITS[-1][0], float(MEMORY_UNITS[-1][1])
