"""Traces other projects publish (traces/public/): each is read as ``workbench analyze``
reads a directory and held to its row: the device as analysed and the peak row it resolves to, MFU
where FLOPs exist, diagnoses present and absent, the warnings, and the README table's verdict.
Also the deliverables one by one: any file name, the device table and ``--peak-tflops``, AMD
kernels, older and step-less traces; each test fails without its fix."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import TRACES, workbench
from workbench.hardware import devices
from workbench.format import discover
from workbench.analysis.kernel_classes import classify
from workbench.analysis.rocm_kernels import tensile_dtype
from workbench.hardware.peaks import device_peak
from workbench.pipeline.verdict import analyze_run

PUBLIC = TRACES / "public"
README = PUBLIC / "README.md"


@dataclass(frozen=True)
class Row:
    device: str | None
    """``run.device`` in the JSON (the trace's own name when it says the GPU)."""
    peak_row: str | None
    """The devices.GPUS row the peak comes from (``efficiency.peak.source`` starts with it)."""
    ranks: tuple[int, ...]
    verdict: str
    """The verdict's finding (its id, or "no bottleneck")."""
    present: frozenset = frozenset()
    absent: frozenset = frozenset()
    mfu: bool | None = None
    """MFU present (True), absent although FLOPs were counted (False), no FLOPs counted (None)."""
    warnings: tuple[str, ...] = ()
    amd: bool = False


def row(device, peak_row, ranks, verdict, present=(), absent=(), mfu=None, warnings=(), amd=False) -> Row:
    return Row(device, peak_row, tuple(ranks), verdict, frozenset(present), frozenset(absent), mfu, tuple(warnings), amd)


TOOK = "took {} trace file"
WHOLE = "the whole trace is analysed as one step"
UNKNOWN = "unknown device"
TABLE = {
    "hta_v100_ddp": row("Tesla V100-SXM2-16GB", "Tesla V100 SXM2", [1], "fp32_matmul",
                        {"fp32_matmul", "low_mfu", "unfused_elementwise"}, mfu=True, warnings=[TOOK.format(1)]),
    "hta_a100_nccl": row("NVIDIA A100-PG509-200", "NVIDIA A100 SXM4 40GB", [0], "low_gpu_utilization",
                         {"low_gpu_utilization", "host_sync"}, {"low_mfu"}),
    "hta_a100_80gb": row("NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB", [0], "host_bound", {"host_bound"},
                         {"dataloader_stall"}, mfu=True),
    "hta_a100_control": row("NVIDIA A100-PG509-200", "NVIDIA A100 SXM4 40GB", [3], "unfused_elementwise",
                            {"unfused_elementwise", "low_mfu", "fp32_matmul"}, mfu=True, warnings=["control.json.gz"]),
    "hta_sampled_ranks": row(None, None, [0, 1], "low_gpu_utilization", {"low_gpu_utilization", "unfused_optimizer"},
                             mfu=False, warnings=[TOOK.format(2) + "s: sampled_rank-0.json.gz, sampled_rank-1.json.gz",
                                                  UNKNOWN, "--peak-tflops"]),
    "hta_mi250": row("AMD Instinct MI250 (one GCD)", "AMD Instinct MI250 (one GCD)", [0], "host_bound",
                     {"host_bound", "low_mfu"}, mfu=True, warnings=["'AMD Radeon Graphics' is taken as AMD Instinct MI250"],
                     amd=True),
    "hta_cpu_only": row(None, None, [34], "exposed_communication", {"exposed_communication"}, {"low_gpu_utilization"}),
    "hta_no_distributed_info": row("NVIDIA A100-PG509-200", None, [0], "no bottleneck", absent={"low_mfu"}, mfu=False),
    "hta_export_chrome_trace": row("NVIDIA A100-PG509-200", "NVIDIA A100 SXM4 40GB", [0], "low_gpu_utilization", {"low_gpu_utilization"},
                                   warnings=[WHOLE, "trace.json.gz"]),
    "hta_execution_trace": row("NVIDIA A100-PG509-200", "NVIDIA A100 SXM4 40GB", [0], "host_bound", {"host_bound"},
                               warnings=["skipped 1: benchmark_simple_add_et.json.gz (a PyTorch execution trace", WHOLE]),
    "kineto_v100_2021": row("Tesla V100-DGXS-32GB", "Tesla V100 SXM2", [0], "dataloader_stall",
                            {"dataloader_stall", "fp32_matmul", "unfused_elementwise", "pageable_memcpy"}),
    "kineto_autograd_2021": row(None, None, [0], "host_bound", {"host_bound", "host_sync", "dataloader_stall"},
                                warnings=[UNKNOWN, WHOLE]),
    "tracelens_h100": row("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", [0], "host_bound", {"host_bound", "low_mfu"}, mfu=True),
    "tracelens_b200": row("NVIDIA B200", "NVIDIA B200", [0], "host_bound", {"host_bound", "low_mfu"}, mfu=True, warnings=[WHOLE]),
    "tracelens_mi300x": row("AMD Instinct MI300X", "AMD Instinct MI300X", [0], "exposed_communication",
                            {"exposed_communication", "low_mfu", "unfused_elementwise"}, mfu=True, amd=True),
    "tracelens_mi300x_vf": row("AMD Instinct MI300X VF", "AMD Instinct MI300X", [0], "host_bound",
                               {"host_bound", "host_sync", "low_mfu"}, mfu=True, amd=True),
    "tracelens_mi210": row("AMD Instinct MI210", "AMD Instinct MI210", [0], "unfused_elementwise", {"unfused_elementwise"},
                           warnings=[WHOLE], amd=True),
}
NAMES = sorted(TABLE)


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {}


def _doc(docs: dict, name: str) -> dict:
    if name not in docs:
        docs[name] = json.loads(json.dumps(analyze_run(PUBLIC / name, workers=1, cache=False).to_json(), default=str))
    return docs[name]


def _readme_rows() -> dict[str, list[str]]:
    rows = {}
    for line in README.read_text().splitlines():
        m = re.match(r"^\| `([a-z0-9_]+)` \|", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in line.strip().strip("|").split("|")]
    return rows


@pytest.mark.committed
def test_the_corpus_is_the_table_and_the_readme():
    """Every committed directory has its row here and in the README, with a source and a licence;
    the kinds the issue asks for are covered; the corpus stays small."""
    dirs = sorted(p.name for p in PUBLIC.iterdir() if p.is_dir())
    assert dirs == NAMES
    readme = _readme_rows()
    assert sorted(readme) == NAMES
    for name, cells in readme.items():
        assert cells[2] in ("MIT", "BSD-3-Clause") and cells[1].split()[0] in ("HTA", "kineto", "TraceLens"), name
    kinds = {"V100": "hta_v100_ddp", "A100": "hta_a100_nccl", "H100": "tracelens_h100", "AMD": "hta_mi250",
             "CPU": "hta_cpu_only", "multi-rank NCCL": "hta_sampled_ranks", "old format": "kineto_autograd_2021"}
    assert set(kinds.values()) <= set(NAMES)
    assert sum(f.stat().st_size for f in PUBLIC.rglob("*") if f.is_file()) < 10 << 20


@pytest.mark.committed
@pytest.mark.parametrize("name", NAMES)
def test_public_trace_matches_its_row(docs, name):
    r, doc = TABLE[name], _doc(docs, name)
    run = doc["run"]
    assert run["device"] == r.device
    assert sorted(int(p["rank"]) for p in doc["summary"]["per_rank"]) == list(r.ranks)
    ids = {d["id"] for d in doc["diagnoses"]}
    assert r.present <= ids, ids
    assert not (r.absent & ids), ids
    first = doc["verdict"].split(":")[0]
    assert first == r.verdict or (r.verdict == "no bottleneck" and doc["verdict"].startswith("no bottleneck")), doc["verdict"]
    readme = _readme_rows()[name]
    assert readme[5].startswith(f"`{r.verdict}`" if r.verdict != "no bottleneck" else "no bottleneck"), readme[5]
    for w in r.warnings:
        assert any(w in line for line in run["warnings"]), (w, run["warnings"])
    eff = doc["efficiency"]
    if r.mfu is None:
        assert eff is None or eff["mfu_pct"] is None
    else:
        assert eff is not None and (eff["mfu_pct"] is not None) == r.mfu
    if r.peak_row:
        assert device_peak(run["device"]).source.startswith(r.peak_row + ": ")
        assert eff is None or eff["peak"]["source"].startswith(r.peak_row + ": ")
    elif eff is not None:
        assert eff["peak"] is None
    if r.amd:
        assert eff is None or not eff["other_kernels"]
        assert eff is None or all(c["class"] != "other" for c in eff["classes"])


# ---- 1. any file name ------------------------------------------------------------------------------

def _copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)
    return dst


