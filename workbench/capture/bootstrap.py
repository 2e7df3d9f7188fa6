"""Entry point of each profiled rank: ``python -m workbench.capture.bootstrap SCRIPT [ARGS…]``.

Started by ``workbench profile`` (directly, or through torchrun), it runs the unmodified script
as ``__main__`` inside a :class:`CaptureSession` (:func:`workbench.capture.rank.run_captured`), then
exits with the script's own exit code. The run directory and schedule come from
``WORKBENCH_RUN_DIR`` and ``WORKBENCH_SCHEDULE``. Ranks the script starts itself are captured too
(:mod:`workbench.capture.children`).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from workbench.capture import children
from workbench.capture.rank import SpawnedRank, run_captured


def run_script(script: str, argv: list[str]) -> int:
    """Run ``script`` with ``argv`` under capture; returns its exit code (never raises)."""
    from workbench.capture.session import CaptureConfig, CaptureSession

    try:
        session = CaptureSession(CaptureConfig.from_env()).start()
    except Exception as e:
        print(f"workbench: error: could not start capture: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    children.install(session, SpawnedRank)  # ranks the script starts itself are captured too
    sys.argv = [script, *argv]
    # The script's directory comes first on sys.path, as `python script.py` would have it.
    sys.path.insert(0, str(Path(script).resolve().parent))
    return run_captured(session, lambda: runpy.run_path(script, run_name="__main__"))


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m workbench.capture.bootstrap SCRIPT [ARGS...]", file=sys.stderr)
        sys.exit(2)
    _flush()
    code = run_script(sys.argv[1], sys.argv[2:])
    _flush()
    sys.exit(code)


def _flush() -> None:
    """Flush stdout and stderr, unless the script closed them (the exit code stays the script's)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


if __name__ == "__main__":
    main()
