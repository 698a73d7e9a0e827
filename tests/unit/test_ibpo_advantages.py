"""Group advantages and Theorem A.2 diagnostics against brute-force references; the verl estimator."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ibpo.advantages import (
    broadcast_advantages,
    compute_ibpo_outcome_advantage,
    group_normalized_advantages,
    place_sequence_reward,
    shaped_rewards,
)
from ibpo.diagnostics import correction_stats, theorem_stats
from ibpo.lambda_schedule import LambdaSchedule


def brute_force_advantages(scores: list[float], gids: list, eps: float = 1e-8) -> list[float]:
    out = []
    for s, g in zip(scores, gids):
        members = [x for x, h in zip(scores, gids) if h == g]
        if len(members) < 2 or max(members) == min(members):
            out.append(0.0)
            continue
        mean = sum(members) / len(members)
        std = math.sqrt(sum((m - mean) ** 2 for m in members) / len(members))
        out.append((s - mean) / (std + eps))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_group_advantages_match_brute_force(seed):
    rng = random.Random(seed)
    gids = [rng.choice("abcdefg") for _ in range(rng.randrange(1, 60))]
    scores = [rng.choice([0.0, 1.0, 0.3, 0.5 * rng.random()]) for _ in gids]
    got = group_normalized_advantages(torch.tensor(scores, dtype=torch.float64), gids)
    assert got.tolist() == pytest.approx(brute_force_advantages(scores, gids), rel=1e-9, abs=1e-12)


def test_degenerate_groups():
    # all right, all wrong, G = 1, constant shaped values
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.3, 0.3])
    gids = ["right", "right", "wrong", "wrong", "single", "const", "const"]
    assert group_normalized_advantages(scores, gids).tolist() == [0.0] * 7
    assert group_normalized_advantages(torch.zeros(0), []).numel() == 0


def test_verl_estimator_contract():
    """(bs, T) outputs, zero on padding, scores read from token_level_rewards.sum(-1)."""
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    scores = torch.tensor([1.0, 0.3, 0.0, 0.5])
    rewards = place_sequence_reward(mask, scores)
    assert rewards.sum(-1).tolist() == pytest.approx(scores.tolist())
    assert rewards[0].tolist() == [0.0, 0.0, 1.0, 0.0]  # last valid token
    index = np.array(["a", "a", "a", "b"], dtype=object)
    adv, ret = compute_ibpo_outcome_advantage(rewards, mask, index, config={})
    expected = brute_force_advantages([1.0, 0.3, 0.0, 0.5], list(index))
    assert adv.shape == mask.shape and torch.equal(adv, ret)
    for i in range(4):
        assert adv[i][mask[i].bool()].tolist() == pytest.approx([expected[i]] * int(mask[i].sum()), rel=1e-5)
        assert adv[i][~mask[i].bool()].abs().sum() == 0
    assert adv[3].abs().sum() == 0  # singleton: 0, not its raw reward (verl grpo would give 0.5)


def test_shaped_rewards_bounds():
    assert shaped_rewards(torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.0]), 0.6).tolist() == pytest.approx([0.3, 1.0])
    with pytest.raises(ValueError, match="Eq. 8"):
        shaped_rewards(torch.tensor([0.0]), torch.tensor([1.0]), 1.0)


@pytest.mark.parametrize("delta, lam", [([math.nan, 0.0], 0.6), ([0.5, 0.0], math.nan), ([0.5, 0.0], math.inf)])
def test_shaped_rewards_refuse_a_nan_bonus(delta, lam):
    # before: NaN passed the 0 <= λΔ < 1 check (every comparison with NaN is False) and made the group's
    # advantages NaN
    with pytest.raises(ValueError, match=r"Eq\. 8.*rows \[0"):
        shaped_rewards(torch.tensor([0.0, 1.0]), torch.tensor(delta), lam)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_group_advantages_refuse_a_non_finite_score(bad):
    # before: one NaN score silently made every advantage of its group NaN
    with pytest.raises(ValueError, match=r"scores must be finite; rows \[1\]"):
        group_normalized_advantages(torch.tensor([1.0, bad, 0.0, 0.5]), ["a", "a", "a", "b"])


def test_broadcast_shape_check():
    with pytest.raises(ValueError, match="token_mask shape"):
        broadcast_advantages(torch.ones(2), torch.ones(2, 3), torch.ones(2, 4))


def brute_force_theorem(y, phi, gids, lam):
    cov = vphi = vg = vi = 0.0
    n = 0
    for g in set(gids):
        idx = [i for i, h in enumerate(gids) if h == g]
        if len(idx) < 2:
            continue
        ym = sum(y[i] for i in idx) / len(idx)
        fm = sum(phi[i] for i in idx) / len(idx)
        for i in idx:
            cov += (y[i] - ym) * (phi[i] - fm)
            vphi += (phi[i] - fm) ** 2
            vg += (y[i] - ym) ** 2
            vi += ((y[i] - ym) + lam * (phi[i] - fm)) ** 2
            n += 1
    return cov / n, vphi / n, vg / n, vi / n


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.floats(0.0, 1.0)), min_size=1, max_size=30),
       st.floats(0.0, 1.0))
def test_theorem_stats_properties(rows, lam):
    gids = [g for g, _, _ in rows]
    y = [1.0 if ok else 0.0 for _, ok, _ in rows]
    phi = [0.0 if ok else f for _, ok, f in rows]
    stats = theorem_stats(y, phi, gids, lam)
    assert stats.cov_y_phi <= 1e-12  # Assumption A.1 holds by construction
    if stats.num_groups:
        cov, vphi, vg, vi = brute_force_theorem(y, phi, gids, lam)
        assert stats.cov_y_phi == pytest.approx(cov, abs=1e-12)
        assert stats.v_phi == pytest.approx(vphi, abs=1e-12)
        assert stats.var_unnorm_adv_gspo == pytest.approx(vg, abs=1e-12)
        assert stats.var_unnorm_adv_ibpo == pytest.approx(vi, abs=1e-12)
        # Eq. 12 identity: Var(A^IBPO) = Var(A^GSPO) - 2λC + λ²V_φ (pooled within-group moments)
        assert stats.var_unnorm_adv_ibpo == pytest.approx(stats.var_unnorm_adv_gspo - 2 * lam * stats.c + lam**2 * stats.v_phi,
                                                   abs=1e-9)
        if stats.v_phi > 1e-9 and 1e-6 < lam < 0.999 * stats.lambda_max:
            assert stats.var_unnorm_adv_ibpo < stats.var_unnorm_adv_gspo  # Theorem A.2


def test_theorem_hand_example():
    # one group: Y = (1, 0, 0, 0), φ = (0, 0.5, 0, 0): Ȳ = 1/4, φ̄ = 1/8; Cov = -Ȳφ̄ = -1/32
    s = theorem_stats([1, 0, 0, 0], [0, 0.5, 0, 0], ["g"] * 4, lam=0.6)
    assert s.cov_y_phi == pytest.approx(-1 / 32)
    assert s.v_phi == pytest.approx((0.375**2 + 3 * 0.125**2) / 4)
    assert s.lambda_max == pytest.approx(2 * (1 / 32) / (s.v_phi + 1e-8))


def test_correction_stats_and_schedule():
    m = correction_stats(4, [True, True, False], [True, False, False], [0.5], [0.2, 0.9, 0.0], batch_size=8)
    assert m["correction_success_rate"] == pytest.approx(2 / 3) and m["rewrite_rate"] == 0.5
    assert m["shaped_fraction"] == pytest.approx(1 / 8) and m["unmodified_ratio"] == pytest.approx(0.55)
    sched = LambdaSchedule("theorem", lam=0.6, fraction=0.5, momentum=0.5)
    assert sched.current() == 0.6
    sched.update(theorem_stats([1, 0, 0, 0], [0, 0.5, 0, 0], ["g"] * 4, lam=0.6))
    assert sched.current() == pytest.approx(min(0.6, 0.5 * sched.running_lambda_max))
    fixed = LambdaSchedule("fixed", lam=0.4)
    fixed.update(theorem_stats([1, 0], [0, 0.5], ["g"] * 2, lam=0.4))
    assert fixed.current() == 0.4


@pytest.mark.slow  # a fresh interpreter imports verl (≈10 s)
def test_entry_point_registers_estimator_in_fresh_process(tmp_path):
    """`import verl` alone (no import of ibpo) must make `ibpo` resolvable: proves the entry point (the module the
    installed package's entry point names: ``recipe.common.verl_plugin``, which loads ``recipe.ibpo.verl_plugin``)."""
    from importlib.metadata import entry_points

    assert entry_points(group="verl.plugins")["methods"].value == "recipe.common.verl_plugin"
    plugin = "recipe.ibpo.verl_plugin"
    code = (
        "import sys, verl\n"
        f"assert {plugin!r} in sys.modules, 'entry point not loaded'\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "fn = get_adv_estimator_fn('ibpo')\n"
        "print(fn.__module__, fn.__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_MODULES", "VERL_USE_EXTERNAL_PLUGINS")}
    env["PYTHONPATH"] = ""
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ibpo.advantages compute_ibpo_outcome_advantage" in out.stdout
    # and the explicit check raises when plugins are disabled
    env["VERL_USE_EXTERNAL_PLUGINS"] = "none"
    code2 = (f"import verl\nfrom {plugin} import assert_registered\nassert_registered()\n"
             "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as R\n"
             "R.pop('ibpo')\n"
             "try:\n    assert_registered()\nexcept RuntimeError as e:\n    print('raised', e)\n")
    out2 = subprocess.run([sys.executable, "-c", code2], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert out2.returncode == 0, out2.stderr[-2000:]
    assert "raised" in out2.stdout and "not registered" in out2.stdout
