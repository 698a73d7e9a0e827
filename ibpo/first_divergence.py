"""Localisation without a correction (beyond the paper, designed here): where would the policy, shown the
reference, first not have written the wrong response's token?

The correction prompt x~ (Eq. 28: the problem, the wrong response y and its reference) is prefilled with y as
the assistant's answer, one teacher-forced forward pass: at each position t the policy's greedy token
ĝ_t = argmax π(· | x~, y_<t) is read. The first t with ĝ_t ≠ y_t is where, shown the reference, the policy
departs from y; the tokens from there on are the wrong response's localised credit (its negative advantage
lands on them only, as the ``mask`` variant's ``negative_only`` sign). An "edit from the target" would decode a
correction from t on; this design stops at t, so it costs one prefill of |x~| + |y| tokens and no decode pass.
Every wrong response that gets a correction prompt is localised unless the policy would have written all of
y (no divergence: it trains as in GSPO).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def first_divergence(target: Sequence[int], greedy: Sequence[int]) -> int | None:
    """The first index t with ``greedy[t] != target[t]`` over their common length; None when they agree."""
    n = min(len(target), len(greedy))
    if len(target) != len(greedy):
        raise ValueError(f"target has {len(target)} tokens but greedy has {len(greedy)}: one prediction per token")
    differ = np.flatnonzero(np.asarray(target[:n], dtype=np.int64) != np.asarray(greedy[:n], dtype=np.int64))
    return int(differ[0]) if differ.size else None


def divergence_mask(length: int, first: int | None) -> np.ndarray:
    """1.0 on the tokens from ``first`` to the end of a ``length``-token response, 0 before; all ones when
    nothing diverged (no localisation: the row trains as in GSPO)."""
    if length < 0 or (first is not None and not 0 <= first < max(length, 1)):
        raise ValueError(f"first divergence {first} outside a response of {length} tokens")
    mask = np.ones(length, dtype=np.float32)
    if first is not None:
        mask[:first] = 0.0
    return mask


def disagreement_mask(target: Sequence[int], greedy: Sequence[int]) -> np.ndarray:
    """1.0 on every token of ``target`` where the policy's greedy token differs (the first divergence and any
    later one), 0 elsewhere; all ones when they agree everywhere (no localisation)."""
    if len(target) != len(greedy):
        raise ValueError(f"target has {len(target)} tokens but greedy has {len(greedy)}: one prediction per token")
    differ = np.asarray(target, dtype=np.int64) != np.asarray(greedy, dtype=np.int64)
    return differ.astype(np.float32) if differ.any() else np.ones(len(target), dtype=np.float32)


MASK_RULES = {"from_first": lambda target, greedy: divergence_mask(len(target), first_divergence(target, greedy)),
              "disagreements": disagreement_mask}
