"""Evaluation statistics as pure functions: avg@k, unbiased pass@k, Best-of-N selection without a verifier,
t-intervals over seeds and paired differences to a baseline (the comparison's primary statistics), the
number of seeds a power target needs, bootstrap confidence intervals over problems and seeds, and a paired
bootstrap test (paper §5, Table 1: "mean and 95% bootstrap CI over 5 random seeds; paired bootstrap tests").

**Which interval to report.** Training seeds are the unit of replication: the between-seed spread of a
trained policy includes the spread of the evaluation problems' mean, so an interval over seeds already
contains the problem noise. :func:`t_interval` (Student t over the per-seed values) and
:func:`paired_difference` (t over the per-seed differences A_s − B_s of arms that share seed s: warm
start, data order and sampling streams) have their stated coverage for normal per-seed values and close
to it for means of hundreds of problems (tests/unit/test_evaluation_stats.py checks 95% coverage by
simulation). A percentile bootstrap over a handful of seeds does not: with 2 seeds its "95%" interval is
the seeds' range, a 50% interval. Use the bootstrap functions for one run's problems (one seed) or many
seeds (>= 20).

Shapes: a run's scores are a ``(num_problems, k)`` array (one row per problem, one column per sample);
several runs of one method (seeds) stack to ``(num_seeds, num_problems)`` per-problem values. Problems are
the same across seeds and across the two methods of a paired test (rows are matched by problem id by
the caller).

Bootstrap conventions (**Decision**, documented here once):
- Resampling is hierarchical: each replicate draws problems with replacement and, independently, seeds
  with replacement; the statistic is the mean of the resampled ``seeds × problems`` block. With one seed
  this is the ordinary bootstrap over problems.
- The interval is the percentile interval of the replicate means.
- The paired test resamples the *same* problems for both methods and, when both have the same number of
  seeds, the *same* seeds (seed s of A is paired with seed s of B: same warm start, data order and sampling
  streams); with different seed counts the seeds cannot be paired and are resampled per method. It reports the two-sided p-value of the
  centred bootstrap: p = (1 + #{|d* − d̂| ≥ |d̂|}) / (B + 1), i.e. the bootstrap distribution of
  d* − d̂ stands in for the null distribution of d̂ (Efron & Tibshirani 1993, §16.4).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Sequence

import math
from statistics import NormalDist

import numpy as np

# ----------------------------------------------------------------------------------------------------------
# Per-problem metrics


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k of one problem (Chen et al. 2021, Codex paper Eq. 1): 1 − C(n−c, k) / C(n, k).

    Computed as the stable product 1 − Π_{i=n−c+1}^{n} (1 − k/i). Raises on k > n (the estimator is
    undefined) or counts out of range.
    """
    n, c = int(num_samples), int(num_correct)
    if not 0 <= c <= n:
        raise ValueError(f"num_correct={c} must lie in [0, num_samples={n}]")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= num_samples; got k={k}, num_samples={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k_per_problem(correct: np.ndarray, k: int) -> np.ndarray:
    """pass@k of every row of a ``(num_problems, n)`` 0/1 matrix."""
    correct = _as_matrix(correct, "correct")
    n = correct.shape[1]
    counts = (correct >= 0.5).sum(axis=1)
    return np.array([pass_at_k(n, int(c), k) for c in counts], dtype=np.float64)


def avg_at_k_per_problem(scores: np.ndarray) -> np.ndarray:
    """Mean score of every row of a ``(num_problems, k)`` matrix (avg@k per problem)."""
    return _as_matrix(scores, "scores").mean(axis=1)


def _as_matrix(values: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (num_problems, k) matrix; got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return array


# ----------------------------------------------------------------------------------------------------------
# Best-of-N without a verifier

BEST_OF_N_METHODS = ("majority", "logprob")


def best_of_n_choice(answers: Sequence[str | None], mean_logprobs: Sequence[float], method: str) -> int:
    """Index of the sample Best-of-N keeps among N candidates, chosen without the verifier.

    ``majority``: the most frequent extracted final answer (``None`` / empty = no answer, never voted
    for); ties between answers, and the choice among the samples that give the winning answer, go to
    the highest mean token log-prob. With no answer at all it falls back to ``logprob``.
    ``logprob``: the sample with the highest mean token log-prob under the model (its own confidence;
    length-normalised so short degenerate outputs are not favoured by sum-of-log-probs).
    """
    if len(answers) != len(mean_logprobs) or not answers:
        raise ValueError(f"need one answer and one log-prob per candidate; got {len(answers)}, {len(mean_logprobs)}")
    if method not in BEST_OF_N_METHODS:
        raise ValueError(f"Best-of-N method must be one of {BEST_OF_N_METHODS}, got {method!r}")
    logp = np.asarray(mean_logprobs, dtype=np.float64)
    if np.isnan(logp).any():
        raise ValueError("mean_logprobs contains NaN")
    candidates = list(range(len(answers)))
    if method == "majority":
        votes = Counter(a for a in answers if a)
        if votes:
            top = max(votes.values())
            winners = {a for a, v in votes.items() if v == top}
            candidates = [i for i, a in enumerate(answers) if a in winners]
    return max(candidates, key=lambda i: (logp[i], -i))


def best_of_n_per_problem(
    correct: np.ndarray,
    answers: Sequence[Sequence[str | None]],
    mean_logprobs: np.ndarray,
    n: int,
    method: str,
) -> np.ndarray:
    """Best-of-N accuracy per problem from k already-drawn samples: the k samples of a problem are cut
    into ⌊k/n⌋ disjoint blocks of n (in sample order), one sample is kept per block by
    :func:`best_of_n_choice`, and the kept samples' correctness is averaged."""
    correct = _as_matrix(correct, "correct")
    logp = np.asarray(mean_logprobs, dtype=np.float64)
    num_problems, k = correct.shape
    if logp.shape != correct.shape or len(answers) != num_problems:
        raise ValueError(f"answers/log-probs must match correct's shape {correct.shape}")
    if not 1 <= n <= k:
        raise ValueError(f"Best-of-N needs 1 <= N <= k; got N={n}, k={k}")
    blocks = k // n
    out = np.zeros(num_problems, dtype=np.float64)
    for p in range(num_problems):
        kept = []
        for b in range(blocks):
            lo = b * n
            choice = best_of_n_choice(list(answers[p][lo:lo + n]), logp[p, lo:lo + n], method)
            kept.append(correct[p, lo + choice])
        out[p] = float(np.mean(kept))
    return out


# ----------------------------------------------------------------------------------------------------------
# Bootstrap


@dataclass(frozen=True)
class ConfidenceInterval:
    """Mean of a ``seeds × problems`` matrix with a percentile bootstrap interval."""

    mean: float
    low: float
    high: float
    confidence: float
    num_boot: int
    num_seeds: int
    num_problems: int

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PairedTest:
    """Paired bootstrap comparison of method A against method B on the same problems."""

    mean_a: float
    mean_b: float
    diff: float  # mean_a − mean_b
    ci_low: float
    ci_high: float
    p_value: float  # two-sided, centred bootstrap
    confidence: float
    num_boot: int
    num_problems: int

    def as_dict(self) -> dict:
        return asdict(self)


def _as_seed_matrix(values: np.ndarray, name: str) -> np.ndarray:
    """``(num_problems,)`` → ``(1, num_problems)``; ``(num_seeds, num_problems)`` kept; checked finite."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name} must be (num_problems,) or (num_seeds, num_problems); got shape {np.shape(values)}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return array


def draw_bootstrap_indices(num_items: int, num_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``(num_boot, num_items)`` indices drawn uniformly with replacement."""
    return rng.integers(0, num_items, size=(num_boot, num_items))


def _counts(indices: np.ndarray, num_items: int) -> np.ndarray:
    """Per replicate, how often each item was drawn: ``(num_boot, num_items)``."""
    num_boot = indices.shape[0]
    flat = (indices + num_items * np.arange(num_boot)[:, None]).ravel()
    return np.bincount(flat, minlength=num_boot * num_items).reshape(num_boot, num_items).astype(np.float64)


def bootstrap_means(values: np.ndarray, seed_indices: np.ndarray, problem_indices: np.ndarray) -> np.ndarray:
    """Replicate means of ``values[seeds_b][:, problems_b]`` for every replicate b, vectorised as
    w_s(b)ᵀ V w_p(b) / (S·P) with the draw counts w (no ``B × S × P`` array is built)."""
    values = _as_seed_matrix(values, "values")
    num_seeds, num_problems = values.shape
    ws = _counts(np.asarray(seed_indices), num_seeds)
    wp = _counts(np.asarray(problem_indices), num_problems)
    return np.einsum("bs,sp,bp->b", ws, values, wp) / (num_seeds * num_problems)


def bootstrap_ci(values: np.ndarray, num_boot: int = 10_000, confidence: float = 0.95, seed: int = 0
                 ) -> ConfidenceInterval:
    """Mean over seeds and problems with a percentile bootstrap CI (hierarchical: problems and seeds
    resampled independently; one seed = bootstrap over problems)."""
    values = _as_seed_matrix(values, "values")
    _check_boot(num_boot, confidence)
    rng = np.random.default_rng(seed)
    num_seeds, num_problems = values.shape
    problem_idx = draw_bootstrap_indices(num_problems, num_boot, rng)
    seed_idx = draw_bootstrap_indices(num_seeds, num_boot, rng) if num_seeds > 1 else np.zeros((num_boot, 1), int)
    reps = bootstrap_means(values, seed_idx, problem_idx)
    low, high = np.quantile(reps, [(1 - confidence) / 2, (1 + confidence) / 2])
    return ConfidenceInterval(float(values.mean()), float(low), float(high), confidence, num_boot,
                              num_seeds, num_problems)


def paired_bootstrap_test(a: np.ndarray, b: np.ndarray, num_boot: int = 10_000, confidence: float = 0.95,
                          seed: int = 0) -> PairedTest:
    """Paired bootstrap of mean(A) − mean(B): problems resampled jointly for A and B; seeds resampled
    jointly when A and B have the same number of seeds (row s of ``a`` and of ``b`` is the same training
    seed), independently per method otherwise. ``a`` and ``b`` are ``(num_problems,)`` or
    ``(num_seeds, num_problems)`` with the same problems in the same column order."""
    a = _as_seed_matrix(a, "a")
    b = _as_seed_matrix(b, "b")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"paired test needs the same problems: A has {a.shape[1]}, B has {b.shape[1]}")
    _check_boot(num_boot, confidence)
    rng = np.random.default_rng(seed)
    num_problems = a.shape[1]
    problem_idx = draw_bootstrap_indices(num_problems, num_boot, rng)

    def seeds_of(m: np.ndarray) -> np.ndarray:
        return draw_bootstrap_indices(m.shape[0], num_boot, rng) if m.shape[0] > 1 else np.zeros((num_boot, 1), int)

    seeds_a = seeds_of(a)
    seeds_b = seeds_a if a.shape[0] == b.shape[0] else seeds_of(b)  # paired seeds when they can be
    reps = bootstrap_means(a, seeds_a, problem_idx) - bootstrap_means(b, seeds_b, problem_idx)
    diff = float(a.mean() - b.mean())
    low, high = np.quantile(reps, [(1 - confidence) / 2, (1 + confidence) / 2])
    extreme = int(np.sum(np.abs(reps - diff) >= abs(diff) - 1e-12))
    p_value = (1 + extreme) / (num_boot + 1)
    return PairedTest(float(a.mean()), float(b.mean()), diff, float(low), float(high), float(min(1.0, p_value)),
                      confidence, num_boot, num_problems)


def _check_boot(num_boot: int, confidence: float) -> None:
    if num_boot < 100:
        raise ValueError(f"num_boot={num_boot} is too small for a percentile interval (use >= 100)")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence} must lie in (0, 1)")


