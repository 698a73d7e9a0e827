"""The mechanism of IBPO's shaping under group normalisation (ibpo.mechanism, ibpo.advantages.shaping_*),
against hand-worked groups and slow references; ibpo.correct_groups in the correction plan."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from ibpo.advantages import SHAPING_LEVELS, ibpo_sequence_advantages, shaping_advantage_factor, shapes_reward
from ibpo.mechanism import (RewardDropAlarm, advantage_mechanism, alarm_steps, group_kinds, reinforces_wrong_answers,
                            sibling_overlap)
from ibpo.options import IBPOConfig, IBPOConfigError
from ibpo.pipeline import plan_corrections

SQRT3 = math.sqrt(3.0)


def adv(rewards, delta, shaping, lam=0.6, groups=None):
    r = torch.tensor(rewards, dtype=torch.float64)
    d = torch.tensor(delta, dtype=torch.float64)
    return ibpo_sequence_advantages(r, d, r >= 0.5, groups or [0] * len(rewards), lam, shaping).tolist()


def test_one_right_three_wrong_one_shaped_by_hand():
    """{1,0,0,0}, λΔ = 0.3 on the first wrong response. r' = (1, .3, 0, 0): mean .325, population variance
    (.675² + .025² + 2·.325²)/4 = .166875."""
    std = math.sqrt(0.166875)
    expected = [0.675 / std, -0.025 / std, -0.325 / std, -0.325 / std]
    got = adv([1, 0, 0, 0], [0, 0.5, 0, 0], "reward")
    assert got == pytest.approx(expected, abs=1e-7)
    assert got[1] == pytest.approx(-0.0612, abs=1e-4)  # the push away from the fixable slip nearly vanishes
    # unshaped GSPO: (1, -1/3, -1/3, -1/3)/std with std = √3/4 → (√3, −1/√3, …)
    assert adv([1, 0, 0, 0], [0, 0, 0, 0], "reward") == pytest.approx([SQRT3, -1 / SQRT3, -1 / SQRT3, -1 / SQRT3])
    # capped: nothing wrong is positive here, so the same numbers
    assert adv([1, 0, 0, 0], [0, 0.5, 0, 0], "reward_capped") == pytest.approx(expected, abs=1e-7)
    # advantage-level: GSPO's advantages, the shaped wrong one scaled by 1 − 0.3
    assert adv([1, 0, 0, 0], [0, 0.5, 0, 0], "advantage") == pytest.approx(
        [SQRT3, -0.7 / SQRT3, -1 / SQRT3, -1 / SQRT3])


def test_all_wrong_group_with_one_shaped_by_hand():
    """{0.3, 0, 0, 0}: mean .075, std √(.225² + 3·.075²)/2 = .1299 → (+√3, −1/√3, −1/√3, −1/√3)."""
    assert adv([0, 0, 0, 0], [0.5, 0, 0, 0], "reward") == pytest.approx([SQRT3, -1 / SQRT3, -1 / SQRT3, -1 / SQRT3])
    # any λ > 0 gives the same full positive advantage (scale invariance of the normalisation)
    # (up to Eq. 23's ε = 1e-8 in the denominator: λΔ = 0.01 → std = 0.01·√3/4)
    std = 0.01 * SQRT3 / 4
    assert adv([0, 0, 0, 0], [0.5, 0, 0, 0], "reward", lam=0.02)[0] == pytest.approx(0.0075 / (std + 1e-8), rel=1e-12)
    assert adv([0, 0, 0, 0], [0.5, 0, 0, 0], "reward_capped") == pytest.approx([0, -1 / SQRT3, -1 / SQRT3, -1 / SQRT3])
    assert adv([0, 0, 0, 0], [0.5, 0, 0, 0], "advantage") == [0.0, 0.0, 0.0, 0.0]


def test_ratio_at_lam_06_next_to_a_right_sibling_turns_positive():
    """The issue's claim for `ratio`: Δ = |U|/T near 1 at λ = .6 lifts a wrong response above the group mean
    even with a right sibling: r' = (1, .57, 0, 0, 0, 0, 0, 0) with Δ = .95."""
    got = adv([1, 0, 0, 0, 0, 0, 0, 0], [0, 0.95, 0, 0, 0, 0, 0, 0], "reward")
    assert got[1] > 0
    assert adv([1, 0, 0, 0, 0, 0, 0, 0], [0, 0.95, 0, 0, 0, 0, 0, 0], "reward_capped")[1] == 0.0
    assert adv([1, 0, 0, 0, 0, 0, 0, 0], [0, 0.95, 0, 0, 0, 0, 0, 0], "advantage")[1] < 0