@pytest.mark.live
def test_a_directory_of_traces_under_other_names_is_a_run_and_says_what_it_took(tmp_path):
    """HTA's names (``rank-0.json.gz``, ``sampled_rank-1.json.gz``), a plain ``trace.json``, the
    manifest-less directory with a config and an execution trace beside them: the traces are taken,
    the rest skipped with why, in one line."""
    d = tmp_path / "foreign"
    for f in (PUBLIC / "hta_sampled_ranks").iterdir():
        _copy(f, d / f.name)
    (d / "config.json").write_text(json.dumps({"lr": 3e-4}))
    (d / "results.json").write_text("[1, 2, 3]")
    _copy(PUBLIC / "hta_execution_trace" / "benchmark_simple_add_et.json.gz", d / "et.json.gz")
    found = discover.find(d)
    assert [f.name for f in found.taken] == ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"]
    why = {f.name: w for f, w in found.skipped}
    assert why == {"config.json": "no traceEvents: not a Kineto/Chrome trace",
                   "et.json.gz": "a PyTorch execution trace (nodes), not a Kineto trace",
                   "results.json": 'a JSON array without trace events ("ph")'}
    out = workbench("analyze", "--json", "--no-cache", d)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["run"]["world_size"] == 2
    note = next(w for w in doc["run"]["warnings"] if w.startswith("took "))
    assert note == ("took 2 trace files: sampled_rank-0.json.gz, sampled_rank-1.json.gz; skipped 3: config.json (no "
                    "traceEvents: not a Kineto/Chrome trace), et.json.gz (a PyTorch execution trace (nodes), not a "
                    "Kineto trace), results.json (a JSON array without trace events (\"ph\"))")
    text = workbench("analyze", "--no-cache", d)
    assert text.returncode == 0 and f"warning: {note}" in " ".join(text.stdout.split()), text.stdout  # the result, warnings included, is stdout


