"""What group normalisation does to IBPO's shaping, measured every step (``docs/method_ibpo.md``, "The
mechanism"; issue: "IBPO that pays for its compute").

With the population std (Eq. 23), the squared advantages of a non-constant group sum to G, so shaping a
wrong response's reward (Eq. 15) only moves advantage weight inside its group:

- next to a right sibling it shrinks the push away from the shaped response: in ``{1, 0, 0, 0}`` with
  λΔ = 0.3 on the first wrong response its Â goes from −0.577 to −0.061;
- in a group with no right response, any λΔ > 0 gives the shaped wrong response a full **positive**
  advantage: ``{0.3, 0, 0, 0}`` → Â = (+1.732, −0.577, −0.577, −0.577).

These functions measure how much of that happens in a batch: the share of positive advantage mass that
lands on wrong responses, how many all-wrong groups were shaped, the mean |Â| of shaped and unshaped wrong
responses by group kind, and how many of a wrong response's tokens it already shares with a right sibling
(what GSPO's group contrast localises without any correction: shared tokens get opposite advantages from
the right and the wrong response, Σ Â = 0 per group). Pure numpy on plain sequences; the verl trainer and
the CPU loop (``lab.analysis.toy_loop``) call the same two functions.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from ibpo.alignment import unmodified_positions

GROUP_KINDS = ("mixed", "all_wrong", "all_right")


def group_kinds(is_correct: Sequence[bool], group_ids: Sequence[Hashable]) -> list[str]:
    """Per row, the kind of its group: ``mixed`` (right and wrong responses), ``all_wrong`` or ``all_right``."""
    correct = np.asarray(is_correct, dtype=bool)
    if correct.shape != (len(group_ids),):
        raise ValueError(f"is_correct must have one entry per group id; got {correct.shape}, {len(group_ids)}")
    right: dict[Hashable, int] = {}
    size: dict[Hashable, int] = {}
    for g, c in zip(group_ids, correct):
        right[g] = right.get(g, 0) + int(c)
        size[g] = size.get(g, 0) + 1
    return ["all_right" if right[g] == size[g] else "all_wrong" if right[g] == 0 else "mixed" for g in group_ids]


def advantage_mechanism(advantages: Sequence[float], is_correct: Sequence[bool], delta: Sequence[float],
                        group_ids: Sequence[Hashable]) -> dict[str, float]:
    """Where the sequence advantages Â_i that a step trains on put their weight.

    - ``positive_adv_mass_on_wrong``: Σ_{wrong} max(Â, 0) / Σ_all max(Â, 0), the share of the positive
      advantage mass on wrong responses (0 under GSPO with {0, 1} rewards; left out when no Â is positive);
    - ``shaped_all_wrong_groups``: groups with no right response and at least one Δ > 0;
    - ``shaped_wrong_positive``: wrong responses with Δ > 0 and Â > 0 (reinforced although wrong);
    - ``mean_abs_adv/{shaped,unshaped}_wrong_{mixed,all_wrong}``: mean |Â| of wrong responses with Δ > 0 /
      Δ = 0, by group kind; left out when there is no such response this step (a 0 would read as "no push").
    """
    adv = np.asarray(advantages, dtype=np.float64)
    correct = np.asarray(is_correct, dtype=bool)
    d = np.asarray(delta, dtype=np.float64)
    if not (adv.shape == correct.shape == d.shape == (len(group_ids),)):
        raise ValueError(f"advantages, is_correct, delta and group_ids must be 1-D of equal length; got "
                         f"{adv.shape}, {correct.shape}, {d.shape}, {len(group_ids)}")
    for name, values in (("advantages", adv), ("delta", d)):  # a NaN fails every comparison: its row would vanish
        if not np.isfinite(values).all():
            rows = np.flatnonzero(~np.isfinite(values))[:5].tolist()
            raise ValueError(f"{name} must be finite; rows {rows} hold {values[rows].tolist()}")
    kinds = np.array(group_kinds(correct, group_ids), dtype=object)
    wrong, shaped = ~correct, d > 0
    out: dict[str, float] = {}
    positive = np.clip(adv, 0.0, None)
    if positive.sum() > 0:
        out["positive_adv_mass_on_wrong"] = float(positive[wrong].sum() / positive.sum())
    out["shaped_all_wrong_groups"] = float(len({g for g, k, s in zip(group_ids, kinds, shaped)
                                                if k == "all_wrong" and s}))
    out["shaped_wrong_positive"] = float(np.sum(wrong & shaped & (adv > 0)))
    for kind in ("mixed", "all_wrong"):
        for label, rows in (("shaped", wrong & shaped), ("unshaped", wrong & ~shaped)):
            sel = rows & (kinds == kind)
            if sel.any():
                out[f"mean_abs_adv/{label}_wrong_{kind}"] = float(np.abs(adv[sel]).mean())
    return out


def sibling_overlap(response_ids: Sequence[Sequence[int]], is_correct: Sequence[bool],
                    group_ids: Sequence[Hashable]) -> dict[str, float]:
    """How many of a wrong response's tokens a right sibling already has, in mixed groups.

    Per wrong response y in a group with right responses: max over its right siblings y⁺ of |U(y, y⁺)| / |y|,
    U the positions an optimal Levenshtein alignment keeps equal (``ibpo.alignment``, the same alignment IBPO
    uses for its corrections). ``wrong_tokens_shared_with_right_sibling`` is the mean over those responses
    (left out when the batch has no mixed group); ``wrong_in_mixed_groups`` their count. Near 1: the wrong
    response differs from a right one in a few tokens, which group contrast already isolates; near 0: the
    paths differ everywhere and only a correction can say which tokens were wrong.
    """
    correct = np.asarray(is_correct, dtype=bool)
    if not (len(response_ids) == correct.size == len(group_ids)):
        raise ValueError("response_ids, is_correct and group_ids must have equal lengths")
    right_by_group: dict[Hashable, list[int]] = {}
    for row, (g, c) in enumerate(zip(group_ids, correct)):
        if c:
            right_by_group.setdefault(g, []).append(row)
    shares = []
    for row, (g, c) in enumerate(zip(group_ids, correct)):
        if c or g not in right_by_group:
            continue
        y = response_ids[row]
        if len(y) == 0:
            shares.append(0.0)
            continue
        shares.append(max(float(unmodified_positions(y, response_ids[r])[0].sum()) / len(y)
                          for r in right_by_group[g]))
    out = {"wrong_in_mixed_groups": float(len(shares))}
    if shares:
        out["wrong_tokens_shared_with_right_sibling"] = float(np.mean(shares))
    return out


def localised_coverage(is_correct: Sequence[bool], localised: Sequence[bool]) -> dict[str, float]:
    """How much of the step's wrong answers got localised credit (issue 39; ``docs/evidence.md`` 2b):
    ``wrong_rows``, ``masked_rows`` (wrong rows trained with a token mask) and ``coverage`` = masked / wrong
    (NaN when no response is wrong). A right row marked ``localised`` is not counted: credit is localised on
    wrong answers only."""
    wrong = ~np.asarray(is_correct, dtype=bool)
    marked = np.asarray(localised, dtype=bool)
    if not (wrong.ndim == 1 and marked.shape == wrong.shape):
        raise ValueError(f"is_correct and localised must be 1-D with one entry per row; got {wrong.shape}, "
                         f"{marked.shape}")
    masked = wrong & marked
    n_wrong = int(wrong.sum())
    return {"wrong_rows": float(n_wrong), "masked_rows": float(masked.sum()),
            "coverage": float(masked.sum()) / n_wrong if n_wrong else float("nan")}


def reinforces_wrong_answers(enable: bool, shaping: str, lam: float) -> bool:
    """Whether an IBPO configuration can give a wrong response a positive advantage: reward-level shaping
    (``ibpo.shaping=reward``) with λ > 0 does whenever λΔ exceeds its group's mean shaped reward — always in a
    group with no right response (``{0.3, 0, 0, 0}`` → +1.73), and next to a right one in a larger group
    (``{1, .3, 0, 0, 0, 0, 0, 0}``: mean .1625 < .3)."""
    return bool(enable) and shaping == "reward" and lam > 0


class RewardDropAlarm:
    """Fires when a run unlearns: the mean training reward of the last ``window`` steps has fallen to at most
    ``ratio`` times that of the first ``window`` steps (which was at least ``min_start``; below that there is
    nothing to lose). The pattern the paper's configuration shows on a weak warm start (train reward ~0.2 →
    ~0.03 in a few steps, ``docs/evidence.md``). Per run; a resumed verl run starts a new history."""

    def __init__(self, window: int = 3, ratio: float = 0.5, min_start: float = 0.05):
        if window < 1 or not 0.0 < ratio < 1.0 or min_start < 0.0:
            raise ValueError(f"RewardDropAlarm(window={window}, ratio={ratio}, min_start={min_start}): need "
                             "window >= 1, 0 < ratio < 1, min_start >= 0")
        self.window, self.ratio, self.min_start = window, ratio, min_start
        self.history: list[float] = []

    def update(self, reward_mean: float) -> bool:
        """Add one step's mean training reward; whether the alarm fires at this step."""
        self.history.append(float(reward_mean))
        if len(self.history) < 2 * self.window:
            return False
        first = float(np.mean(self.history[:self.window]))
        last = float(np.mean(self.history[-self.window:]))
        return first >= self.min_start and last <= self.ratio * first


def alarm_steps(rewards: Sequence[float], **kwargs) -> list[bool]:
    """:class:`RewardDropAlarm` over a run's per-step training rewards: whether it fires at each step."""
    alarm = RewardDropAlarm(**kwargs)
    return [alarm.update(r) for r in rewards]


__all__ = ["GROUP_KINDS", "RewardDropAlarm", "advantage_mechanism", "alarm_steps", "group_kinds",
           "reinforces_wrong_answers", "sibling_overlap"]
