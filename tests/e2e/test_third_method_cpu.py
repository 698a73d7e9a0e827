"""The test tree's third method (tests/methods/scaled_advantage, never shipped) trains one step through the real
launcher on CPU: ``python -m recipe.main method=scaled_advantage`` runs the pre-flight, starts Ray and verl's
workers, builds the method's trainer from the registry inside the task runner and runs its hook."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from recipe.ibpo.quickstart import run_cpu_training

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
METHODS_DIR = REPO / "tests" / "methods"


def test_a_method_defined_in_the_test_tree_trains_a_step_through_the_launcher(cpu_demo_assets, tmp_path):
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{METHODS_DIR}", "RECIPE_METHOD_MODULES": "scaled_advantage.method"}
    result, metrics = run_cpu_training(cpu_demo_assets, tmp_path, "scaled_advantage",
                                       ["actor_rollout_ref.actor.optim.lr=1e-4", "scaled_advantage.factor=0.25"],
                                       1, 600, env, method="scaled_advantage")
    log = result.log_path.read_text(errors="replace")
    assert not result.timed_out and result.returncode == 0, result.log_tail()
    assert "[ibpo] pre-flight checks passed" in log
    assert "method=scaled_advantage trainer=RayScaledAdvantageTrainer" in log
    assert sorted(metrics) == [1]
    m = metrics[1]
    assert m["scaled_advantage/factor"] == 0.25
    assert m["scaled_advantage/abs_sum_after"] == pytest.approx(0.25 * m["scaled_advantage/abs_sum_before"])