@pytest.mark.live
def test_a_directory_with_no_trace_says_what_it_skipped(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    out = workbench("analyze", tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"workbench: error: {tmp_path}: no manifest.json and no trace files (*.json[.gz] holding traceEvents) "
        "(skipped 1: config.json (no traceEvents: not a Kineto/Chrome trace)); is this a run directory?"]


@pytest.mark.committed
def test_ranks_come_from_distributed_info_then_the_name_then_the_order(tmp_path):
    """Two rank-less traces of different processes: named ``rank-5``/``rank_7`` they are ranks 5
    and 7; named otherwise they take ranks 0 and 1 by file order, said in a warning. A trace's
    ``distributedInfo`` wins over its name."""
    src = PUBLIC / "hta_no_distributed_info" / "distributed_info_not_found.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    other = dict(doc, traceEvents=[dict(e, pid=e["pid"] + 1) if "pid" in e else e for e in doc["traceEvents"]])
    named, ordered, ranked = tmp_path / "named", tmp_path / "ordered", tmp_path / "ranked"
    for d, names in ((named, ("rank-5.json.gz", "job_rank_7.json.gz")), (ordered, ("b.json.gz", "a.json.gz"))):
        d.mkdir()
        (d / names[0]).write_bytes(gzip.compress(json.dumps(doc).encode()))
        (d / names[1]).write_bytes(gzip.compress(json.dumps(other).encode()))
    a = analyze_run(named, workers=1, cache=False)
    assert sorted(a.run.ranks) == [5, 7] and not any("file order" in w for w in a.run.warnings)
    b = analyze_run(ordered, workers=1, cache=False)
    assert sorted(b.run.ranks) == [0, 1]
    assert "ranked by file order: a.json.gz → 0, b.json.gz → 1" in " ".join(b.run.warnings)
    ranked.mkdir()
    (ranked / "rank-9.json.gz").write_bytes(gzip.compress(json.dumps(dict(doc, distributedInfo={"rank": 2})).encode()))
    assert sorted(analyze_run(ranked, workers=1, cache=False).run.ranks) == [2]


@pytest.mark.committed
def test_a_single_trace_file_and_a_workbench_run_directory_are_read_as_before():
    one = analyze_run(PUBLIC / "hta_mi250" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", workers=1, cache=False)
    assert list(one.run.ranks) == [0] and not any(w.startswith("took ") for w in one.run.warnings)
    own = analyze_run(TRACES / "ddp_slow_data", workers=1, cache=False)
    assert sorted(own.run.ranks) == [0, 1] and not any(w.startswith("took ") for w in own.run.warnings)


@pytest.mark.unit
def test_chrome_array_traces_are_taken_and_broken_foreign_files_skipped(tmp_path):
    """A top-level array of events (Chrome's other layout) under a plain name is a trace; a corrupt
    gzip under a foreign name is skipped with why (under a ``*.pt.trace.json.gz`` name it stays an
    error: RELIABILITY.md's corrupt_gzip row)."""
    events = [{"ph": "X", "name": f"op{i}", "cat": "cpu_op", "ts": i * 10.0, "dur": 5.0, "pid": 1, "tid": 1}
              for i in range(50)]
    (tmp_path / "trace.json").write_text(json.dumps(events))
    (tmp_path / "old.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    (tmp_path / "big.json").write_text('{"meta": "' + "x" * (discover.SNIFF_BYTES + 10) + '", "traceEvents": []}')
    found = discover.find(tmp_path)
    assert [f.name for f in found.taken] == ["trace.json"]
    assert dict((f.name, w) for f, w in found.skipped) == {
        "old.json.gz": "corrupt or truncated gzip data", "big.json": "no traceEvents in its first MiB: not a Kineto/Chrome trace"}
    a = analyze_run(tmp_path, workers=1, cache=False)
    assert list(a.run.ranks) == [0] and any(w.startswith("took 1 trace file: trace.json; skipped 2") for w in a.run.warnings)


@pytest.mark.unit
def test_rank_from_name():
    got = {n: discover.rank_from_name(n) for n in ("rank-0.json.gz", "sampled_rank-12.json.gz", "rank3.pt.trace.json.gz",
                                                  "inference_rank_1.json.gz", "rank0_trace_no_pyfn.json.gz",
                                                  "control.json.gz", "worker0.pt.trace.json.gz", "frank1.json")}
    assert got == {"rank-0.json.gz": 0, "sampled_rank-12.json.gz": 12, "rank3.pt.trace.json.gz": 3,
                   "inference_rank_1.json.gz": 1, "rank0_trace_no_pyfn.json.gz": 0, "control.json.gz": None,
                   "worker0.pt.trace.json.gz": None, "frank1.json": None}


# ---- 2. peaks for the GPUs people train on ------------------------------------------------------------

GIB = 1 << 30
RESOLVED = [
    ("Tesla V100-SXM2-16GB", {}, "Tesla V100 SXM2"),
    ("Tesla V100-DGXS-32GB", {}, "Tesla V100 SXM2"),
    ("Tesla V100-PCIE-32GB", {}, "Tesla V100 PCIe"),
    ("Tesla T4", {}, "Tesla T4"),
    ("NVIDIA A10G", {}, "NVIDIA A10G"),
    ("NVIDIA A10", {}, "NVIDIA A10"),
    ("NVIDIA A100-PG509-200", {}, "NVIDIA A100 SXM4 40GB"),
    ("NVIDIA A100-SXM4-80GB", {}, "NVIDIA A100 SXM4 80GB"),
    ("NVIDIA A100 80GB PCIe", {}, "NVIDIA A100 PCIe 80GB"),
    ("NVIDIA A100-PCIE-40GB", {}, "NVIDIA A100 PCIe 40GB"),
    ("NVIDIA L4", {}, "NVIDIA L4"),
    ("NVIDIA L40S", {}, "NVIDIA L40S"),
    ("NVIDIA GeForce RTX 3090", {}, "NVIDIA GeForce RTX 3090"),
    ("NVIDIA GeForce RTX 4090", {}, "NVIDIA GeForce RTX 4090"),
    ("NVIDIA RTX A6000", {}, "NVIDIA RTX A6000"),
    ("NVIDIA RTX 6000 Ada Generation", {}, "NVIDIA RTX 6000 Ada"),
    ("NVIDIA H100 80GB HBM3", {}, "NVIDIA H100 SXM"),
    ("NVIDIA H100 PCIe", {}, "NVIDIA H100 PCIe"),
    ("NVIDIA H100 NVL", {}, "NVIDIA H100 NVL"),
    ("NVIDIA H100", {"numSms": 132, "totalGlobalMem": 101997215744}, "NVIDIA H100 NVL"),  # torch's own test trace
    ("NVIDIA H200", {}, "NVIDIA H200 SXM"),
    ("NVIDIA B200", {}, "NVIDIA B200"),
    ("NVIDIA GB200", {}, "NVIDIA GB200"),
    ("AMD Instinct MI250X", {}, "AMD Instinct MI250X (one GCD)"),
    ("AMD Instinct MI250X/MI250", {"numSms": 104}, "AMD Instinct MI250 (one GCD)"),
    ("AMD Instinct MI300X VF", {}, "AMD Instinct MI300X"),
    ("AMD Instinct MI325X", {}, "AMD Instinct MI325X"),
    ("AMD Radeon Graphics", {"computeMajor": 9, "computeMinor": 0, "numSms": 110, "totalGlobalMem": 64 * GIB,
                             "warpSize": 64}, "AMD Instinct MI250X (one GCD)"),
    ("AMD Radeon Graphics", {"gcnArchName": "gfx942:sramecc+:xnack-", "numSms": 304, "totalGlobalMem": 192 * GIB},
     "AMD Instinct MI300X"),
    ("Graphics Device", {"gcnArchName": "gfx942", "numSms": 304, "totalGlobalMem": 256 * GIB}, "AMD Instinct MI325X"),
    ("NVIDIA Graphics Device", {"computeMajor": 8, "computeMinor": 6, "numSms": 82, "totalGlobalMem": 24 * GIB},
     "NVIDIA GeForce RTX 3090"),
    ("NVIDIA Graphics Device", {"computeMajor": 9, "computeMinor": 0, "numSms": 114, "totalGlobalMem": 80 * GIB},
     "NVIDIA H100 PCIe"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("name", "props", "key"), RESOLVED, ids=[f"{n}-{k}" for n, _, k in RESOLVED])
def test_a_device_resolves_from_what_the_trace_carries(name, props, key):
    assert devices.resolve(name, {"name": name, **props}).gpu.key == key
    assert device_peak(devices.label(name, {"name": name, **props})).source.startswith(key + ": ")


@pytest.mark.committed
def test_the_table_covers_the_gpus_people_train_on_dense_and_sourced():
    keys = {g.key for g in devices.GPUS}
    for want in ("V100 SXM2", "V100 PCIe", "T4", "A10", "A10G", "A100 SXM4 40GB", "A100 SXM4 80GB", "A100 PCIe 40GB",
                 "A100 PCIe 80GB", "L4", "L40S", "RTX 3090", "RTX 4090", "RTX A6000", "RTX 6000 Ada", "H100 SXM",
                 "H100 PCIe", "H100 NVL", "H200", "B200", "GB200", "MI250X", "MI250", "MI300X", "MI325X"):
        assert any(want in k for k in keys), want
    for g in devices.GPUS:
        assert g.source and set(g.tflops) <= set(devices.DTYPES) and g.hbm_tb_s > 0, g.key
    # dense, not the datasheets' "with sparsity" figures (A100 624, H100 SXM 1979, L4 242, B200 4500 bf16)
    dense_bf16 = {"NVIDIA A100 SXM4 80GB": 312.0, "NVIDIA H100 SXM": 989.0, "NVIDIA L4": 121.0, "NVIDIA B200": 2250.0,
                  "AMD Instinct MI300X": 1307.4, "AMD Instinct MI250X (one GCD)": 191.5}
    assert {k: devices.BY_KEY[k].tflops["bf16"] for k in dense_bf16} == dense_bf16
    assert device_peak("Tesla V100-SXM2-16GB").tflops == {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}
    table = (TRACES.parent / "docs" / "analyze.md").read_text()  # the device table moved out of the README
    for g in devices.GPUS:
        assert f"| {g.key} |" in table, g.key


@pytest.mark.live
def test_an_unknown_device_says_so_and_peak_tflops_supplies_the_figure(docs):
    """No deviceProperties: one line naming the option; with ``--peak-tflops`` MFU is computed and
    the peak's source names the option."""
    assert any("unknown device" in w and "--peak-tflops" in w for w in _doc(docs, "hta_sampled_ranks")["run"]["warnings"])
    out = workbench("analyze", "--json", PUBLIC / "hta_sampled_ranks", "--peak-tflops", "156", "--peak-dtype", "tf32")
    assert out.returncode == 0, out.stderr
    eff = json.loads(out.stdout)["efficiency"]
    assert eff["mfu_pct"] is not None and eff["peak"]["tflops"]["tf32"] == 156.0
    assert eff["peak"]["source"].startswith("--peak-tflops 156 (given for tf32")
    assert workbench("analyze", PUBLIC / "hta_sampled_ranks", "--peak-tflops", "-1").returncode == 2
    # a known device: the option replaces that dtype's figure only
    out = workbench("analyze", "--json", PUBLIC / "tracelens_h100", "--peak-tflops", "700")
    peak = json.loads(out.stdout)["efficiency"]["peak"]
    assert peak["tflops"]["bf16"] == 700.0 and peak["tflops"]["fp8"] == 1979.0 and "NVIDIA H100 SXM" in peak["source"]


# ---- 3. AMD kernels ---------------------------------------------------------------------------------------

AMD_KERNELS = [
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1", ("gemm_simt", "fp32")),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT320x224x64_MI16x16x1_SN_LDSB0_AFC1_AG0", ("gemm_tensor_core", "bf16")),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0", ("gemm_tensor_core", "fp16")),
    ("Cijk_Alik_Bljk_F8F8S_BH_Bias_SAV_UserArgs_MT256x256x64_MI16x16x1", ("gemm_tensor_core", "fp8")),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x256x32_wt32x32x8_ws1x2_wr2x2", ("gemm_tensor_core", "bf16")),
    ("naive_conv_fwd_nchw_float_double_float", ("gemm_simt", "fp32")),
    ("miopenSp3AsmConv3x3F", ("gemm_tensor_core", "mfma")),
    ("Im2d2Col_v2", ("gemm_tensor_core", "mfma")),
    ("SubTensorOpWithScalar1d", ("elementwise", "elementwise")),
    ("MIOpenBatchNormFwdTrainSpatial", ("normalization", "norm")),
    ("attn_fwd", ("attention", "flash")),
    ("bwd_kernel_dk_dv", ("attention", "flash")),
    ("_ZN7ck_tile6kentryILi1ENS_13FmhaFwdKernelINS_28BlockFmhaPipelineQRKSVSAsync", ("attention", "flash")),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", ("communication", "nccl")),
    ("__amd_rocclr_copyBuffer", ("copy", "memcpy")),
    ("__amd_rocclr_fillBufferAligned", ("copy", "memset")),
    ("CopyHostToDevice", ("copy", "memcpy_htod")),
    ("void rocprim::ROCPRIM_400400_NS::detail::trampoline_kernel<rocprim::default_config, rocprim::detail::reduce_config",
     ("reduction", "reduction")),
    ("batched_transpose_32x32_half", ("copy", "layout")),
]


@pytest.mark.unit
@pytest.mark.parametrize(("name", "want"), AMD_KERNELS, ids=[n[:40] for n, _ in AMD_KERNELS])
def test_amd_kernels_are_classified(name, want):
    assert classify(name)[:2] == want


@pytest.mark.unit
def test_tensile_names_state_their_dtype():
    assert tensile_dtype("Cijk_Ailk_Bjlk_SB_MT64x16x16") == "fp32"
    assert tensile_dtype("Cijk_Ailk_Bljk_DB_MT64x16x16") == "fp64"
    assert tensile_dtype("Cijk_Ailk_Bljk_XS_BH_MT64") == "tf32"
    assert tensile_dtype("void at::native::gemm") is None
    assert classify("Memcpy HtoD (Host -> Device)", "gpu_memcpy")[:2] == ("copy", "memcpy_htod")  # ROCm's Kineto names


@pytest.mark.committed
def test_efficiency_rules_fire_on_amd_as_on_nvidia(docs):
    """The MI300X training trace: the kernel classes, MFU against the MI300X row, and the same
    rules an NVIDIA trace gets (exposed communication over RCCL, low MFU, unfused elementwise)."""
    doc = _doc(docs, "tracelens_mi300x")
    eff = doc["efficiency"]
    classes = {(c["class"], c["subclass"]) for c in eff["classes"]}
    assert {("gemm_tensor_core", "bf16"), ("communication", "nccl"), ("copy", "layout"), ("normalization", "norm")} <= classes
    gemm = next(c for c in eff["classes"] if (c["class"], c["subclass"]) == ("gemm_tensor_core", "bf16"))
    assert gemm["pct_of_peak"] is not None and 0 < gemm["pct_of_peak"] < 100
    assert eff["peak"]["tflops"]["bf16"] == 1307.4


# ---- 4. older and other traces ----------------------------------------------------------------------------

@pytest.mark.committed
def test_a_trace_without_step_markers_is_one_clear_whole_trace_step(docs):
    doc = _doc(docs, "kineto_autograd_2021")
    assert doc["summary"]["steps"] == 1
    stall = next(d for d in doc["diagnoses"] if d["id"] == "dataloader_stall")
    assert "the whole trace (no step markers)" in stall["title"] and "step -1" not in stall["title"]
    assert any("no ProfilerStep#N marker" in w for w in doc["run"]["warnings"])


@pytest.mark.committed
def test_torch_1_9_traces_and_traces_without_distributed_info_are_read(docs):
    old = _doc(docs, "kineto_v100_2021")
    assert old["summary"]["steps"] == 2 and old["run"]["device"] == "Tesla V100-DGXS-32GB"
    stall = next(d for d in old["diagnoses"] if d["id"] == "dataloader_stall")
    assert stall["title"].endswith("profiled steps 5–6)")
    none = _doc(docs, "hta_no_distributed_info")
    assert none["run"]["world_size"] == 1 and [r["rank"] for r in none["summary"]["per_rank"]] == [0]


@pytest.mark.committed
def test_the_v100_fp32_trace_gets_fp32_matmul_against_its_fp16_peak(docs):
    """The issue's V100 trace: MFU against the V100's fp32 peak, fp32_matmul held to its fp16
    tensor cores (no bf16 on Volta), and the fix says fp16 with a GradScaler."""
    doc = _doc(docs, "hta_v100_ddp")
    assert doc["efficiency"]["mfu_pct"] is not None and doc["efficiency"]["dtype_flops_pct"] == {"fp32": 100.0}
    d = next(d for d in doc["diagnoses"] if d["id"] == "fp32_matmul")
    assert d["evidence"]["peak_tflops"] == {"fp32": 15.7, "tf32": None, "fp16": 125.0}
    assert "fp16 would save" in d["title"] and "GradScaler" in d["recommendation"]
