"""IBPO's math and localisers against slow, obviously-correct references on random inputs (red team).

Each reference is written out here as a plain loop: an O(nm) Levenshtein DP on token lists, an explicit
per-group mean/population-std loop (ε = 1e-8, singleton and constant groups 0), per-token loops for the masks
and the first divergence, set counting for coverage/precision/recall, a naive longest-common-prefix scan.
Edge cases: groups of size 1, all-equal rewards, empty responses and corrections, identical sequences,
λΔ at its bound, ties.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from lab.analysis.credit_localisation import localise
from ibpo.advantages import (get_mask_sign, group_normalized_advantages, ibpo_sequence_advantages, shaped_rewards,
                             signed_token_mask)
from ibpo.alignment import align, closest_reference_below, normalized_edit_distance, unmodified_positions
from ibpo.diagnostics import theorem_stats
from ibpo.first_divergence import disagreement_mask, divergence_mask, first_divergence
from ibpo.mechanism import advantage_mechanism
from ibpo.prefix_sharing import shared_prefix_lengths


def dp_levenshtein(a: list[int], b: list[int]) -> int:
    """Plain O(nm) dynamic programme."""
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
    return row[len(b)]


def edit_pair(rng: random.Random, vocab: int, longest: int) -> tuple[list[int], list[int]]:
    """A random sequence and either a few random edits of it or an unrelated sequence."""
    a = [rng.randrange(vocab) for _ in range(rng.randrange(0, longest))]
    if rng.random() < 0.5:
        return a, [rng.randrange(vocab) for _ in range(rng.randrange(0, longest))]
    b = list(a)
    for _ in range(rng.randrange(0, 5)):
        p = rng.randrange(len(b) + 1)
        op = rng.randrange(3)
        if op == 0:
            b.insert(p, rng.randrange(vocab))
        elif b:
            p = min(p, len(b) - 1)
            if op == 1:
                b.pop(p)
            else:
                b[p] = rng.randrange(vocab)
    return a, b


def cheapest_alignment_keeping(a: list[int], b: list[int], kept: np.ndarray) -> float:
    """Least Levenshtein cost of an alignment that matches exactly the ``kept`` positions of ``a`` to equal
    tokens of ``b`` (in order) and edits everything else: each gap between matches costs max(gap in a, gap in b).
    ``inf`` when the kept tokens are not a subsequence of ``b``."""
    states = {-1: 0}  # position in b of the last match -> least cost so far
    last_i = -1
    for i in np.flatnonzero(kept).tolist():
        states = {j: min(cost + max(i - last_i - 1, j - jp - 1) for jp, cost in states.items() if jp < j)
                  for j in range(len(b)) if b[j] == a[i] and any(jp < j for jp in states)}
        last_i = i
        if not states:
            return math.inf
    return min(cost + max(len(a) - 1 - last_i, len(b) - 1 - jp) for jp, cost in states.items())


@pytest.mark.parametrize("vocab", [2, 3, 50])
def test_alignment_matches_a_dp_levenshtein(vocab):
    rng = random.Random(vocab)
    for _ in range(600):
        a, b = edit_pair(rng, vocab, 20)
        d = dp_levenshtein(a, b)
        longest = max(len(a), len(b))
        assert normalized_edit_distance(a, b) == (0.0 if longest == 0 else d / longest)
        kept, distance = unmodified_positions(a, b)
        assert distance == d and kept.shape == (len(a),)
        assert cheapest_alignment_keeping(a, b, kept) == d  # U is the kept set of an optimal alignment
        assert align(a, b).d_original == (0.0 if longest == 0 else d / longest)
        assert np.array_equal(align(a, b).unmodified, kept)


def test_alignment_edges():
    assert unmodified_positions([], [])[1] == 0 and align([], []).d_original == 0.0
    assert align([], []).unmodified_ratio == 0.0
    assert align([1, 2, 3], []).d_original == 1.0 and not align([1, 2, 3], []).unmodified.any()
    assert align([], [1, 2]).d_original == 1.0 and align([], [1, 2]).unmodified.shape == (0,)
    same = align([4, 5, 6], [4, 5, 6])
    assert same.d_original == 0.0 and same.unmodified.all() and same.unmodified_ratio == 1.0


def test_alignment_stays_optimal_past_the_score_hint():
    """Past rapidfuzz's banded score hint (32): many edits on a few hundred tokens."""
    rng = random.Random(7)
    for _ in range(40):
        a = [rng.randrange(4) for _ in range(rng.randrange(60, 200))]
        b = list(a)
        for _ in range(rng.randrange(20, 80)):
            p = rng.randrange(len(b))
            if rng.random() < 0.5:
                b[p] = rng.randrange(4)
            else:
                b.insert(p, rng.randrange(4))
        kept, distance = unmodified_positions(a, b)
        assert distance == dp_levenshtein(a, b)
        assert cheapest_alignment_keeping(a, b, kept) == distance


