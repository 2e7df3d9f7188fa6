"""Device sampler: a daemon thread that appends one row of NVML readings (or, without a GPU,
CPU/process readings from psutil) to ``nvml_rank{r}.csv`` every ``interval_s``.

NVML is reached through a small backend object so that tests can pass a fake
(:class:`FakeNvml`) and need no GPU. A 10 Hz sampler costs nothing measurable on an H200
(see shared notes); rows are flushed about once a second so a crash loses at most that.

A run of weeks would write millions of rows at 10 Hz: every sample is written during the first
:data:`FULL_RATE_S` and while the profiler records (:attr:`Sampler.recording`), one every
:data:`SLOW_INTERVAL_S` otherwise. Every sample still feeds :meth:`Sampler.drain`, the means the
step history (workbench.capture.history) writes beside each block of steps.
"""

from __future__ import annotations

import csv
import os
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from workbench.format.contract import NVML_COLUMNS

FULL_RATE_S = 3600.0
"""Seconds from the start during which every sample is written to ``nvml_rank{r}.csv``."""
SLOW_INTERVAL_S = 10.0
"""After :data:`FULL_RATE_S`, seconds between written samples while the profiler is not recording."""
DRAINED = ("gpu_util_pct", "sm_clock_mhz", "gpu_temp_c", "power_w", "cpu_util_pct")
"""The samples :meth:`Sampler.drain` averages (``throttle_reasons`` is OR-ed)."""


class NvmlBackend(Protocol):
    def read(self) -> dict[str, Any]:
        """One sample: a dict with (a subset of) NVML_COLUMNS' gpu fields."""


class PynvmlBackend:
    """Real NVML through ``pynvml`` (package nvidia-ml-py). Raises if there is no usable GPU."""

    def __init__(self, index: int) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nv = pynvml
        self._h = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.index = index
        self.name = pynvml.nvmlDeviceGetName(self._h)
        if isinstance(self.name, bytes):
            self.name = self.name.decode()

    def _try(self, fn, *args):
        try:
            return fn(self._h, *args)
        except self._nv.NVMLError:  # a query the device does not support: leave the cell empty
            return None

    def read(self) -> dict[str, Any]:
        nv = self._nv
        util = self._try(nv.nvmlDeviceGetUtilizationRates)
        mem = self._try(nv.nvmlDeviceGetMemoryInfo)
        power = self._try(nv.nvmlDeviceGetPowerUsage)
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        return {
            "device": self.index,
            "gpu_util_pct": util.gpu if util else None,
            "mem_util_pct": util.memory if util else None,
            "mem_used_bytes": mem.used if mem else None,
            "mem_total_bytes": mem.total if mem else None,
            "power_w": power / 1000.0 if power is not None else None,
            "sm_clock_mhz": self._try(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
            "pcie_tx_kbps": self._try(nv.nvmlDeviceGetPcieThroughput, nv.NVML_PCIE_UTIL_TX_BYTES),
            "pcie_rx_kbps": self._try(nv.nvmlDeviceGetPcieThroughput, nv.NVML_PCIE_UTIL_RX_BYTES),
            "gpu_temp_c": self._try(nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU),
            "throttle_reasons": self._try(reasons) if reasons else None,
        }

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception:
            pass


class FakeNvml:
    """A scripted NVML for unit tests: returns ``samples`` in turn, then repeats the last."""

    def __init__(self, samples: list[dict[str, Any]], name: str = "Fake GPU") -> None:
        self.samples = list(samples)
        self.name = name
        self.reads = 0

    def read(self) -> dict[str, Any]:
        s = self.samples[min(self.reads, len(self.samples) - 1)]
        self.reads += 1
        return dict(s)

    def close(self) -> None:
        pass


def open_nvml(local_rank: int) -> PynvmlBackend | None:
    """The NVML backend for this rank's GPU, or None (no pynvml, no driver, no GPU)."""
    try:
        return PynvmlBackend(local_rank)
    except Exception:
        return None


class Sampler:
    """Samples ``backend`` (or the CPU when it is None) into ``path`` on a daemon thread."""

    def __init__(self, path: Path, backend: NvmlBackend | None, interval_s: float = 0.1) -> None:
        import psutil

        self.path = Path(path)
        self.backend = backend
        self.interval_s = interval_s
        self.source = "cpu" if backend is None else "nvml"
        self._proc = psutil.Process(os.getpid())
        self._psutil = psutil
        self.recording = False
        """Set by the session while the profiler records: every sample is written then."""
        self._acc: dict[str, list] = {}
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="workbench-sampler", daemon=True)
        self._file = open(self.path, "a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=NVML_COLUMNS, extrasaction="ignore")
        if self._file.tell() == 0:
            self._writer.writeheader()
        # psutil's cpu_percent needs a first call to set its reference point
        psutil.cpu_percent(None)
        self._proc.cpu_percent(None)

    def sample(self) -> dict[str, Any]:
        row: dict[str, Any] = {"ts_unix_s": f"{time.time():.6f}", "source": self.source}
        if self.backend is not None:
            row.update(self.backend.read())
        row["cpu_util_pct"] = self._psutil.cpu_percent(None)
        row["proc_cpu_pct"] = self._proc.cpu_percent(None)
        row["rss_bytes"] = self._proc.memory_info().rss
        return row

    def _accumulate(self, row: dict[str, Any]) -> None:
        acc = self._acc
        for k in DRAINED:
            v = row.get(k)
            if v is not None:
                a = acc.setdefault(k, [0.0, 0])
                a[0] += float(v)
                a[1] += 1
        if row.get("throttle_reasons") is not None:
            acc["throttle_reasons"] = [int(acc.get("throttle_reasons", [0])[0]) | int(row["throttle_reasons"]), 1]

    def drain(self) -> dict[str, Any]:
        """The means of the samples taken since the last drain (``throttle_reasons`` OR-ed); empty
        when none was taken. Called from the training thread: the swap is one assignment."""
        acc, self._acc = self._acc, {}
        return {k: (int(s) if k == "throttle_reasons" else round(s / n, 2)) for k, (s, n) in acc.items() if n}

    def _loop(self) -> None:
        last_flush = last_written = time.monotonic()
        while not self._stop.wait(self.interval_s):
            try:
                row = self.sample()
                self._accumulate(row)
                now = time.monotonic()
                if self.recording or now - self._started < FULL_RATE_S or now - last_written >= SLOW_INTERVAL_S:
                    self._writer.writerow(row)
                    last_written = now
            except OSError:  # the run directory's disk is full: stop sampling, keep training
                return
            except Exception:  # a failing query must never take the training down
                continue
            if time.monotonic() - last_flush > 1.0:
                try:
                    self._file.flush()
                except OSError:
                    return
                last_flush = time.monotonic()

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        try:
            self._file.flush()
            self._file.close()
        except OSError:  # disk full: the rows already on disk stay
            pass
        if self.backend is not None:
            self.backend.close()