# ----------------------------------------------------------------------------------------------------------
# Student t over seeds (the primary statistics of lab/scripts/compare_methods.py)


def student_t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with an integer ``df`` >= 1, in closed form (Abramowitz & Stegun 26.7.3/4:
    with θ = atan(t/√ν), P(|T| <= t) = sinθ Σ_{k<ν/2} c_k cos^{2k}θ for even ν, and
    (2/π)(θ + sinθ Σ_{k<(ν−1)/2} c'_k cos^{2k+1}θ) for odd ν)."""
    if int(df) != df or df < 1:
        raise ValueError(f"df={df} must be an integer >= 1")
    df = int(df)
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c * c * (2 * k - 1) / (2 * k)
            total += term
        two_sided = s * total
    else:
        total = 0.0
        if df > 1:
            term = c
            total = term
            for k in range(1, (df - 1) // 2):
                term *= c * c * (2 * k) / (2 * k + 1)
                total += term
        two_sided = (2.0 / math.pi) * (theta + s * total)
    two_sided = min(max(two_sided, 0.0), 1.0)
    return 0.5 + 0.5 * two_sided if t >= 0 else 0.5 - 0.5 * two_sided


def student_t_quantile(q: float, df: int) -> float:
    """The ``q`` quantile of Student's t (bisection on :func:`student_t_cdf`, |error| < 1e-10)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"q={q} must lie in (0, 1)")
    if q < 0.5:
        return -student_t_quantile(1.0 - q, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < q:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if student_t_cdf(mid, df) < q:
            low = mid
        else:
            high = mid
        if high - low < 1e-10:
            break
    return 0.5 * (low + high)


@dataclass(frozen=True)
class SeedInterval:
    """Mean over seeds with a Student-t interval (``low``/``high`` NaN with fewer than 2 seeds)."""

    mean: float
    low: float
    high: float
    sd: float  # between-seed standard deviation (ddof = 1)
    seeds: int
    confidence: float

    def as_dict(self) -> dict:
        return asdict(self)


def t_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> SeedInterval:
    """Mean of per-seed values with the Student-t interval mean ± t_{(1+c)/2, n−1} · sd/√n."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if not np.isfinite(x).all():
        raise ValueError("t_interval: values contain NaN or infinite values")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence} must lie in (0, 1)")
    n = x.size
    if n == 0:
        return SeedInterval(float("nan"), float("nan"), float("nan"), float("nan"), 0, confidence)
    mean = float(x.mean())
    if n < 2:
        return SeedInterval(mean, float("nan"), float("nan"), float("nan"), 1, confidence)
    sd = float(x.std(ddof=1))
    half = student_t_quantile((1.0 + confidence) / 2.0, n - 1) * sd / math.sqrt(n)
    return SeedInterval(mean, mean - half, mean + half, sd, n, confidence)


def equal_but_for_rounding(values: np.ndarray, scale: float) -> bool:
    """Whether ``values`` are all equal but for floating-point rounding of quantities of magnitude ``scale``: a
    spread of at most 1e-12 · scale. The per-seed differences of accuracies that all differ by one problem
    (0.7 − 0.65 and 0.6 − 0.55) differ by ~1e-17, which a t test would read as p ≈ 0; they are equal."""
    values = np.asarray(values, dtype=np.float64)
    return values.size == 0 or float(np.ptp(values)) <= 1e-12 * abs(scale)


def t_test_p_value(estimate: float, standard_error: float, df: int) -> float:
    """Two-sided p of the t test of a zero mean: 2 · (1 − F_t(|estimate| / standard_error, df)).

    **Decision** (one place for every t test of the analysis): with ``standard_error`` 0, i.e. all the values the
    test is over are equal (every seed's paired difference the same), the statistic is ±∞ or 0/0 and says nothing
    about the sampling variation the test is for, so p is **undefined: NaN**, never 0 (a "significant" win from two
    seeds both one problem apart) nor 1. NaN fails every ``p < alpha``; a Holm family leaves it out
    (:func:`lab.analysis.curves_report.holm`); tables print it as ``-`` beside the interval text's "zero spread"."""
    if not (math.isfinite(estimate) and math.isfinite(standard_error)) or standard_error < 0 or df < 1:
        return float("nan")
    if standard_error == 0:
        return float("nan")
    p = 2.0 * (1.0 - student_t_cdf(abs(estimate) / standard_error, int(df)))
    return float(min(max(p, 0.0), 1.0))


@dataclass(frozen=True)
class PairedDifference:
    """Arm A minus baseline B over seeds that pair them (same seed, warm start, data order)."""

    mean_a: float
    mean_b: float
    diff: float  # mean over seeds of (A_s − B_s)
    low: float  # Student-t interval of the mean difference
    high: float
    sd_diff: float  # SD over seeds of A_s − B_s (ddof = 1)
    sd_a: float
    sd_b: float
    correlation: float  # Pearson correlation of A_s and B_s over seeds (how much pairing removes)
    p_value: float  # two-sided paired t-test of mean difference 0; NaN when undefined (:func:`t_test_p_value`)
    seeds: int
    confidence: float

    def as_dict(self) -> dict:
        return asdict(self)


def paired_difference(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                      confidence: float = 0.95) -> PairedDifference:
    """Paired t over seeds: ``a[s]`` and ``b[s]`` are the same seed's values in the two arms. When every seed's
    difference is the same (:func:`equal_but_for_rounding`), ``sd_diff`` is 0, the interval has width 0 and
    ``p_value`` is NaN (:func:`t_test_p_value`); with fewer than two seeds everything but the means is NaN."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired_difference needs one value per seed in both arms; got {a.size} and {b.size}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired_difference: values contain NaN or infinite values")
    d = t_interval(a - b, confidence)
    nan = float("nan")
    if a.size < 2:
        return PairedDifference(float(a.mean()) if a.size else nan, float(b.mean()) if b.size else nan, d.mean,
                                nan, nan, nan, nan, nan, nan, nan, int(a.size), confidence)
    if equal_but_for_rounding(a - b, max(float(np.abs(a).max()), float(np.abs(b).max()))):
        # every seed's difference the same: SD 0 exactly (not ~1e-17 of rounding, which gave p ≈ 0), no p
        d = SeedInterval(d.mean, d.mean, d.mean, 0.0, d.seeds, confidence)
    sd_a, sd_b = float(a.std(ddof=1)), float(b.std(ddof=1))
    corr = float(np.corrcoef(a, b)[0, 1]) if sd_a > 0 and sd_b > 0 else nan
    p = t_test_p_value(d.mean, d.sd / math.sqrt(a.size), a.size - 1)
    return PairedDifference(float(a.mean()), float(b.mean()), d.mean, d.low, d.high, d.sd, sd_a, sd_b, corr,
                            p, int(a.size), confidence)


def _seeds_need(n: int, sd_diff: float, effect: float, power: float, alpha: float) -> float:
    """((t_{1−α/2, n−1} + t_{power, n−1}) · sd/effect)²: the seeds the t approximation asks for at n seeds."""
    t_sum = student_t_quantile(1 - alpha / 2, n - 1) + student_t_quantile(power, n - 1)
    return (t_sum * sd_diff / effect) ** 2


def seeds_for_power(sd_diff: float, effect: float, power: float = 0.8, alpha: float = 0.05,
                    max_seeds: int = 100_000) -> int | None:
    """Seeds a two-sided paired t-test at level ``alpha`` needs to detect a mean difference ``effect`` with
    probability ``power`` when the per-seed differences have SD ``sd_diff``: the smallest n >= 2 with
    n >= need(n) = ((t_{1−α/2, n−1} + t_{power, n−1}) · sd/effect)² (the usual t approximation of the noncentral
    t). **None when no n <= ``max_seeds`` suffices** (the answer exceeds ``max_seeds``; callers say so).

    Search, not a scan from 2 (which took minutes for a tiny effect): need(n) never rises with n (Student t
    quantiles spread less as the degrees of freedom grow, towards the normal's), so n − need(n) rises by at least 1
    per seed and "n >= need(n)" holds from one n on. need(n) >= the normal need ((z_{1−α/2} + z_power) · sd/effect)²
    starts the search; doubling steps then bisection find the first n, the same n a scan from 2 finds."""
    if not (sd_diff >= 0 and effect > 0 and math.isfinite(effect)):
        raise ValueError(f"need finite sd_diff >= 0 and effect > 0; got {sd_diff}, {effect}")
    if not (0.0 < power < 1.0 and 0.0 < alpha < 1.0):
        raise ValueError(f"power={power} and alpha={alpha} must lie in (0, 1)")
    if int(max_seeds) != max_seeds or max_seeds < 2:
        raise ValueError(f"max_seeds={max_seeds} must be an integer >= 2")
    max_seeds = int(max_seeds)
    if not math.isfinite(sd_diff):
        return None

    def enough(n: int) -> bool:
        return n >= _seeds_need(n, sd_diff, effect, power, alpha)

    normal = NormalDist()
    z_sum = normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)
    normal_need = (z_sum * sd_diff / effect) ** 2
    # one below the normal bound, for the t quantiles' bisection error (|error| < 1e-10) where t ≈ z
    start = 2 if normal_need < 3 else int(min(math.ceil(normal_need * (1 - 1e-9)) - 1, max_seeds + 1))
    if start > max_seeds:
        return None
    if enough(start):
        return start
    low, step = start, 1  # enough(low) is False
    while True:
        high = min(start + step, max_seeds)
        if enough(high):
            break
        if high == max_seeds:
            return None
        low, step = high, step * 2
    while high - low > 1:  # enough(high) and not enough(low)
        mid = (low + high) // 2
        if enough(mid):
            high = mid
        else:
            low = mid
    return high


__all__ = [
    "student_t_cdf", "student_t_quantile", "SeedInterval", "t_interval", "t_test_p_value", "equal_but_for_rounding",
    "PairedDifference",
    "paired_difference", "seeds_for_power", "interval_text", "no_interval_reason", "p_value_text",
    "pass_at_k", "pass_at_k_per_problem", "avg_at_k_per_problem", "best_of_n_choice", "best_of_n_per_problem",
    "BEST_OF_N_METHODS", "ConfidenceInterval", "PairedTest", "draw_bootstrap_indices", "bootstrap_means",
    "bootstrap_ci", "paired_bootstrap_test",
]


def no_interval_reason(mean: float, low: float, high: float, n: int, unit: str = "seeds") -> str | None:
    """Why ``[low, high]`` is not an interval to print, or ``None`` when it is one: fewer than two independent
    units (``n = 1: no interval``), bounds that are not numbers (``no interval``), or no spread among the units
    (``zero spread over n seeds: no interval``: a t interval of width 0 is not a certainty)."""
    if n < 2:
        return f"n = {n}: no interval"
    if not (math.isfinite(low) and math.isfinite(high)):
        return "no interval"
    if high - low <= 1e-12 * max(1.0, abs(mean)):
        return f"zero spread over {n} {unit}: no interval"
    return None


def interval_text(mean: float, low: float, high: float, n: int, fmt: str = "{:.3f}", unit: str = "seeds",
                  bounds: tuple[float, float] | None = None) -> str:
    """``mean [low, high]``, or the mean alone with why there is no interval (:func:`no_interval_reason`): fewer
    than two independent units (``n = 1: no interval``), or no spread among them (``zero spread over n seeds: no
    interval``). ``bounds``: the range the quantity lives in (e.g. (0, 1) for an accuracy); an interval reaching
    outside it is cut to it and marked ``(clipped to [0, 1])``. Every report's interval cell is this text."""
    point = fmt.format(mean)
    reason = no_interval_reason(mean, low, high, n, unit)
    if reason is not None:
        return f"{point} ({reason})"
    note = ""
    if bounds is not None and (low < bounds[0] or high > bounds[1]):
        low, high = max(low, bounds[0]), min(high, bounds[1])
        note = f" (clipped to [{bounds[0]:g}, {bounds[1]:g}])"
    return f"{point} [{fmt.format(low)}, {fmt.format(high)}]{note}"


def p_value_text(p: float | None, fmt: str = "{:.3f}") -> str:
    """A table's p cell: ``fmt`` of p, or ``-`` where there is no p (``None``, or NaN: undefined,
    :func:`t_test_p_value`)."""
    return "-" if p is None or not math.isfinite(p) else fmt.format(p)
