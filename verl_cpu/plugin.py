"""verl plugin entry point (``verl.plugins`` group, name ``ibpo_cpu``): the CPU platform and ``hf`` rollout.

verl imports this module at ``import verl`` in every process (entry point, or
``VERL_USE_EXTERNAL_MODULES=verl_cpu.plugin``). It must be cheap and safe on a GPU machine:

* always: register the ``cpu`` platform class (inert unless ``VERL_PLATFORM=cpu``; it is never
  auto-detected) and the ``hf`` rollout backend (inert unless ``actor_rollout_ref.rollout.name=hf``).
  The rollout registration is deferred with a post-import hook until verl itself imports its rollout
  modules, so processes that never build a rollout do not pay for importing them;
* only when ``VERL_PLATFORM=cpu``: the gloo backend-string patch (:mod:`.patches`).

Nothing here may import verl's trainer/worker modules at import time: this module is loaded from
inside ``verl/__init__.py``, before those exist.
"""

from __future__ import annotations

import os
from types import ModuleType

from verl_cpu import platform_cpu  # noqa: F401  (registers PlatformCPU as "cpu")
from verl_cpu.import_hooks import when_imported

ROLLOUT_NAME = "hf"
HF_ADAPTER_FQN = "verl_cpu.hf_rollout.HFServerAdapter"


def cpu_platform_selected() -> bool:
    """True when verl was told to use the CPU platform (``VERL_PLATFORM=cpu``)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == platform_cpu.PLATFORM_NAME


def _load_hf_replica() -> type:
    from verl_cpu.hf_rollout import HFReplica

    return HFReplica


def _register_adapter(rollout_base: ModuleType) -> None:
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = HF_ADAPTER_FQN


def _register_replica(rollout_replica: ModuleType) -> None:
    rollout_replica.RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_hf_replica)


def register_hf_rollout() -> None:
    """Register the ``hf`` backend in verl's two rollout registries (now, or when they are imported)."""
    when_imported("verl.workers.rollout.base", _register_adapter)
    when_imported("verl.workers.rollout.replica", _register_replica)


def apply_cpu_patches() -> None:
    """Install the gloo backend-string patch on ``verl.utils.distributed`` (now, or when imported)."""
    from verl_cpu.patches import patch_distributed_module

    when_imported("verl.utils.distributed", patch_distributed_module)


register_hf_rollout()
if cpu_platform_selected():
    apply_cpu_patches()
