"""The test tree's third method (tests/methods/scaled_advantage, never shipped) trains one step through the real
launcher on CPU: ``python -m recipe.main method=scaled_advantage`` runs the pre-flight, starts Ray and verl's
workers, builds the method's trainer from the registry inside the task runner and runs its hook. Nothing of
another method's folder is used (the run is started with verl_cpu's launcher helpers)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from verl_cpu.launch import cpu_env, cpu_overrides, process_env, read_metrics_jsonl, run_with_timeout

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
METHODS_DIR = REPO / "tests" / "methods"


def test_a_method_defined_in_the_test_tree_trains_a_step_through_the_launcher(cpu_demo_assets, tmp_path):
    metrics_path = tmp_path / "scaled_advantage_metrics.jsonl"
    env = process_env(os.environ, {**cpu_env(metrics_path=metrics_path),
                                   "PYTHONPATH": f"{REPO}{os.pathsep}{METHODS_DIR}",
                                   "RECIPE_METHOD_MODULES": "scaled_advantage.method"})
    assets = cpu_demo_assets
    cmd = [sys.executable, "-m", "recipe.main", "method=scaled_advantage",
           *cpu_overrides(assets["model"], assets["train"], assets["val"], total_training_steps=1),
           f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
           "actor_rollout_ref.actor.optim.lr=1e-4", "scaled_advantage.factor=0.25"]
    result = run_with_timeout(cmd, env, timeout_s=600, log_path=tmp_path / "scaled_advantage.log", cwd=tmp_path)
    log = result.log_path.read_text(errors="replace")
    assert not result.timed_out and result.returncode == 0, log[-4000:]
    assert "[recipe] pre-flight checks passed" in log
    assert "method=scaled_advantage trainer=RayScaledAdvantageTrainer" in log
    metrics = read_metrics_jsonl(metrics_path)
    assert sorted(metrics) == [1]
    m = metrics[1]
    assert m["scaled_advantage/factor"] == 0.25
    assert m["scaled_advantage/abs_sum_after"] == pytest.approx(0.25 * m["scaled_advantage/abs_sum_before"])
