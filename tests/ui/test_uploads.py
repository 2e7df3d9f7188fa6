"""workbench.ui.uploads: what a user can upload, and everything that must be refused without a trace."""

from __future__ import annotations

import gzip
import io
import stat
import zipfile
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import TRACES
from workbench.load import load_run
from workbench.ui.uploads import UploadError, run_dir, store_trace, store_upload, store_zip

SLOW = TRACES / "ddp_slow_data"


def _zip(members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, target)
    return buf.getvalue()


def _run_zip(prefix: str = "") -> bytes:
    return _zip({prefix + f.name: f.read_bytes() for f in SLOW.iterdir()})


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def root(tmp_path) -> Path:
    r = tmp_path / "traces"
    r.mkdir()
    return r


@pytest.mark.committed
def test_zipped_run_is_stored_and_loads(root):
    path = store_zip(root, "uploaded", _run_zip("ddp_slow_data/"))  # zipped as its folder
    assert path == root / "uploaded"
    assert {f.name for f in path.iterdir()} == {f.name for f in SLOW.iterdir()}
    run = load_run(path)
    assert sorted(run.traces) == [0, 1] and run.manifest["run_id"] == "ddp_slow_data"
    assert _listing(root) == {"uploaded", *(f"uploaded/{f.name}" for f in SLOW.iterdir())}  # no staging left


@pytest.mark.committed
def test_single_trace_gets_its_rank_name(root):
    data = (SLOW / "rank1.pt.trace.json.gz").read_bytes()
    path = store_trace(root, "one", "anything.pt.trace.json.gz", data)
    assert [f.name for f in path.iterdir()] == ["rank1.pt.trace.json.gz"]
    plain = gzip.decompress(data)
    path = store_upload(root, "plain", "x.json", plain)
    assert [f.name for f in path.iterdir()] == ["rank1.pt.trace.json"]


@pytest.mark.committed
@pytest.mark.parametrize("name", ["../x", "..", ".", "/etc", "a/b", "..\\x", "", ".hidden", "x" * 101, "a\x00b"])
def test_bad_run_names_write_nothing(root, name):
    with pytest.raises(UploadError, match="bad run name"):
        store_zip(root, name, _run_zip())
    assert _listing(root) == set()
    assert not (root.parent / "x").exists()


@pytest.mark.unit
def test_existing_run_is_not_overwritten(root):
    (root / "taken").mkdir()
    with pytest.raises(UploadError, match="already exists"):
        run_dir(root, "taken")


@pytest.mark.unit
@pytest.mark.parametrize("members, symlinks, message", [
    ({"../evil.pt.trace.json": b"{}"}, None, "leaves the run directory"),
    ({"run/../../evil.json": b"{}"}, None, "leaves the run directory"),
    ({"/etc/manifest.json": b"{}"}, None, "absolute"),
    ({"C:/x/manifest.json": b"{}"}, None, "absolute"),
    ({"manifest.json": b"{}"}, {"rank0.pt.trace.json": "/etc/passwd"}, "symbolic links"),
    ({"manifest.json": b"{}", "payload.pkl": b"\x80\x04K\x01."}, None, "not a run file"),
    ({"manifest.json": b"{}", "train.py": b"import os"}, None, "not a run file"),
    ({"a/manifest.json": b"{}", "a/b/rank0.pt.trace.json": b"{}"}, None, "nested folders"),
    ({"manifest.json": b"not json {"}, None, "not JSON"),
    ({"manifest.json": b"[1, 2]"}, None, "not a JSON object"),
    ({"rank0.pt.trace.json": b"\x80\x04K\x01."}, None, "rank0.pt.trace.json"),
    ({"rank0.pt.trace.json": b'{"traceEvents": []}'}, None, "no traceEvents"),
    ({"steps_rank0.csv": b"\xff\xfe\x00binary"}, None, "no trace"),
    ({"manifest.json": b"{}", "steps_rank0.csv": b"\xff\xfe\x00binary"}, None, "not UTF-8"),
    ({}, None, "no files"),
])
def test_bad_zips_are_refused_and_leave_nothing(root, members, symlinks, message):
    with pytest.raises(UploadError, match=message):
        store_zip(root, "bad", _zip(members, symlinks))
    assert _listing(root) == set()
    assert not (root.parent / "evil.pt.trace.json").exists() and not (root.parent / "evil.json").exists()


@pytest.mark.unit
def test_not_a_zip_and_not_json(root):
    with pytest.raises(UploadError, match="not a valid zip"):
        store_upload(root, "bad", "run.zip", b"PK\x03\x04 garbage")
    with pytest.raises(UploadError, match="expected a"):
        store_upload(root, "bad", "model.pt", b"\x80\x04")
    with pytest.raises(UploadError, match="invalid JSON|not a Kineto"):
        store_upload(root, "bad", "t.json", b"{oops")
    assert _listing(root) == set()


@pytest.mark.unit
def test_oversize_upload_and_zip_bomb(root):
    with pytest.raises(UploadError, match="limit"):
        store_upload(root, "big", "t.json", b" " * 2048, max_bytes=1024)
    bomb = _zip({"manifest.json": b"{}", "rank0.pt.trace.json": b" " * (4 << 20)})
    assert len(bomb) < 64 << 10
    with pytest.raises(UploadError, match="unpacks to more than"):
        store_zip(root, "bomb", bomb, max_extracted=1 << 20)
    assert _listing(root) == set()


@pytest.mark.unit
def test_zip_with_lying_header_is_stopped_while_reading(root):
    data = bytearray(_zip({"manifest.json": b"{}", "rank0.pt.trace.json": b" " * (2 << 20)}))
    # Rewrite the declared size of the trace member (central directory) to 10 bytes.
    z = zipfile.ZipFile(io.BytesIO(bytes(data)))
    info = z.getinfo("rank0.pt.trace.json")
    cd = data.rfind(b"PK\x01\x02")  # last central-directory entry = the trace
    assert data[cd + 46: cd + 46 + len(info.filename)] == info.filename.encode()
    data[cd + 24: cd + 28] = (10).to_bytes(4, "little")
    with pytest.raises(UploadError):
        store_zip(root, "liar", bytes(data), max_extracted=1 << 20)
    assert _listing(root) == set()


def _runs_page():
    from workbench.ui.runs import runs_page

    runs_page()


@pytest.mark.unit
def test_runs_page_upload_without_file_is_refused(monkeypatch, root):
    """AppTest cannot attach files (the browser test uploads `../x` for real): an empty form is refused."""
    monkeypatch.setenv("WORKBENCH_TRACES", str(root))
    at = AppTest.from_function(_runs_page, default_timeout=60).run()
    assert not at.exception
    at.text_input[0].input("../x")
    at.button[0].click().run()  # no file picked: refused before anything else
    assert at.error and "Pick a file" in at.error[0].value
    assert _listing(root.parent) == {"traces"}
