"""Reference selection for counterfactual comparison (paper Alg. 1 lines 14-19, Eq. 4, App. C.1).

A reference *rule* decides, for one group, which responses each wrong response is compared with. Rules are
a registry, like the shaping variants (``ibpo.variants``) and the mask-sign policies
(``ibpo.advantages.register_mask_sign``): a rule is one decorated function that sees the group
(:class:`GroupView`: its batch rows, which are correct, their response token ids) and the step's rng::

    @register_reference_rule("nearest_correct")
    def nearest_correct(group: GroupView, num_references: int, rng: np.random.Generator):
        ...  # per group position: None for a correct response, else a list of group-local positions

Built in: ``independent`` (the paper: one uniform draw per wrong response) and ``per_group`` (one draw
shared by the group's wrong responses, each still uniform). The option ``ibpo.reference_rule`` names the
rule; it is validated against this registry when the config is built and resolved once
(:func:`get_reference_rule`) into the :class:`ReferenceRule` that :func:`select_references` receives.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import numpy as np


@dataclass(frozen=True)
class GroupView:
    """What a reference rule sees of one group (positions are group-local, 0..G-1)."""

    rows: tuple[int, ...]  # the batch row of each position
    is_correct: tuple[bool, ...]
    response_ids: tuple[Sequence[int], ...] | None  # each position's response token ids (None: not given)


DrawFn = Callable[[GroupView, int, np.random.Generator], list]


@dataclass(frozen=True)
class ReferenceRule:
    """One registered reference rule: ``draw(group, num_references, rng)`` returns, per group position,
    ``None`` for a correct response or the list of group-local reference positions."""

    name: str
    draw: DrawFn


_RULES: dict[str, ReferenceRule] = {}


def register_reference_rule(name: str, *, replace: bool = False) -> Callable[[DrawFn], DrawFn]:
    """Decorator: register ``fn(group, num_references, rng) -> [None | [positions]] * G`` as rule ``name``
    (the value of ``ibpo.reference_rule``). Registering an existing name fails unless ``replace=True``."""
    def decorator(fn: DrawFn) -> DrawFn:
        if name in _RULES and not replace:
            raise ValueError(f"reference rule {name!r} is already registered ({_RULES[name].draw.__qualname__})")
        _RULES[name] = ReferenceRule(name, fn)
        return fn

    return decorator


def unregister_reference_rule(name: str) -> None:
    """Remove a registered rule (tests that register a toy one clean up with this)."""
    _RULES.pop(name, None)


def reference_rule_names() -> tuple[str, ...]:
    """Names of the registered reference rules, in registration order."""
    return tuple(_RULES)


def get_reference_rule(name: str) -> ReferenceRule:
    """The registered rule ``name``; an unknown name raises ``ValueError`` listing the known ones."""
    try:
        return _RULES[name]
    except KeyError:
        raise ValueError(f"unknown reference rule {name!r}; registered: {reference_rule_names()}") from None


def _resolved(rule: ReferenceRule | None) -> ReferenceRule:
    """``rule``, or the paper's ``independent`` when None; a name is refused (resolve it once, by
    :func:`get_reference_rule`, where the config is read)."""
    if rule is None:
        return _RULES["independent"]
    if not isinstance(rule, ReferenceRule):
        raise TypeError(f"expected a ReferenceRule (ibpo.references.get_reference_rule(name)), not {rule!r}")
    return rule


def select_references_in_group(
    is_correct: Sequence[bool], num_references: int, rng: np.random.Generator, rule: ReferenceRule | None = None
) -> list[list[int] | None]:
    """Pick ``num_references`` (= K - 1) reference positions for every wrong response of one group.

    For a wrong response i: references are drawn uniformly from the correct responses of the group
    (without replacement while enough exist, then duplicated, Eq. 4: "we duplicate them to reach the
    required number"); if the group has no correct response, uniformly from the *other* wrong responses
    (never i itself when G >= 2). A singleton wrong group (G = 1) gets ``[]`` (self-correction).

    That is the default rule, ``independent``. The rule ``per_group`` (``ibpo.reference_rule=per_group``) draws
    once for the whole group instead of once per wrong response, so the wrong responses share their references
    (and, with ``candidate_order = reference_first``, the prompt prefix problem + reference): see
    :func:`shared_draws`. Each wrong response's references keep exactly the distribution of the independent
    draw (marginally uniform); only the joint draw across the group's wrong responses changes.

    Returns, per position, ``None`` for a correct response (it is not corrected) or the list of chosen
    group-local positions.
    """
    if num_references < 0:
        raise ValueError(f"num_references must be >= 0, got {num_references}")
    rule = _resolved(rule)
    group = GroupView(tuple(range(len(is_correct))), tuple(bool(x) for x in is_correct), None)
    local = rule.draw(group, num_references, rng)
    _check_rule_output(rule.name, group, local)
    return local


@register_reference_rule("independent")
def independent_draws(group: GroupView, num_references: int, rng: np.random.Generator) -> list[list[int] | None]:
    """One uniform draw per wrong response (Alg. 1 lines 14-19): from the correct responses, else from the
    other wrong ones (see :func:`select_references_in_group`)."""
    is_correct = group.is_correct
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


@register_reference_rule("per_group")
def shared_draws(group: GroupView, k: int, rng: np.random.Generator) -> list[list[int] | None]:
    """One draw per group: uniform permutations π_1, π_2, ... of the pool (the correct responses, else all
    wrong ones); wrong response i takes the first k entries of π_1 π_2 ... with i itself skipped.

    Removing i from a uniform permutation of the pool leaves a uniform permutation of pool \\ {i}, so i's
    references are distributed exactly as :func:`_draw` (pool \\ {i}, k): distinct while possible, then
    duplicated. When the pool is the correct responses, every wrong response gets the same list.
    """
    is_correct = group.is_correct
    correct = [j for j, ok in enumerate(is_correct) if ok]
    pool = correct if correct else [j for j, ok in enumerate(is_correct) if not ok]
    others = len(pool) - (0 if correct else 1)  # size of pool \ {i} for a wrong i
    rounds = 0 if k == 0 or others <= 0 else -(-k // others)
    order = [int(pool[j]) for _ in range(rounds) for j in rng.permutation(len(pool))]
    return [None if ok else [j for j in order if j != i][:k] for i, ok in enumerate(is_correct)]


def select_references(
    group_ids: Sequence[Hashable], is_correct: Sequence[bool], num_references: int, seed: int, step: int = 0,
    rule: ReferenceRule | None = None, response_ids: Sequence[Sequence[int]] | None = None,
) -> list[list[int] | None]:
    """Batch version over rows grouped by ``group_ids`` (verl's ``uid``), with the reference rule ``rule``
    (a registry entry, :func:`get_reference_rule`; default ``independent``). ``response_ids`` (per batch
    row) is what a rule may read of the responses.

    Returned indices are *batch* row indices. The RNG is seeded from ``(seed, step)`` so a step is
    reproducible; groups are visited in order of first appearance, so the result does not depend on
    hash ordering. A rule's output is checked: one entry per position, ``None`` exactly for the correct
    responses, positions inside the group.
    """
    if len(group_ids) != len(is_correct):
        raise ValueError(f"group_ids has {len(group_ids)} rows but is_correct has {len(is_correct)}")
    if response_ids is not None and len(response_ids) != len(group_ids):
        raise ValueError(f"group_ids has {len(group_ids)} rows but response_ids has {len(response_ids)}")
    if num_references < 0:
        raise ValueError(f"num_references must be >= 0, got {num_references}")
    rule = _resolved(rule)
    rng = np.random.default_rng([int(seed), int(step)])
    rows_of: dict[Hashable, list[int]] = defaultdict(list)
    for row, gid in enumerate(group_ids):
        rows_of[gid].append(row)
    out: list[list[int] | None] = [None] * len(group_ids)
    for rows in rows_of.values():
        group = GroupView(tuple(rows), tuple(bool(is_correct[r]) for r in rows),
                          None if response_ids is None else tuple(response_ids[r] for r in rows))
        local = rule.draw(group, num_references, rng)
        _check_rule_output(rule.name, group, local)
        for r, refs in zip(rows, local):
            out[r] = None if refs is None else [rows[j] for j in refs]
    return out


def _check_rule_output(name: str, group: GroupView, local: list) -> None:
    """A rule's answer for one group is well formed (a bad custom rule fails here, naming itself)."""
    size = len(group.is_correct)
    if len(local) != size:
        raise ValueError(f"reference rule {name!r} returned {len(local)} entries for a group of {size}")
    for pos, (ok, refs) in enumerate(zip(group.is_correct, local)):
        if (refs is None) != ok:
            raise ValueError(f"reference rule {name!r}: position {pos} is {'correct' if ok else 'wrong'} but got "
                             f"{refs!r} (None exactly for correct responses)")
        if refs is not None and any(not 0 <= int(j) < size for j in refs):
            raise ValueError(f"reference rule {name!r}: position {pos} got references {refs} outside the group")