@pytest.mark.parametrize("seed", range(5))
def test_shaping_factor_matches_a_slow_reference(seed):
    rng = random.Random(seed)
    n = 24
    a = torch.tensor([rng.gauss(0, 1) if rng.random() > 0.2 else 0.0 for _ in range(n)], dtype=torch.float64)
    d = torch.tensor([rng.choice([0.0, 0.5, rng.random()]) for _ in range(n)], dtype=torch.float64)
    c = torch.tensor([rng.random() < 0.4 for _ in range(n)])
    lam = rng.uniform(0, 0.9)
    for shaping in SHAPING_LEVELS:
        got = shaping_advantage_factor(a, d, c, lam, shaping).tolist()
        for i in range(n):
            wrong = not bool(c[i])
            if shaping == "reward_capped" and wrong and a[i] > 0:
                want = 0.0
            elif shaping == "advantage" and wrong and d[i] > 0 and a[i] < 0:
                want = 1 - lam * float(d[i])
            else:
                want = 1.0
            assert got[i] == pytest.approx(want)
    with pytest.raises(ValueError, match="unknown ibpo.shaping 'rewards'"):
        shapes_reward("rewards")


def test_new_options_validate():
    # the defaults (docs/evidence.md section 2): the paper's binary Δ and λ, corrections only in mixed groups,
    # shaping at the advantage level (never reinforces a wrong answer)
    assert (IBPOConfig().variant, IBPOConfig().lam, IBPOConfig().correct_groups, IBPOConfig().shaping) == (
        "binary", 0.6, "mixed", "advantage")
    assert not reinforces_wrong_answers(True, IBPOConfig().shaping, IBPOConfig().lam)
    with pytest.raises(IBPOConfigError, match=r"ibpo.shaping='clip'.*one of \('reward', 'reward_capped', 'advantage'\)"):
        IBPOConfig(shaping="clip")
    with pytest.raises(IBPOConfigError, match=r"ibpo.correct_groups='some'.*one of \('all', 'mixed'\)"):
        IBPOConfig(correct_groups="some")


def test_advantage_mechanism_by_hand():
    # group 0: {1,0,0,0} with row 1 shaped; group 1: {0.3,0,0,0} all wrong, row 4 shaped
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    correct = [True, False, False, False, False, False, False, False]
    delta = [0, 0.5, 0, 0, 0.5, 0, 0, 0]
    a = torch.tensor(adv([1, 0, 0, 0, 0, 0, 0, 0], delta, "reward", groups=groups))
    out = advantage_mechanism(a.numpy(), correct, delta, groups)
    pos = a.clamp(min=0)
    assert out["positive_adv_mass_on_wrong"] == pytest.approx(float(pos[4] / pos.sum()))  # √3 / (1.652 + √3)
    assert out["positive_adv_mass_on_wrong"] == pytest.approx(SQRT3 / (0.675 / math.sqrt(0.166875) + SQRT3))
    assert out["shaped_all_wrong_groups"] == 1.0 and out["shaped_wrong_positive"] == 1.0
    assert out["mean_abs_adv/shaped_wrong_mixed"] == pytest.approx(0.025 / math.sqrt(0.166875))
    assert out["mean_abs_adv/unshaped_wrong_mixed"] == pytest.approx(0.325 / math.sqrt(0.166875))
    assert out["mean_abs_adv/shaped_wrong_all_wrong"] == pytest.approx(SQRT3)
    assert out["mean_abs_adv/unshaped_wrong_all_wrong"] == pytest.approx(1 / SQRT3)
    # GSPO on the same samples: no positive mass on wrong responses, nothing shaped
    g = advantage_mechanism(adv([1, 0, 0, 0, 0, 0, 0, 0], [0] * 8, "reward", groups=groups), correct, [0] * 8, groups)
    assert g["positive_adv_mass_on_wrong"] == 0.0 and g["shaped_all_wrong_groups"] == 0.0
    assert "mean_abs_adv/shaped_wrong_mixed" not in g  # no such response: left out, not 0
    assert group_kinds([True, True, False, False], ["a", "a", "b", "b"]) == ["all_right", "all_right", "all_wrong",
                                                                           "all_wrong"]
    with pytest.raises(ValueError, match="equal length"):
        advantage_mechanism([0.0, 1.0], [True], [0.0, 0.0], [0, 0])


def _lcs(a, b):  # slow reference: matched tokens of an optimal alignment <= LCS; for Levenshtein-equal it's exact
    dp = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a)):
        for j in range(len(b)):
            dp[i + 1][j + 1] = dp[i][j] + 1 if a[i] == b[j] else max(dp[i][j + 1], dp[i + 1][j])
    return dp[-1][-1]


