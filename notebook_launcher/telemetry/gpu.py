"""Each rank's GPU, read from the kernel through NVML (``nvidia-ml-py``): utilisation, memory in use,
power and whether its clocks are held down (heat, power cap). NVML is the driver's management
library, not CUDA: reading it leaves CUDA uninitialised in the kernel, so the kernel can still fork.

A rank's GPU is the one where NVML lists the rank's process (it holds a CUDA context there); until
it has one, or where NVML lists processes of another PID namespace (a container), the rank's local
index among the visible devices is taken (``CUDA_VISIBLE_DEVICES``, by index or UUID). Memory is the
device's in use, as ``nvidia-smi`` shows it. Without NVML (no driver, no library, a CPU machine) the
sampler gives nothing and tries no more.

Example (on a GPU machine, in the kernel)::

    sampler = GpuSampler()
    sampler.sample({0: rank_pid})   # {0: {"GPU %": 97.0, "GPU memory MB": 31022.0, "GPU power W": 612.4,
                                    #      "GPU throttled": 0.0}}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .names import GPU_MEMORY, GPU_POWER, GPU_THROTTLED, GPU_UTIL

__all__ = ["GpuSampler", "BENIGN_REASONS"]

BENIGN_REASONS = 0x1 | 0x2  # idle, and clocks an administrator set: not a slowdown of the work


class GpuSampler:
    """``sample(pids)``: {rank: {"GPU %", "GPU memory MB", "GPU power W", "GPU throttled"}};
    ``nvml``: the NVML module (``pynvml`` by default; a test gives a stand-in)."""

    def __init__(self, nvml: Any = None, environ: Mapping[str, str] = os.environ) -> None:
        self._nvml = nvml
        self._environ = environ
        self._ready: bool | None = None  # None: not tried yet
        self._handles: list[Any] = []
        self._visible: list[Any] = []  # the devices the ranks see, in their order

    def _start(self) -> bool:
        if self._ready is None:
            try:
                if self._nvml is None:
                    import pynvml

                    self._nvml = pynvml
                self._nvml.nvmlInit()
                count = self._nvml.nvmlDeviceGetCount()
                self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
                self._visible = self._visible_devices()
                self._ready = count > 0
            except Exception:  # no NVML library, no driver, no device: nothing to read
                self._ready = False
        return self._ready

    def sample(self, pids: Mapping[int, int]) -> dict[int, dict[str, float]]:
        """The figures of each rank's GPU now (``pids``: rank → its process)."""
        if not pids or not self._start():
            return {}
        owners = self._owners()
        fallback = self._visible
        samples = {}
        for local, (rank, pid) in enumerate(sorted(pids.items())):
            handle = owners.get(pid, fallback[local] if local < len(fallback) else None)
            if handle is None:
                continue
            try:
                samples[rank] = self._read(handle)
            except Exception:  # a device gone or refusing one query: that rank has no sample this time
                continue
        return samples

    def _read(self, handle: Any) -> dict[str, float]:
        nvml = self._nvml
        # NVML 12.2 renamed throttle reasons "clocks event reasons"; older bindings have the old name only
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons = reasons or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return {
            GPU_UTIL: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            GPU_MEMORY: round(nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20, 1),
            GPU_POWER: round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, 1),
            GPU_THROTTLED: 1.0 if reasons(handle) & ~BENIGN_REASONS else 0.0,
        }

    def _owners(self) -> dict[int, Any]:
        """PID → the device where NVML lists it (the last one, where a process has several)."""
        owners = {}
        for handle in self._handles:
            try:
                processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception:
                continue
            for process in processes:
                owners[process.pid] = handle
        return owners

    def _visible_devices(self) -> list[Any]:
        """The devices the ranks see, in their order (``CUDA_VISIBLE_DEVICES``, else all)."""
        listed = self._environ.get("CUDA_VISIBLE_DEVICES")
        if listed is None:
            return list(self._handles)
        visible = []
        for item in filter(None, (part.strip() for part in listed.split(","))):
            try:
                if item.isdigit():
                    visible.append(self._handles[int(item)])
                else:
                    visible.append(self._nvml.nvmlDeviceGetHandleByUUID(item))
            except Exception:
                break  # CUDA stops at the first device it cannot find, and so does the order here
        return visible
