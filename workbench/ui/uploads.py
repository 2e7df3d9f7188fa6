"""Store an uploaded trace or zipped run under the traces root, safely (no streamlit here).

What can come in is a user's file, so nothing is trusted:
- the run name is one path component of letters, digits, ``.``, ``_``, ``-`` (``../x``, ``/etc``,
  ``a/b`` are refused) and the run must not exist yet;
- a zip may only hold the files of the run-directory contract (see workbench.format.contract) or
  ``*.pt.trace.json[.gz]``, flat or under one top folder: absolute paths, ``..``, symlinks,
  nested folders, other files (pickles, scripts) are refused before anything is written;
- sizes are capped (upload, each member, the sum, counted while reading, so a lying zip header
  or a zip bomb cannot fill the disk), and so is the number of members (each is read and checked);
- content is parsed only as JSON (traces through :func:`workbench.load.read_trace`, the rest with
  ``json.loads``) or as UTF-8 CSV text; nothing is unpickled or executed.
Everything is written into a hidden staging folder inside the root and renamed into place only
when every file passed, so a bad upload leaves nothing behind.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from workbench.format.contract import MANIFEST
from workbench.format.errors import WorkbenchError
from workbench.format.manifest import read_manifest
from workbench.load import read_trace
from workbench.load.run import MAX_RANKS

MAX_UPLOAD_BYTES = 1 << 30  # what the browser sends (also .streamlit/config.toml maxUploadSize)
MAX_EXTRACTED_BYTES = 8 << 30  # all members of a zip, uncompressed
MAX_MEMBERS = 4 * MAX_RANKS + 1
"""Files a zipped run may hold: a trace, a steps and an NVML CSV and a status per rank of the most
ranks one analysis takes (workbench.load.run.MAX_RANKS), and the manifest. Each member is read and
checked (~6.5 ms each: a zip of 25,000 took 162 s)."""
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
TRACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.pt\.trace\.json(\.gz)?$")
JSON_NAME = re.compile(r"^(manifest|(env|status)_rank\d+)\.json$")
CSV_NAME = re.compile(r"^(steps|nvml)_rank\d+\.csv$")
_CHUNK = 1 << 20


class UploadError(WorkbenchError):
    """An upload that was refused; nothing was written."""


def run_dir(root: Path | str, name: str) -> Path:
    """The directory a new run called ``name`` gets under ``root``; refuses unsafe or taken names."""
    if not isinstance(name, str) or not RUN_NAME.match(name) or name in (".", ".."):
        raise UploadError(f"bad run name {name!r}: use letters, digits, '.', '_' and '-' (no '/', no leading '.')")
    root = Path(root).resolve()
    target = (root / name).resolve()
    if target.parent != root:
        raise UploadError(f"bad run name {name!r}: it must stay inside {root}")
    if target.exists() or target.is_symlink():
        raise UploadError(f"a run called {name!r} already exists under {root}")
    return target


def store_upload(root: Path | str, name: str, filename: str, data: bytes, *, max_bytes: int = MAX_UPLOAD_BYTES,
                 max_extracted: int = MAX_EXTRACTED_BYTES) -> Path:
    """Store ``data`` (a ``.zip`` of a run, or one ``*.json[.gz]`` trace) as run ``name``; returns its path."""
    if filename.lower().endswith(".zip"):
        return store_zip(root, name, data, max_bytes=max_bytes, max_extracted=max_extracted)
    return store_trace(root, name, filename, data, max_bytes=max_bytes)


def store_trace(root: Path | str, name: str, filename: str, data: bytes, *, max_bytes: int = MAX_UPLOAD_BYTES) -> Path:
    """One Kineto trace (plain or gzipped JSON) → ``root/name/rank{r}.pt.trace.json[.gz]``."""
    if not re.search(r"\.json(\.gz)?$", filename.lower()):
        raise UploadError(f"{filename}: expected a *.pt.trace.json[.gz] trace or a .zip of a run")
    _check_size(filename, len(data), max_bytes)
    target = run_dir(root, name)
    with _staging(target) as tmp:
        gz = data[:2] == b"\x1f\x8b"
        f = tmp / ("upload.pt.trace.json.gz" if gz else "upload.pt.trace.json")
        f.write_bytes(data)
        trace = _read_trace(f, filename)
        rank = trace.rank if isinstance(trace.rank, int) and trace.rank >= 0 else 0
        f.rename(tmp / f"rank{rank}.pt.trace.json{'.gz' if gz else ''}")
    return target


def store_zip(root: Path | str, name: str, data: bytes, *, max_bytes: int = MAX_UPLOAD_BYTES,
              max_extracted: int = MAX_EXTRACTED_BYTES) -> Path:
    """A zipped run directory → ``root/name/``; every member checked before the run appears."""
    _check_size("the zip", len(data), max_bytes)
    target = run_dir(root, name)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise UploadError(f"not a valid zip file ({e})") from None
    with zf:
        members = _plan(zf, max_extracted)
        with _staging(target) as tmp:
            budget = max_extracted
            for info, flat in members:
                out = tmp / flat
                budget -= _extract(zf, info, out, budget)
                _validate(out, info.filename)
    return target


def _check_size(what: str, size: int, limit: int) -> None:
    if size > limit:
        raise UploadError(f"{what} is {size / 2**20:.0f} MiB; the limit is {limit / 2**20:.0f} MiB")


def _plan(zf: zipfile.ZipFile, max_extracted: int) -> list[tuple[zipfile.ZipInfo, str]]:
    """Check every member's name, type and declared size; map it to a flat file name."""
    files = []
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise UploadError(f"the zip holds {len(infos):,} members, more than the {MAX_MEMBERS:,} of a run of "
                          f"{MAX_RANKS:,} ranks (zip the ranks to look at)")
    for info in infos:
        raw = info.filename
        if "\\" in raw or raw.startswith("/") or re.match(r"^[A-Za-z]:", raw):
            raise UploadError(f"zip member {raw!r}: absolute or Windows path refused")
        parts = PurePosixPath(raw).parts
        if any(p in ("..", ".") for p in parts) or not parts:
            raise UploadError(f"zip member {raw!r}: path leaves the run directory")
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise UploadError(f"zip member {raw!r}: symbolic links are refused")
        if info.is_dir():
            continue
        if info.flag_bits & 0x1:
            raise UploadError(f"zip member {raw!r}: encrypted members are refused")
        files.append((info, parts))
    if not files:
        raise UploadError("the zip holds no files")
    # A run zipped as its folder (`zip -r run.zip run/`) has one top component: drop it.
    tops = {p[0] for _, p in files}
    strip = 1 if len(tops) == 1 and all(len(p) > 1 for _, p in files) else 0
    out, seen, total = [], set(), 0
    for info, parts in files:
        rest = parts[strip:]
        if len(rest) != 1:
            raise UploadError(f"zip member {info.filename!r}: nested folders are refused (zip one run directory)")
        flat = rest[0]
        if not (TRACE_NAME.match(flat) or JSON_NAME.match(flat) or CSV_NAME.match(flat)):
            raise UploadError(f"zip member {info.filename!r}: not a run file (expected manifest.json, *.pt.trace.json[.gz], "
                              "steps_rank*.csv, nvml_rank*.csv, env/status_rank*.json)")
        if flat in seen:
            raise UploadError(f"zip member {info.filename!r}: duplicate name")
        seen.add(flat)
        total += info.file_size
        if total > max_extracted:
            raise UploadError(f"the zip unpacks to more than {max_extracted / 2**20:.0f} MiB")
        out.append((info, flat))
    if not any(TRACE_NAME.match(f) or f == "manifest.json" for _, f in out):
        raise UploadError("the zip holds no trace (*.pt.trace.json[.gz]) and no manifest.json")
    return out


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo, out: Path, budget: int) -> int:
    """Copy one member, counting real bytes (headers can lie); returns the bytes written."""
    n = 0
    try:
        with zf.open(info) as src, open(out, "xb") as dst:
            while chunk := src.read(_CHUNK):
                n += len(chunk)
                if n > budget:
                    raise UploadError(f"zip member {info.filename!r}: unpacks beyond the size limit")
                dst.write(chunk)
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError, EOFError) as e:
        raise UploadError(f"zip member {info.filename!r}: cannot be read ({e})") from None
    return n


