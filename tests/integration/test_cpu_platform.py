"""The CPU platform, the gloo patch, the post-import hooks, and loading through verl's plugin hooks.

The plugin tests run in fresh subprocesses: what matters is what ``import verl`` does in a new
process (entry-point loading, deferred registration, patches only when ``VERL_PLATFORM=cpu``).
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from verl_cpu.import_hooks import pending_hooks, when_imported
from verl_cpu.patches import dedupe_backend_string


def _run_fresh(code: str, env_overrides: dict[str, str], timeout: int = 120) -> dict:
    """Run ``code`` in a fresh interpreter (from /tmp, so only installed packages are visible); parse its last line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_")}
    env.update({"HF_HUB_OFFLINE": "1", **env_overrides})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd="/tmp",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------
# Pure pieces


@pytest.mark.parametrize(
    "backend, expected",
    [
        ("cpu:gloo,cpu:gloo", "gloo"),
        ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"),
        ("gloo", "gloo"),
        ("cpu:gloo", "cpu:gloo"),
        ("cpu:gloo, cuda:nccl, cuda:nccl", "cpu:gloo,cuda:nccl"),
    ],
)
def test_dedupe_backend_string(backend, expected):
    assert dedupe_backend_string(backend) == expected


def test_dedupe_backend_string_rejects_conflicts():
    with pytest.raises(ValueError, match="two backends"):
        dedupe_backend_string("cpu:gloo,cpu:mpi")


