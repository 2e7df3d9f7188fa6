"""JSON as strict parsers read it: no ``NaN``, ``Infinity`` or ``-Infinity``.

Python's ``json.dumps`` writes a float NaN as the bare token ``NaN`` (and infinities likewise),
which JavaScript's ``JSON.parse``, jq, Go and Rust refuse. Every document workbench prints or
caches goes through :func:`dumps`: a non-finite number is null (unknown), as the schemas say of a
figure that was not measured.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(x: Any) -> Any:
    """``x`` with every non-finite float (NaN, ±inf; numpy's float64 is one) replaced by None; tuples as lists."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def dumps(doc: Any, **kw) -> str:
    """``doc`` as strict JSON (:func:`finite`, then ``allow_nan=False``); ``kw``: json.dumps's."""
    return json.dumps(finite(doc), allow_nan=False, **kw)


__all__ = ["dumps", "finite"]
