"""Numbers and words as a reader expects them: a parameter count as people write it, a large integer
with its thousands separated, a plural that agrees with its count, a list of ranks, a change that is
never "-0.0 %". Every output (the CLI, the report, the app) says them through here.
"""

from __future__ import annotations

import math


def count(n: float | int | None) -> str:
    """A count of parameters (or tokens) as people write it: 8.03B, 46.7M, 33.1K, 512 (a 33,088-parameter
    model is not "0.0M")."""
    if n is None or not math.isfinite(float(n)):
        return "?"
    n = float(n)
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}" if abs(n) < 100 * div else f"{n / div:,.0f}{unit}"
    return f"{n:,.0f}"


def integer(n: float | int | None) -> str:
    """A whole number with its thousands separated (12,582,912, not 12582912); "?" where unknown."""
    if n is None or isinstance(n, float) and not math.isfinite(n):
        return "?"
    return f"{int(round(n)):,}"


def plural(n: float | int, noun: str, many: str | None = None) -> str:
    """``1 micro-batch``, ``2 micro-batches``, ``1 rank``, ``3 ranks``: the count and its noun, agreed."""
    one = n == 1
    return f"{integer(n) if isinstance(n, (int, float)) and float(n).is_integer() else n} {noun if one else many or _plural(noun)}"


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def ranks(rs) -> str:
    """``rank 0``, ``ranks 0, 1`` (``ranks 0`` for one rank read as a typo)."""
    rs = list(rs)
    return f"rank{'s' * (len(rs) != 1)} {', '.join(map(str, rs))}"


def pct(x: float | None, digits: int = 1) -> str:
    """A share in percent with the decimals it needs: ``34.5%``, ``0.04%`` (not ``0.0%``: a small MFU is not none)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if x == 0 or abs(x) >= 10 ** -digits * 10:
        return f"{x:.{digits}f}%"
    return f"{x:.2g}%"


def signed_pct(x: float | None, digits: int = 1) -> str:
    """A change in percent with its sign, ``+3.2 %`` or ``-0.4 %``; a change that rounds to zero is ``±0.0 %``
    (never ``-0.0 %``)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    text = f"{x:+.{digits}f}"
    if float(text) == 0:
        return f"±{abs(float(text)):.{digits}f} %"
    return f"{text} %"


__all__ = ["count", "integer", "pct", "plural", "ranks", "signed_pct"]
