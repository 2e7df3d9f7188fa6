"""Which GPU a trace ran on, and that GPU's datasheet peaks: the denominators of MFU and of the
kernel-class roofline (:mod:`workbench.hardware.peaks` is the API the analysis calls).

``GPUS`` is one row per GPU people train on, each with the datasheet its figures come from. The
figures are **dense** TFLOP/s (vendors print tensor-core figures "with sparsity": the dense one is
half) per dtype, and memory bandwidth in TB/s (10^12 bytes/s). What each dtype column holds:

- ``fp8``, ``bf16``, ``fp16``, ``tf32``: the tensor-core (NVIDIA) or matrix-core (AMD MFMA) peak;
  a dtype the GPU has no tensor path for (bf16 on a V100, fp8 before Hopper/Ada, tf32 before
  Ampere or on MI200) is absent.
- ``fp32``: what an fp32 GEMM reaches without a reduced-precision format: NVIDIA's CUDA cores
  (SIMT; NVIDIA has no fp32 tensor core, TF32 is separate); AMD's FP32 *matrix* (MFMA) figure,
  which rocBLAS/hipBLASLt use for fp32 GEMMs (twice the vector figure on MI200, equal on MI300).
- ``fp64``: the FP64 tensor-core / matrix figure where one exists (A100, H100, Instinct), else
  the vector figure; absent where the datasheet gives none (T4, GeForce/RTX parts).

An AMD MI250/MI250X is two GCDs, and torch sees each GCD as one device: those rows are per GCD
(half the OAM's datasheet figures), as the trace's ``deviceProperties`` describe one GCD.

A device is resolved from what the trace carries (:func:`resolve`): its name (the aliases traces
carry, e.g. ``NVIDIA A100-PG509-200``, ``Tesla V100-DGXS-32GB``, ``AMD Instinct MI300X VF``), else
its ``gcnArchName`` (``gfx90a``, ``gfx942``), else compute capability (ROCm reports 9.0 for gfx90a,
9.4 for gfx942; a warp of 64 says AMD), each narrowed by SM/CU count and memory. Unknown devices
get their figure from the user (``workbench analyze --peak-tflops X --peak-dtype bf16``), carried
in the device's name as a suffix (:func:`with_peak`) so it reaches every worker unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

DTYPES = ("fp8", "bf16", "fp16", "tf32", "fp32", "fp64")
GIB = 1 << 30
UNKNOWN = "unknown device"
MEMORY_TOLERANCE = 0.12
"""How far a device's ``totalGlobalMem`` (GiB) may be from a row's nominal size: an "80GB" A100
reports 79.2 GiB, a "180GB" B200 178.4 GiB, a "94GB" H100 NVL 95.0 GiB."""


@dataclass(frozen=True, slots=True)
class Gpu:
    key: str
    """The row's name, as the analysis reports the device when its own name did not say it."""
    vendor: str
    tflops: dict[str, float]
    """dtype (one of DTYPES) → dense TFLOP/s (see the module docstring for each column)."""
    hbm_tb_s: float
    memory_gib: tuple[float, ...]
    """Nominal memory sizes of the variants (GB as marketed, which is close to GiB)."""
    units: int | None
    """SMs (NVIDIA) or CUs (AMD) of one torch device: ``numSms`` in ``deviceProperties``."""
    cc: tuple[int, int]
    """Compute capability as torch reports it (AMD: gfx9.0a → (9, 0), gfx942 → (9, 4))."""
    names: str
    """Regex of the device names that mean this row (case-insensitive, searched)."""
    source: str
    family: str = ""
    """Regex of names that say the family, not the variant (``NVIDIA H100``): the properties decide."""
    arch: str = ""
    """gcnArchName (AMD)."""
    note: str = ""


