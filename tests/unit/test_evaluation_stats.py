"""analysis.evaluation_stats against slow, obviously-correct references: pass@k by enumerating k-subsets, bootstrap
means by explicit indexing, interval coverage on data with a known mean, and the paired test's behaviour
under a true and a null difference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.evaluation_stats import (
    avg_at_k_per_problem,
    best_of_n_choice,
    best_of_n_per_problem,
    bootstrap_ci,
    bootstrap_means,
    draw_bootstrap_indices,
    paired_bootstrap_test,
    pass_at_k,
    pass_at_k_per_problem,
)


def pass_at_k_by_enumeration(outcomes: list[int], k: int) -> float:
    """Fraction of the size-k subsets of the n samples that contain at least one correct sample."""
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_subset_enumeration(args):
    n, c, k = args
    outcomes = [1] * c + [0] * (n - c)
    assert pass_at_k(n, c, k) == pytest.approx(pass_at_k_by_enumeration(outcomes, k), abs=1e-12)


def test_pass_at_k_edge_cases_and_errors():
    assert pass_at_k(64, 0, 8) == 0.0
    assert pass_at_k(64, 64, 1) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="k <= num_samples"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="num_correct"):
        pass_at_k(4, 5, 1)


def test_per_problem_metrics():
    correct = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    np.testing.assert_allclose(avg_at_k_per_problem(correct), [0.25, 1.0, 0.0])
    np.testing.assert_allclose(pass_at_k_per_problem(correct, 2), [0.5, 1.0, 0.0])
    with pytest.raises(ValueError, match="NaN"):
        avg_at_k_per_problem(np.array([[np.nan, 1.0]]))


def test_best_of_n_choice_majority_and_logprob():
    answers = ["5", "7", "5", None, "7", "5"]
    logp = [-1.0, -0.1, -0.5, -0.01, -0.2, -0.9]
    assert best_of_n_choice(answers, logp, "majority") == 2  # "5" wins 3-2; best log-prob among the "5"s
    assert best_of_n_choice(answers, logp, "logprob") == 3  # highest mean log-prob overall
    # tie between answers -> the answer held by the most confident sample
    assert best_of_n_choice(["a", "b"], [-0.3, -0.2], "majority") == 1
    # no answer anywhere -> log-prob
    assert best_of_n_choice([None, "", None], [-3.0, -1.0, -2.0], "majority") == 1
    with pytest.raises(ValueError, match="method"):
        best_of_n_choice(["a"], [0.0], "oracle")


def test_best_of_n_per_problem_uses_disjoint_blocks():
    correct = np.array([[1, 0, 0, 0, 0, 0, 1, 0]], dtype=float)
    answers = [["1", "2", "2", "3", "4", "4", "9", "4"]]
    logp = np.zeros((1, 8))
    # block 1: "2" is the majority -> sample 1 (wrong); block 2: "4" -> sample 4 (wrong)
    assert best_of_n_per_problem(correct, answers, logp, 4, "majority")[0] == 0.0
    logp[0, 0], logp[0, 6] = 1.0, 1.0
    assert best_of_n_per_problem(correct, answers, logp, 4, "logprob")[0] == 1.0
    with pytest.raises(ValueError, match="N <= k"):
        best_of_n_per_problem(correct, answers, logp, 16, "logprob")


def test_bootstrap_means_equal_explicit_indexing():
    rng = np.random.default_rng(3)
    values = rng.random((4, 9))
    seed_idx = draw_bootstrap_indices(4, 50, rng)
    problem_idx = draw_bootstrap_indices(9, 50, rng)
    fast = bootstrap_means(values, seed_idx, problem_idx)
    slow = [values[np.ix_(seed_idx[b], problem_idx[b])].mean() for b in range(50)]
    np.testing.assert_allclose(fast, slow, rtol=1e-12)


def test_bootstrap_ci_one_seed_matches_plain_problem_bootstrap():
    values = np.random.default_rng(0).random(25)
    ci = bootstrap_ci(values, num_boot=2000, seed=7)
    rng = np.random.default_rng(7)
    idx = rng.integers(0, 25, size=(2000, 25))
    reps = values[idx].mean(axis=1)
    assert ci.mean == pytest.approx(values.mean())
    assert ci.low == pytest.approx(np.quantile(reps, 0.025))
    assert ci.high == pytest.approx(np.quantile(reps, 0.975))
    assert ci.low < ci.mean < ci.high


def test_bootstrap_ci_coverage_on_known_mean():
    """95% intervals for the mean of Bernoulli(0.3) problem scores cover 0.3 about 95% of the time."""
    rng = np.random.default_rng(11)
    covered = 0
    trials = 300
    for t in range(trials):
        per_problem = rng.binomial(16, 0.3, size=40) / 16  # 40 problems, avg@16 each
        ci = bootstrap_ci(per_problem, num_boot=500, seed=t)
        covered += ci.low <= 0.3 <= ci.high
    assert 0.88 <= covered / trials <= 0.99


def test_seed_resampling_widens_the_interval_when_seeds_disagree():
    rng = np.random.default_rng(5)
    base = 0.5 + rng.normal(0, 0.05, 30)  # small between-problem spread
    same = np.stack([base] * 5)
    shifted = np.stack([base + d for d in (-0.1, -0.05, 0.0, 0.05, 0.1)])
    w_same = bootstrap_ci(same, num_boot=2000).high - bootstrap_ci(same, num_boot=2000).low
    w_shift = bootstrap_ci(shifted, num_boot=2000).high - bootstrap_ci(shifted, num_boot=2000).low
    assert w_shift > 2.0 * w_same


def test_paired_test_detects_a_real_difference_and_not_a_null_one():
    rng = np.random.default_rng(2)
    difficulty = rng.random(30)
    a = np.clip(difficulty + 0.08 + rng.normal(0, 0.02, 30), 0, 1)
    b = difficulty
    test = paired_bootstrap_test(a, b, num_boot=4000)
    assert test.diff == pytest.approx(a.mean() - b.mean())
    assert test.p_value < 0.01 and test.ci_low > 0
    # pairing matters: the same difference hidden in large between-problem spread is clear only when paired
    null = paired_bootstrap_test(b + rng.normal(0, 0.02, 30), b, num_boot=4000)
    assert null.ci_low < 0 < null.ci_high or null.p_value > 0.01
    identical = paired_bootstrap_test(b, b, num_boot=500)
    assert identical.p_value == 1.0 and identical.diff == 0.0


def test_paired_test_null_p_values_are_not_anticonservative():
    """Under H0 (A and B exchangeable per problem) p < 0.05 should happen about 5% of the time."""
    rng = np.random.default_rng(9)
    rejections = 0
    trials = 200
    for t in range(trials):
        difficulty = rng.random(30)
        a = rng.binomial(8, difficulty) / 8
        b = rng.binomial(8, difficulty) / 8
        rejections += paired_bootstrap_test(a, b, num_boot=400, seed=t).p_value < 0.05
    assert rejections / trials <= 0.11


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="same problems"):
        paired_bootstrap_test(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="num_boot"):
        bootstrap_ci(np.ones(3), num_boot=10)
    with pytest.raises(ValueError, match="values"):
        bootstrap_ci(np.ones((2, 2, 2)))
