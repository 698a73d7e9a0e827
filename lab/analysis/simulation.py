"""A controlled world with a known ground truth for checking Theorem A.2 and the λ optimum (issue 7, part 4).

World: P problems, each solved by L reasoning steps; at every step a tabular softmax policy picks one of M
choices, choice 0 being the right one. The answer is right (Y = 1) iff every step is right, so one wrong
step makes it wrong. Responses are token sequences (token = step·M + choice), so the real IBPO pipeline
(:func:`ibpo.pipeline.plan_corrections` / :func:`ibpo.pipeline.shape_batch`: references, alignment,
rewrite filter, Δ, φ) runs on them unchanged, followed by :func:`ibpo.advantages.shaped_rewards`,
:func:`ibpo.advantages.group_normalized_advantages` and :func:`ibpo.diagnostics.theorem_stats`.

Correction operator (the stand-in for the model's compare-and-correct): given a wrong target and its
reference, with probability ``rewrite_prob`` it copies the reference (a full rewrite); otherwise it
repairs every wrong step independently with probability ``repair_correct_ref`` (reference right) or
``repair_wrong_ref`` (reference wrong) and keeps every right step. So a target with w wrong steps is
corrected with probability ρ^w: success depends on how many steps are wrong, and φ (= Δ) carries
process information the terminal reward does not.

Per-sample score functions are exact: ∇_θ log π(τ) = Σ_t (onehot(a_t) − π_θ(·|x, t)) in problem x's block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from ibpo.advantages import group_normalized_advantages, shaped_rewards
from ibpo.diagnostics import TheoremStats, theorem_stats
from ibpo.options import IBPOConfig
from ibpo.pipeline import plan_corrections, shape_batch


PAPER_GROUP_SIZE = 8  # G of IBPO in the paper (App. D); the GSPO baseline uses 64

@dataclass(frozen=True)
class World:
    """The task and the correction operator."""

    num_steps: int = 6  # L
    num_choices: int = 4  # M; choice 0 is right
    repair_correct_ref: float = 0.7  # ρ with a right reference
    repair_wrong_ref: float = 0.35  # ρ with a wrong reference
    rewrite_prob: float = 0.1  # the correction copies the reference instead of repairing

    def __post_init__(self) -> None:
        if self.num_steps < 1 or self.num_choices < 2:
            raise ValueError("World needs num_steps >= 1 and num_choices >= 2")
        for name in ("repair_correct_ref", "repair_wrong_ref", "rewrite_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"World.{name}={getattr(self, name)} must lie in [0, 1]")


def logits_for_step_accuracy(step_accuracy: Sequence[float], world: World) -> np.ndarray:
    """(P, L, M) logits with P(right choice) = step_accuracy[x] at every step, wrong choices equally likely."""
    p = np.asarray(step_accuracy, dtype=np.float64)
    if ((p <= 0) | (p >= 1)).any():
        raise ValueError("step accuracies must lie in (0, 1)")
    wrong = (1 - p) / (world.num_choices - 1)
    logits = np.zeros((p.size, world.num_steps, world.num_choices))
    logits[:, :, 0] = np.log(p / wrong)[:, None]
    return logits


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def expected_reward(logits: np.ndarray) -> float:
    """Exact J(θ) = mean over problems of Π_t π(right | x, t)."""
    return float(np.prod(softmax(logits)[:, :, 0], axis=1).mean())


def sample_actions(logits: np.ndarray, problems: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(n, L) choices for the problems in ``problems`` (one row per sample)."""
    probs = softmax(logits)[problems]  # (n, L, M)
    u = rng.random(probs.shape[:2])[..., None]
    return (u > np.cumsum(probs, axis=-1)).sum(axis=-1).clip(max=probs.shape[-1] - 1)


def tokens_of(actions: np.ndarray, world: World) -> list[list[int]]:
    """Token ids of traces: step t with choice a -> t·M + a (one token per step)."""
    offsets = np.arange(actions.shape[1]) * world.num_choices
    return (actions + offsets).tolist()


