"""lab.analysis.simulation's exact quantities against slow references, and lab/scripts/simulate_theorem.py end to end in
its quick setting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ibpo.advantages import group_normalized_advantages
from ibpo.options import IBPOConfig
from lab.analysis.simulation import (
    World,
    correct,
    crossing,
    estimator_variance,
    expected_reward,
    ibpo_advantages,
    logits_for_step_accuracy,
    measure_regime,
    per_sample_gradient_variance,
    sample_actions,
    sample_and_shape,
    score_functions,
    true_gradients,
)

ROOT = Path(__file__).resolve().parents[3]


def test_score_functions_equal_autograd():
    world = World(num_steps=3, num_choices=4)
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 4))
    problems = np.array([0, 1, 1])
    actions = sample_actions(logits, problems, rng)
    fast = score_functions(logits, problems, actions)
    for i, (x, a) in enumerate(zip(problems, actions)):
        theta = torch.tensor(logits[x], requires_grad=True)
        logp = torch.log_softmax(theta, dim=-1)[torch.arange(3), torch.tensor(a)].sum()
        logp.backward()
        np.testing.assert_allclose(fast[i], theta.grad.numpy().ravel(), atol=1e-12)
    assert world.num_steps == 3


def test_expected_reward_and_true_gradient_are_exact():
    logits = logits_for_step_accuracy([0.6, 0.9], World(num_steps=4))
    assert expected_reward(logits) == pytest.approx((0.6 ** 4 + 0.9 ** 4) / 2)
    theta = torch.tensor(logits, requires_grad=True)
    torch.prod(torch.softmax(theta, dim=-1)[:, :, 0], dim=1).sum().backward()
    np.testing.assert_allclose(true_gradients(logits), theta.grad.numpy().reshape(2, -1), atol=1e-12)
    actions = sample_actions(logits, np.zeros(20000, dtype=int), np.random.default_rng(1))
    assert (actions == 0).all(axis=1).mean() == pytest.approx(0.6 ** 4, abs=0.02)


def test_correction_success_is_rho_to_the_number_of_wrong_steps():
    world = World(num_steps=6, repair_correct_ref=0.7, rewrite_prob=0.0)
    rng = np.random.default_rng(2)
    trace = np.array([1, 0, 2, 0, 0, 3])  # three wrong steps
    ref = np.zeros(6, dtype=int)
    ok = np.mean([(correct(trace, ref, True, world, rng) == 0).all() for _ in range(20000)])
    assert ok == pytest.approx(0.7 ** 3, abs=0.015)
    fixed = correct(trace, ref, True, world, rng)
    assert (fixed[[1, 3, 4]] == 0).all()  # right steps are kept


def test_variances_equal_dense_references():
    rng = np.random.default_rng(3)
    P, R, G, D = 3, 5, 4, 6
    problems = np.repeat(np.arange(P), R * G)
    scores = rng.normal(size=(P * R * G, D))
    adv = rng.normal(size=P * R * G)
    dense = np.zeros((P * R * G, P * D))
    for i, x in enumerate(problems):
        dense[i, x * D:(x + 1) * D] = adv[i] * scores[i]
    assert per_sample_gradient_variance(adv, scores, problems, P) == pytest.approx(
        np.var(dense, axis=0, ddof=1).sum(), rel=1e-10)
    per_prompt = (adv[:, None] * scores).reshape(P, R, G, D).mean(axis=2)
    slow = np.mean([np.var(per_prompt[x], axis=0, ddof=1).sum() for x in range(P)])
    assert estimator_variance(adv, scores, P, R, G) == pytest.approx(slow, rel=1e-10)


def test_pipeline_batch_and_advantages():
    world = World()
    config = IBPOConfig(variant="binary", lam=0.6, correct_groups="all")  # the paper's rule
    rng = np.random.default_rng(4)
    logits = logits_for_step_accuracy([0.75] * 4, world)
    batch = sample_and_shape(logits, np.arange(4).repeat(6), 8, world, config, rng, step=0)
    assert batch.num_corrections == int((batch.rewards == 0).sum())  # every wrong response is corrected once
    assert (batch.phi[batch.rewards == 1] == 0).all() and set(np.unique(batch.delta)) <= {0.0, 0.5}
    gspo = group_normalized_advantages(torch.as_tensor(batch.rewards), batch.group_ids).numpy()
    np.testing.assert_allclose(ibpo_advantages(batch, 0.0, normalize=True), gspo)
    centred = ibpo_advantages(batch, 0.6, normalize=False)
    assert abs(np.bincount(batch.group_ids, weights=centred)).max() < 1e-9


def test_crossing():
    lams = np.array([0.0, 0.5, 1.0, 1.5])
    assert crossing(lams, np.array([1.0, 0.8, 0.9, 1.2])) == pytest.approx(1.0 + 0.5 * (0.1 / 0.3))
    assert crossing(lams, np.array([1.0, 1.1, 1.2, 1.3])) == 0.0
    assert crossing(lams, np.array([1.0, 0.5, 0.4, 0.3])) == float("inf")


def test_advantage_variance_crossing_is_lambda_max():
    """Eq. 12 with pooled within-group moments is exact: the measured crossing is 2C/V_φ."""
    grid = np.round(np.arange(0.0, 1.99, 0.02), 6)
    result = measure_regime(0.7, World(), IBPOConfig(variant="binary", lam=0.6, correct_groups="all"), 6, 12, grid,
                            seed=5)
    assert result.stats.cov_y_phi < 0
    assert result.cross_adv == pytest.approx(result.lam_max, abs=0.02)


def test_simulate_theorem_quick_run(tmp_path):
    out = tmp_path / "sim.json"
    proc = subprocess.run([sys.executable, str(ROOT / "lab" / "scripts" / "simulate_theorem.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for needle in ("Table 1", "Table 2", "Table 3", "λ_max=2C/V_φ", "Assumption A.1", "IBPO G=8", "GSPO G=64"):
        assert needle in proc.stdout
    assert proc.stdout.count("AGREES") + proc.stdout.count("DISAGREES") >= 4
    assert out.exists() and '"regimes"' in out.read_text()
