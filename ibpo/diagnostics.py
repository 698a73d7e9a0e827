"""The paper's own evidence, computed every step (§5.1.1, App. A Theorem A.2, App. C.3).

Statistics of the Theorem are *within-group* (the theorem fixes x and varies the trajectory): every
quantity is centred by its group mean and pooled over the batch's groups. With r ∈ {0, 1} and φ = 0 on
correct responses, Cov(Y, φ) = −Ȳ·φ̄ ≤ 0 in every group (Assumption A.1 holds by construction).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np
import torch

from ibpo.advantages import group_ids_to_index


def _group_centred(values: np.ndarray, index: np.ndarray, num_groups: int) -> np.ndarray:
    counts = np.bincount(index, minlength=num_groups).astype(np.float64)
    means = np.bincount(index, weights=values, minlength=num_groups) / np.maximum(counts, 1.0)
    return values - means[index]


def unnormalised_advantages(values: Sequence[float], group_ids: Sequence[Hashable]) -> np.ndarray:
    """Theorem A.2's advantages: each value minus its group's mean, not divided by the group's std
    (Eq. 10: A^GSPO = Y − Ȳ from the rewards; Eq. 11: A^IBPO = Y + λφ − mean from r' = r + λφ)."""
    v = np.asarray(values, dtype=np.float64)
    if v.shape != (len(group_ids),):
        raise ValueError(f"values must be 1-D with one entry per group id; got {v.shape}, {len(group_ids)}")
    if not len(group_ids):
        return v.copy()
    index = group_ids_to_index(list(group_ids)).numpy()
    return _group_centred(v, index, int(index.max()) + 1)


@dataclass(frozen=True)
class TheoremStats:
    """Pooled within-group statistics of Theorem A.2 for one batch."""

    cov_y_phi: float  # Cov(Y, φ), must be <= 0
    c: float  # C = −Cov(Y, φ)
    v_phi: float  # V_φ = Var(φ − φ̄)
    lambda_max: float  # 2C / (V_φ + ε); +inf-like when V_φ = 0 and C = 0 is reported as 0
    var_unnorm_adv_gspo: float  # Var(A^GSPO) = Var(Y − Ȳ), unnormalised (Eq. 10), not what is trained on
    var_unnorm_adv_ibpo: float  # Var(A^IBPO) = Var(Y + λφ − mean), unnormalised (Eq. 11), at the λ used
    num_groups: int  # groups with >= 2 members that entered the statistics


def theorem_stats(
    rewards: Sequence[float], phi: Sequence[float], group_ids: Sequence[Hashable], lam: float, eps: float = 1e-8
) -> TheoremStats:
    """Cov(Y, φ), C, V_φ, λ_max = 2C / (V_φ + ε) (Theorem A.2) and the unnormalised advantage variances of
    Eq. 10-12, pooled within groups of size >= 2 (population moments)."""
    y = np.asarray(rewards, dtype=np.float64)
    f = np.asarray(phi, dtype=np.float64)
    if not (y.ndim == f.ndim == 1 and y.shape == f.shape and y.shape[0] == len(group_ids)):
        raise ValueError(f"rewards, phi and group_ids must be 1-D of the same length; got {y.shape}, {f.shape}, "
                         f"{len(group_ids)}")
    for name, values in (("rewards", y), ("phi", f)):  # a NaN would fold a λ_max of 0 into the theorem schedule
        if not np.isfinite(values).all():
            rows = np.flatnonzero(~np.isfinite(values))[:5].tolist()
            raise ValueError(f"{name} must be finite; rows {rows} hold {values[rows].tolist()}")
    index = group_ids_to_index(list(group_ids)).numpy() if len(group_ids) else np.zeros(0, dtype=np.int64)
    num_groups = int(index.max()) + 1 if index.size else 0
    counts = np.bincount(index, minlength=num_groups)
    keep = counts[index] >= 2 if index.size else np.zeros(0, dtype=bool)
    if not keep.any():
        return TheoremStats(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    yc = _group_centred(y, index, num_groups)[keep]
    fc = _group_centred(f, index, num_groups)[keep]
    cov = float(np.mean(yc * fc))
    v_phi = float(np.mean(fc * fc))
    c = -cov
    lambda_max = 2.0 * c / (v_phi + eps) if c > 0 else 0.0
    var_gspo = float(np.mean(yc * yc))
    a_ibpo = yc + lam * fc
    return TheoremStats(cov, c, v_phi, lambda_max, var_gspo, float(np.mean(a_ibpo * a_ibpo)),
                        int(np.sum(counts >= 2)))


def correction_stats(
    num_wrong: int,
    correction_right: Sequence[bool],
    rewrite: Sequence[bool],
    delta: Sequence[float],
    unmodified_ratio: Sequence[float],
    batch_size: int,
) -> dict[str, float]:
    """Counts (wrong responses, corrections, right corrections, shaped responses) and the rates and means over
    them: success rate (right corrections / corrections), rewrite rate (rewrites / right corrections), shaped
    fraction (shaped responses / all responses), mean Δ over shaped responses, mean unmodified ratio over
    right corrections. A rate or mean whose denominator is empty this step is left out (not 0: a 0 would
    read as "no copying" or "every correction failed" and drag averages over steps); its count is there."""
    right = np.asarray(correction_right, dtype=bool)
    rew = np.asarray(rewrite, dtype=bool)
    d = np.asarray(delta, dtype=np.float64)
    ratio = np.asarray(unmodified_ratio, dtype=np.float64)
    if not (right.ndim == 1 and rew.shape == ratio.shape == right.shape):
        raise ValueError(f"correction_right, rewrite and unmodified_ratio must be 1-D with one entry per correction; "
                         f"got {right.shape}, {rew.shape}, {ratio.shape}")
    n_corr = right.size
    n_right = int(right.sum())
    shaped = d > 0
    stats = {
        "num_wrong": float(num_wrong),
        "num_corrections": float(n_corr),
        "num_right_corrections": float(n_right),
        "num_shaped": float(shaped.sum()),
        "shaped_fraction": int(shaped.sum()) / batch_size if batch_size else 0.0,
    }
    if n_corr:
        stats["correction_success_rate"] = n_right / n_corr
    if n_right:
        stats["rewrite_rate"] = int((rew & right).sum()) / n_right
        stats["unmodified_ratio"] = float(ratio[right].mean())
    if shaped.any():
        stats["mean_delta"] = float(d[shaped].mean())
    return stats


def trained_advantage_variance(advantages: np.ndarray, response_mask: np.ndarray) -> tuple[float, float]:
    """Population variance of the advantages the actor is trained on (after normalisation, Eq. 23, and the
    token mask, Eq. 17): over sequences (each row's mean advantage over its valid response tokens) and
    over all valid response tokens. Rows without valid tokens are left out. Returns (per_sequence,
    per_token)."""
    adv = np.asarray(advantages, dtype=np.float64)
    valid = np.asarray(response_mask, dtype=bool)
    counts = valid.sum(-1)
    rows = counts > 0
    if not rows.any():
        return 0.0, 0.0
    per_sequence = (np.where(valid, adv, 0.0).sum(-1)[rows] / counts[rows])
    return float(per_sequence.var()), float(adv[valid].var())


def total_variance(per_sample: torch.Tensor) -> float:
    """tr Cov over samples: Σ_k Var_i(g_{i,k}) with the (B − 1) denominator; 0 for B < 2."""
    if per_sample.shape[0] < 2:
        return 0.0
    return float(per_sample.to(torch.float64).var(dim=0, unbiased=True).sum())