def _validate(path: Path, member: str) -> None:
    name = path.name
    if TRACE_NAME.match(name):
        _read_trace(path, member)
    elif name == MANIFEST:
        try:  # the reader every command uses: what it refuses here would be refused there
            read_manifest(path.parent)
        except WorkbenchError as e:
            raise UploadError(f"zip member {member!r}: not JSON workbench reads as a manifest ({getattr(e, 'problem', e)})") from None
    elif JSON_NAME.match(name):
        try:
            doc = json.loads(path.read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise UploadError(f"zip member {member!r}: not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise UploadError(f"zip member {member!r}: not a JSON object")
    else:
        try:
            head = path.read_bytes()[:4096].decode("utf-8").splitlines()[:1]
        except UnicodeDecodeError:
            raise UploadError(f"zip member {member!r}: not UTF-8 CSV text") from None
        if head and not re.match(r"^[A-Za-z_]+(,[A-Za-z_]+)*$", head[0].strip()):
            raise UploadError(f"zip member {member!r}: not a workbench CSV (bad header)")


def _read_trace(path: Path, shown: str):
    try:
        return read_trace(path)
    except WorkbenchError as e:
        raise UploadError(f"{shown}: {getattr(e, 'problem', e)}") from None


class _staging:
    """A hidden folder next to ``target`` (same file system), renamed to ``target`` on success,
    removed on any failure."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __enter__(self) -> Path:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=".upload-", dir=self.target.parent))
        self.tmp.chmod(0o755)  # mkdtemp makes it private; a run directory is as readable as its root
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                os.rename(self.tmp, self.target)
                return
            except OSError as e:
                shutil.rmtree(self.tmp, ignore_errors=True)
                raise UploadError(f"cannot store the run as {self.target} ({e.strerror or e})") from None
        shutil.rmtree(self.tmp, ignore_errors=True)
