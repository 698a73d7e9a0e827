"""A ``cpu`` platform for the pinned verl's ``PlatformRegistry`` (selected with ``VERL_PLATFORM=cpu``).

The pinned verl registers only accelerator platforms; on a machine without one, detection falls back to
``nvidia`` and the workers fail in ``init_process_group("cpu:gloo,cuda:nccl")``. This platform makes
the whole stack run on the host CPU:

* ``device_name="cpu"`` and ``current_device()="cpu"``, so ``model.to(get_device_id())`` and
  ``init_device_mesh(get_device_name(), ...)`` stay on the CPU;
* ``communication_backend_name()="gloo"``;
* ``ray_resource_name()="GPU"``: verl's resource pools are hard-coded ``use_gpu=True``, so the run
  declares fake Ray GPUs (``ray_init.num_gpus``) and every "GPU" worker lands on one of them;
* ``device_module`` is :data:`CPU_DEVICE_MODULE`, a stand-in for ``torch.cuda`` with the functions
  verl calls on ``get_torch_device()`` (memory counters report this process's RSS).

Registering the class is inert: verl only instantiates it when ``VERL_PLATFORM=cpu``.
"""

from __future__ import annotations

import os
import resource
import types
from contextlib import contextmanager
from typing import Any, Optional

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


def _rss_bytes() -> int:
    """Resident set size of this process in bytes (what 'allocated device memory' means on CPU)."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def _peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes (Linux reports ``ru_maxrss`` in KiB).

    The kernel updates the high-water mark lazily, so the current RSS can be briefly higher.
    """
    return max(int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, _rss_bytes())


class _CPUDeviceProperties:
    """The subset of ``torch.cuda.get_device_properties`` verl reads (``name``, ``total_memory``)."""

    def __init__(self) -> None:
        import psutil

        self.name = "cpu"
        self.total_memory = int(psutil.virtual_memory().total)
        self.multi_processor_count = os.cpu_count() or 1


class CPUDeviceModule(types.ModuleType):
    """Stand-in for ``torch.cuda`` on the CPU platform.

    Implements what the pinned verl calls on ``get_torch_device()`` (``empty_cache``, ``synchronize``,
    ``mem_get_info``, RNG state, memory counters, ``set_device``...). Anything else is looked up on
    ``torch.cpu`` (``Stream``, ``Event``, ``stream``, ``current_stream``), and a missing name raises
    ``AttributeError`` naming this module rather than silently doing nothing.
    """

    def __init__(self) -> None:
        super().__init__("ibpo_cpu_device", "torch.cuda stand-in for the verl cpu platform")
        self.__file__ = __file__  # else __getattr__ would report torch.cpu's file

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(torch.cpu, name)
        except AttributeError:
            raise AttributeError(
                f"CPU device stand-in (verl_cpu.platform_cpu) has no attribute {name!r}"
            ) from None

    # -- device selection: there is one CPU "device"; verl passes Ray's fake GPU index here.
    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def set_device(device: Any) -> None:
        """No-op: the process always computes on the host CPU."""

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_device_properties(device: Any = None) -> _CPUDeviceProperties:
        return _CPUDeviceProperties()

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """No-op: CPU kernels are synchronous."""

    # -- memory
    @staticmethod
    def empty_cache() -> None:
        """No-op: there is no caching allocator to release on CPU."""

    @staticmethod
    def ipc_collect() -> None:
        """No-op: no CUDA IPC on CPU."""

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        """No-op: the host memory is not partitioned."""

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """``(free, total)`` host memory in bytes, like ``torch.cuda.mem_get_info``."""
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return _rss_bytes()

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return _rss_bytes()

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return _peak_rss_bytes()

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return _peak_rss_bytes()

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        """No-op: the kernel's peak RSS cannot be reset."""

    @staticmethod
    def reset_accumulated_memory_stats(device: Any = None) -> None:
        """No-op: no allocator statistics on CPU."""

    # -- RNG: the CPU generator is the device generator here.
    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        torch.manual_seed(seed)


CPU_DEVICE_MODULE = CPUDeviceModule()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl platform for the host CPU: gloo collectives, fake Ray GPUs, no profiler, no IPC."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: a machine with an accelerator must keep its own platform, and a
        # machine without one only gets this platform when asked for it (VERL_PLATFORM=cpu).
        return False

    def current_device(self) -> str:  # type: ignore[override]  # verl passes it to .to(device=...)
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        """No-op: there is one host CPU device."""

    def synchronize(self, device_index: Optional[int] = None) -> None:
        """No-op: CPU kernels are synchronous."""

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        """No-op: the CUDA caching-allocator settings (expandable segments) do not exist on CPU."""

    def empty_cache(self) -> None:
        """No-op: no caching allocator on CPU."""

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets CUDA_VISIBLE_DEVICES for actors holding (fake) GPU resources; verl's workers read it
        # to derive LOCAL_RANK, which must stay consistent with the "GPU" resource name below.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        """No-op: no device profiler."""

    def profiler_stop(self) -> None:
        """No-op: no device profiler."""

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
