"""evaluation.stats against slow, obviously-correct references: pass@k by enumerating k-subsets, bootstrap
means by explicit indexing, interval coverage on data with a known mean, and the paired test's behaviour
under a true and a null difference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.stats import (
    avg_at_k_per_problem,
    best_of_n_choice,
    best_of_n_per_problem,
    bootstrap_ci,
    bootstrap_means,
    draw_bootstrap_indices,
    paired_bootstrap_test,
    paired_difference,
    pass_at_k,
    pass_at_k_per_problem,
    seeds_for_power,
    student_t_cdf,
    student_t_quantile,
    t_interval,
    t_test_p_value,
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


# ----------------------------------------------------------------------------------------------------------
# Student t over seeds


def _binomial_tolerance(p: float, trials: int, z: float = 3.5) -> float:
    """Half-width of a z-sigma binomial band around the nominal rate ``p`` for ``trials`` simulations."""
    return z * (p * (1 - p) / trials) ** 0.5


def _t_cdf_by_integration(t: float, df: int, steps: int = 200_000) -> float:
    """Slow reference: 0.5 + ∫_0^t of Student's density (midpoint rule)."""
    import math
    const = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    x = (np.arange(steps) + 0.5) * (abs(t) / steps)
    area = float(np.sum(const * (1 + x * x / df) ** (-(df + 1) / 2)) * abs(t) / steps)
    return 0.5 + area if t >= 0 else 0.5 - area


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10, 29])
@pytest.mark.parametrize("t", [-3.1, -0.4, 0.0, 0.9, 2.2, 6.0])
def test_student_t_cdf_matches_numerical_integration(df, t):
    assert student_t_cdf(t, df) == pytest.approx(_t_cdf_by_integration(t, df), abs=2e-7)


def test_student_t_quantiles_match_tables():
    # two-sided 95% critical values (any statistics table)
    for df, value in [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (24, 2.064), (30, 2.042)]:
        assert student_t_quantile(0.975, df) == pytest.approx(value, abs=5e-4)
    assert student_t_quantile(0.025, 4) == pytest.approx(-2.776, abs=5e-4)
    with pytest.raises(ValueError, match="df"):
        student_t_cdf(1.0, 0)


@pytest.mark.parametrize("seeds", [2, 5, 25])
def test_t_interval_has_its_stated_coverage(seeds):
    """95% t-intervals over seeds cover the true mean in 95% ± 3.5 binomial SE of 4000 seeded simulations.
    Per-seed values are accuracies on 512 problems of a policy whose true accuracy varies by seed (between-
    seed SD 0.05), i.e. the comparison's own situation."""
    rng = np.random.default_rng(seeds)
    trials, covered = 4000, 0
    for _ in range(trials):
        p = np.clip(0.7 + rng.normal(0, 0.05, seeds), 0, 1)
        values = rng.binomial(512, p) / 512
        ci = t_interval(values)
        covered += ci.low <= 0.7 <= ci.high
    assert abs(covered / trials - 0.95) <= _binomial_tolerance(0.95, trials)


def test_seed_bootstrap_of_two_seeds_is_not_a_95_percent_interval():
    """Why the comparison reports t-intervals: a percentile bootstrap over 2 seeds is their range, which
    covers the mean half the time."""
    rng = np.random.default_rng(3)
    trials = 1000
    covered = sum(
        (lambda ci: ci.low <= 0.0 <= ci.high)(bootstrap_ci(rng.normal(0, 1, 2)[:, None], num_boot=200, seed=t))
        for t in range(trials))
    assert abs(covered / trials - 0.5) <= _binomial_tolerance(0.5, trials)


def test_paired_difference_uses_the_pairing_and_has_its_coverage():
    rng = np.random.default_rng(4)
    seed_effect = rng.normal(0, 0.1, 8)  # large, shared by both arms of a seed
    b = 0.6 + seed_effect
    a = b + 0.03 + rng.normal(0, 0.005, 8)
    d = paired_difference(a, b)
    assert d.diff == pytest.approx(np.mean(a - b))
    assert d.low > 0 and d.p_value < 1e-4 and d.correlation > 0.95
    # unpaired, the same arms are indistinguishable
    ua, ub = t_interval(a), t_interval(b)
    assert ua.low < ub.high
    # coverage of the paired interval
    trials, covered = 4000, 0
    for _ in range(trials):
        shared = rng.normal(0, 0.1, 6)
        x = 0.6 + shared + rng.normal(0, 0.03, 6)
        y = 0.55 + shared + rng.normal(0, 0.03, 6)
        r = paired_difference(x, y)
        covered += r.low <= 0.05 <= r.high
    assert abs(covered / trials - 0.95) <= _binomial_tolerance(0.95, trials)
    with pytest.raises(ValueError, match="one value per seed"):
        paired_difference([1.0, 2.0], [1.0])


def test_paired_t_test_null_rejection_rate_is_alpha():
    rng = np.random.default_rng(6)
    trials = 4000
    rejections = sum(paired_difference(rng.normal(0, 1, 10), rng.normal(0, 1, 10)).p_value < 0.05
                     for _ in range(trials))
    assert abs(rejections / trials - 0.05) <= _binomial_tolerance(0.05, trials)