_V100 = "NVIDIA Tesla V100 datasheet (2020); FP16 = the tensor-core figure"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021); fp64 = FP64 Tensor Core, tensor figures halved (datasheet: with sparsity)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023); tensor figures halved (datasheet: with sparsity)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (2024); tensor figures halved (datasheet: with sparsity)"
_BLACKWELL = "NVIDIA GB200 NVL72 / HGX B200 datasheet (2024), per GPU; tensor figures halved (datasheet: with sparsity)"
_GA102 = "NVIDIA Ampere GA102 GPU architecture whitepaper (2021), appendix; tensor figures with FP32 accumulate, dense"
_ADA = "NVIDIA Ada GPU architecture whitepaper (2023), appendix; tensor figures with FP32 accumulate, dense"
_MI200 = "per GCD: half the AMD Instinct {} OAM datasheet's figures (2021); fp32/fp64 = the matrix (MFMA) figures"
_MI300 = "AMD Instinct {} datasheet ({}); fp32/fp64 = the matrix (MFMA) figures, tensor figures dense"

_A100_TF = {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}
_H100_SXM_TF = {"fp64": 67.0, "fp32": 67.0, "tf32": 494.5, "bf16": 989.0, "fp16": 989.0, "fp8": 1979.0}
_NVL_TF = {"fp64": 60.0, "fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}
_MI300_TF = {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}

GPUS: tuple[Gpu, ...] = (
    # Volta, Turing
    Gpu("Tesla V100 SXM2", "nvidia", {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}, 0.9, (16, 32), 80, (7, 0),
        r"V100-SXM[23]|V100-DGXS|V100 SXM", _V100 + " (SXM2)", family=r"V100(?!S)",
        note="DGX Station (DGXS) and DGX-2 (SXM3) parts run at the SXM2 clocks"),
    Gpu("Tesla V100 PCIe", "nvidia", {"fp64": 7.0, "fp32": 14.0, "fp16": 112.0}, 0.9, (16, 32), 80, (7, 0),
        r"V100-PCIE|V100 PCIe", _V100 + " (PCIe)", family=r"V100(?!S)"),
    Gpu("Tesla V100S PCIe", "nvidia", {"fp64": 8.2, "fp32": 16.4, "fp16": 130.0}, 1.134, (32,), 80, (7, 0),
        r"V100S", _V100 + " (V100S PCIe)"),
    Gpu("Tesla T4", "nvidia", {"fp32": 8.1, "fp16": 65.0}, 0.32, (16,), 40, (7, 5),
        r"\bT4\b", "NVIDIA T4 Tensor Core GPU datasheet (2019); FP16 = mixed precision FP16/FP32"),
    # Ampere
    Gpu("NVIDIA A100 SXM4 40GB", "nvidia", _A100_TF, 1.555, (40,), 108, (8, 0),
        r"A100-SXM4?-40GB|PG509-200", _A100 + " (40GB SXM)", family=r"A100",
        note="PG509-200 is the A100 SXM4 40GB board"),
    Gpu("NVIDIA A100 SXM4 80GB", "nvidia", _A100_TF, 2.039, (80,), 108, (8, 0),
        r"A100-SXM4?-80GB|PG509-210", _A100 + " (80GB SXM)", family=r"A100"),
    Gpu("NVIDIA A100 PCIe 40GB", "nvidia", _A100_TF, 1.555, (40,), 108, (8, 0),
        r"A100-PCIE-40GB|A100 40GB PCIe", _A100 + " (40GB PCIe)", family=r"A100"),
    Gpu("NVIDIA A100 PCIe 80GB", "nvidia", _A100_TF, 1.935, (80,), 108, (8, 0),
        r"A100-PCIE-80GB|A100 80GB PCIe", _A100 + " (80GB PCIe)", family=r"A100"),
    Gpu("NVIDIA A10", "nvidia", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}, 0.6, (24,), 72, (8, 6),
        r"\bA10\b(?!G)", "NVIDIA A10 Tensor Core GPU datasheet (2021); tensor figures halved (datasheet: with sparsity)"),
    Gpu("NVIDIA A10G", "nvidia", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}, 0.6, (24,), 80, (8, 6),
        r"\bA10G\b", "NVIDIA A10 datasheet's figures: NVIDIA publishes no A10G sheet (AWS G5: same GA102 "
        "memory, 24 GB at 600 GB/s)", note="an upper bound: the A10G's tensor throughput is below the A10's"),
    Gpu("NVIDIA GeForce RTX 3090", "nvidia", {"fp32": 35.6, "tf32": 35.6, "bf16": 71.0, "fp16": 71.0}, 0.936, (24,), 82,
        (8, 6), r"RTX 3090(?! Ti)", _GA102 + " (GeForce RTX 3090)"),
    Gpu("NVIDIA RTX A6000", "nvidia", {"fp32": 38.7, "tf32": 77.4, "bf16": 154.8, "fp16": 154.8}, 0.768, (48,), 84,
        (8, 6), r"RTX A6000", _GA102 + " (RTX A6000)"),
    # Ada
    Gpu("NVIDIA L4", "nvidia", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5}, 0.3, (24,), 58,
        (8, 9), r"\bL4\b", "NVIDIA L4 Tensor Core GPU datasheet (2023); tensor figures halved (datasheet: with sparsity)"),
    Gpu("NVIDIA L40S", "nvidia", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0}, 0.864,
        (48,), 142, (8, 9), r"L40S", "NVIDIA L40S GPU datasheet (2023); dense tensor figures as printed"),
    Gpu("NVIDIA L40", "nvidia", {"fp32": 90.5, "tf32": 90.5, "bf16": 181.05, "fp16": 181.05, "fp8": 362.0}, 0.864,
        (48,), 142, (8, 9), r"\bL40\b(?!S)", "NVIDIA L40 GPU datasheet (2022); dense tensor figures as printed"),
    Gpu("NVIDIA GeForce RTX 4090", "nvidia", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3},
        1.008, (24,), 128, (8, 9), r"RTX 4090", _ADA + " (GeForce RTX 4090)"),
    Gpu("NVIDIA RTX 6000 Ada", "nvidia", {"fp32": 91.1, "tf32": 182.1, "bf16": 364.2, "fp16": 364.2, "fp8": 728.5},
        0.96, (48,), 142, (8, 9), r"RTX 6000 Ada", _ADA + " (RTX 6000 Ada Generation)"),
    # Hopper
    Gpu("NVIDIA H100 SXM", "nvidia", _H100_SXM_TF, 3.35, (80,), 132, (9, 0),
        r"H100 80GB HBM3|H100[- ]SXM", _H100 + " (SXM); bf16 989 as torchtitan rounds it", family=r"H100"),
    Gpu("NVIDIA H100 PCIe", "nvidia", {"fp64": 51.0, "fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0,
                                       "fp8": 1513.0}, 2.0, (80,), 114, (9, 0), r"H100 PCIe", _H100 + " (PCIe)", family=r"H100"),
    Gpu("NVIDIA H100 NVL", "nvidia", _NVL_TF, 3.9, (94,), 132, (9, 0), r"H100 NVL", _H100 + " (H100 NVL)", family=r"H100"),
    Gpu("NVIDIA H200 SXM", "nvidia", _H100_SXM_TF, 4.8, (141,), 132, (9, 0), r"H200(?! NVL)",
        _H200 + " (SXM; the H100 SXM's compute)"),
    Gpu("NVIDIA H200 NVL", "nvidia", _NVL_TF, 4.8, (141,), 132, (9, 0), r"H200 NVL", _H200 + " (H200 NVL)"),
    # Blackwell
    Gpu("NVIDIA B200", "nvidia", {"fp64": 37.0, "fp32": 75.0, "tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0,
                                  "fp8": 4500.0}, 7.7, (180, 192), 148, (10, 0), r"\bB200\b", _BLACKWELL + " (HGX B200)"),
    Gpu("NVIDIA GB200", "nvidia", {"fp64": 40.0, "fp32": 80.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0,
                                   "fp8": 5000.0}, 8.0, (186,), None, (10, 0), r"GB200", _BLACKWELL + " (GB200 NVL72)"),
    # AMD Instinct
    Gpu("AMD Instinct MI250X (one GCD)", "amd", {"fp64": 47.85, "fp32": 47.85, "bf16": 191.5, "fp16": 191.5}, 1.6384,
        (64,), 110, (9, 0), r"MI250X", _MI200.format("MI250X"), arch="gfx90a"),
    Gpu("AMD Instinct MI250 (one GCD)", "amd", {"fp64": 45.25, "fp32": 45.25, "bf16": 181.05, "fp16": 181.05}, 1.6384,
        (64,), 104, (9, 0), r"MI250(?!X)", _MI200.format("MI250"), arch="gfx90a",
        note="an MI210 (one GCD, 104 CUs, 64 GB) has the same figures"),
    Gpu("AMD Instinct MI210", "amd", {"fp64": 45.3, "fp32": 45.3, "bf16": 181.0, "fp16": 181.0}, 1.6384, (64,), 104,
        (9, 0), r"MI210", "AMD Instinct MI210 PCIe datasheet (2022); fp32/fp64 = the matrix (MFMA) figures", arch="gfx90a"),
    Gpu("AMD Instinct MI300X", "amd", _MI300_TF, 5.3, (192,), 304, (9, 4), r"MI300X",
        _MI300.format("MI300X", "2023"), arch="gfx942"),
    Gpu("AMD Instinct MI325X", "amd", _MI300_TF, 6.0, (256,), 304, (9, 4), r"MI325X",
        _MI300.format("MI325X", "2024") + " (the MI300X's compute, 256 GB HBM3E)", arch="gfx942"),
)
BY_KEY = {g.key: g for g in GPUS}
_NAMES = [(g, re.compile(g.names, re.IGNORECASE), re.compile(g.family, re.IGNORECASE) if g.family else None)
          for g in GPUS]