def test_sibling_overlap_by_hand_and_against_a_reference():
    responses = [[1, 2, 3, 4], [1, 2, 9, 4], [7, 7, 7, 7], [5, 5], [5, 6]]
    correct = [True, False, False, False, False]
    groups = [0, 0, 0, 1, 1]  # group 1 has no right response: not counted
    out = sibling_overlap(responses, correct, groups)
    assert out["wrong_in_mixed_groups"] == 2.0
    assert out["wrong_tokens_shared_with_right_sibling"] == pytest.approx((3 / 4 + 0 / 4) / 2)
    assert "wrong_tokens_shared_with_right_sibling" not in sibling_overlap([[1], [2]], [False, False], [0, 0])
    rng = random.Random(3)
    for _ in range(20):  # one substitution-only edit: the kept tokens are exactly the unchanged positions
        right = [rng.randrange(5) for _ in range(12)]
        wrong = [t if rng.random() > 0.3 else t + 5 for t in right]
        share = sibling_overlap([right, wrong], [True, False], [0, 0])["wrong_tokens_shared_with_right_sibling"]
        assert share * len(wrong) == pytest.approx(sum(x == y for x, y in zip(right, wrong)))
        assert share * len(wrong) <= _lcs(right, wrong)


def test_reward_drop_alarm():
    # the weak-warm-start pattern of the paper's configuration: ~0.2 → ~0.03
    assert alarm_steps([0.2, 0.22, 0.18, 0.1, 0.05, 0.03]) == [False] * 5 + [True]
    assert not any(alarm_steps([0.2, 0.22, 0.18, 0.2, 0.25, 0.3, 0.1]))  # one bad step is not a trend
    assert not any(alarm_steps([0.03, 0.04, 0.02, 0.0, 0.0, 0.0]))  # nothing to lose below min_start
    assert alarm_steps([0.4, 0.4, 0.4, 0.2, 0.2, 0.2]) == [False] * 5 + [True]  # exactly half fires
    with pytest.raises(ValueError, match="0 < ratio < 1"):
        RewardDropAlarm(ratio=1.5)


def test_correct_groups_mixed_skips_all_wrong_groups_and_keeps_references():
    groups = [0, 0, 0, 1, 1, 1]
    correct = [True, False, False, False, False, False]
    responses = [[1], [2], [3], [4], [5], [6]]
    messages = [[{"role": "user", "content": f"q{g}"}] for g in groups]
    decode = lambda ids: " ".join(map(str, ids))  # noqa: E731
    every = plan_corrections(groups, correct, messages, responses, decode, IBPOConfig(correct_groups="all"), step=1)
    mixed = plan_corrections(groups, correct, messages, responses, decode, IBPOConfig(correct_groups="mixed"), step=1)
    assert [r.target_row for r in every] == [1, 2, 3, 4, 5]
    assert [r.target_row for r in mixed] == [1, 2]
    assert [r.reference_rows for r in mixed] == [r.reference_rows for r in every[:2]]  # same draws


def test_reward_shaping_reinforces_a_wrong_answer_next_to_a_right_one_in_a_larger_group():
    """{1, .3, 0, 0, 0, 0, 0, 0}: the shaped wrong response sits above the group mean .1625, so Â > 0 although a
    right sibling exists; the configurations reinforces_wrong_answers flags are exactly reward-level shaping."""
    rewards, delta = [1, 0, 0, 0, 0, 0, 0, 0], [0, 0.5, 0, 0, 0, 0, 0, 0]
    std = math.sqrt(np.var([1, 0.3, 0, 0, 0, 0, 0, 0]))
    assert adv(rewards, delta, "reward")[1] == pytest.approx((0.3 - 0.1625) / (std + 1e-8), rel=1e-12)
    assert adv(rewards, delta, "reward")[1] > 0
    assert adv(rewards, delta, "reward_capped")[1] == 0.0 and adv(rewards, delta, "advantage")[1] < 0
    from ibpo.mechanism import reinforces_wrong_answers

    assert reinforces_wrong_answers(True, "reward", 0.6)
    assert not reinforces_wrong_answers(True, "reward", 0.0)
    assert not reinforces_wrong_answers(False, "reward", 0.6)
    assert not any(reinforces_wrong_answers(True, s, 0.6) for s in ("reward_capped", "advantage"))


def test_coverage_counts_only_wrong_rows_with_localised_credit():
    from ibpo.mechanism import localised_coverage

    # rows: right+localised (not counted), wrong+localised, wrong, wrong+localised
    out = localised_coverage([True, False, False, False], [True, True, False, True])
    assert out == {"wrong_rows": 3.0, "masked_rows": 2.0, "coverage": pytest.approx(2 / 3)}
    assert math.isnan(localised_coverage([True, True], [False, True])["coverage"])
    rng = np.random.default_rng(0)
    for _ in range(50):  # against a loop
        right, loc = rng.random(9) < 0.4, rng.random(9) < 0.5
        wrong = [i for i in range(9) if not right[i]]
        masked = [i for i in wrong if loc[i]]
        got = localised_coverage(right.tolist(), loc.tolist())
        assert got["masked_rows"] == len(masked) and got["wrong_rows"] == len(wrong)
        if wrong:
            assert got["coverage"] == len(masked) / len(wrong)