def test_paired_bootstrap_pairs_seeds_when_it_can():
    rng = np.random.default_rng(8)
    problems = rng.random(40)
    seed_effect = np.array([-0.15, 0.0, 0.15])[:, None]
    b = np.clip(problems + seed_effect, 0, 1)
    a = b + 0.02
    test = paired_bootstrap_test(a, b, num_boot=2000)
    # paired seeds and problems: every replicate difference is exactly 0.02
    assert test.ci_low == pytest.approx(0.02) and test.ci_high == pytest.approx(0.02)


def test_seeds_for_power_gives_the_power_it_promises():
    rng = np.random.default_rng(10)
    sd, effect = 0.06, 0.05
    n = seeds_for_power(sd, effect)
    trials = 3000

    def power(k: int) -> float:
        return float(np.mean([paired_difference(rng.normal(effect, sd, k), np.zeros(k)).p_value < 0.05
                              for _ in range(trials)]))

    tol = _binomial_tolerance(0.8, trials)
    assert power(n) >= 0.8 - tol
    assert power(n - 1) <= 0.8 + tol
    assert seeds_for_power(0.0, 0.05) == 2


def _seeds_for_power_by_scan(sd, effect, power, alpha, max_seeds):
    """The original definition: the first n = 2, 3, ... with n >= need(n); None when none up to max_seeds."""
    for n in range(2, max_seeds + 1):
        need = ((student_t_quantile(1 - alpha / 2, n - 1) + student_t_quantile(power, n - 1)) * sd / effect) ** 2
        if n >= need:
            return n
    return None


def test_seeds_for_power_is_the_scan_from_two_on_random_inputs():
    # the search (normal start, doubling, bisection) relies on need(n) never rising with n; checked here against
    # the scan on random inputs, power and alpha anywhere in (0, 1) (power < 0.5 and power < alpha/2 included)
    rng = np.random.default_rng(12)
    answers = []
    for _ in range(150):
        sd, effect = float(rng.uniform(0, 1)), float(rng.uniform(0.05, 1.0))
        power, alpha = float(rng.uniform(0.01, 0.99)), float(rng.uniform(0.001, 0.5))
        max_seeds = int(rng.integers(2, 120))
        expected = _seeds_for_power_by_scan(sd, effect, power, alpha, max_seeds)
        assert seeds_for_power(sd, effect, power, alpha, max_seeds) == expected, (sd, effect, power, alpha, max_seeds)
        answers.append(expected)
    assert sum(a is None for a in answers) > 10 and sum(a is not None and a > 5 for a in answers) > 30


def test_seeds_for_power_beyond_max_seeds_is_none_and_fast():
    # before: a scan to 100,000 that took minutes, then 100000 returned as if it sufficed
    import time

    start = time.perf_counter()
    assert seeds_for_power(0.1, 1e-9) is None
    assert seeds_for_power(0.3, 0.01, max_seeds=500) is None  # needs ~7066
    assert time.perf_counter() - start < 1.0
    assert seeds_for_power(0.3, 0.01, max_seeds=20_000) == 7066
    with pytest.raises(ValueError, match="sd_diff"):
        seeds_for_power(float("nan"), 0.05)  # before: NaN failed every test and scanned to max_seeds


def test_a_t_test_over_equal_differences_has_no_p_value():
    # before: p = 0 when every seed's difference was the same nonzero value ("significant" from two seeds both one
    # problem apart), and 1 when they were all 0; the consumers special-cased SD 0 out of Holm and the wins count
    for a, b in (([0.6, 0.7, 0.8], [0.55, 0.65, 0.75]), ([0.6, 0.7], [0.6, 0.7])):
        d = paired_difference(a, b)
        assert d.sd_diff == pytest.approx(0.0, abs=1e-15) and np.isnan(d.p_value)
    assert np.isnan(t_test_p_value(0.05, 0.0, 4)) and np.isnan(t_test_p_value(0.0, 0.0, 4))
    assert t_test_p_value(0.0, 0.1, 4) == 1.0
    assert t_test_p_value(0.1, 0.1, 4) == pytest.approx(2 * (1 - student_t_cdf(1.0, 4)))


def test_paired_difference_matches_scipy_on_random_inputs():
    import scipy.stats as scipy_stats  # a test extra (setup.py): the reference is never skipped

    rng = np.random.default_rng(13)
    for _ in range(200):
        n = int(rng.integers(2, 40))
        a, b = rng.normal(0.5, 0.1, n), rng.normal(0.5, 0.1, n) + rng.normal(0, 0.05)
        d = paired_difference(a, b, confidence=0.9)
        ref = scipy_stats.ttest_rel(a, b)
        assert d.p_value == pytest.approx(ref.pvalue, rel=1e-6, abs=1e-12)
        low, high = ref.confidence_interval(0.9)
        assert (d.low, d.high) == pytest.approx((low, high), rel=1e-6)
