"""``layout_conversion``: cuDNN's ``nchwToNhwc``/``nhwcToNchw`` kernels around convolutions with
NCHW tensors. Saved = all of their time (channels_last tensors need none).

The impact test and the savings' common parts: workbench.diagnose.efficiency.
"""

from __future__ import annotations

import re

from workbench.analysis.intervals import str_mask
from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.efficiency import EFFICIENCY_READS, IMPACT_LEVELS, per_step_ms, saved_frame, saving_diagnosis
from workbench.diagnose.registry import rule

LAYOUT_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw", re.IGNORECASE)


def _layout_saved(e, steps, step_ms, rf):
    k = e.kernels
    m = k[str_mask(k["name"], lambda c: c.str.contains(LAYOUT_KERNEL))]
    if m.empty:
        return None
    ms = per_step_ms(m, steps)
    return {"layout_ms_per_step": round(ms, 3), "layout_pct_of_step": round(100 * ms / step_ms, 2),
            "layout_kernels_per_step": round(len(m) / steps, 1),
            "source": "nchwToNhwc / nhwcToNchw kernels"}, ms


SAVED_LAYOUT = saved_frame("layout_conversion", _layout_saved)


@rule("layout_conversion", reads=(*EFFICIENCY_READS, SAVED_LAYOUT), group="efficiency",
      summary="`nchwToNhwc`/`nhwcToNchw` kernels around NCHW convolutions",
      threshold=f"{IMPACT_LEVELS}; saving = their time", source="cuDNN")
def layout_conversion(ctx: Context) -> Diagnosis | None:
    return saving_diagnosis(
        ctx, SAVED_LAYOUT,
        lambda ev, pct: (f"NCHW↔NHWC conversions: {ev['layout_kernels_per_step']:.0f} kernels, "
                         f"{ev['layout_pct_of_step']:.0f}% of the step"),
        "keep conv tensors channels_last: model.to(memory_format=torch.channels_last) and the same for each input batch",
        "saved = layout conversion kernel time", [])
