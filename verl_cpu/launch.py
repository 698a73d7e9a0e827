"""Environment, Hydra overrides and a hang-proof runner for verl runs on a CPU-only machine.

Nothing here is specific to ``verl.trainer.main_ppo``: any entry point that composes verl's
``ppo_trainer`` config (e.g. the recipe launcher ``python -m recipe.main method=ibpo``) takes the same
environment and overrides::

    env = {**os.environ, **cpu_env(metrics_path=...)}
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *cpu_overrides(model, train, val), *algorithm_overrides]
    result = run_with_timeout(cmd, env, timeout_s=600, log_path=...)

Why each setting exists is recorded in ``docs/verl_on_cpu.md`` (the row ids below).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

PLUGIN_MODULE = "verl_cpu.plugin"
RUN_MARKER_ENV = "IBPO_CPU_RUN_ID"  # inherited by every process of a run; used to find and stop them all
# Ray refuses to start with fake GPUs when CUDA_VISIBLE_DEVICES is set to an empty list (notes a4).
UNSET_ENV = ("CUDA_VISIBLE_DEVICES",)


def cpu_env(metrics_path: Optional[str | os.PathLike] = None, extra_modules: Sequence[str] = ()) -> dict[str, str]:
    """Environment variables for a verl run on CPU (merge them over ``os.environ``).

    * ``VERL_PLATFORM=cpu`` selects the plugin's platform (notes a6); ``VERL_ENGINE_DEVICE=cuda`` lets
      verl's engine registry pick its FSDP engine, which is registered for cuda/npu only (b2).
    * ``VERL_USE_EXTERNAL_MODULES`` loads the plugin in every process even where the ``verl.plugins``
      entry point is not installed; ``extra_modules`` are appended (comma-separated, in order).
    * ``metrics_path`` sets ``VERL_FILE_LOGGER_PATH`` for ``trainer.logger=[...,file]`` (JSON lines).
    """
    env = {
        "VERL_PLATFORM": "cpu",
        "VERL_ENGINE_DEVICE": "cuda",
        "VERL_USE_EXTERNAL_MODULES": ",".join([PLUGIN_MODULE, *extra_modules]),
        "TORCH_COMPILE_DISABLE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "PYTHONUNBUFFERED": "1",
        "RAY_DEDUP_LOGS": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    if metrics_path is not None:
        env["VERL_FILE_LOGGER_PATH"] = str(metrics_path)
    return env


def process_env(base: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """``base`` updated with ``overrides``, minus the variables that break a fake-GPU Ray start."""
    env = {k: v for k, v in base.items() if k not in UNSET_ENV}
    env.update(overrides)
    return env


def cpu_overrides(
    model_path: str | os.PathLike,
    train_file: str | os.PathLike,
    val_file: str | os.PathLike,
    reward_path: Optional[str] = "pkg://reward_fns",
    reward_name: str = "compute_score",
    *,
    total_training_steps: int = 2,
    train_batch_size: int = 4,
    rollout_n: int = 4,
    max_prompt_length: int = 64,
    max_response_length: int = 16,
    n_workers: int = 1,
    ray_num_cpus: int = 16,
    loggers: Sequence[str] = ("console", "file"),
) -> list[str]:
    """Hydra overrides for a tiny run of a verl ``ppo_trainer``-based entry point on CPU.

    Algorithm choices (estimator, loss mode, learning rate, KL) are left to the caller. ``n_workers``
    FSDP2 ranks over gloo each get one fake Ray GPU and one ``hf`` rollout replica.
    """
    if train_batch_size * rollout_n % n_workers:
        raise ValueError(
            f"train_batch_size*rollout_n={train_batch_size * rollout_n} must divide by n_workers={n_workers}"
        )
    micro = max(1, train_batch_size * rollout_n // n_workers)
    overrides = [
        f"data.train_files={train_file}",
        f"data.val_files={val_file}",
        f"data.train_batch_size={train_batch_size}",
        f"data.max_prompt_length={max_prompt_length}",
        f"data.max_response_length={max_response_length}",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={train_batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.n={rollout_n}",
        *cpu_device_overrides(n_workers, ray_num_cpus),
        f"trainer.n_gpus_per_node={n_workers}",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={total_training_steps}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.logger=[{','.join(loggers)}]",
    ]
    if reward_path:
        overrides += [
            f"reward.custom_reward_function.path={reward_path}",
            f"reward.custom_reward_function.name={reward_name}",
        ]
    return overrides


def cpu_device_overrides(ray_gpus: int = 1, ray_num_cpus: int | None = None) -> list[str]:
    """The Hydra overrides that move a run, whatever its sizes, from GPUs to CPU (``ray_gpus`` fake Ray GPUs, one
    per FSDP2 rank): what :func:`cpu_overrides` adds to a tiny run, and what a launch script appends under
    ``RECIPE_DEVICE=cpu`` (``recipe/common/launch_env.sh``, ``python -m verl_cpu.launch overrides``).
    ``ray_num_cpus`` defaults to 16 for one rank and 3 more per further rank (each rank's bundle asks for 3: a5);
    16 for 8 ranks leaves Ray waiting for ``{'GPU': 8.0, 'CPU': 24.0}`` forever."""
    ray_num_cpus = 13 + 3 * ray_gpus if ray_num_cpus is None else ray_num_cpus
    return [
        # flash_attention_2 is the default and needs CUDA (notes b3).
        "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        # FSDP1 needs an accelerator for sync_module_states (b4, c3); torch.compile costs ~15 s (c4).
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "critic.strategy=fsdp2",
        "actor_rollout_ref.actor.use_torch_compile=False",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile=False",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        # One agent-loop and one reward worker: the defaults (8 each) cost ~50 s of start-up (b7).
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        "trainer.device=cpu",
        # V1 trainer: 8 storage actors of 1 logical CPU each deadlock a small Ray cluster (c1).
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        # Logical CPUs (may exceed the physical count): each placement bundle asks for 3 (a5).
        f"ray_kwargs.ray_init.num_cpus={ray_num_cpus}",
        # verl's resource pools are hard-coded use_gpu=True: declare fake Ray GPUs (a3).
        f"++ray_kwargs.ray_init.num_gpus={ray_gpus}",
    ]


# ---------------------------------------------------------------------------------------------
# Running a command so that a hang cannot outlive its timeout
# ---------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """Outcome of :func:`run_with_timeout`."""

    returncode: int
    log_path: Path
    timed_out: bool
    wall_s: float
    # Peak over the samples of the RSS summed over the run's own processes (the driver, Ray's daemons and
    # workers, found by the run marker): pages shared between processes count once per process.
    peak_tree_rss_bytes: int
    # Peak rise of the whole machine's MemTotal - MemAvailable over the run (includes other programs).
    peak_sys_used_delta_bytes: int
    leftover_pids: list[int]  # run processes still alive after the driver exited (then killed)

    def log_tail(self, chars: int = 4000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-chars:]


def _run_processes(marker: str) -> list:
    """Live processes whose environment carries ``RUN_MARKER_ENV=marker`` (this run's tree, reparented or not)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(RUN_MARKER_ENV) == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def _alive(proc) -> bool:
    """Running and not a zombie (a zombie is dead, only waiting to be reaped)."""
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _terminate(procs: list, grace_s: float) -> None:
    """SIGTERM the given processes, then SIGKILL those alive after ``grace_s``."""
    import psutil

    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


def _sys_used_bytes() -> int:
    import psutil

    vm = psutil.virtual_memory()
    return int(vm.total - vm.available)


def _tree_rss(procs: list) -> int:
    """The summed resident memory of ``procs`` (those gone meanwhile count 0)."""
    import psutil

    rss = 0
    for proc in procs:
        try:
            rss += proc.memory_info().rss
        except psutil.Error:
            pass
    return rss


def _stop_run(driver: subprocess.Popen, marker: str, grace_s: float) -> None:
    """SIGTERM the driver's process group, stop every process carrying ``marker``, then reap the driver."""
    try:
        os.killpg(driver.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    _terminate(_run_processes(marker), grace_s)
    try:
        driver.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        driver.kill()
        driver.wait()


def _reap_leftovers(marker: str, settle_s: float, grace_s: float) -> list[int]:
    """The pids of the run's processes still alive ``settle_s`` after the driver ended, stopped."""
    deadline = time.monotonic() + settle_s
    leftovers = _run_processes(marker)
    while leftovers and time.monotonic() < deadline:
        time.sleep(0.5)
        leftovers = [p for p in leftovers if _alive(p)]
    if leftovers:
        _terminate(leftovers, grace_s)
    return [p.pid for p in leftovers]


def run_with_timeout(
    cmd: Sequence[str],
    env: Mapping[str, str],
    timeout_s: float,
    log_path: Optional[str | os.PathLike] = None,
    cwd: Optional[str | os.PathLike] = None,
    grace_s: float = 10.0,
    sample_every_s: float = 1.0,
    settle_s: float = 5.0,
    on_tick: Optional[Callable[[float], None]] = None,
) -> RunResult:
    """Run ``cmd`` in its own process group with stdout+stderr to ``log_path``; kill everything on timeout.

    Every process of the run (the driver, Ray's daemons and workers, even after they are reparented)
    is identified by a unique ``IBPO_CPU_RUN_ID`` environment marker and stopped by pid: on timeout,
    and after a normal exit for any process still alive ``settle_s`` later (Ray's daemons and workers
    normally follow the driver down within a few seconds). Peak memory is sampled meanwhile, and
    ``on_tick(elapsed_s)`` (e.g. a progress printer) is called after every sample and once after the exit.
    """
    marker = uuid.uuid4().hex
    log = Path(log_path) if log_path is not None else Path(f"/tmp/ibpo_cpu_run_{marker[:8]}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    run_env = {**env, RUN_MARKER_ENV: marker}
    sys_base = _sys_used_bytes()
    peak_rss, peak_sys = 0, 0
    start = time.monotonic()
    timed_out = False
    with open(log, "wb") as out:
        driver = subprocess.Popen(
            list(cmd), env=run_env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        while True:
            try:
                driver.wait(timeout=sample_every_s)
                break
            except subprocess.TimeoutExpired:
                pass
            peak_rss = max(peak_rss, _tree_rss(_run_processes(marker)))
            peak_sys = max(peak_sys, _sys_used_bytes() - sys_base)
            if on_tick is not None:
                on_tick(time.monotonic() - start)
            if time.monotonic() - start > timeout_s:
                timed_out = True
                _stop_run(driver, marker, grace_s)
                break
    wall = time.monotonic() - start
    if on_tick is not None:
        on_tick(wall)
    leftover_pids = _reap_leftovers(marker, 0.0 if timed_out else settle_s, grace_s)
    if timed_out:
        with open(log, "ab") as out:
            out.write(f"\n[run_with_timeout] killed after {timeout_s:.0f} s\n".encode())
    return RunResult(
        returncode=124 if timed_out else driver.returncode,
        log_path=log,
        timed_out=timed_out,
        wall_s=wall,
        peak_tree_rss_bytes=peak_rss,
        peak_sys_used_delta_bytes=peak_sys,
        leftover_pids=leftover_pids,
    )


def read_metrics_jsonl(path: str | os.PathLike) -> dict[int, dict[str, float]]:
    """Metrics written by verl's ``file`` logger (``{"step": N, "data": {...}}`` per line), by step."""
    by_step: dict[int, dict[str, float]] = {}
    for line_no, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            by_step.setdefault(int(record["step"]), {}).update(record["data"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}, line {line_no}: not a verl file-logger record ({exc})") from exc
    return by_step


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m verl_cpu.launch env`` prints :func:`cpu_env`'s variables (``NAME=value`` lines);
    ``python -m verl_cpu.launch overrides [--ray-gpus N]`` prints :func:`cpu_device_overrides` (one a line)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("what", choices=("env", "overrides"))
    parser.add_argument("--ray-gpus", type=int, default=1, help="fake Ray GPUs: one per FSDP2 rank of the run")
    args = parser.parse_args(argv)
    lines = ([f"{k}={v}" for k, v in cpu_env().items()] if args.what == "env"
             else cpu_device_overrides(args.ray_gpus))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
