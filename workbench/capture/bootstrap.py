"""Entry point of each profiled rank: ``python -m workbench.capture.bootstrap SCRIPT [ARGS…]``.

Started by ``workbench profile`` (directly, or through torchrun), it runs the unmodified script
as ``__main__`` inside a :class:`CaptureSession`, then records how it ended in
``status_rank{r}.json`` and exits with the script's own exit code. The run directory and
schedule come from ``WORKBENCH_RUN_DIR`` and ``WORKBENCH_SCHEDULE``.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path


def run_script(script: str, argv: list[str]) -> int:
    """Run ``script`` with ``argv`` under capture; returns its exit code (never raises)."""
    from workbench.capture.session import CaptureConfig, CaptureSession

    try:
        session = CaptureSession(CaptureConfig.from_env()).start()
    except Exception as e:
        print(f"workbench: error: could not start capture: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    code, error = 0, None
    sys.argv = [script, *argv]
    # The script's directory comes first on sys.path, as `python script.py` would have it.
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:
        code, error = 130, "KeyboardInterrupt"
        traceback.print_exc()
    except BaseException as e:  # the script's own failure: print it as Python would
        code, error = 1, f"{type(e).__name__}: {e}"
        traceback.print_exc()
    finally:
        session.stop()
        status = {
            "rank": session.rank,
            "exit_code": code,
            "error": error,
            "steps": session.step,
            "trace_written": session.trace_written,
            "trace_complete": session.trace_complete,
            "end_unix_s": time.time(),
        }
        path = session.out / f"status_rank{session.rank}.json"
        path.write_text(json.dumps(status, indent=2))
    return code


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m workbench.capture.bootstrap SCRIPT [ARGS...]", file=sys.stderr)
        sys.exit(2)
    sys.stdout.flush()
    code = run_script(sys.argv[1], sys.argv[2:])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
