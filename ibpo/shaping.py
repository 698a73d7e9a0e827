"""Full-rewrite filter and the shaping term Δ (paper Eq. 14, 16, 17, 18, 19, 26; App. C.2-C.3).

Δ_i is non-zero only for a wrong response whose correction is right and is not a full rewrite; a failed
correction gets no penalty (App. C.2, "Why No Penalty for Failed Corrections").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ibpo.alignment import Alignment, closest_reference_below
from ibpo.options import IBPOConfig
from ibpo.variants import ShapingVariant, get_variant


def adaptive_alpha(distances: Sequence[float], fixed_alpha: float, min_samples: int = 8) -> tuple[float, bool]:
    """Adaptive rewrite threshold α = μ_d + 2σ_d over a batch's d(y, ŷ) (App. C.3, "Adaptive Threshold").

    σ is the population standard deviation. With fewer than ``min_samples`` distances the batch
    statistics are too noisy, so the fixed α is returned (**Decision** in ``docs/method_ibpo.md``). Returns
    ``(alpha, used_adaptive)``.
    """
    values = np.asarray(list(distances), dtype=np.float64)
    if values.size < min_samples:
        return float(fixed_alpha), False
    return float(values.mean() + 2.0 * values.std()), True


def is_full_rewrite(d_original: float, d_reference: float | None, alpha: float) -> bool:
    """Eq. 18: rewrite ⇔ d(y, ŷ) > α and d(y, ŷ) > d(ŷ, y_ref).

    Without a reference (self-correction, ``num_references = 0``) only the first condition applies.
    """
    if d_original <= alpha:
        return False
    return True if d_reference is None else d_original > d_reference


def shaping_delta(
    variant: ShapingVariant,
    target_wrong: bool,
    correction_right: bool,
    rewrite: bool,
    unmodified_ratio: float,
    beta: float,
) -> float:
    """Δ for one response: the variant's Δ (a registered :class:`ibpo.variants.ShapingVariant`: β for
    ``binary``/``mask``, Eq. 19; |U|/T for ``ratio``, Eq. 16) times 1[r(y)=0 ∧ r(ŷ)=1 ∧ ¬rewrite]. The
    caller resolves the variant once (``get_variant(config.variant)``), not per correction."""
    if not isinstance(variant, ShapingVariant):
        raise TypeError(f"shaping_delta takes a ShapingVariant (ibpo.variants.get_variant(name)), not {variant!r}")
    if not (target_wrong and correction_right and not rewrite):
        return 0.0
    return float(variant.delta(float(unmodified_ratio), float(beta)))


def correction_token_mask(variant: ShapingVariant, shaped: bool, unmodified: np.ndarray) -> np.ndarray:
    """Token mask m over the original response (Eq. 7/17): for a variant that masks tokens (``mask``), on a
    shaped response m_t = 1[t ∉ U]; every other response keeps m_t = 1."""
    if shaped and variant.masks_tokens:
        return (~unmodified).astype(np.float32)
    return np.ones(unmodified.shape[0], dtype=np.float32)


@dataclass(frozen=True)
class TargetShaping:
    """Shaping outcome for one correction of a wrong response."""

    delta: float
    rewrite: bool
    correction_right: bool
    token_mask: np.ndarray  # float32 over the original response's tokens
    alignment: Alignment | None  # None when the correction was not aligned (failed correction)
    d_reference: float | None  # d(ŷ, y_ref) when it decided a rewrite, else None


def shape_targets(
    alignments: Sequence[Alignment | None],
    correction_right: Sequence[bool],
    response_lengths: Sequence[int],
    corrections: Sequence[Sequence[int]],
    references: Sequence[Sequence[Sequence[int]]],
    config: IBPOConfig,
) -> tuple[list[TargetShaping], float, bool]:
    """Rewrite filter (Eq. 18) + Δ (Eq. 16/19) + token mask (Eq. 17) for every correction of a batch.

    ``alignments[k]`` is ``None`` for a failed correction (Δ = 0 whatever its distance, App. C.2). The
    adaptive α uses d(y, ŷ) of the *successful* corrections only (App. C.3). With
    ``rewrite_condition="closer_to_reference"`` a successful correction with references is a rewrite iff
    d(ŷ, y_ref) < d(y, ŷ) (Eq. 18's second condition alone, α unused). Otherwise d(ŷ, y_ref) is computed only
    for successful corrections with d(y, ŷ) > α, the only ones it can turn into rewrites; with several
    references (K > 2) the correction is a rewrite if it is closer to *any* reference than to y. Without
    references (self-correction) only the threshold applies. Returns the per-correction results, the α
    used and whether it was adaptive.
    """
    if not (len(alignments) == len(correction_right) == len(response_lengths) == len(corrections)
            == len(references)):
        raise ValueError("alignments, correction_right, response_lengths, corrections and references must "
                         "have equal lengths")
    variant = get_variant(config.variant)  # resolved once; an unknown name fails here, whatever the rows
    successful = [a.d_original for a, ok in zip(alignments, correction_right) if ok and a is not None]
    if config.alpha_mode == "adaptive":
        alpha, used_adaptive = adaptive_alpha(successful, config.alpha, config.adaptive_min_samples)
    else:
        alpha, used_adaptive = config.alpha, False
    results = []
    for alignment, right, length, corrected, refs in zip(alignments, correction_right, response_lengths,
                                                         corrections, references):
        if right and alignment is None:
            raise ValueError("a successful correction needs its alignment")
        if alignment is not None and alignment.unmodified.shape != (int(length),):
            raise ValueError(f"an alignment's unmodified mask has {alignment.unmodified.shape[0]} positions but its "
                             f"target has {int(length)} tokens (response_lengths): aligned with another response")
        rewrite, d_reference = False, None
        if right and refs and config.rewrite_condition == "closer_to_reference":
            # Eq. 18's second condition alone: closer to a reference than to y (a copy has d(ŷ, y_ref) = 0)
            d_reference = closest_reference_below(corrected, refs, alignment.d_original)
            rewrite = d_reference is not None
        elif right and alignment.d_original > alpha:
            if refs:
                d_reference = closest_reference_below(corrected, refs, alignment.d_original)
                rewrite = d_reference is not None and is_full_rewrite(alignment.d_original, d_reference, alpha)
            else:
                rewrite = is_full_rewrite(alignment.d_original, None, alpha)
        ratio = alignment.unmodified_ratio if alignment is not None else 0.0
        delta = shaping_delta(variant, True, bool(right), rewrite, ratio, config.beta)
        unmodified = alignment.unmodified if alignment is not None else np.zeros(int(length), dtype=bool)
        mask = correction_token_mask(variant, delta > 0.0, unmodified)
        results.append(TargetShaping(delta, rewrite, bool(right), mask, alignment, d_reference))
    return results, alpha, used_adaptive


def aggregate_corrections(per_correction: Sequence[TargetShaping], length: int) -> tuple[float, np.ndarray]:
    """Combine the ``corrections_per_target`` results of one wrong response into (Δ_i, m_i).

    **Decision** (the paper samples one correction per target for shaping): Δ_i is the mean of the
    per-correction Δ, an estimate of β·P(recoverable) that keeps 0 <= λΔ_i < 1; the token mask comes
    from the shaped correction with the smallest d(y, ŷ) (the most local repair), all-ones if none.
    """
    if not per_correction:
        return 0.0, np.ones(int(length), dtype=np.float32)
    delta = float(np.mean([c.delta for c in per_correction]))
    shaped = [c for c in per_correction if c.delta > 0.0 and c.alignment is not None]
    if not shaped:
        return delta, np.ones(int(length), dtype=np.float32)
    best = min(shaped, key=lambda c: c.alignment.d_original)
    return delta, best.token_mask
