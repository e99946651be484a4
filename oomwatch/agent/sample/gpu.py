"""GPU memory through NVIDIA's NVML (the optional extra ``oomwatch[gpu]``, i.e. ``nvidia-ml-py``).

No GPU is the normal case: without the module, or without the driver, the collector says so once
and returns nothing. With NVML: per device used/total, and per process the GPU memory NVML reports
(so a host kill can be shown next to "GPU memory was at 38%").
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from oomwatch.agent.sample.notices import Notices
from oomwatch.agent.tick import GpuSample


class GpuCollector:
    def __init__(self, notices: Notices) -> None:
        self.notices = notices
        self._nvml: ModuleType | None = None
        self._tried = False

    def _init(self) -> ModuleType | None:
        if self._tried:
            return self._nvml
        self._tried = True
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            self.notices.say("gpu", "no NVML module (pip install 'oomwatch[gpu]' on GPU nodes): no GPU figures")
            return None
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no usable GPU here
            self.notices.say("gpu", f"NVML is installed but unusable ({exc}): no GPU figures")
            return None
        self._nvml = pynvml
        return pynvml

    def collect(self) -> tuple[tuple[GpuSample, ...], dict[int, int]]:
        """(devices, GPU memory used per pid); empty without NVML."""
        nvml = self._init()
        if nvml is None:
            return (), {}
        devices = []
        per_pid: dict[int, int] = {}
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            uuid, name = _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle))
            devices.append(GpuSample(i, uuid, name, mem.used, mem.total))
            for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    procs = getattr(nvml, getter)(handle)
                except Exception:  # not supported on this device/driver
                    continue
                for p in procs:
                    used = getattr(p, "usedGpuMemory", None)
                    if isinstance(used, int):
                        per_pid[p.pid] = per_pid.get(p.pid, 0) + used
        return tuple(devices), per_pid

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):  # shutting down; nothing to do about it
                self._nvml.nvmlShutdown()
            self._nvml = None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
