"""Shaped rewards and group-normalised advantages (paper Eq. 8, 9, 15, 23, 27; Alg. 1 lines 25-31).

r'_i = r_i + λΔ_i,  Â_i = (r'_i − mean_G r') / (std_G r' + ε) with the population std and ε = 1e-8.
Singleton and constant groups get Â = 0 (no within-group signal). The sequence advantage is broadcast
over the response tokens and multiplied by the token mask m_t (IBPO-mask, Eq. 7/17) *after*
normalisation, so GSPO's sequence ratio still covers every token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import numpy as np
import torch

IBPO_EPSILON = 1e-8


def _require_floating(name: str, values: torch.Tensor) -> None:
    """Refuse an integer or bool tensor: the result would be cast back to its dtype and truncated
    (``{1, 0, 0, 0}`` would give advantages ``{1, 0, 0, 0}``, not ``{1.73, -0.58, ...}``)."""
    if not values.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, not {values.dtype}: the result would be "
                        f"truncated to {values.dtype} (convert with .float() or .double())")


def check_bonus(delta: torch.Tensor, lam: float, dtype: torch.dtype) -> torch.Tensor:
    """λΔ in ``dtype``, asserting 0 <= λΔ < 1 (Eq. 8) on every row; a NaN λΔ (NaN λ or Δ) is outside it too."""
    bonus = lam * delta.to(dtype)
    outside = ~((bonus >= 0) & (bonus < 1))  # written so that NaN, which fails every comparison, is outside
    if bonus.numel() and bool(outside.any()):
        rows = torch.nonzero(outside.reshape(-1)).squeeze(-1)[:5].tolist()
        raise ValueError(f"λΔ must lie in [0, 1) (Eq. 8); got {bonus.reshape(-1)[rows].tolist()} at rows {rows} "
                         f"(λ = {lam})")
    return bonus


def shaped_rewards(rewards: torch.Tensor, delta: torch.Tensor, lam: float) -> torch.Tensor:
    """r' = r + λΔ (Eq. 15/27), asserting 0 <= λΔ < 1 (Eq. 8); a NaN λΔ (NaN λ or Δ) is outside it too.
    ``rewards`` (floating point) and ``delta`` must have the same shape: one Δ per reward, no broadcasting."""
    if rewards.shape != delta.shape:
        raise ValueError(f"rewards {tuple(rewards.shape)} and delta {tuple(delta.shape)} must have the same shape "
                         "(one Δ per reward)")
    _require_floating("rewards", rewards)
    return rewards + check_bonus(delta, lam, rewards.dtype)


def group_ids_to_index(group_ids: Sequence[Hashable]) -> torch.Tensor:
    """Map arbitrary group ids (verl ``uid`` strings) to dense int64 ids in order of first appearance."""
    dense: dict[Hashable, int] = {}
    return torch.tensor([dense.setdefault(g, len(dense)) for g in group_ids], dtype=torch.long)


def group_normalized_advantages(
    scores: torch.Tensor, group_ids: Sequence[Hashable], epsilon: float = IBPO_EPSILON
) -> torch.Tensor:
    """Eq. 9/23 per group, vectorised: (s − mean_g) / (std_g + ε), population std; 0 for groups of size 1
    or with constant scores. A non-finite score raises ``ValueError`` naming its rows."""
    if scores.dim() != 1 or scores.shape[0] != len(group_ids):
        raise ValueError(f"scores must be 1-D with one entry per group id; got {tuple(scores.shape)}, {len(group_ids)}")
    _require_floating("scores", scores)
    if scores.numel() == 0:
        return scores.clone()
    bad = torch.nonzero(~torch.isfinite(scores)).squeeze(-1)
    if bad.numel():  # one NaN would make its whole group's advantages NaN, silently
        rows = bad[:5].tolist()
        raise ValueError(f"scores must be finite; rows {rows} (of {bad.numel()}) hold {scores[bad[:5]].tolist()}")
    index = group_ids_to_index(group_ids).to(scores.device)
    num_groups = int(index.max()) + 1
    values = scores.to(torch.float64)
    count = torch.zeros(num_groups, dtype=torch.float64, device=scores.device).index_add_(
        0, index, torch.ones_like(values))
    mean = torch.zeros_like(count).index_add_(0, index, values) / count
    centred = values - mean[index]
    var = torch.zeros_like(count).index_add_(0, index, centred * centred) / count
    std = var.sqrt()
    adv = centred / (std[index] + epsilon)
    # Singleton groups have no baseline. Constant groups are detected by max == min, not by var == 0:
    # round-off in the mean can leave centred ~1e-17, which ε = 1e-8 would blow up to ~1e-9.
    high = torch.full_like(count, -torch.inf).scatter_reduce(0, index, values, reduce="amax")
    low = torch.full_like(count, torch.inf).scatter_reduce(0, index, values, reduce="amin")
    degenerate = (count[index] < 2) | (high[index] == low[index])
    adv = torch.where(degenerate, torch.zeros_like(adv), adv)
    return adv.to(scores.dtype)


# Where λΔ enters (``ibpo.shaping``; docs/method_ibpo.md, "The mechanism"). ``reward``: the paper, r' = r + λΔ
# before the group normalisation (Eq. 15/23). The other two are beyond the paper: ``reward_capped`` is the
# paper's rule with a wrong response's advantage capped at 0 afterwards (a wrong answer is never reinforced);
# ``advantage`` normalises the unshaped reward and scales a shaped wrong response's negative Â by (1 − λΔ).
SHAPING_LEVELS = ("reward", "reward_capped", "advantage")


def shapes_reward(shaping: str) -> bool:
    """Whether λΔ is added to the reward before normalisation under ``ibpo.shaping=shaping``."""
    if shaping not in SHAPING_LEVELS:
        raise ValueError(f"unknown ibpo.shaping {shaping!r}; one of {SHAPING_LEVELS}")
    return shaping != "advantage"


def shaping_advantage_factor(
    sequence_advantages: torch.Tensor, delta: torch.Tensor, is_correct: torch.Tensor, lam: float, shaping: str
) -> torch.Tensor:
    """Per-row factor the normalised advantages Â are multiplied by under ``ibpo.shaping`` (all (bs,)).

    ``reward``: 1 everywhere. ``reward_capped``: 0 on wrong rows with Â > 0, else 1 (in ``{0.3, 0, 0, 0}``
    the shaped wrong response's +1.732 becomes 0; the others keep −0.577). ``advantage``: 1 − λΔ on wrong
    rows with Δ > 0 and Â < 0 (``{1, 0, 0, 0}``, λΔ = 0.3: −0.577 → −0.404), else 1; a group without a right
    response has Â = 0 there, so shaping cannot reinforce a wrong answer. Every level asserts 0 <= λΔ < 1
    (Eq. 8, as :func:`shaped_rewards` does): under ``advantage`` a λΔ > 1 would flip the sign of Â.
    """
    if not (sequence_advantages.shape == delta.shape == is_correct.shape and sequence_advantages.dim() == 1):
        raise ValueError(f"expected (bs,) advantages, delta and is_correct; got {tuple(sequence_advantages.shape)}, "
                         f"{tuple(delta.shape)}, {tuple(is_correct.shape)}")
    shapes_reward(shaping)  # validates the name
    check_bonus(delta, lam, torch.float64)  # Eq. 8 whatever the level: 1 − λΔ < 0 would flip Â's sign
    ones = torch.ones_like(sequence_advantages)
    wrong = ~is_correct.bool()
    if shaping == "reward_capped":
        return torch.where(wrong & (sequence_advantages > 0), torch.zeros_like(ones), ones)
    if shaping == "advantage":
        scaled = 1.0 - lam * delta.to(sequence_advantages.dtype)
        return torch.where(wrong & (delta > 0) & (sequence_advantages < 0), scaled, ones)
    return ones


def ibpo_sequence_advantages(
    rewards: torch.Tensor, delta: torch.Tensor, is_correct: torch.Tensor, group_ids: Sequence[Hashable],
    lam: float, shaping: str = "reward",
) -> torch.Tensor:
    """The (bs,) sequence advantages IBPO trains on: Eq. 15 + 23 under ``shaping=reward``, with the
    :func:`shaping_advantage_factor` of the other levels. The CPU loop calls this; the verl trainer reaches
    the same numbers through its reward hook, verl's estimator and the same factor (a test checks both)."""
    scores = shaped_rewards(rewards, delta, lam) if shapes_reward(shaping) else rewards
    adv = group_normalized_advantages(scores, group_ids)
    return adv * shaping_advantage_factor(adv, delta, is_correct, lam, shaping)


def broadcast_advantages(
    sequence_advantages: torch.Tensor, response_mask: torch.Tensor, token_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """(bs,) → (bs, T): Â_i on every valid response token, times m_t when a token mask is given (Eq. 7)."""
    if response_mask.dim() != 2 or sequence_advantages.shape != (response_mask.shape[0],):
        raise ValueError(f"expected (bs,) sequence advantages for a (bs, T) response_mask; got "
                         f"{tuple(sequence_advantages.shape)}, {tuple(response_mask.shape)}")
    adv = sequence_advantages.unsqueeze(-1) * response_mask.to(sequence_advantages.dtype)
    if token_mask is not None:
        if token_mask.shape != response_mask.shape:
            raise ValueError(f"token_mask shape {tuple(token_mask.shape)} != response_mask {tuple(response_mask.shape)}")
        adv = adv * token_mask.to(adv.dtype)
    return adv


# A mask-sign policy's function: (token_mask (bs, T), shaped, negative, positive (bs, 1) bool) -> the (bs, T) mask.
MaskSignFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class MaskSignPolicy:
    """One registered mask-sign policy (the value of ``ibpo.mask_sign``; what each built-in one does and why
    the default is ``negative_only``: that option's doc in ``ibpo.options.IBPOConfig``)."""

    name: str
    mask: MaskSignFn


_MASK_SIGN_POLICIES: dict[str, MaskSignPolicy] = {}


def register_mask_sign(name: str, *, replace: bool = False) -> Callable[[MaskSignFn], MaskSignFn]:
    """Decorator: register a mask-sign policy ``fn(token_mask, shaped, negative, positive) -> mask`` under
    ``name`` (the value of ``ibpo.mask_sign``), like :func:`ibpo.variants.register_variant`. ``shaped``,
    ``negative`` (Â < 0) and ``positive`` (Â > 0) are (bs, 1) booleans; the policy decides the mask of the
    shaped rows only: :func:`signed_token_mask` gives every unshaped row ones whatever the policy returns.
    Registering an existing name fails unless ``replace=True``."""
    def decorator(fn: MaskSignFn) -> MaskSignFn:
        if name in _MASK_SIGN_POLICIES and not replace:
            raise ValueError(f"mask-sign policy {name!r} is already registered")
        _MASK_SIGN_POLICIES[name] = MaskSignPolicy(name, fn)
        return fn

    return decorator


def unregister_mask_sign(name: str) -> None:
    """Remove a registered policy (tests that register a toy one clean up with this)."""
    _MASK_SIGN_POLICIES.pop(name, None)


def mask_sign_names() -> tuple[str, ...]:
    """Names of the registered mask-sign policies, in registration order."""
    return tuple(_MASK_SIGN_POLICIES)


def get_mask_sign(name: str) -> MaskSignPolicy:
    """The registered policy ``name``; an unknown name raises ``ValueError`` listing the known ones."""
    try:
        return _MASK_SIGN_POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown ibpo.mask_sign {name!r}; registered: {mask_sign_names()}") from None


@register_mask_sign("negative_only")
def _mask_negative_only(token_mask, shaped, negative, positive):
    """m_t where Â < 0, ones where Â >= 0."""
    return torch.where(shaped & negative, token_mask, torch.ones_like(token_mask))


@register_mask_sign("complement_when_positive")
def _mask_complement_when_positive(token_mask, shaped, negative, positive):
    """m_t where Â < 0, 1 − m_t where Â > 0, ones at Â = 0."""
    ones = torch.ones_like(token_mask)
    out = torch.where(shaped & negative, token_mask, ones)
    return torch.where(shaped & positive, ones - token_mask, out)


@register_mask_sign("literal")
def _mask_literal(token_mask, shaped, negative, positive):
    """m_t whatever the sign (Eq. 17 as written)."""
    return torch.where(shaped, token_mask, torch.ones_like(token_mask))


def signed_token_mask(
    sequence_advantages: torch.Tensor, token_mask: torch.Tensor, shaped: torch.Tensor, policy: MaskSignPolicy
) -> torch.Tensor:
    """The token mask IBPO-mask multiplies into the advantages (Eq. 7/17), by the sign of Â_i.

    ``token_mask`` holds m_t = 1[t ∉ U] (1 on the tokens the correction changed) on the ``shaped`` rows and
    ones elsewhere. ``policy`` is the registered entry ``ibpo.mask_sign`` names (:func:`get_mask_sign`,
    resolved by the caller); why the sign matters and what each built-in policy does: the doc of the option
    ``mask_sign`` (``ibpo.options.IBPOConfig``, also in ``ibpo_blocks.yaml``) and docs/method_ibpo.md.

    Rows that are not shaped always get ones. Returns a (bs, T) float mask in ``token_mask``'s dtype.
    """
    if not isinstance(policy, MaskSignPolicy):
        raise TypeError(f"signed_token_mask takes a MaskSignPolicy (ibpo.advantages.get_mask_sign(name)), "
                        f"not {policy!r}")
    if token_mask.dim() != 2 or sequence_advantages.shape != (token_mask.shape[0],) or shaped.shape != (
            token_mask.shape[0],):
        raise ValueError(f"expected (bs,) advantages and shaped flags for a (bs, T) mask; got "
                         f"{tuple(sequence_advantages.shape)}, {tuple(shaped.shape)}, {tuple(token_mask.shape)}")
    shaped = shaped.bool().unsqueeze(-1)
    negative = (sequence_advantages < 0).unsqueeze(-1)
    positive = (sequence_advantages > 0).unsqueeze(-1)
    return torch.where(shaped, policy.mask(token_mask, shaped, negative, positive), torch.ones_like(token_mask))


def compute_ibpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | Sequence[Hashable],
    config=None,
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``ibpo``: group normalisation (Eq. 23) of the shaped reward r' that the
    trainer has already placed in ``token_level_rewards``.

    Differs from verl's ``grpo`` exactly where the paper does: ε = 1e-8 (Alg. 1 line 29), population std,
    and singleton groups get 0 rather than their raw reward. ``config`` (verl passes ``algorithm``) is not
    read. Returns ``(advantages, returns)``, both ``(bs, T)``, like every verl estimator.
    """
    scores = token_level_rewards.sum(dim=-1)
    with torch.no_grad():
        adv = group_normalized_advantages(scores, list(index))
        token_adv = broadcast_advantages(adv, response_mask)
    return token_adv, token_adv


def place_sequence_reward(response_mask: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A (bs, T) token-level reward tensor holding ``values[i]`` at row i's last valid response token
    (verl's convention for outcome rewards); rows without valid tokens get nothing."""
    if response_mask.dim() != 2 or values.shape != (response_mask.shape[0],):
        raise ValueError(f"expected one value per row of the (bs, T) response_mask; got {tuple(values.shape)}, "
                         f"{tuple(response_mask.shape)}")
    out = torch.zeros(response_mask.shape, dtype=values.dtype, device=values.device)
    lengths = response_mask.sum(dim=-1).long()
    rows = torch.nonzero(lengths > 0, as_tuple=False).squeeze(-1)
    if rows.numel():
        # last valid position = index of the last 1 in the mask (masks are right-padded but be general)
        positions = torch.arange(response_mask.shape[1], device=response_mask.device)
        last = (response_mask.bool() * positions).max(dim=-1).values
        out[rows, last[rows]] = values[rows]
    return out