@dataclass(frozen=True, slots=True)
class Resolved:
    gpu: Gpu
    how: str
    """What in the trace named it: ``its name``, ``gcnArchName gfx90a, 110 CUs, 64 GiB`` …"""
    alternatives: tuple[str, ...] = field(default_factory=tuple)
    """Other rows the trace fits as well (the first of the table is taken)."""


def _int(props: dict, key: str) -> int | None:
    v = props.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _narrow(cands: list[Gpu], props: dict) -> tuple[list[Gpu], list[str]]:
    """``cands`` that fit the SM/CU count and the memory (a property the trace lacks narrows
    nothing), and the words saying which properties decided."""
    used = []
    units = _int(props, "numSms")
    if units and len(cands) > 1:
        fit = [g for g in cands if g.units == units]
        if fit:
            cands, _ = fit, used.append(f"{units} {'CUs' if fit[0].vendor == 'amd' else 'SMs'}")
    mem = _int(props, "totalGlobalMem")
    if mem and len(cands) > 1:
        gib = mem / GIB
        dist = {g.key: min(abs(gib - m) / m for m in g.memory_gib) for g in cands}
        fit = [g for g in cands if dist[g.key] <= MEMORY_TOLERANCE]
        if fit:
            best = min(dist[g.key] for g in fit)
            cands = [g for g in fit if dist[g.key] <= best + 0.02]
            used.append(f"{gib:.0f} GiB")
    return cands, used


