"""Token-level alignment of a response and its correction (paper App. C.2, C.3; Eq. 16-18).

Sequences are the rollout's response token ids (no re-tokenisation). The Levenshtein distance and an
optimal alignment come from rapidfuzz (bit-parallel, C++), which accepts any sequence of hashables, so
integer token ids are compared exactly. The test suite checks both against a plain-Python DP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from rapidfuzz.distance import Levenshtein


def _as_list(tokens: Sequence[int]) -> list[int]:
    return tokens.tolist() if isinstance(tokens, np.ndarray) else list(tokens)


def normalized_edit_distance(a: Sequence[int], b: Sequence[int]) -> float:
    """d(a, b) = lev(a, b) / max(|a|, |b|) in [0, 1]; d = 0 for two empty sequences (App. C.3)."""
    a, b = _as_list(a), _as_list(b)
    longest = max(len(a), len(b))
    return 0.0 if longest == 0 else Levenshtein.distance(a, b) / longest


def _score_hint(a: list[int], b: list[int]) -> int:
    # rapidfuzz starts a banded search at this distance and widens it as needed: a correction that edits
    # a few spans is far cheaper to align than the full O(N·M/64) bit-parallel matrix (8x at 16k tokens).
    return max(abs(len(a) - len(b)), 32)


def unmodified_positions(original: Sequence[int], corrected: Sequence[int]) -> tuple[np.ndarray, int]:
    """Mask over ``original`` of the positions an optimal alignment keeps equal (the set U of App. C.2),
    and the edit distance of that alignment.

    ``U = {t : y_t = ŷ_t after alignment}``. Several optimal alignments can exist; any one of them
    defines a valid U (the test suite checks optimality and consistency, not a particular tie-break).
    """
    a, b = _as_list(original), _as_list(corrected)
    mask = np.zeros(len(a), dtype=bool)
    distance = 0
    for tag, i1, i2, j1, j2 in Levenshtein.opcodes(a, b, score_hint=_score_hint(a, b)):
        if tag == "equal":
            mask[i1:i2] = True
        else:
            distance += max(i2 - i1, j2 - j1)  # replace: (i2-i1)==(j2-j1); insert/delete: one side is 0
    return mask, distance


@dataclass(frozen=True)
class Alignment:
    """Alignment of an original response y with its correction ŷ."""

    d_original: float  # d(y, ŷ)
    unmodified: np.ndarray  # bool mask over y: True for t in U

    @property
    def unmodified_ratio(self) -> float:
        """|U| / T (Eq. 16); 0 for an empty original."""
        return float(self.unmodified.mean()) if self.unmodified.size else 0.0


def align(original: Sequence[int], corrected: Sequence[int]) -> Alignment:
    """d(y, ŷ) and the unmodified mask U of y (Eq. 16-18) from one optimal alignment."""
    mask, distance = unmodified_positions(original, corrected)
    longest = max(len(original), len(corrected))
    return Alignment(d_original=0.0 if longest == 0 else distance / longest, unmodified=mask)


def closest_reference_below(
    corrected: Sequence[int], references: Sequence[Sequence[int]], bound: float
) -> float | None:
    """d(ŷ, y_ref) of the first reference closer to ŷ than ``bound``, or ``None`` when none is.

    This is the second condition of Eq. 18 (d(y, ŷ) > d(ŷ, y_ref)) with ``bound`` = d(y, ŷ). rapidfuzz's
    ``score_cutoff`` stops each distance as soon as it cannot be below the bound, so checking a reference
    far from ŷ costs little; the first reference below the bound is enough to decide.
    """
    b = _as_list(corrected)
    for reference in references:
        r = _as_list(reference)
        longest = max(len(b), len(r))
        if longest == 0:
            if bound > 0.0:
                return 0.0
            continue
        cutoff = math.ceil(bound * longest) - 1  # largest integer distance strictly below bound·longest
        if cutoff < 0:
            continue
        distance = Levenshtein.distance(b, r, score_cutoff=cutoff)
        if distance <= cutoff and distance / longest < bound:
            return distance / longest
    return None
