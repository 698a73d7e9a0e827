"""Rewrite filter, Δ, token masks and the batch pipeline; hand-worked examples of Eq. 14-19 and 23."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ibpo.advantages import broadcast_advantages, group_normalized_advantages, shaped_rewards
from ibpo.alignment import align
from ibpo.options import IBPOConfig
from ibpo.pipeline import plan_corrections, shape_batch
from ibpo.shaping import adaptive_alpha, aggregate_corrections, is_full_rewrite, shape_targets, shaping_delta
from ibpo.variants import get_variant


def test_rewrite_rule_eq18():
    # both conditions needed: far from y AND farther from y than from y_ref
    assert is_full_rewrite(0.7, 0.2, alpha=0.6)
    assert not is_full_rewrite(0.7, 0.8, alpha=0.6)  # far from y but even farther from the reference
    assert not is_full_rewrite(0.5, 0.1, alpha=0.6)  # local repair
    assert not is_full_rewrite(0.6, 0.1, alpha=0.6)  # strict inequality
    assert is_full_rewrite(0.7, None, alpha=0.6)  # no reference: threshold only


def test_adaptive_alpha_matches_population_formula_and_falls_back():
    d = [0.1, 0.2, 0.2, 0.3, 0.4, 0.1, 0.15, 0.25]
    mu = sum(d) / len(d)
    sigma = math.sqrt(sum((x - mu) ** 2 for x in d) / len(d))
    alpha, adaptive = adaptive_alpha(d, fixed_alpha=0.6, min_samples=8)
    assert adaptive and alpha == pytest.approx(mu + 2 * sigma)
    assert adaptive_alpha(d[:7], fixed_alpha=0.6, min_samples=8) == (0.6, False)


def test_delta_cases_eq14_16_19():
    binary, ratio, mask = get_variant("binary"), get_variant("ratio"), get_variant("mask")
    # Eq. 14/19 binary: β only for wrong target, right correction, no rewrite
    assert shaping_delta(binary, True, True, False, 0.9, beta=0.5) == 0.5
    assert shaping_delta(binary, True, False, False, 0.9, beta=0.5) == 0.0  # failed correction: no penalty
    assert shaping_delta(binary, True, True, True, 0.9, beta=0.5) == 0.0  # rewrite filtered
    assert shaping_delta(binary, False, True, False, 0.9, beta=0.5) == 0.0  # correct target: φ = 0
    # Eq. 16 ratio: |U|/T
    assert shaping_delta(ratio, True, True, False, 0.75, beta=0.5) == 0.75
    assert shaping_delta(mask, True, True, False, 0.75, beta=0.5) == 0.5
    with pytest.raises(TypeError, match="takes a ShapingVariant"):  # names are resolved once, by the caller
        shaping_delta("binary", True, True, False, 0.5, beta=0.5)
    with pytest.raises(ValueError, match="unknown IBPO variant"):
        get_variant("nope")


def test_hand_worked_group_eq14_to_23():
    """G = 4, r = (1, 0, 0, 0). y_2's correction is right and local (Δ = β = 0.5), y_3's is a full rewrite,
    y_4's correction fails. λ = 0.6 → r' = (1, 0.3, 0, 0)."""
    cfg = IBPOConfig(variant="binary", lam=0.6, beta=0.5, alpha=0.6)
    y = {
        0: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],  # correct
        1: [1, 2, 3, 4, 5, 6, 7, 8, 9, 11],  # wrong in the last token
        2: [20, 21, 22, 23, 24, 25, 26, 27, 28, 29],  # wrong everywhere
        3: [30, 31, 32],
    }
    is_correct = [True, False, False, False]
    requests = plan_corrections(["g"] * 4, is_correct, [[{"role": "user", "content": "P"}]] * 4,
                                [y[i] for i in range(4)], decode=lambda ids: " ".join(map(str, ids)),
                                config=cfg, step=0)
    assert [r.target_row for r in requests] == [1, 2, 3]
    assert all(r.reference_rows == (0,) for r in requests)  # the only correct sibling
    corrections = [
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],  # fixes y_1's last token: d(y,ŷ) = 0.1
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],  # copies the reference: d(y,ŷ) = 1 > α, d(ŷ,y_ref) = 0 → rewrite
        [30, 31, 33],
    ]
    outcome = shape_batch(requests, corrections, [True, True, False], [y[i] for i in range(4)], is_correct, cfg)
    assert outcome.delta.tolist() == [0.0, 0.5, 0.0, 0.0]
    assert outcome.phi.tolist() == [0.0, 0.5, 0.0, 0.0]
    assert outcome.correction_rewrite.tolist() == [False, True, False]
    assert outcome.metrics["correction_success_rate"] == pytest.approx(2 / 3)
    assert outcome.metrics["rewrite_rate"] == pytest.approx(1 / 2)
    assert outcome.metrics["shaped_fraction"] == pytest.approx(1 / 4)
    assert outcome.metrics["mean_delta"] == pytest.approx(0.5)

    r_prime = shaped_rewards(torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64), torch.tensor(outcome.delta), cfg.lam)
    assert r_prime.tolist() == pytest.approx([1.0, 0.3, 0.0, 0.0])
    # Eq. 23 by hand: mean = 0.325, population std = sqrt(((0.675)^2 + (-0.025)^2 + 2(0.325)^2)/4)
    mean = 0.325
    std = math.sqrt((0.675**2 + 0.025**2 + 2 * 0.325**2) / 4)
    expected = [(v - mean) / (std + 1e-8) for v in (1.0, 0.3, 0.0, 0.0)]
    adv = group_normalized_advantages(r_prime.double(), ["g"] * 4)
    assert adv.tolist() == pytest.approx(expected, rel=1e-9)
    assert adv.sum().item() == pytest.approx(0.0, abs=1e-12)


def test_mask_variant_masks_only_the_shaped_response():
    cfg = IBPOConfig(variant="mask", lam=0.6, beta=0.5)
    y = [[1, 2, 3, 4], [1, 2, 9, 4], [5, 6, 7, 8]]
    is_correct = [True, False, False]
    requests = plan_corrections([0, 0, 0], is_correct, [[{"role": "user", "content": "P"}]] * 3, y,
                                decode=str, config=cfg, step=3)
    outcome = shape_batch(requests, [[1, 2, 3, 4], [5, 6, 0, 8]], [True, False], y, is_correct, cfg)
    assert outcome.delta.tolist() == [0.0, 0.5, 0.0]
    # y_1: U = {0, 1, 3} (token 2 changed) → m = 1[t ∉ U] = (0, 0, 1, 0)
    assert outcome.token_masks[1].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert outcome.token_masks[0].tolist() == [1.0] * 4 and outcome.token_masks[2].tolist() == [1.0] * 4
    # masks reach the broadcast advantages
    resp_mask = torch.ones(3, 4)
    token_mask = torch.tensor(np.stack(outcome.token_masks))
    adv = broadcast_advantages(torch.tensor([1.0, -0.5, 2.0]), resp_mask, token_mask)
    assert adv[1].tolist() == [0.0, 0.0, -0.5, 0.0] and adv[0].tolist() == [1.0] * 4


def test_ratio_variant_uses_unmodified_share():
    cfg = IBPOConfig(variant="ratio", lam=0.5)
    y = [[1, 2, 3, 4], [1, 2, 9, 9]]
    req = plan_corrections(["a", "a"], [True, False], [[{"role": "user", "content": "P"}]] * 2, y, str, cfg, 0)
    out = shape_batch(req, [[1, 2, 3, 9]], [True], y, [True, False], cfg)
    assert out.delta[1] == pytest.approx(0.75)  # U = {0,1,3}, T = 4


def test_adaptive_threshold_in_batch_pipeline():
    cfg = IBPOConfig(alpha_mode="adaptive", adaptive_min_samples=2, alpha=0.99)
    a1 = align([1, 2, 3, 4], [1, 2, 3, 5])
    a2 = align([1, 2, 3, 4], [9, 9, 9, 9])
    results, alpha, adaptive = shape_targets([a1, a2], [True, True], [4, 4], [[1, 2, 3, 5], [9, 9, 9, 9]],
                                             [[[1, 2, 3, 5]], [[9, 9, 9, 8]]], cfg)
    assert adaptive and alpha == pytest.approx(np.mean([0.25, 1.0]) + 2 * np.std([0.25, 1.0]))
    assert [r.rewrite for r in results] == [False, False]  # α = 1.375 > every distance


def test_corrections_per_target_aggregation():
    cfg = IBPOConfig(variant="mask", corrections_per_target=2)
    y = [[1, 2, 3, 4], [1, 2, 3, 9]]
    req = plan_corrections(["a", "a"], [True, False], [[{"role": "user", "content": "P"}]] * 2, y, str, cfg, 0)
    assert len(req) == 2 and req[0].messages == req[1].messages
    out = shape_batch(req, [[1, 2, 3, 4], [0, 0, 0, 4]], [True, False], y, [True, False], cfg)
    assert out.delta[1] == pytest.approx(0.25)  # mean of (0.5, 0)
    assert out.token_masks[1].tolist() == [0.0, 0.0, 0.0, 1.0]
    delta, mask = aggregate_corrections([], 3)
    assert delta == 0.0 and mask.tolist() == [1.0, 1.0, 1.0]


def test_no_wrong_responses_and_all_failed():
    cfg = IBPOConfig(correct_groups="all")  # the all-wrong group is corrected too (Alg. 1)
    y = [[1, 2], [3, 4]]
    assert plan_corrections(["a", "a"], [True, True], [[{"role": "user", "content": "P"}]] * 2, y, str, cfg, 0) == []
    out = shape_batch([], [], [], y, [True, True], cfg)
    assert out.delta.tolist() == [0.0, 0.0] and out.metrics["num_corrections"] == 0
    # no correction: the rates over corrections are left out, not reported as 0
    assert {"correction_success_rate", "rewrite_rate", "unmodified_ratio", "mean_delta"}.isdisjoint(out.metrics)
    assert out.metrics["num_right_corrections"] == 0 and out.metrics["num_shaped"] == 0
    req = plan_corrections(["a", "a"], [False, False], [[{"role": "user", "content": "P"}]] * 2, y, str, cfg, 0)
    assert [r.reference_rows for r in req] == [(1,), (0,)]  # the other wrong one
    out = shape_batch(req, [[0], [0]], [False, False], y, [False, False], cfg)
    assert out.delta.tolist() == [0.0, 0.0]
    assert out.metrics["correction_success_rate"] == 0.0 and out.metrics["num_right_corrections"] == 0
    assert {"rewrite_rate", "unmodified_ratio", "mean_delta"}.isdisjoint(out.metrics)  # no right correction


@st.composite
def batches(draw):
    n_groups = draw(st.integers(1, 4))
    group_size = draw(st.integers(1, 5))
    variant = draw(st.sampled_from(["binary", "ratio", "mask"]))
    lam = draw(st.floats(0.0, 0.95))
    rows = n_groups * group_size
    is_correct = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    responses = draw(st.lists(st.lists(st.integers(0, 4), min_size=0, max_size=8), min_size=rows, max_size=rows))
    return n_groups, group_size, variant, lam, is_correct, responses, draw(st.randoms(use_true_random=False))


@settings(max_examples=150, deadline=None)
@given(batches())
def test_invariants(batch):
    n_groups, group_size, variant, lam, is_correct, responses, rnd = batch
    cfg = IBPOConfig(variant=variant, lam=lam, correct_groups="all")
    gids = [g for g in range(n_groups) for _ in range(group_size)]
    req = plan_corrections(gids, is_correct, [[{"role": "user", "content": "P"}]] * len(gids), responses, str, cfg, 0)
    assert sorted(r.target_row for r in req) == [i for i, ok in enumerate(is_correct) if not ok]
    for r in req:
        assert r.target_row not in r.reference_rows or group_size == 1
        assert all(gids[x] == gids[r.target_row] for x in r.reference_rows)
        group_has_correct = any(is_correct[j] for j, g in enumerate(gids) if g == gids[r.target_row])
        assert all(is_correct[x] for x in r.reference_rows) == group_has_correct or not r.reference_rows
    corrections = [[rnd.randrange(5) for _ in range(rnd.randrange(9))] for _ in req]
    right = [rnd.random() < 0.5 for _ in req]
    out = shape_batch(req, corrections, right, responses, is_correct, cfg)
    bonus = lam * out.delta
    assert np.all(bonus >= 0) and np.all(bonus < 1)  # Eq. 8
    for i, ok in enumerate(is_correct):
        if ok:
            assert out.delta[i] == 0 and out.phi[i] == 0
        if not (variant == "mask" and out.delta[i] > 0):  # masks only on successfully corrected wrong rows
            assert np.all(out.token_masks[i] == 1.0)
        assert out.token_masks[i].shape == (len(responses[i]),)
    r_prime = shaped_rewards(torch.tensor([float(c) for c in is_correct], dtype=torch.float64),
                             torch.tensor(out.delta), lam)
    adv = group_normalized_advantages(r_prime, gids)
    for g in range(n_groups):
        members = [i for i, x in enumerate(gids) if x == g]
        assert adv[members].sum().item() == pytest.approx(0.0, abs=1e-6)


def test_mask_sign_hand_worked_groups():
    """IBPO-mask by the sign of Â (ibpo.mask_sign). Group A, all wrong, one shaped row: r' = [0.3, 0, 0, 0],
    mean 0.075, population std √0.016875, Â = [√3, −1/√3, −1/√3, −1/√3]: the shaped row is *positive*.
    Group B has a right answer: r' = [1, 0.3, 0, 0], the shaped row's Â = −0.025/σ < 0. Token mask of both
    shaped rows (1 = changed by the correction): [0, 0, 1, 1]."""
    from ibpo.advantages import get_mask_sign, signed_token_mask

    rewards = torch.tensor([0.3, 0.0, 0.0, 0.0, 1.0, 0.3, 0.0, 0.0], dtype=torch.float64)
    adv = group_normalized_advantages(rewards, ["A"] * 4 + ["B"] * 4)
    assert adv[0].item() == pytest.approx(math.sqrt(3)) and adv[1].item() == pytest.approx(-1 / math.sqrt(3))
    sigma_b = math.sqrt(((0.675) ** 2 + 0.025**2 + 2 * 0.325**2) / 4)
    assert adv[5].item() == pytest.approx(-0.025 / sigma_b) and adv[5] < 0
    m = torch.ones(8, 4, dtype=torch.float64)
    m[0] = m[5] = torch.tensor([0.0, 0.0, 1.0, 1.0])
    shaped = torch.tensor([True, False, False, False, False, True, False, False])

    literal = signed_token_mask(adv, m, shaped, get_mask_sign("literal"))
    negative_only = signed_token_mask(adv, m, shaped, get_mask_sign("negative_only"))
    complement = signed_token_mask(adv, m, shaped, get_mask_sign("complement_when_positive"))
    assert literal[0].tolist() == [0, 0, 1, 1] and literal[5].tolist() == [0, 0, 1, 1]  # Eq. 17 as written
    assert negative_only[0].tolist() == [1, 1, 1, 1] and negative_only[5].tolist() == [0, 0, 1, 1]
    assert complement[0].tolist() == [1, 1, 0, 0] and complement[5].tolist() == [0, 0, 1, 1]
    for mask in (literal, negative_only, complement):  # unshaped rows are never masked
        assert torch.equal(mask[~shaped], torch.ones(6, 4, dtype=torch.float64))
    # the advantage each token of the positive shaped row is trained with
    assert (adv[0] * literal[0]).tolist() == pytest.approx([0, 0, math.sqrt(3), math.sqrt(3)])
    assert (adv[0] * complement[0]).tolist() == pytest.approx([math.sqrt(3), math.sqrt(3), 0, 0])
    with pytest.raises(ValueError, match="mask_sign"):
        get_mask_sign("positive")
    with pytest.raises(TypeError, match="takes a MaskSignPolicy"):  # a name is resolved once, by the caller
        signed_token_mask(adv, m, shaped, "literal")


def test_the_issues_positive_advantages_of_a_shaped_wrong_response():
    """r' = 0.3 in a group of 8 with 0, 1, 2 right answers: Â = +2.65, +0.41, +0.03 (Eq. 23, population std),
    the hand values: (0.3 − μ) / σ with μ = (0.3 + right) / 8."""
    for right in (0, 1, 2):
        values = [0.3] + [1.0] * right + [0.0] * (7 - right)
        mu = sum(values) / 8
        sigma = math.sqrt(sum((v - mu) ** 2 for v in values) / 8)
        got = group_normalized_advantages(torch.tensor(values, dtype=torch.float64), [0] * 8)[0].item()
        assert got == pytest.approx((0.3 - mu) / sigma) and got > 0
        assert round(got, 2) == (2.65, 0.41, 0.03)[right]
