"""Where the result goes cannot take it: stdout closed (``>&-``), a full disk (``> /dev/full``), a reader that
left (``| head``). One clear line and exit 2 for the first two, exit 0 for the last; never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, TRACES

pytestmark = pytest.mark.live


def _run(stdout, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", "analyze", str(TRACES / "engine_ddp")], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120, preexec_fn=preexec,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_closed_stdout_is_one_line():
    r = _run(None, preexec=lambda: os.close(1))
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "workbench: error: stdout is closed: the result has nowhere to go (redirect it: workbench … > result.txt)"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full is Linux's")
def test_a_full_disk_under_stdout_is_one_line():
    with open("/dev/full", "w") as full:
        r = _run(full)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == ("workbench: error: cannot write the result (No space left on device); "
                                                 "nothing more was written")


def test_a_reader_that_left_is_no_error():
    p = subprocess.Popen([sys.executable, "-m", "workbench", "analyze", "--json", str(TRACES / "engine_ddp")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    p.stdout.read(10)
    p.stdout.close()  # `| head -c 10`
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0 and b"Traceback" not in err
