"""Reference selection for counterfactual comparison (paper Alg. 1 lines 14-19, Eq. 4, App. C.1)."""

from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Sequence

import numpy as np


def select_references_in_group(
    is_correct: Sequence[bool], num_references: int, rng: np.random.Generator
) -> list[list[int] | None]:
    """Pick ``num_references`` (= K - 1) reference positions for every wrong response of one group.

    For a wrong response i: references are drawn uniformly from the correct responses of the group
    (without replacement while enough exist, then duplicated, Eq. 4: "we duplicate them to reach the
    required number"); if the group has no correct response, uniformly from the *other* wrong responses
    (never i itself when G >= 2). A singleton wrong group (G = 1) gets ``[]`` (self-correction).

    Returns, per position, ``None`` for a correct response (it is not corrected) or the list of chosen
    group-local positions.
    """
    if num_references < 0:
        raise ValueError(f"num_references must be >= 0, got {num_references}")
    correct = [j for j, ok in enumerate(is_correct) if ok]
    out: list[list[int] | None] = []
    for i, ok in enumerate(is_correct):
        if ok:
            out.append(None)
            continue
        pool = correct if correct else [j for j, ok_j in enumerate(is_correct) if not ok_j and j != i]
        out.append(_draw(pool, num_references, rng))
    return out


def _draw(pool: list[int], k: int, rng: np.random.Generator) -> list[int]:
    """k uniform draws from ``pool``: distinct while possible, then the pool repeated (duplicates)."""
    if k == 0 or not pool:
        return []
    chosen: list[int] = []
    while len(chosen) < k:
        take = min(k - len(chosen), len(pool))
        chosen.extend(int(pool[j]) for j in rng.choice(len(pool), size=take, replace=False))
    return chosen


def select_references(
    group_ids: Sequence[Hashable], is_correct: Sequence[bool], num_references: int, seed: int, step: int = 0
) -> list[list[int] | None]:
    """Batch version of :func:`select_references_in_group` over rows grouped by ``group_ids`` (verl's ``uid``).

    Returned indices are *batch* row indices. The RNG is seeded from ``(seed, step)`` so a step is
    reproducible; groups are visited in order of first appearance, so the result does not depend on
    hash ordering.
    """
    if len(group_ids) != len(is_correct):
        raise ValueError(f"group_ids has {len(group_ids)} rows but is_correct has {len(is_correct)}")
    rng = np.random.default_rng([int(seed), int(step)])
    rows_of: dict[Hashable, list[int]] = defaultdict(list)
    for row, gid in enumerate(group_ids):
        rows_of[gid].append(row)
    out: list[list[int] | None] = [None] * len(group_ids)
    for rows in rows_of.values():
        local = select_references_in_group([bool(is_correct[r]) for r in rows], num_references, rng)
        for r, refs in zip(rows, local):
            out[r] = None if refs is None else [rows[j] for j in refs]
    return out