def _arch(props: dict) -> str:
    v = props.get("gcnArchName")
    return v.split(":")[0].strip().lower() if isinstance(v, str) else ""


def _is_amd(name: str, props: dict) -> bool:
    return bool(re.search(r"\bAMD\b|Radeon|Instinct", name, re.IGNORECASE)) or props.get("warpSize") == 64 or bool(_arch(props))


def resolve(name: str | None, props: dict[str, Any] | None = None) -> Resolved | None:
    """The row of the device named ``name`` (default: ``props["name"]``) with ``deviceProperties``
    ``props``, or None when nothing in them says which GPU it is."""
    props = props if isinstance(props, dict) else {}
    name = strip_peak(name or (props.get("name") if isinstance(props.get("name"), str) else "") or "")
    if name in BY_KEY:
        return Resolved(BY_KEY[name], "its name")
    cands = [g for g, rx, _ in _NAMES if rx.search(name)] if name else []
    how = [f"its name '{name}'"] if cands else []
    if not cands and name:
        cands = [g for g, _, fam in _NAMES if fam is not None and fam.search(name)]
        how = [f"its name '{name}'"] if cands else []
    if not cands and _arch(props):
        cands = [g for g in GPUS if g.arch == _arch(props)]
        how = [f"gcnArchName {_arch(props)}"] if cands else []
    major, minor = _int(props, "computeMajor"), props.get("computeMinor")
    if not cands and major is not None and isinstance(minor, int):
        vendor = "amd" if _is_amd(name, props) else "nvidia"
        cands = [g for g in GPUS if g.cc == (major, minor) and g.vendor == vendor]
        how = [f"{'ROCm compute' if vendor == 'amd' else 'compute capability'} {major}.{minor}"] if cands else []
    if not cands:
        return None
    cands, used = _narrow(cands, props)
    others = tuple(g.key for g in cands[1:] if not _same_figures(g, cands[0]))
    return Resolved(cands[0], ", ".join(how + used), others)


