"""Bad input to IBPO's math fails early and names what is wrong (red team; each case was accepted before, or
failed later with an unrelated error).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ibpo.advantages import (broadcast_advantages, compute_ibpo_outcome_advantage, group_normalized_advantages,
                             ibpo_sequence_advantages, place_sequence_reward, shaped_rewards, shaping_advantage_factor)
from ibpo.alignment import align
from ibpo.correction_lengths import CorrectionBudgetError, correction_budget, correction_max_tokens
from ibpo.diagnostics import TheoremStats, correction_stats, theorem_stats
from ibpo.lambda_schedule import LambdaSchedule
from ibpo.mechanism import advantage_mechanism, localised_coverage
from ibpo.options import IBPOConfig, IBPOConfigError
from ibpo.pipeline import CorrectionRequest, shape_batch
from ibpo.shaping import shape_targets


@pytest.mark.parametrize("scores", [torch.tensor([1, 0, 0, 0]), torch.tensor([True, False, False, False])])
def test_integer_scores_are_refused_not_truncated(scores):
    # before: the float advantages were cast back to the input dtype: {1, 0, 0, 0} -> {1, 0, 0, 0} (not 1.73, ...)
    with pytest.raises(TypeError, match="scores must be a floating-point tensor"):
        group_normalized_advantages(scores, [0, 0, 0, 0])
    with pytest.raises(TypeError, match="floating-point"):
        compute_ibpo_outcome_advantage(scores[:, None], torch.ones(4, 1), ["a"] * 4)


def test_integer_rewards_are_refused_before_shaping():
    # before: Δ was cast to the rewards' integer dtype, so λΔ = 0.3 became 0 silently
    with pytest.raises(TypeError, match="rewards must be a floating-point tensor"):
        shaped_rewards(torch.tensor([0, 1]), torch.tensor([0.5, 0.0]), 0.6)


def test_shaped_rewards_refuse_a_delta_that_would_broadcast():
    # before: one Δ was added to every reward
    with pytest.raises(ValueError, match=r"rewards \(3,\) and delta \(1,\) must have the same shape"):
        shaped_rewards(torch.zeros(3), torch.tensor([0.5]), 0.6)


@pytest.mark.parametrize("delta", [2.0, -0.5, float("nan")])
@pytest.mark.parametrize("shaping", ["advantage", "reward_capped"])
def test_advantage_level_shaping_checks_eq8(delta, shaping):
    # before: under ibpo.shaping=advantage (the default) nothing checked λΔ: 1 − 0.6·2 = −0.2 flipped Â's sign,
    # a NaN or negative Δ was silently not shaped; ibpo.shaping=reward raised for the same Δ
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5])
    d = torch.tensor([0.0, delta, 0.0, 0.0])
    correct = torch.tensor([True, False, False, False])
    with pytest.raises(ValueError, match=r"λΔ must lie in \[0, 1\)"):
        shaping_advantage_factor(adv, d, correct, 0.6, shaping)
    with pytest.raises(ValueError, match=r"λΔ must lie in \[0, 1\)"):
        ibpo_sequence_advantages(torch.tensor([1.0, 0, 0, 0]), d, correct, [0] * 4, 0.6, shaping)


def test_valid_advantage_shaping_is_unchanged():
    adv = ibpo_sequence_advantages(torch.tensor([1.0, 0, 0, 0]), torch.tensor([0.0, 0.5, 0, 0]),
                                   torch.tensor([True, False, False, False]), [0] * 4, 0.6, "advantage")
    assert adv.tolist() == pytest.approx([1.7320508, -0.5773503 * 0.7, -0.5773503, -0.5773503], rel=1e-6)


def test_broadcast_and_placement_refuse_mismatched_rows():
    mask = torch.ones(3, 4)
    with pytest.raises(ValueError, match=r"expected \(bs,\) sequence advantages for a \(bs, T\) response_mask"):
        broadcast_advantages(torch.tensor([0.5]), mask)  # before: one advantage broadcast to every row
    with pytest.raises(ValueError, match="one value per row"):
        place_sequence_reward(mask, torch.tensor([1.0, 2.0, 3.0, 4.0]))  # before: the 4th value was dropped


@pytest.mark.parametrize("options, message", [
    ({"enable": "false"}, r"ibpo.enable='false' has type str; expected bool"),  # before: truthy, IBPO ran
    ({"joint_training": "false"}, r"ibpo.joint_training='false' has type str; expected bool"),
    ({"lam": "0.6"}, r"ibpo.lam='0.6' has type str; expected float"),  # before: TypeError from a comparison
    ({"corrections_per_target": 2.0}, r"ibpo.corrections_per_target=2.0 has type float; expected int"),
    ({"seed": 1.5}, r"ibpo.seed=1.5 has type float; expected int"),  # before: int(seed) = 1 silently
    ({"alpha": True}, r"ibpo.alpha=True has type bool; expected float"),
    ({"candidate_labels": "AB"}, r"ibpo.candidate_labels='AB' has type str; expected a list of str"),
    ({"candidate_labels": ("A", 5)}, r"expected a list of str"),
    ({"instruction": None}, r"ibpo.instruction=None has type NoneType; expected str"),
    ({"template": 5}, r"ibpo.template=5 has type int; expected str"),
])
def test_options_of_the_wrong_type_are_named(options, message):
    with pytest.raises(IBPOConfigError, match=message):
        IBPOConfig(**options)


def test_options_accept_ints_for_floats_and_numpy_numbers():
    cfg = IBPOConfig(lam=0, alpha=1, seed=np.int64(3), beta=np.float64(0.5), candidate_labels=["A", "B"])
    assert cfg.lam == 0 and cfg.seed == 3


def test_theorem_stats_and_schedule_refuse_non_finite_values():
    # before: a NaN reward gave C = NaN, which passed `C <= 0` and folded λ_max = 0 into the running estimate
    with pytest.raises(ValueError, match=r"rewards must be finite; rows \[2\]"):
        theorem_stats([1.0, 0.0, float("nan")], [0.0, 0.5, 0.5], [0, 0, 0], 0.6)
    schedule = LambdaSchedule("theorem", 0.6)
    with pytest.raises(ValueError, match="Theorem A.2 statistics must be finite"):
        schedule.update(TheoremStats(float("nan"), float("nan"), 0.05, 0.0, 0.0, 0.0, 1))
    for kwargs, name in (({"lam": -0.1}, "ibpo.lam"), ({"lam": 0.6, "fraction": 0.0}, "ibpo.lambda_max_fraction"),
                         ({"lam": 0.6, "momentum": 1.0}, "ibpo.lambda_max_momentum"),
                         ({"lam": float("nan")}, "ibpo.lam")):
        with pytest.raises(ValueError, match=name):
            LambdaSchedule("theorem", **kwargs)


def test_metric_helpers_refuse_mismatched_lengths_and_nan():
    with pytest.raises(ValueError, match="one entry per correction"):
        correction_stats(1, [True, False], [True], [0.5], [0.3, 0.2], 4)  # before: IndexError or a broadcast
    with pytest.raises(ValueError, match="is_correct and localised"):
        localised_coverage([False, False, True], [True])  # before: one flag broadcast to every row
    with pytest.raises(ValueError, match=r"advantages must be finite; rows \[1\]"):
        advantage_mechanism([1.0, float("nan")], [True, False], [0.0, 0.3], [0, 0])  # before: row silently dropped


def test_shape_batch_and_targets_refuse_mismatched_rows():
    cfg = IBPOConfig(shaping="reward")
    request = CorrectionRequest(1, (0,), [], 0)
    with pytest.raises(ValueError, match="is_correct has 1 entries for 2 responses"):
        shape_batch([request], [[1, 2, 9]], [True], [[1, 2, 3], [1, 2, 4]], [False], cfg)
    with pytest.raises(ValueError, match=r"target rows \[5\] outside the batch of 2"):
        shape_batch([CorrectionRequest(5, (0,), [], 0)], [[1]], [True], [[1], [2]], [True, False], cfg)
    with pytest.raises(ValueError, match="aligned with another response"):
        shape_targets([align([1, 2, 3], [1, 2, 4])], [True], [5], [[1, 2, 4]], [[]], cfg)


def test_correction_lengths_refuse_negative_or_non_finite_input():
    with pytest.raises(ValueError, match="target_tokens and closing_tokens must be >= 0"):
        correction_max_tokens(-5, 2.0, 64, 100)  # before: ceil(-10) + 64 = 54 tokens
    with pytest.raises(ValueError, match="correction_max_tokens_factor must be finite"):
        correction_max_tokens(5, float("nan"), 64, 100)  # before: "cannot convert float NaN to integer"
    with pytest.raises(CorrectionBudgetError, match="data.max_response_length=0 must be >= 1"):
        correction_budget(512, 0, 1, 0)
    with pytest.raises(CorrectionBudgetError, match="ibpo.num_references=-2 must be >= 0"):
        correction_budget(512, 1024, -2, 0)
