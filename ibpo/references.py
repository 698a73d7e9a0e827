"""Reference selection for counterfactual comparison (paper Alg. 1 lines 14-19, Eq. 4, App. C.1)."""

from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Sequence

import numpy as np


def select_references_in_group(
    is_correct: Sequence[bool], num_references: int, rng: np.random.Generator, per_group: bool = False
) -> list[list[int] | None]:
    """Pick ``num_references`` (= K - 1) reference positions for every wrong response of one group.

    For a wrong response i: references are drawn uniformly from the correct responses of the group
    (without replacement while enough exist, then duplicated, Eq. 4: "we duplicate them to reach the
    required number"); if the group has no correct response, uniformly from the *other* wrong responses
    (never i itself when G >= 2). A singleton wrong group (G = 1) gets ``[]`` (self-correction).

    ``per_group=True`` (option ``reference_per_group``) draws once for the whole group instead of once per
    wrong response, so the wrong responses share their references (and, with ``candidate_order =
    reference_first``, the prompt prefix problem + reference): see :func:`_shared_draws`. Each wrong
    response's references keep exactly the distribution of the independent draw (marginally uniform);
    only the joint draw across the group's wrong responses changes.

    Returns, per position, ``None`` for a correct response (it is not corrected) or the list of chosen
    group-local positions.
    """
    if num_references < 0:
        raise ValueError(f"num_references must be >= 0, got {num_references}")
    if per_group:
        return _shared_draws(is_correct, num_references, rng)
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


def _shared_draws(is_correct: Sequence[bool], k: int, rng: np.random.Generator) -> list[list[int] | None]:
    """One draw per group: uniform permutations π_1, π_2, ... of the pool (the correct responses, else all
    wrong ones); wrong response i takes the first k entries of π_1 π_2 ... with i itself skipped.

    Removing i from a uniform permutation of the pool leaves a uniform permutation of pool \\ {i}, so i's
    references are distributed exactly as :func:`_draw` (pool \\ {i}, k): distinct while possible, then
    duplicated. When the pool is the correct responses, every wrong response gets the same list.
    """
    correct = [j for j, ok in enumerate(is_correct) if ok]
    pool = correct if correct else [j for j, ok in enumerate(is_correct) if not ok]
    others = len(pool) - (0 if correct else 1)  # size of pool \ {i} for a wrong i
    rounds = 0 if k == 0 or others <= 0 else -(-k // others)
    order = [int(pool[j]) for _ in range(rounds) for j in rng.permutation(len(pool))]
    return [None if ok else [j for j in order if j != i][:k] for i, ok in enumerate(is_correct)]


def select_references(
    group_ids: Sequence[Hashable], is_correct: Sequence[bool], num_references: int, seed: int, step: int = 0,
    per_group: bool = False,
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
        local = select_references_in_group([bool(is_correct[r]) for r in rows], num_references, rng, per_group)
        for r, refs in zip(rows, local):
            out[r] = None if refs is None else [rows[j] for j in refs]
    return out
