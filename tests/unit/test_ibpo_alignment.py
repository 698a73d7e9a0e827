"""Alignment numerics against a plain-Python Levenshtein DP on random token-id sequences."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibpo.alignment import align, closest_reference_below, normalized_edit_distance, unmodified_positions


def dp_levenshtein(a: list[int], b: list[int]) -> int:
    """Textbook O(|a||b|) edit distance (unit costs)."""
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
        prev = cur
    return prev[len(b)]


def dp_lcs(a: list[int], b: list[int]) -> int:
    prev = [0] * (len(b) + 1)
    for i in range(1, len(a) + 1):
        cur = [0] * (len(b) + 1)
        for j in range(1, len(b) + 1):
            cur[j] = prev[j - 1] + 1 if a[i - 1] == b[j - 1] else max(prev[j], cur[j - 1])
        prev = cur
    return prev[len(b)]


def edited_copy(rng: random.Random, seq: list[int], vocab: int, edits: int) -> list[int]:
    out = list(seq)
    for _ in range(edits):
        op = rng.choice("sid")
        pos = rng.randrange(len(out) + 1)
        if op == "i" or not out:
            out.insert(pos, rng.randrange(vocab))
        elif op == "d":
            del out[min(pos, len(out) - 1)]
        else:
            out[min(pos, len(out) - 1)] = rng.randrange(vocab)
    return out


def random_pairs(n: int, seed: int):
    rng = random.Random(seed)
    for _ in range(n):
        vocab = rng.choice([2, 3, 5, 50])
        a = [rng.randrange(vocab) for _ in range(rng.randrange(0, 40))]
        b = edited_copy(rng, a, vocab, rng.randrange(0, 12)) if rng.random() < 0.7 else [
            rng.randrange(vocab) for _ in range(rng.randrange(0, 40))]
        yield a, b


@pytest.mark.parametrize("seed", range(4))
def test_distance_matches_dp(seed):
    for a, b in random_pairs(150, seed):
        expected = dp_levenshtein(a, b)
        longest = max(len(a), len(b))
        assert normalized_edit_distance(a, b) == pytest.approx(0.0 if longest == 0 else expected / longest)


@pytest.mark.parametrize("seed", range(4))
def test_unmodified_mask_is_an_optimal_alignment(seed):
    for a, b in random_pairs(150, seed + 100):
        mask, distance = unmodified_positions(a, b)
        assert mask.shape == (len(a),) and mask.dtype == bool
        # the alignment rapidfuzz returns is optimal ...
        assert distance == dp_levenshtein(a, b)
        # ... the kept tokens form a common subsequence of a and b (so |U| <= LCS) ...
        kept = [a[i] for i in range(len(a)) if mask[i]]
        it = iter(b)
        assert all(any(x == y for y in it) for x in kept)
        assert mask.sum() <= dp_lcs(a, b)
        # ... and any alignment with |U| matches costs at least max(|a|,|b|) - |U|, so an optimal one
        # cannot keep fewer tokens than max(|a|,|b|) - lev.
        assert mask.sum() >= max(len(a), len(b)) - distance


def test_hand_example_single_substitution():
    y = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    y_hat = [1, 2, 3, 4, 99, 6, 7, 8, 9, 10]
    result = align(y, y_hat)
    assert result.d_original == pytest.approx(0.1)  # one substitution / 10
    assert result.unmodified.tolist() == [True] * 4 + [False] + [True] * 5
    assert result.unmodified_ratio == pytest.approx(0.9)
    # d(ŷ, y_ref) = 1 (nothing shared, |ŷ| = 10) is not below d(y, ŷ) = 0.1
    assert closest_reference_below(y_hat, [[50, 51, 52]], bound=0.1) is None
    assert closest_reference_below(y_hat, [[50, 51, 52], y_hat[:9]], bound=0.2) == pytest.approx(0.1)


def test_empty_sequences():
    assert normalized_edit_distance([], []) == 0.0
    assert normalized_edit_distance([], [1, 2]) == 1.0
    result = align([], [3])
    assert result.unmodified.size == 0 and result.unmodified_ratio == 0.0 and result.d_original == 1.0
    assert closest_reference_below([], [[]], bound=0.5) == 0.0


def test_numpy_inputs_are_accepted():
    a = np.array([5, 6, 7], dtype=np.int64)
    assert normalized_edit_distance(a, np.array([5, 7])) == pytest.approx(1 / 3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=30), st.lists(st.integers(0, 6), max_size=30))
def test_distance_properties(a, b):
    d = normalized_edit_distance(a, b)
    assert 0.0 <= d <= 1.0
    assert d == pytest.approx(normalized_edit_distance(b, a))
    assert (d == 0.0) == (a == b)


@pytest.mark.parametrize("seed", range(3))
def test_closest_reference_below_matches_dp(seed):
    """The cut-off search decides 'some reference is closer than bound' exactly as full DP distances do."""
    rng = random.Random(seed)
    for _ in range(200):
        vocab = rng.choice([2, 4, 30])
        corrected = [rng.randrange(vocab) for _ in range(rng.randrange(0, 25))]
        refs = [edited_copy(rng, corrected, vocab, rng.randrange(0, 10)) for _ in range(rng.randrange(1, 4))]
        bound = rng.random()
        exact = [dp_levenshtein(corrected, r) / max(len(corrected), len(r)) if (corrected or r) else 0.0
                 for r in refs]
        got = closest_reference_below(corrected, refs, bound)
        if any(d < bound for d in exact):
            assert got is not None and got < bound and any(got == pytest.approx(d) for d in exact)
        else:
            assert got is None


def test_align_normalises_by_the_longer_sequence_on_unequal_lengths():
    """align's own d(y, ŷ) = lev / max(|y|, |ŷ|) (App. C.3), not lev / |y|: a correction that appends three
    tokens to a 3-token response is at d = 3/6, and U keeps all of y."""
    a = align([1, 2, 3], [1, 2, 3, 4, 5, 6])
    assert a.d_original == pytest.approx(0.5) and a.unmodified.tolist() == [True, True, True]
    b = align([1, 2, 3, 4, 5, 6], [1, 2, 3])  # the other way round: the same distance
    assert b.d_original == pytest.approx(0.5) and b.unmodified.tolist() == [True] * 3 + [False] * 3
    rng = random.Random(7)
    for _ in range(200):
        x = [rng.randrange(5) for _ in range(rng.randrange(1, 30))]
        y = [rng.randrange(5) for _ in range(rng.randrange(1, 30))]
        if len(x) == len(y):
            continue
        assert align(x, y).d_original == pytest.approx(dp_levenshtein(x, y) / max(len(x), len(y)))
        assert align(x, y).d_original == pytest.approx(normalized_edit_distance(x, y))