def score_functions(logits: np.ndarray, problems: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """(n, L·M) exact ∇ log π(τ_i) restricted to problem x_i's block."""
    probs = softmax(logits)[problems]
    onehot = np.zeros_like(probs)
    np.put_along_axis(onehot, actions[..., None], 1.0, axis=-1)
    return (onehot - probs).reshape(actions.shape[0], -1)


def correct(actions: np.ndarray, reference: np.ndarray, reference_right: bool, world: World,
            rng: np.random.Generator) -> np.ndarray:
    """One correction of a wrong trace (the operator described in the module docstring)."""
    if rng.random() < world.rewrite_prob:
        return reference.copy()
    rho = world.repair_correct_ref if reference_right else world.repair_wrong_ref
    fixed = actions.copy()
    repair = (actions != 0) & (rng.random(actions.shape) < rho)
    fixed[repair] = 0
    return fixed


@dataclass
class ShapedBatch:
    """One batch after the IBPO pipeline: everything the variance measurements need."""

    problems: np.ndarray  # (n,) problem of each sample
    group_ids: list[int]  # (n,) group of each sample
    actions: np.ndarray  # (n, L)
    rewards: np.ndarray  # (n,) Y ∈ {0, 1}
    delta: np.ndarray  # (n,) Δ from ibpo.pipeline.shape_batch
    phi: np.ndarray  # (n,) φ (0 on right responses)
    num_corrections: int
    metrics: dict[str, float] = field(default_factory=dict)


def sample_and_shape(logits: np.ndarray, problems_per_group: np.ndarray, group_size: int, world: World,
                     config: IBPOConfig, rng: np.random.Generator, step: int) -> ShapedBatch:
    """Sample ``group_size`` traces per entry of ``problems_per_group``, correct every wrong one with the
    operator, and run the IBPO pipeline (references, alignment, rewrite filter, Δ, φ)."""
    problems = np.repeat(np.asarray(problems_per_group), group_size)
    group_ids = np.repeat(np.arange(len(problems_per_group)), group_size).tolist()
    actions = sample_actions(logits, problems, rng)
    rewards = (actions == 0).all(axis=1).astype(np.float64)
    is_correct = [bool(r) for r in rewards]
    response_ids = tokens_of(actions, world)
    prompts = [[{"role": "user", "content": f"problem {int(x)}"}] for x in problems]
    requests = plan_corrections(group_ids, is_correct, prompts, response_ids,
                                lambda ids: " ".join(map(str, ids)), config, step)
    correction_ids, correction_right = [], []
    for req in requests:
        ref_row = req.reference_rows[0] if req.reference_rows else req.target_row
        ref_right = bool(req.reference_rows) and is_correct[ref_row]
        fixed = correct(actions[req.target_row], actions[ref_row], ref_right, world, rng)
        correction_ids.append(tokens_of(fixed[None], world)[0])
        correction_right.append(bool((fixed == 0).all()))
    outcome = shape_batch(requests, correction_ids, correction_right, response_ids, is_correct, config)
    return ShapedBatch(problems, group_ids, actions, rewards, outcome.delta, outcome.phi, len(requests),
                       outcome.metrics)


def ibpo_advantages(batch: ShapedBatch, lam: float, normalize: bool, epsilon: float = 1e-8) -> np.ndarray:
    """A^IBPO of every sample at shaping weight λ (λ = 0 gives A^GSPO on the same samples): group-normalised
    (Eq. 9/23, what the trainer uses) or only group-centred (Eq. 10-11, the theorem's form)."""
    shaped = shaped_rewards(torch.as_tensor(batch.rewards), torch.as_tensor(batch.delta), lam)
    if normalize:
        return group_normalized_advantages(shaped, batch.group_ids, epsilon).numpy()
    index = np.asarray(batch.group_ids)
    values = shaped.numpy()
    means = np.bincount(index, weights=values) / np.bincount(index)
    return values - means[index]


def per_sample_gradient_variance(advantages: np.ndarray, scores: np.ndarray, problems: np.ndarray,
                                 num_problems: int) -> float:
    """tr Cov over samples of g_i = A_i ∇log π(τ_i) (each g_i lives in its problem's block), (n − 1)
    denominator: what :mod:`ibpo.grad_probe` measures in the trainer."""
    n = advantages.shape[0]
    g = advantages[:, None] * scores
    membership = np.zeros((num_problems, n))
    membership[problems, np.arange(n)] = 1.0
    sums = membership @ g  # per-problem block sums of g
    return float(((g * g).sum() - (sums * sums).sum() / n) / (n - 1))


def estimator_variance(advantages: np.ndarray, scores: np.ndarray, num_problems: int, num_groups: int,
                       group_size: int) -> float:
    """Variance of the per-prompt gradient estimate ĝ_x = (1/G) Σ_i A_i ∇log π(τ_i) across independent
    groups of the same problem, tr Cov, averaged over problems. Samples must be laid out
    ``(problem, group, member)``."""
    g = (advantages[:, None] * scores).reshape(num_problems, num_groups, group_size, -1).mean(axis=2)
    return float(g.var(axis=1, ddof=1).sum(axis=-1).mean())


def true_gradients(logits: np.ndarray) -> np.ndarray:
    """(P, L·M) exact ∇_θ J_x with J_x = Π_t π(right | x, t): J_x·(onehot(0) − π_t) at every step t."""
    probs = softmax(logits)
    j = np.prod(probs[:, :, 0], axis=1)
    onehot = np.zeros_like(probs)
    onehot[:, :, 0] = 1.0
    return (j[:, None, None] * (onehot - probs)).reshape(logits.shape[0], -1)


def estimator_quality(advantages: np.ndarray, scores: np.ndarray, true_grad: np.ndarray, num_groups: int,
                      group_size: int) -> tuple[float, float]:
    """Signal-to-noise ratio ||E ĝ_x||² / tr Var(ĝ_x) of the per-prompt estimate and the cosine between
    E ĝ_x and the true ∇J_x, both averaged over problems whose estimate is not identically 0."""
    num_problems = true_grad.shape[0]
    g = (advantages[:, None] * scores).reshape(num_problems, num_groups, group_size, -1).mean(axis=2)
    mean = g.mean(axis=1)
    var = g.var(axis=1, ddof=1).sum(axis=-1)
    keep = var > 0
    if not keep.any():
        return 0.0, 0.0
    snr = (mean * mean).sum(axis=-1)[keep] / var[keep]
    norms = np.linalg.norm(mean, axis=-1) * np.linalg.norm(true_grad, axis=-1)
    cos = (mean * true_grad).sum(axis=-1)[keep] / np.maximum(norms[keep], 1e-300)
    return float(snr.mean()), float(cos.mean())


def crossing(lams: np.ndarray, values: np.ndarray) -> float:
    """Smallest λ > 0 at which ``values`` climbs back to its λ = 0 level, linearly interpolated between grid
    points; 0 when it is already there at the first grid point after 0; ``inf`` when it stays below it on
    the whole grid."""
    base = values[0]
    for j in range(1, len(lams)):
        if values[j] >= base:
            if j == 1:
                return 0.0
            below = base - values[j - 1]  # > 0: j is the first grid point at or above the base
            frac = below / (values[j] - values[j - 1])
            return float(lams[j - 1] + frac * (lams[j] - lams[j - 1]))
    return float("inf")


@dataclass(frozen=True)
class RegimeResult:
    """Theorem A.2 quantities and measured variances at one fixed policy."""

    step_accuracy: float
    mean_reward: float
    correction_success: float
    rewrite_rate: float
    stats: TheoremStats  # pooled within-group, at λ = lam
    lam: float
    lam_max: float  # 2C / V_φ (predicted)
    cross_adv: float  # measured λ where Var(A^IBPO) (unnormalised) returns to Var(A^GSPO)
    cross_grad: float  # same for the per-sample policy-gradient variance (unnormalised advantages)
    cross_grad_norm: float  # per-sample gradient variance with group-normalised advantages
    cross_est_norm: float  # per-prompt estimator variance with group-normalised advantages
    ratio_adv: float  # Var(A^IBPO)/Var(A^GSPO), unnormalised, at λ = lam
    ratio_grad: float  # per-sample gradient variance ratio, unnormalised, at λ = lam
    ratio_grad_norm: float  # per-sample gradient variance ratio, normalised, at λ = lam
    ratio_est_norm: float  # estimator variance ratio, normalised, at λ = lam
    snr_gspo: float  # ||E ĝ||² / tr Var(ĝ) of the per-prompt estimator, normalised advantages, λ = 0
    snr_ibpo: float  # same at λ = lam
    cos_gspo: float  # cosine(E ĝ, true ∇J), λ = 0
    cos_ibpo: float  # same at λ = lam
    score_sq_right: float  # mean ‖∇log π(τ)‖² over right traces
    score_sq_wrong: float  # mean ‖∇log π(τ)‖² over wrong traces
    frac_informative_gspo: float  # share of groups with non-constant reward (non-zero GSPO advantages)
    frac_informative_ibpo: float  # share of groups with non-constant shaped reward


def measure_regime(step_accuracy: float, world: World, config: IBPOConfig, num_problems: int, groups_per_problem: int,
                   lam_grid: np.ndarray, seed: int, group_size: int = PAPER_GROUP_SIZE) -> RegimeResult:
    """Sample ``groups_per_problem`` groups of ``group_size`` (G) for every problem at a fixed policy
    (every step right with probability ``step_accuracy``) and measure everything on the same samples."""
    rng = np.random.default_rng(seed)
    logits = logits_for_step_accuracy([step_accuracy] * num_problems, world)
    G = int(group_size)
    layout = np.repeat(np.arange(num_problems), groups_per_problem)  # (problem, group) order
    batch = sample_and_shape(logits, layout, G, world, config, rng, step=seed)
    scores = score_functions(logits, batch.problems, batch.actions)
    stats = theorem_stats(batch.rewards, batch.phi, batch.group_ids, config.lam)
    curves = {k: [] for k in ("adv", "grad", "grad_norm", "est_norm")}
    for lam in lam_grid:
        a_c = ibpo_advantages(batch, float(lam), normalize=False)
        a_n = ibpo_advantages(batch, float(lam), normalize=True)
        curves["adv"].append(float(np.mean(a_c ** 2)))
        curves["grad"].append(per_sample_gradient_variance(a_c, scores, batch.problems, num_problems))
        curves["grad_norm"].append(per_sample_gradient_variance(a_n, scores, batch.problems, num_problems))
        curves["est_norm"].append(estimator_variance(a_n, scores, num_problems, groups_per_problem, G))
    arrays = {k: np.asarray(v) for k, v in curves.items()}
    at = int(np.argmin(np.abs(lam_grid - config.lam)))
    if lam_grid[0] != 0.0 or abs(lam_grid[at] - config.lam) > 1e-9:
        raise ValueError(f"lam_grid must start at 0 and contain λ = {config.lam}")
    truth = true_gradients(logits)
    snr_gspo, cos_gspo = estimator_quality(ibpo_advantages(batch, 0.0, True), scores, truth, groups_per_problem, G)
    snr_ibpo, cos_ibpo = estimator_quality(ibpo_advantages(batch, config.lam, True), scores, truth,
                                           groups_per_problem, G)
    shaped = batch.rewards + config.lam * batch.delta
    groups = np.asarray(batch.group_ids)

    def informative(values: np.ndarray) -> float:
        hi = np.full(groups.max() + 1, -np.inf)
        lo = np.full(groups.max() + 1, np.inf)
        np.maximum.at(hi, groups, values)
        np.minimum.at(lo, groups, values)
        return float(np.mean(hi > lo))

    return RegimeResult(
        step_accuracy=step_accuracy,
        mean_reward=float(batch.rewards.mean()),
        correction_success=batch.metrics.get("correction_success_rate", 0.0),
        rewrite_rate=batch.metrics.get("rewrite_rate", 0.0),
        stats=stats,
        lam=config.lam,
        lam_max=stats.lambda_max,
        cross_adv=crossing(lam_grid, arrays["adv"]),
        cross_grad=crossing(lam_grid, arrays["grad"]),
        cross_grad_norm=crossing(lam_grid, arrays["grad_norm"]),
        cross_est_norm=crossing(lam_grid, arrays["est_norm"]),
        ratio_adv=arrays["adv"][at] / arrays["adv"][0],
        ratio_grad=arrays["grad"][at] / arrays["grad"][0],
        ratio_grad_norm=arrays["grad_norm"][at] / arrays["grad_norm"][0],
        ratio_est_norm=arrays["est_norm"][at] / arrays["est_norm"][0],
        snr_gspo=snr_gspo,
        snr_ibpo=snr_ibpo,
        cos_gspo=cos_gspo,
        cos_ibpo=cos_ibpo,
        score_sq_right=float((scores[batch.rewards == 1] ** 2).sum(axis=1).mean()) if batch.rewards.any() else 0.0,
        score_sq_wrong=float((scores[batch.rewards == 0] ** 2).sum(axis=1).mean()) if (batch.rewards == 0).any() else 0.0,
        frac_informative_gspo=informative(batch.rewards),
        frac_informative_ibpo=informative(shaped),
    )


@dataclass(frozen=True)
class TrainingResult:
    """One training run to a reward threshold."""

    label: str
    group_size: int
    shaping: bool
    seed: int
    reached: bool
    steps: int  # steps taken (to the threshold, or the step budget)
    samples: float  # generated samples counted at the threshold (corrections weighted by their cost)
    final_reward: float  # exact J at the end


def train(label: str, world: World, config: IBPOConfig, shaping: bool, initial_accuracy: Sequence[float],
          prompts_per_step: int, learning_rate: float, threshold: float, max_steps: int, correction_cost: float,
          seed: int, group_size: int = PAPER_GROUP_SIZE) -> TrainingResult:
    """On-policy GSPO (ratio = 1, so the update is the group-normalised policy gradient) with or without the
    IBPO shaping, until the exact expected reward J(θ) reaches ``threshold``. Corrections are counted as
    ``correction_cost`` samples each (they are generated too; App. B)."""
    rng = np.random.default_rng(seed)
    logits = logits_for_step_accuracy(initial_accuracy, world)
    num_problems = logits.shape[0]
    G = int(group_size)
    samples = 0.0
    for step in range(max_steps):
        if expected_reward(logits) >= threshold:
            return TrainingResult(label, G, shaping, seed, True, step, samples, expected_reward(logits))
        problems = rng.integers(0, num_problems, size=prompts_per_step)
        if shaping:
            batch = sample_and_shape(logits, problems, G, world, config, rng, step)
            adv = ibpo_advantages(batch, config.lam, normalize=True)
            samples += batch.problems.size + correction_cost * batch.num_corrections
            rows, actions = batch.problems, batch.actions
        else:
            rows = np.repeat(problems, G)
            actions = sample_actions(logits, rows, rng)
            rewards = torch.as_tensor((actions == 0).all(axis=1).astype(np.float64))
            adv = group_normalized_advantages(rewards, np.repeat(np.arange(prompts_per_step), G).tolist()).numpy()
            samples += rows.size
        grad = np.zeros((num_problems, logits.shape[1] * logits.shape[2]))
        np.add.at(grad, rows, adv[:, None] * score_functions(logits, rows, actions))
        logits = logits + learning_rate * grad.reshape(logits.shape) / rows.size
    return TrainingResult(label, G, shaping, seed, expected_reward(logits) >= threshold, max_steps, samples,
                          expected_reward(logits))
