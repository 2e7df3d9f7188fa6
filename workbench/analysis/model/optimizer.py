"""The optimizer: ``Optimizer.step#AdamW.step``; fused (``aten::_fused_*``) or foreach
(``aten::_foreach_*``) from the ops inside it."""

from __future__ import annotations

import re
from collections import Counter

import pandas as pd

from workbench.analysis.intervals import str_mask
from workbench.analysis.model.context import field

_OPTIMIZER = re.compile(r"^Optimizer\.step#(\w+)\.step$")
_FUSED_STEP = re.compile(r"^aten::_fused_(?:adam|adamw|sgd|adagrad)_?$")
"""torch.optim's fused steps (``fused=True``); other ``aten::_fused_*`` ops (rms_norm, dropout) are not."""


def optimizer(ev: pd.DataFrame, names: pd.Series) -> dict | None:
    opt = ev[str_mask(names, lambda c: c.str.match(_OPTIMIZER.pattern))]
    if opt.empty:
        return None
    kinds = Counter(_OPTIMIZER.match(str(n)).group(1) for n in opt["name"])
    wrappers = {"ZeroRedundancyOptimizer", "LightningOptimizer", "AcceleratedOptimizer"}
    inner = [k for k in kinds if k not in wrappers] or list(kinds)
    kind = inner[0]
    cats = pd.Series(names.cat.categories.astype(str)) if isinstance(names.dtype, pd.CategoricalDtype) else pd.Series(names.unique().astype(str))
    fused = sorted(c for c in cats if _FUSED_STEP.match(c))
    foreach = any(c.startswith("aten::_foreach_") for c in cats)
    how = (f"fused ({fused[0]})" if fused else "foreach (aten::_foreach_* ops)" if foreach
           else "per-parameter loop (no fused or foreach ops)")
    if kind.endswith("Container") or kind in wrappers:
        # a container of optimizers (torchtitan's OptimizersContainer) or a wrapper names no
        # algorithm: the fused step it ran does (aten::_fused_adamw_ -> adamw)
        algo = next((m.group(1) for c in fused if (m := re.match(r"aten::_fused_(\w+?)_$", c))), None)
        if algo:
            return field(algo, f"Optimizer.step#{kind}.step annotation around {fused[0]}; fused")
        return field(kind.lower(), f"Optimizer.step#{kind}.step annotation (a container: its optimizer is not named); {how}",
                     "low")
    return field(kind.lower(), f"Optimizer.step#{kind}.step annotation; {how}")
