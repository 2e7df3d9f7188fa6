"""Capture: runs inside training processes (imports torch; never plotly or streamlit).

Names are imported lazily so that ``workbench profile``'s launcher starts without torch.
"""

from __future__ import annotations

__all__ = ["CaptureConfig", "CaptureSession", "record_metrics"]


def __getattr__(name: str):
    if name in __all__:
        from workbench.capture import session

        return getattr(session, name)
    raise AttributeError(name)
