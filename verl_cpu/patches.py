"""The one monkey patch the CPU platform needs: a valid process-group backend string.

The pinned verl builds the backend as ``f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"``
(``verl/utils/distributed.py``). On the CPU platform that is ``"cpu:gloo,cpu:gloo"``, which
``torch.distributed`` rejects (``Duplicate device type cpu in backend string``). The patch wraps
``initialize_global_process_group_ray`` and ``initialize_global_process_group`` so that the string is
de-duplicated first. It is applied only when ``VERL_PLATFORM=cpu`` (see :mod:`.plugin`).
"""

from __future__ import annotations

import functools
import os
from datetime import timedelta
from types import ModuleType

_PATCHED_ATTR = "__ibpo_cpu_patched__"


def dedupe_backend_string(backend: str) -> str:
    """Collapse a ``device:backend`` list with repeated devices into one valid entry per device.

    ``"cpu:gloo,cpu:gloo"`` -> ``"gloo"``; ``"cpu:gloo,cuda:nccl"`` is returned unchanged. A string
    naming two different backends for one device is an error, not something to guess about.
    """
    entries = [part.strip() for part in backend.split(",") if part.strip()]
    if len(entries) <= 1 or not all(":" in e for e in entries):
        return backend
    by_device: dict[str, str] = {}
    for entry in entries:
        device, name = (s.strip() for s in entry.split(":", 1))
        if by_device.setdefault(device, name) != name:
            raise ValueError(f"backend string {backend!r} gives device {device!r} two backends")
    if set(by_device.values()) == {"gloo"} and list(by_device) == ["cpu"]:
        return "gloo"
    return ",".join(f"{d}:{n}" for d, n in by_device.items())


def patch_distributed_module(dist_module: ModuleType) -> None:
    """Wrap verl's process-group initialisers in ``verl.utils.distributed`` (idempotent)."""
    original_ray = dist_module.initialize_global_process_group_ray
    if getattr(original_ray, _PATCHED_ATTR, False):
        return

    @functools.wraps(original_ray)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        default = f"cpu:gloo,{dist_module.get_device_name()}:{dist_module.get_nccl_backend()}"
        return original_ray(timeout_second=timeout_second, backend=dedupe_backend_string(backend or default))

    def initialize_global_process_group(timeout_second=36000):
        # RECIPE: the pinned verl's text (recipe/common/upstream/manifest.toml; torchrun entry points, e.g. SFT)
        # RECIPE: with a valid backend string, no set_device on CPU, verl's module globals bound here
        import torch.distributed  # RECIPE

        get_device_name, get_nccl_backend = dist_module.get_device_name, dist_module.get_nccl_backend  # RECIPE
        backend = f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"
        torch.distributed.init_process_group(
            backend=dedupe_backend_string(backend),  # RECIPE
            timeout=timedelta(seconds=timeout_second),
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )
        local_rank = int(os.environ["LOCAL_RANK"])
        rank = int(os.environ["RANK"])
        world_size = int(os.environ["WORLD_SIZE"])

        return local_rank, rank, world_size

    for fn in (initialize_global_process_group_ray, initialize_global_process_group):
        setattr(fn, _PATCHED_ATTR, True)
    dist_module.initialize_global_process_group_ray = initialize_global_process_group_ray
    dist_module.initialize_global_process_group = initialize_global_process_group
