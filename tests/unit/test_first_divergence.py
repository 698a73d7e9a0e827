"""ibpo.first_divergence against an obviously correct loop on random token sequences."""

from __future__ import annotations

import numpy as np
import pytest

from ibpo.first_divergence import MASK_RULES, disagreement_mask, divergence_mask, first_divergence


def slow_first(target, greedy):
    for t, (a, b) in enumerate(zip(target, greedy)):
        if a != b:
            return t
    return None


@pytest.mark.parametrize("seed", range(20))
def test_masks_match_a_loop(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 12))
    target = rng.integers(0, 3, n).tolist()
    greedy = [t if rng.random() < 0.7 else int(rng.integers(0, 3)) for t in target]
    first = slow_first(target, greedy)
    assert first_divergence(target, greedy) == first
    expected = [1.0] * n if first is None else [0.0] * first + [1.0] * (n - first)
    assert MASK_RULES["from_first"](target, greedy).tolist() == expected
    differ = [float(a != b) for a, b in zip(target, greedy)]
    assert disagreement_mask(target, greedy).tolist() == (differ if any(differ) else [1.0] * n)


def test_mismatched_lengths_and_positions_are_refused():
    with pytest.raises(ValueError, match="one prediction per token"):
        first_divergence([1, 2], [1])
    with pytest.raises(ValueError, match="outside"):
        divergence_mask(3, 3)