def test_closest_reference_below_matches_a_loop():
    rng = random.Random(3)
    for _ in range(1500):
        corrected = [rng.randrange(3) for _ in range(rng.randrange(0, 10))]
        refs = [[rng.randrange(3) for _ in range(rng.randrange(0, 10))] for _ in range(rng.randrange(0, 4))]
        bound = rng.choice([0.0, 1.0, rng.random(), rng.randrange(0, 10) / rng.randrange(1, 10)])
        expected = None
        for ref in refs:
            longest = max(len(corrected), len(ref))
            d = 0.0 if longest == 0 else dp_levenshtein(corrected, ref) / longest
            if d < bound:
                expected = d
                break
        assert closest_reference_below(corrected, refs, bound) == expected


def loop_advantages(scores: list[float], gids: list, eps: float = 1e-8) -> list[float]:
    """Eq. 23 as the module documents it: population std, ε = 1e-8, 0 for singleton or constant groups."""
    out = [0.0] * len(scores)
    for g in dict.fromkeys(gids):
        rows = [i for i, h in enumerate(gids) if h == g]
        values = [scores[i] for i in rows]
        if len(values) < 2 or max(values) == min(values):
            continue
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        for i in rows:
            out[i] = (scores[i] - mean) / (std + eps)
    return out


def loop_factor(adv: float, delta: float, correct: bool, lam: float, shaping: str) -> float:
    if shaping == "reward_capped":
        return 0.0 if not correct and adv > 0 else 1.0
    if shaping == "advantage":
        return 1.0 - lam * delta if not correct and delta > 0 and adv < 0 else 1.0
    return 1.0


@pytest.mark.parametrize("shaping", ["reward", "reward_capped", "advantage"])
def test_sequence_advantages_match_a_per_group_loop(shaping):
    rng = random.Random(shaping)
    for _ in range(400):
        n = rng.randrange(1, 14)
        gids = [rng.choice(["a", "b", 3, (4,)]) for _ in range(n)]  # includes singletons and constant groups
        correct = [rng.random() < 0.4 for _ in range(n)]
        rewards = [1.0 if c else 0.0 for c in correct]
        lam = rng.choice([0.0, 0.6, 1.0 - 1e-9])
        delta = [0.0 if c else rng.choice([0.0, 0.5, rng.random() * 0.999]) for c in correct]
        got = ibpo_sequence_advantages(torch.tensor(rewards, dtype=torch.float64),
                                       torch.tensor(delta, dtype=torch.float64), torch.tensor(correct), gids, lam,
                                       shaping).tolist()
        scores = rewards if shaping == "advantage" else [r + lam * d for r, d in zip(rewards, delta)]
        adv = loop_advantages(scores, gids)
        expected = [a * loop_factor(a, d, c, lam, shaping) for a, d, c in zip(adv, delta, correct)]
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_group_advantage_edges():
    ones = torch.ones(5, dtype=torch.float64)
    assert group_normalized_advantages(ones, list("abcde")).tolist() == [0.0] * 5  # every group of size 1
    assert group_normalized_advantages(ones * 0.3, ["g"] * 5).tolist() == [0.0] * 5  # all-equal rewards
    # λΔ just below its bound is allowed and stays below a right response's reward
    shaped = shaped_rewards(torch.zeros(2, dtype=torch.float64), torch.tensor([0.5, 0.0], dtype=torch.float64),
                            1.0 / 0.5 - 1e-9)
    assert 0.0 < float(shaped[0]) < 1.0
    with pytest.raises(ValueError, match=r"λΔ must lie in \[0, 1\)"):
        shaped_rewards(torch.zeros(1, dtype=torch.float64), torch.tensor([0.5], dtype=torch.float64), 2.0)


@pytest.mark.parametrize("policy", ["negative_only", "complement_when_positive", "literal"])
def test_signed_token_mask_matches_a_per_token_loop(policy):
    rng = random.Random(policy)
    for _ in range(200):
        bs, length = rng.randrange(1, 5), rng.randrange(1, 6)
        mask = [[float(rng.random() < 0.5) for _ in range(length)] for _ in range(bs)]
        shaped = [rng.random() < 0.6 for _ in range(bs)]
        adv = [rng.choice([-1.5, 0.0, 0.7]) for _ in range(bs)]
        got = signed_token_mask(torch.tensor(adv), torch.tensor(mask), torch.tensor(shaped), get_mask_sign(policy))
        for i in range(bs):
            for t in range(length):
                m = mask[i][t]
                if not shaped[i] or (policy != "literal" and adv[i] == 0.0):
                    expected = 1.0
                elif policy == "literal" or adv[i] < 0:
                    expected = m
                else:
                    expected = 1.0 - m if policy == "complement_when_positive" else 1.0
                assert float(got[i, t]) == expected


