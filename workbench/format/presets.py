"""The bundled engine's GPT sizes, in one place below both the engine (``workbench train``) and the
planner (``workbench plan engine-370m``), which read it; torch-free.

(n_layer, n_head, d_model, seq_len, vocab). 370m is the GPU benchmark model (38 % MFU eager on
one H200 at batch 16, BENCHMARKS.md); tiny is what CPU tests can afford.
"""

from __future__ import annotations

ENGINE_PRESETS: dict[str, tuple[int, int, int, int, int]] = {
    "tiny": (2, 4, 64, 64, 256),
    "small": (4, 4, 256, 256, 4096),
    "125m": (12, 12, 768, 1024, 50304),
    "370m": (24, 16, 1024, 1024, 50304),
}