def test_when_imported_runs_once_after_the_module_executed(tmp_path, monkeypatch):
    (tmp_path / "ibpo_hook_probe_mod.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported("ibpo_hook_probe_mod", lambda m: seen.append(m.VALUE + 1))
    assert "ibpo_hook_probe_mod" in pending_hooks() and seen == []
    module = importlib.import_module("ibpo_hook_probe_mod")
    assert seen == [42] and "ibpo_hook_probe_mod" not in pending_hooks()
    assert module.__spec__.loader.__class__.__name__ == "SourceFileLoader"  # real loader restored
    importlib.reload(module)
    assert seen == [42]  # one-shot
    when_imported("ibpo_hook_probe_mod", lambda m: seen.append("now"))  # already imported: runs at once
    assert seen == [42, "now"]
    sys.modules.pop("ibpo_hook_probe_mod", None)


def test_cpu_device_module_covers_what_verl_calls():
    import torch

    from verl_cpu.platform_cpu import CPU_DEVICE_MODULE as dev
    from verl_cpu.platform_cpu import PlatformCPU

    free, total = dev.mem_get_info()
    assert 0 < free <= total
    current = dev.memory_allocated()
    assert dev.max_memory_allocated() >= current > 0
    torch.manual_seed(3)
    state = dev.get_rng_state()
    a = torch.rand(3)
    dev.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
    for name in ("empty_cache", "synchronize", "ipc_collect", "reset_peak_memory_stats"):
        getattr(dev, name)()
    dev.set_device(0)
    assert (
        dev.current_device() == "cpu" and dev.device_count() == 1 and dev.get_device_properties(0).total_memory == total
    )
    assert dev.Stream is torch.cpu.Stream  # falls back to torch.cpu
    with pytest.raises(AttributeError, match="no attribute 'nvtx'"):
        dev.nvtx  # noqa: B018
    platform = PlatformCPU()
    assert (platform.device_name, platform.communication_backend_name(), platform.ray_resource_name()) == (
        "cpu",
        "gloo",
        "GPU",
    )
    assert platform.current_device() == "cpu" and platform.ray_resource_options(1) == {"num_gpus": 1}
    assert not platform.is_platform_available(use_smi_check=True)  # never auto-detected


# ------------------------------------------------------------------------------------------------
# Fresh processes: plugin loading through verl's hooks


def test_plugin_entry_point_is_declared():
    from importlib.metadata import entry_points

    values = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert values.get("verl_cpu") == "verl_cpu.plugin", values


DEFAULT_PROCESS_PROBE = """
import json, sys, time
t0 = time.perf_counter()
import verl
import_s = time.perf_counter() - t0
from verl.plugin.platform import PlatformRegistry, platform_manager
obs = {
    "plugin_loaded": "verl_cpu.plugin" in sys.modules,
    "platforms": list(PlatformRegistry.registered_names()),
    "rollout_modules_imported_by_import_verl": "verl.workers.rollout.base" in sys.modules,
    "platform_resolved_by_plugin": platform_manager._current_platform is not None,
    "import_s": import_s,
}
import verl.utils.distributed as dist
obs["dist_patched"] = getattr(dist.initialize_global_process_group_ray, "__ibpo_cpu_patched__", False)
from verl.workers.rollout.base import _ROLLOUT_REGISTRY, get_rollout_class
from verl.workers.rollout.replica import get_rollout_replica_class
obs["adapter"] = get_rollout_class("hf", "async").__qualname__
obs["replica"] = get_rollout_replica_class("hf").__qualname__
obs["vllm_still_registered"] = ("vllm", "async") in _ROLLOUT_REGISTRY
print(json.dumps(obs))
"""


def test_import_verl_registers_without_side_effects():
    obs = _run_fresh(DEFAULT_PROCESS_PROBE, {})
    assert obs["plugin_loaded"], "verl did not load the verl_cpu entry point"
    assert "cpu" in obs["platforms"]
    # Registering must not pick a platform, and the rollout registration is deferred so that `import verl`
    # stays cheap; either failing means some verl.plugins entry point now does it at import time.
    assert not obs["platform_resolved_by_plugin"], "a plugin resolved verl's platform during `import verl`"
    assert not obs["rollout_modules_imported_by_import_verl"], "a plugin imported verl's rollout modules eagerly"
    assert not obs["dist_patched"]  # no monkey patch without VERL_PLATFORM=cpu
    assert (obs["adapter"], obs["replica"]) == ("HFServerAdapter", "HFReplica")
    assert obs["vllm_still_registered"]


CPU_PROCESS_PROBE = """
import json, os, sys
import verl
from verl.utils.device import get_device_id, get_device_name, get_nccl_backend, get_resource_name, get_torch_device
from verl.utils import distributed as dist
import torch, torch.distributed
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1] if len(sys.argv) > 1 else os.environ["PROBE_PORT"],
                  RANK="0", WORLD_SIZE="1")
dist.initialize_global_process_group_ray(timeout_second=60)
t = torch.ones(3)
torch.distributed.all_reduce(t)
from verl.workers.rollout.replica import get_rollout_replica_class
print(json.dumps({
    "device": get_device_name(), "backend": get_nccl_backend(), "resource": get_resource_name(),
    "device_id": get_device_id(), "torch_device": type(get_torch_device()).__name__,
    "pg_backend": torch.distributed.get_backend(), "all_reduce": t.tolist(),
    "patched": dist.initialize_global_process_group_ray.__ibpo_cpu_patched__,
    "replica": get_rollout_replica_class("hf").__qualname__,
}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("loaded_by", ["entry_point", "external_modules_env"])
def test_verl_platform_cpu_selects_platform_and_patches_gloo(loaded_by):
    env = {"VERL_PLATFORM": "cpu", "PROBE_PORT": str(_free_port())}
    if loaded_by == "external_modules_env":  # the path cpu_env() also sets, for installs without the entry point
        env.update(VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="verl_cpu.plugin")
    obs = _run_fresh(CPU_PROCESS_PROBE, env)
    assert (obs["device"], obs["backend"], obs["resource"], obs["device_id"]) == ("cpu", "gloo", "GPU", "cpu")
    assert obs["torch_device"] == "CPUDeviceModule"
    assert obs["patched"] and obs["pg_backend"] == "gloo" and obs["all_reduce"] == [1.0, 1.0, 1.0]
    assert obs["replica"] == "HFReplica"