def test_first_divergence_and_masks_match_a_loop():
    rng = random.Random(11)
    for _ in range(1000):
        n = rng.randrange(0, 9)
        target = [rng.randrange(3) for _ in range(n)]
        greedy = [rng.randrange(3) for _ in range(n)] if rng.random() < 0.7 else list(target)
        first = next((t for t in range(n) if target[t] != greedy[t]), None)
        assert first_divergence(target, greedy) == first
        assert divergence_mask(n, first).tolist() == ([1.0] * n if first is None else
                                                      [0.0] * first + [1.0] * (n - first))
        differ = [float(a != b) for a, b in zip(target, greedy)]
        assert disagreement_mask(target, greedy).tolist() == (differ if any(differ) else [1.0] * n)


def test_credit_localisation_matches_set_counting():
    rng = random.Random(5)
    for _ in range(800):
        response, correction = edit_pair(rng, 3, 10)
        truth = edit_pair(rng, 3, 10)[1] if rng.random() < 0.5 else list(response)
        reference = rng.choice([list(correction), [rng.randrange(3) for _ in range(3)]])
        lines = np.sort(np.array([rng.randrange(3) for _ in response], dtype=np.int64))
        loc = localise(response, correction, truth, reference, lines, True)
        kept_c = set(np.flatnonzero(unmodified_positions(response, correction)[0]).tolist())
        kept_t = set(np.flatnonzero(unmodified_positions(response, truth)[0]).tolist())
        modified, wrong = set(range(len(response))) - kept_c, set(range(len(response))) - kept_t
        assert (loc.modified, loc.wrong, loc.overlap) == (len(modified), len(wrong), len(modified & wrong))
        if wrong:
            first_line = lines[min(wrong)]
            assert loc.covers_first_error == ({t for t in wrong if lines[t] == first_line} <= modified)
        else:
            assert not loc.covers_first_error and math.isnan(loc.recall)
        assert loc.copy_of_reference == (correction == reference)
        if modified:
            assert loc.precision == len(modified & wrong) / len(modified)


def test_theorem_stats_match_a_per_group_loop():
    rng = random.Random(13)
    for _ in range(500):
        n = rng.randrange(0, 14)
        gids = [rng.randrange(4) for _ in range(n)]
        y = [float(rng.random() < 0.5) for _ in range(n)]
        phi = [0.0 if v else rng.choice([0.0, 0.5]) for v in y]
        stats = theorem_stats(y, phi, gids, 0.6)
        yc, fc = [], []
        for g in dict.fromkeys(gids):
            rows = [i for i in range(n) if gids[i] == g]
            if len(rows) >= 2:
                yc += [y[i] - sum(y[j] for j in rows) / len(rows) for i in rows]
                fc += [phi[i] - sum(phi[j] for j in rows) / len(rows) for i in rows]
        if not yc:
            assert stats.num_groups == 0
            continue
        cov = sum(a * b for a, b in zip(yc, fc)) / len(yc)
        v_phi = sum(b * b for b in fc) / len(fc)
        assert stats.cov_y_phi == pytest.approx(cov, abs=1e-12) and stats.v_phi == pytest.approx(v_phi, abs=1e-12)
        assert stats.lambda_max == pytest.approx(2 * -cov / (v_phi + 1e-8) if -cov > 0 else 0.0, rel=1e-9)
        assert stats.var_unnorm_adv_ibpo == pytest.approx(
            sum((a + 0.6 * b) ** 2 for a, b in zip(yc, fc)) / len(yc), abs=1e-12)


def test_mechanism_positive_mass_matches_a_loop():
    rng = random.Random(17)
    for _ in range(300):
        n = rng.randrange(1, 10)
        gids = [rng.randrange(3) for _ in range(n)]
        correct = [rng.random() < 0.4 for _ in range(n)]
        adv = [rng.choice([-1.0, 0.0, 0.5, 2.0]) for _ in range(n)]
        delta = [0.0 if c else rng.choice([0.0, 0.3]) for c in correct]
        out = advantage_mechanism(adv, correct, delta, gids)
        positive = sum(max(a, 0.0) for a in adv)
        on_wrong = sum(max(a, 0.0) for a, c in zip(adv, correct) if not c)
        assert out.get("positive_adv_mass_on_wrong") == (on_wrong / positive if positive > 0 else None)
        assert out["shaped_wrong_positive"] == sum(1 for a, d, c in zip(adv, delta, correct)
                                                   if not c and d > 0 and a > 0)


def test_shared_prefix_lengths_match_a_naive_scan():
    rng = random.Random(19)
    for _ in range(800):
        block = rng.choice([1, 2, 4])
        prompts = [[rng.randrange(rng.choice([2, 70000])) for _ in range(rng.randrange(0, 8))]
                   for _ in range(rng.randrange(0, 7))]
        expected = []
        for i, p in enumerate(prompts):
            best = 0
            for q in prompts[:i]:
                k = 0
                while k < min(len(p), len(q)) and p[k] == q[k]:
                    k += 1
                best = max(best, k)
            best = min(best, max(len(p) - 1, 0))
            expected.append(best - best % block)
        assert shared_prefix_lengths(prompts, block) == expected
