"""ibpo.correction_fraction: a random share of the eligible wrong responses gets a correction (beyond the paper,
docs/method_ibpo.md "Spending less on corrections"). Checked: the option's range, the count ceil(f·m) against
a direct computation, uniformity of the draw, that kept rows keep the references and prompts they have at f = 1,
and that an uncorrected row is trained exactly as in GSPO (Δ = 0, every token)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from ibpo.options import IBPOConfig, IBPOConfigError
from ibpo.pipeline import correction_subset, plan_corrections, shape_batch


def decode(ids: list[int]) -> str:
    return " ".join(map(str, ids))


def batch(groups: list[int]):
    responses = [[10 + i, 20 + i, 30 + i] for i in range(len(groups))]
    messages = [[{"role": "user", "content": f"q{g}"}] for g in groups]
    return responses, messages


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, float("nan")])
def test_out_of_range_fraction_is_refused_naming_the_option(bad):
    with pytest.raises(IBPOConfigError, match="ibpo.correction_fraction"):
        IBPOConfig(correction_fraction=bad)


def test_default_is_every_eligible_wrong_response():
    assert IBPOConfig().correction_fraction == 1.0


@pytest.mark.parametrize("m", [1, 2, 3, 7, 25, 50])
@pytest.mark.parametrize("fraction", [0.14, 0.25, 0.28, 0.5, 0.56, 0.99, 1.0])
def test_count_is_the_ceiling_of_the_exact_share(m, fraction):
    # exact rational arithmetic as the reference: fraction is a short decimal, so f·m = (100·f)·m / 100
    hundredths = round(fraction * 100)
    expected = -(-hundredths * m // 100)
    kept = correction_subset(list(range(100, 100 + m)), fraction, seed=3, step=4)
    assert len(kept) == expected
    assert kept <= set(range(100, 100 + m))


def test_draw_is_uniform_and_depends_on_seed_and_step():
    eligible = [2, 5, 7, 11]
    counts = Counter()
    for step in range(4000):
        counts.update(correction_subset(eligible, 0.5, seed=0, step=step))
    # each row is kept with probability 1/2: 2000 of 4000 expected, SD sqrt(4000/4) ≈ 31.6; 6 SD apart fails
    assert set(counts) == set(eligible)
    assert all(abs(c - 2000) < 6 * math.sqrt(1000) for c in counts.values())
    assert correction_subset(eligible, 0.5, 0, 1) == correction_subset(eligible, 0.5, 0, 1)
    draws = {frozenset(correction_subset(eligible, 0.5, seed, 1)) for seed in range(20)}
    assert len(draws) > 1


def test_kept_rows_keep_their_references_and_prompts():
    groups = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    correct = [True, False, False, False, False, True, False, False, False, False, False, False]
    responses, messages = batch(groups)
    full = plan_corrections(groups, correct, messages, responses, decode, IBPOConfig(), step=7)
    half = plan_corrections(groups, correct, messages, responses, decode, IBPOConfig(correction_fraction=0.5), step=7)
    # mixed groups only (the default): rows 1, 2, 3, 4, 6, 7 are eligible; ceil(0.5 * 6) = 3 of them are corrected
    assert [r.target_row for r in full] == [1, 2, 3, 4, 6, 7]
    kept = correction_subset([1, 2, 3, 4, 6, 7], 0.5, seed=0, step=7)
    assert [r.target_row for r in half] == sorted(kept) and len(kept) == 3
    by_row = {r.target_row: r for r in full}
    for r in half:
        assert r.reference_rows == by_row[r.target_row].reference_rows
        assert r.messages == by_row[r.target_row].messages  # fixed candidate order: the same prompt


def test_a_row_left_uncorrected_is_trained_as_in_gspo():
    groups = [0, 0, 0, 0]
    correct = [True, False, False, False]
    responses, messages = batch(groups)
    cfg = IBPOConfig(variant="mask", lam=0.0, correction_fraction=0.25)
    requests = plan_corrections(groups, correct, messages, responses, decode, cfg, step=0)
    assert len(requests) == 1  # ceil(0.25 * 3)
    target = requests[0].target_row
    # the correction is right and changes one token of three: a local fix
    fixed = list(responses[target])
    fixed[1] = 99
    outcome = shape_batch(requests, [fixed], [True], responses, correct, cfg)
    for row in (1, 2, 3):
        if row == target:
            assert outcome.delta[row] == pytest.approx(cfg.beta)
            assert outcome.token_masks[row].tolist() != [1.0, 1.0, 1.0]
        else:
            assert outcome.delta[row] == 0.0
            assert outcome.token_masks[row].tolist() == [1.0, 1.0, 1.0]
    assert np.all(outcome.token_masks[0] == 1.0)
