"""Where it runs: the GPU (peaks, memory) and the cluster's links.

Peaks come from ``workbench.hardware.peaks`` through :func:`gpu_spec`, the one adapter between the
planner and that table (a richer table drops in without touching the planner). The memory
capacity and the links are the planner's own: capacity per device (datasheets), and per known
system the bandwidth a GPU has inside its node (NVLink) and to other nodes (one NIC per GPU),
each per direction, in Gbit/s as the flags take them.

Achievable bus bandwidth is a stated fraction of the link (:data:`LINK_EFFICIENCY`), until
``--calibrate`` measures collectives: NCCL's nccl-tests reach about 230 of 300 GB/s per
direction on a DGX A100's NVLink and about 45 of 50 GB/s over a 400 Gb/s NIC.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

from workbench.format.errors import WorkbenchError

GIB = float(1 << 30)

# Device memory in bytes as CUDA reports it (datasheets say GB of 10^9 or "80GB" parts of
# 80 GiB); matched like peaks.device_peak, longest key first.
MEMORY_BYTES: dict[str, float] = {
    "H200": 150_109_880_320,   # 141 GB HBM3e; what torch.cuda reports on the H200 this repo ran on
    "H100 PCIe": 85_520_809_984,
    "H100": 85_520_809_984,    # 80 GB HBM3 (SXM5)
    "A100-SXM4-80GB": 85_520_809_984,
    "A100 80GB PCIe": 85_520_809_984,
    "A100": 42_505_273_344,    # the 40 GB part
    "L40S": 48 * 1e9,
    "L4": 24 * 1e9,
    "A10": 24 * 1e9,
}

# (intra-node, inter-node) Gbit/s per GPU and direction: NVLink 4 = 18 links x 25 GB/s = 450 GB/s
# (DGX H100/H200, 8 x 400 Gb/s NDR: one per GPU); NVLink 3 = 12 x 25 GB/s = 300 GB/s (DGX A100,
# 8 x 200 Gb/s HDR); PCIe parts: PCIe 4/5 x16 between GPUs, 100/200 Gb/s Ethernet.
SYSTEMS: dict[str, tuple[float, float, str]] = {
    "H200": (3600.0, 400.0, "DGX H200: NVLink 4 (450 GB/s per direction), 8 x 400 Gb/s NDR per node"),
    "H100 PCIe": (512.0, 200.0, "PCIe 5 x16 (64 GB/s), 200 Gb/s per GPU"),
    "H100": (3600.0, 400.0, "DGX H100: NVLink 4 (450 GB/s per direction), 8 x 400 Gb/s NDR per node"),
    "A100 80GB PCIe": (256.0, 100.0, "PCIe 4 x16 (32 GB/s), 100 Gb/s per GPU"),
    "A100": (2400.0, 200.0, "DGX A100: NVLink 3 (300 GB/s per direction), 8 x 200 Gb/s HDR per node"),
    "L40S": (256.0, 100.0, "PCIe 4 x16 (32 GB/s), 100 Gb/s per GPU"),
    "L4": (256.0, 100.0, "PCIe 4 x16 (32 GB/s), 100 Gb/s per GPU"),
    "A10": (256.0, 100.0, "PCIe 4 x16 (32 GB/s), 100 Gb/s per GPU"),
}

LINK_EFFICIENCY = {"intra": 0.77, "inter": 0.9}
"""Bus bandwidth NCCL reaches as a share of the link (nccl-tests on DGX A100 / H100, large messages)."""
LINK_LATENCY_S = {"intra": 8e-6, "inter": 20e-6}
"""Per-collective start-up cost (NCCL's small-message floor on NVLink / InfiniBand)."""
FIT_FRACTION = 0.95
"""A layout fits when its predicted peak is at most this share of the device's memory: the CUDA
context, NCCL's buffers and the caching allocator's rounding take the rest."""


@dataclass(kw_only=True, slots=True, frozen=True)
class GpuSpec:
    name: str
    """The name asked for (``--gpu``)."""
    tflops: dict[str, float]
    """Dense TFLOP/s per dtype (workbench.hardware.peaks)."""
    hbm_tb_s: float
    """Memory bandwidth, TB/s."""
    memory_bytes: float
    """Device memory as CUDA reports it."""
    source: str
    """Where the peaks come from."""

    def peak_flops(self, dtype: str) -> float:
        # a dtype the GPU lacks runs at its nearest: bf16 work in fp16 on a V100/T4, else fp32
        t = self.tflops.get(dtype) or self.tflops.get("bf16") or self.tflops.get("fp16") or self.tflops["fp32"]
        return t * 1e12

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


def _longest_key(table: dict, name: str) -> str | None:
    low = name.lower()
    return next((k for k in sorted(table, key=len, reverse=True) if k.lower() in low), None)


def gpu_spec(name: str) -> GpuSpec:
    """The planner's view of a device; raises WorkbenchError for one without a known peak."""
    from workbench.hardware.peaks import DEVICES, device_peak

    peak = device_peak(name) or device_peak(name.upper())
    if peak is None:
        raise WorkbenchError(f"unknown GPU {name!r}: known ones are {', '.join(DEVICES)}")
    key = _longest_key(MEMORY_BYTES, name)
    if key is not None:
        memory = MEMORY_BYTES[key]
    else:  # the device table's nominal size (GB as marketed, close to GiB): the largest variant
        from workbench.hardware.devices import resolve

        row = resolve(name)
        if row is None or not row.gpu.memory_gib:
            raise WorkbenchError(f"no memory capacity known for GPU {name!r} (known: {', '.join(MEMORY_BYTES)})")
        memory = max(row.gpu.memory_gib) * GIB
    return GpuSpec(name=name, tflops=dict(peak.tflops), hbm_tb_s=peak.hbm_tb_s, memory_bytes=memory, source=peak.source)


@dataclass(kw_only=True, slots=True, frozen=True)
class Cluster:
    gpu: GpuSpec
    """The device every rank has."""
    gpus: int
    """GPUs in the job."""
    gpus_per_node: int = 8
    """GPUs that share a node's NVLink."""
    intra_gbps: float = 0.0
    """Per-GPU link inside a node, Gbit/s per direction."""
    inter_gbps: float = 0.0
    """Per-GPU network to other nodes, Gbit/s per direction."""
    links_source: str = ""
    """Where the link figures come from (system defaults or flags)."""

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.gpus_per_node < 1:
            raise WorkbenchError("--gpus and --gpus-per-node must be >= 1")
        if not (0 < self.intra_gbps < math.inf and 0 < self.inter_gbps < math.inf):  # NaN fails too
            raise WorkbenchError("link bandwidths must be > 0 Gbit/s")

    def bus_bytes_per_s(self, where: str) -> float:
        """Bandwidth NCCL's collectives reach on this link, bytes/s (the stated efficiency)."""
        gbps = self.intra_gbps if where == "intra" else self.inter_gbps
        return gbps / 8 * 1e9 * LINK_EFFICIENCY[where]


def make_cluster(gpu: str, gpus: int, gpus_per_node: int = 8, intra_gbps: float | None = None,
                 inter_gbps: float | None = None) -> Cluster:
    """A cluster of ``gpus`` × ``gpu``, links from :data:`SYSTEMS` unless given."""
    spec = gpu_spec(gpu)
    key = _longest_key(SYSTEMS, gpu)
    d_intra, d_inter, source = SYSTEMS[key] if key else (256.0, 100.0, "unknown system: PCIe 4 / 100 Gb/s assumed")
    given = [f for f, v in (("--intra-node-gbps", intra_gbps), ("--inter-node-gbps", inter_gbps)) if v is not None]
    if given:
        source = f"{source}; {' and '.join(given)} given"
    return Cluster(gpu=spec, gpus=gpus, gpus_per_node=min(gpus_per_node, gpus),
                   intra_gbps=d_intra if intra_gbps is None else intra_gbps,
                   inter_gbps=d_inter if inter_gbps is None else inter_gbps, links_source=source)
