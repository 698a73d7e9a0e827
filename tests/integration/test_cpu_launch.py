"""The CPU launcher: environment, Hydra overrides against verl's real config, the hang-proof runner."""

from __future__ import annotations

import json
import sys
import time

import psutil
import pytest

from verl_cpu.launch import (
    PLUGIN_MODULE,
    cpu_env,
    cpu_overrides,
    process_env,
    read_metrics_jsonl,
    run_with_timeout,
)


def test_cpu_env_selects_platform_engine_and_plugin():
    env = cpu_env(metrics_path="/x/m.jsonl", extra_modules=["recipe.ibpo.verl_plugin"])
    assert env["VERL_PLATFORM"] == "cpu" and env["VERL_ENGINE_DEVICE"] == "cuda"
    assert env["VERL_USE_EXTERNAL_MODULES"] == f"{PLUGIN_MODULE},recipe.ibpo.verl_plugin"
    assert env["VERL_FILE_LOGGER_PATH"] == "/x/m.jsonl" and env["HF_HUB_OFFLINE"] == "1"
    assert "VERL_FILE_LOGGER_PATH" not in cpu_env()
    assert all(isinstance(v, str) for v in env.values())


def test_process_env_drops_cuda_visible_devices():
    env = process_env({"CUDA_VISIBLE_DEVICES": "", "PATH": "/bin", "VERL_PLATFORM": "x"}, cpu_env())
    assert "CUDA_VISIBLE_DEVICES" not in env and env["PATH"] == "/bin" and env["VERL_PLATFORM"] == "cpu"


def test_cpu_overrides_compose_with_verls_trainer_config():
    from hydra import compose, initialize_config_module

    overrides = cpu_overrides("/m", "/d/train.parquet", "/d/val.parquet", n_workers=2, train_batch_size=4, rollout_n=4)
    with initialize_config_module("verl.trainer.config", version_base=None):
        cfg = compose("ppo_trainer", overrides=overrides)
    arr = cfg.actor_rollout_ref
    assert arr.rollout.name == "hf" and arr.actor.strategy == "fsdp2" and arr.ref.strategy == "fsdp2"
    assert arr.model.override_config.attn_implementation == "sdpa"
    assert not arr.actor.fsdp_config.use_torch_compile and not arr.actor.use_torch_compile
    assert arr.actor.ppo_micro_batch_size_per_gpu == 8 and arr.rollout.agent.num_workers == 1
    assert cfg.ray_kwargs.ray_init.num_gpus == 2 and cfg.trainer.n_gpus_per_node == 2
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.reward.custom_reward_function.path == "pkg://reward_fns"
    assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1
    assert "reward.custom_reward_function.path" not in " ".join(cpu_overrides("/m", "/t", "/v", reward_path=None))


def test_cpu_overrides_reject_batches_that_do_not_split_over_workers():
    with pytest.raises(ValueError, match="must divide by n_workers=3"):
        cpu_overrides("/m", "/t", "/v", train_batch_size=4, rollout_n=1, n_workers=3)


def test_run_with_timeout_success_captures_log(tmp_path):
    code = (
        "import sys, time; print('hello'); print('err', file=sys.stderr)\nx = bytearray(200 * 2**20); time.sleep(2.5)"
    )
    result = run_with_timeout([sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}, 60, tmp_path / "ok.log")
    assert result.returncode == 0 and not result.timed_out and result.leftover_pids == []
    assert "hello" in result.log_tail() and "err" in result.log_tail()
    assert result.peak_tree_rss_bytes > 150 * 2**20  # the 200 MiB buffer was seen by the sampler


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_run_with_timeout_kills_a_hung_process_tree(tmp_path):
    # The driver starts a child in its group and a grandchild that escapes into its own session, then hangs.
    code = (
        "import subprocess, time\n"
        "a = subprocess.Popen(['sleep', '300'])\n"
        "b = subprocess.Popen(['sleep', '301'], start_new_session=True)\n"
        "print(a.pid, b.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    start = time.monotonic()
    result = run_with_timeout(
        [sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}, 3, tmp_path / "hang.log", grace_s=2
    )
    assert result.timed_out and result.returncode == 124 and time.monotonic() - start < 30
    assert "killed after 3 s" in result.log_tail()
    pids = [int(x) for x in result.log_tail().split()[:2]]
    assert all(_gone(pid) for pid in pids), pids


def test_run_with_timeout_stops_processes_left_behind_after_exit(tmp_path):
    code = "import subprocess; p = subprocess.Popen(['sleep', '302'], start_new_session=True); print(p.pid)"
    result = run_with_timeout(
        [sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}, 60, tmp_path / "orphan.log", grace_s=2, settle_s=1
    )
    orphan_pid = int(result.log_tail().split()[0])
    assert result.returncode == 0 and result.leftover_pids == [orphan_pid]
    assert _gone(orphan_pid)


def test_read_metrics_jsonl_reads_verls_file_logger(tmp_path, monkeypatch):
    import numpy as np
    from verl.utils.tracking import FileLogger

    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("proj", "exp")
    logger.log({"actor/grad_norm": np.float64(0.5), "critic/score/mean": 0.25}, step=1)
    logger.log({"actor/grad_norm": 0.75}, step=2)
    logger.finish()
    assert read_metrics_jsonl(path) == {
        1: {"actor/grad_norm": 0.5, "critic/score/mean": 0.25},
        2: {"actor/grad_norm": 0.75},
    }
    path.write_text(json.dumps({"step": 1, "data": {}}) + "\nnot json\n")
    with pytest.raises(ValueError, match="metrics.jsonl, line 2"):
        read_metrics_jsonl(path)