def _same_figures(a: Gpu, b: Gpu, rel: float = 0.02) -> bool:
    """Whether two rows give the same peaks within ``rel`` (an MI210 and one MI250 GCD: 181.0 and
    181.05 TFLOP/s), so that taking either changes no figure the analysis prints."""
    close = lambda x, y: abs(x - y) <= rel * max(x, y)  # noqa: E731
    return (a.tflops.keys() == b.tflops.keys() and all(close(a.tflops[d], b.tflops[d]) for d in a.tflops)
            and close(a.hbm_tb_s, b.hbm_tb_s))


# ---- the name the analysis carries ------------------------------------------------------------------
_PEAK_SUFFIX = re.compile(r"\s*\[--peak-tflops ([0-9.eE+]+) (\w+)\]$")


def with_peak(name: str | None, peak: str | None) -> str | None:
    """``name`` carrying a user's peak (``peak_spec``'s text), which :func:`peak_of` reads back."""
    if not peak:
        return name
    return f"{strip_peak(name or UNKNOWN)} [--peak-tflops {peak}]"


def peak_spec(tflops: float | None, dtype: str = "bf16") -> str | None:
    """The ``--peak-tflops X --peak-dtype D`` options as one spec (``"400 bf16"``), or None."""
    if tflops is None:
        return None
    if dtype not in DTYPES:
        raise ValueError(f"--peak-dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if not tflops > 0:
        raise ValueError(f"--peak-tflops must be a positive number of TFLOP/s, got {tflops!r}")
    return f"{tflops:g} {dtype}"


def strip_peak(name: str) -> str:
    return _PEAK_SUFFIX.sub("", name)


def user_peak(name: str | None) -> tuple[float, str] | None:
    m = _PEAK_SUFFIX.search(name or "")
    return (float(m.group(1)), m.group(2)) if m else None


def label(name: str | None, props: dict[str, Any] | None = None, peak: str | None = None) -> str | None:
    """The device as the analysis names it: ``name`` (default: ``props["name"]``) itself when it
    says which GPU it is (or when nothing does), else the row the properties resolve to (``AMD
    Radeon Graphics`` → ``AMD Instinct MI250 (one GCD)``). A user's peak, ``peak`` (``"400 bf16"``)
    or one already carried on ``name`` or ``props["name"]`` (see :func:`with_peak`), is kept."""
    props = props if isinstance(props, dict) else {}
    own = props.get("name") if isinstance(props.get("name"), str) else None
    raw = name or own
    if raw is None:
        return with_peak(None, peak) if peak else None
    given = user_peak(raw) or user_peak(own)
    peak = peak or (f"{given[0]:g} {given[1]}" if given else None)
    base = strip_peak(raw)
    found, by_name = resolve(base, props), resolve(base, None)
    out = base if found is None or (by_name is not None and by_name.gpu is found.gpu) else found.gpu.key
    return with_peak(out, peak)


def labelled(devs: list[dict[str, Any]], peak: str | None = None) -> list[dict[str, Any]]:
    """``deviceProperties`` entries with ``name`` set to :func:`label` (the trace's own name moves
    to ``name_in_trace`` when it changes), so every reader of ``Trace.devices`` sees the resolved
    device. With ``peak`` and no entry at all (traces before torch 1.9), one entry carries it."""
    out = []
    for d in devs:
        raw = d["name_in_trace"] if isinstance(d.get("name_in_trace"), str) else d.get("name")
        if not isinstance(raw, str):
            out.append(d)
            continue
        new = label(raw, {**d, "name": raw}, peak)
        out.append(d if new == d.get("name") else {**d, "name": new, "name_in_trace": raw})
    if not out and peak:
        out.append({"name": with_peak(None, peak)})
    return out


def describe(name: str | None, props: dict[str, Any] | None) -> str | None:
    """One line on how the device was resolved, when its name alone did not say it (or nothing
    did); None when the name says it."""
    props = props if isinstance(props, dict) else {}
    own = props.get("name") if isinstance(props.get("name"), str) else None
    given = user_peak(name) or user_peak(own)
    trace_name = props.get("name_in_trace")
    raw = strip_peak(name or (trace_name if isinstance(trace_name, str) else own) or "")
    props = {**props, "name": raw}
    found, by_name = resolve(raw, props), resolve(raw, None)
    if given:
        if found:
            return (f"peak {given[0]:g} TFLOP/s {given[1]} from --peak-tflops replaces the {given[1]} figure of "
                    f"{found.gpu.key} (the table's other figures stay)")
        who = f"device '{raw}'" if raw and raw != UNKNOWN else "a device the trace does not name"
        return (f"peak {given[0]:g} TFLOP/s from --peak-tflops (given for {given[1]}) for {who}, which the table lacks: "
                "used for every dtype")
    if found is not None and by_name is not None and by_name.gpu is found.gpu and not found.alternatives:
        return None
    facts = _facts(props)
    if found is None:
        what = f"'{raw}'" if raw else "with no deviceProperties in the trace"
        return (f"unknown device {what}{f' ({facts})' if facts else ''}: no datasheet peak, so no MFU; "
                f"pass --peak-tflops X [--peak-dtype bf16] (workbench analyze)")
    also = f" (as well: {', '.join(found.alternatives)}; the first is used)" if found.alternatives else ""
    note = f"; {found.gpu.note}" if found.gpu.note else ""
    return f"device '{raw}' is taken as {found.gpu.key}, from {found.how}{also}{note}"


def _facts(props: dict) -> str:
    out = []
    if _arch(props):
        out.append(_arch(props))
    if _int(props, "computeMajor") is not None and isinstance(props.get("computeMinor"), int):
        out.append(f"compute {props['computeMajor']}.{props['computeMinor']}")
    if _int(props, "numSms"):
        out.append(f"{props['numSms']} SMs/CUs")
    if _int(props, "totalGlobalMem"):
        out.append(f"{props['totalGlobalMem'] / GIB:.0f} GiB")
    return ", ".join(out)
