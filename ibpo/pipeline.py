"""IBPO steps B-C on plain Python data (Alg. 1 lines 12-31): plan the corrections of a batch, then turn
their outcomes into Δ, φ, token masks and metrics; :func:`correction_step` is the whole pass around a caller's
generation, and :func:`joint_rewards` / :func:`joint_row_uids` its joint-training rows (App. E.2 (C)). The verl
trainer (``recipe.ibpo.correction.step``) and the toy loop (``analysis.toy_loop``) both run a step through these
functions, each with its own generation; the trainer only converts DataProto to and from their inputs, so every
number it feeds verl comes from here.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Sequence, TypeVar

import numpy as np

from ibpo.alignment import Alignment, align
from ibpo.diagnostics import correction_stats
from ibpo.options import IBPOConfig
from ibpo.prompts import Message, build_correction_messages, render_candidate
from ibpo.references import get_reference_rule, select_references
from ibpo.shaping import TargetShaping, aggregate_corrections, shape_targets
from ibpo.variants import get_variant

# the suffix of a correction's group id: a correction is never normalised against the original responses
CORRECTION_UID_SUFFIX = "::ibpo_corr"
Output = TypeVar("Output")  # what a caller's generation returns besides scores and ids (the trainer: a DataProto)


@dataclass(frozen=True)
class CorrectionRequest:
    """One correction to generate: x~ for wrong response ``target_row`` (batch row index)."""

    target_row: int
    reference_rows: tuple[int, ...]
    messages: list[Message]
    group_id: Hashable


@dataclass
class ShapingOutcome:
    """Per-row results of a step (rows of the main batch, in batch order)."""

    delta: np.ndarray  # (bs,) Δ_i (0 for correct responses and unshaped wrong ones)
    phi: np.ndarray  # (bs,) φ_i = Δ_i (Eq. 6): 0 for correct responses
    token_masks: list[np.ndarray]  # per row, float32 over the row's response tokens
    correction_rewrite: np.ndarray  # (num_corrections,) rewrite flag per correction (for the rewrite penalty)
    alpha: float
    alpha_adaptive: bool
    metrics: dict[str, float] = field(default_factory=dict)


def correction_subset(eligible: Sequence[int], fraction: float, seed: int, step: int) -> set[int]:
    """The rows of ``eligible`` that get a correction under ``ibpo.correction_fraction`` f: ceil(f·m) of the m
    eligible rows, drawn uniformly without replacement from its own (seed, step) stream, after the references
    are drawn: a kept row has the reference it would have with f = 1."""
    m = len(eligible)
    k = math.ceil(round(fraction * m, 9))  # round first: 0.28 * 25 is 7.000000000000001: 7 rows, not 8
    if k >= m:
        return set(eligible)
    rng = np.random.default_rng([int(seed), int(step), 2])
    return {int(eligible[i]) for i in rng.choice(m, size=k, replace=False)}


def plan_corrections(
    group_ids: Sequence[Hashable],
    is_correct: Sequence[bool],
    prompt_messages: Sequence[Sequence[Message]],
    response_ids: Sequence[Sequence[int]],
    decode: Callable[[list[int]], str],
    config: IBPOConfig,
    step: int,
    encode: Callable[[str], list[int]] | None = None,
    candidate_budget: Callable[[int], int] | None = None,
) -> list[CorrectionRequest]:
    """References (Alg. 1 lines 14-19) and correction prompts (Eq. 28) for every wrong response (with
    ``correct_groups=mixed``: every wrong response that has a right sibling; with ``correction_fraction`` below
    1, a random share of those: :func:`correction_subset`), ``corrections_per_target``
    requests each (consecutive, same target). References are drawn for every wrong response first, so a
    row's reference does not depend on ``correct_groups``. ``encode`` (the run's tokenizer)
    makes the candidate budget count re-tokenised tokens (:func:`ibpo.prompts.render_candidate`).
    ``candidate_budget`` (None: ``config.max_candidate_tokens`` for every candidate) gives each candidate its
    own budget from the number of tokens its view shows whole (0: keep it whole); the truncation measurement
    (``lab.analysis.truncation_cost``) keeps a fixed share of every candidate with it."""
    n = len(group_ids)
    if not (len(is_correct) == len(prompt_messages) == len(response_ids) == n):
        raise ValueError("group_ids, is_correct, prompt_messages and response_ids must have equal lengths")
    rule = get_reference_rule(config.reference_rule)  # resolved once per batch, passed down as the entry
    references = select_references(group_ids, is_correct, config.num_references, config.seed, step,
                                   rule=rule, response_ids=response_ids)
    if config.correct_groups == "mixed":  # no correction for a wrong response without a right sibling
        has_right = {g for g, c in zip(group_ids, is_correct) if c}
        references = [refs if group_ids[row] in has_right else None for row, refs in enumerate(references)]
    if config.correction_fraction < 1.0:
        kept = correction_subset([row for row, refs in enumerate(references) if refs is not None],
                                 config.correction_fraction, config.seed, step)
        references = [refs if row in kept else None for row, refs in enumerate(references)]
    rng = np.random.default_rng([int(config.seed), int(step), 1])
    rendered: dict[int, str] = {}

    def text(row: int) -> str:
        if row not in rendered:
            row_config = config
            if candidate_budget is not None:
                whole = render_candidate(response_ids[row], decode, config.replace(max_candidate_tokens=0), encode)
                shown = len(encode(whole)) if encode is not None else len(response_ids[row])
                row_config = config.replace(max_candidate_tokens=int(candidate_budget(shown)))
            rendered[row] = render_candidate(response_ids[row], decode, row_config, encode)
        return rendered[row]

    requests = []
    for row, refs in enumerate(references):
        if refs is None:
            continue
        messages = build_correction_messages(prompt_messages[row], text(row), [text(r) for r in refs], config, rng)
        for _ in range(config.corrections_per_target):
            requests.append(CorrectionRequest(row, tuple(refs), messages, group_ids[row]))
    return requests


def shape_batch(
    requests: Sequence[CorrectionRequest],
    correction_ids: Sequence[Sequence[int]],
    correction_right: Sequence[bool],
    response_ids: Sequence[Sequence[int]],
    is_correct: Sequence[bool],
    config: IBPOConfig,
) -> ShapingOutcome:
    """Alignment, rewrite filter, Δ, φ and token masks for a batch (Eq. 14-19), plus correction metrics.

    Only successful corrections are aligned: a failed correction earns Δ = 0 whatever its distance
    (App. C.2), so aligning it would be wasted work.
    """
    if not (len(requests) == len(correction_ids) == len(correction_right)):
        raise ValueError("requests, correction_ids and correction_right must have equal lengths")
    n = len(response_ids)
    if len(is_correct) != n:
        raise ValueError(f"is_correct has {len(is_correct)} entries for {n} responses: one per row of the batch")
    outside = [req.target_row for req in requests if not 0 <= req.target_row < n]
    if outside:
        raise ValueError(f"correction requests target rows {outside[:5]} outside the batch of {n} responses")
    alignments: list[Alignment | None] = [
        align(response_ids[req.target_row], ids) if right else None
        for req, ids, right in zip(requests, correction_ids, correction_right)
    ]
    lengths = [len(response_ids[req.target_row]) for req in requests]
    references = [[response_ids[r] for r in req.reference_rows] for req in requests]
    per_correction, alpha, adaptive = shape_targets(alignments, correction_right, lengths, correction_ids,
                                                    references, config)

    by_target: dict[int, list[TargetShaping]] = {}
    for req, result in zip(requests, per_correction):
        by_target.setdefault(req.target_row, []).append(result)
    delta = np.zeros(n, dtype=np.float64)
    masks = [np.ones(len(ids), dtype=np.float32) for ids in response_ids]
    for row, results in by_target.items():
        if is_correct[row]:
            raise ValueError(f"row {row} is correct but was planned for correction")
        delta[row], masks[row] = aggregate_corrections(results, len(response_ids[row]))
    phi = np.where(np.asarray(is_correct, dtype=bool), 0.0, delta)

    ratios = [r.alignment.unmodified_ratio if r.alignment is not None else 0.0 for r in per_correction]
    metrics = correction_stats(
        num_wrong=int(n - int(np.sum(np.asarray(is_correct, dtype=bool)))),
        correction_right=[r.correction_right for r in per_correction],
        rewrite=[r.rewrite for r in per_correction],
        delta=delta[[row for row in by_target]] if by_target else [],
        unmodified_ratio=ratios,
        batch_size=n,
    )
    metrics["alpha"] = float(alpha)
    metrics["alpha_adaptive"] = float(adaptive)
    shaped_rows = [row for row in by_target if delta[row] > 0]
    if get_variant(config.variant).masks_tokens and shaped_rows:  # a mean over no shaped response is left out
        metrics["mask_kept_fraction"] = float(np.mean([masks[r].mean() if masks[r].size else 0.0 for r in shaped_rows]))
    return ShapingOutcome(delta, phi, masks, np.array([r.rewrite for r in per_correction], dtype=bool),
                          alpha, adaptive, metrics)


@dataclass(frozen=True)
class Generated(Generic[Output]):
    """A step's generated corrections, one per request in request order: verifier score, response token ids, and
    the caller's own record of the generation (``output``: the trainer's DataProto, the toy loop's prompts)."""

    scores: np.ndarray
    ids: list[list[int]]
    output: Output | None = None


@dataclass(frozen=True)
class CorrectionStep(Generic[Output]):
    """One step's correction pass: the requests, which main rows were right, the corrections (``generated``:
    None when nothing was wrong), which corrections were right, and the shaping (Δ, masks, rewrite flags)."""

    requests: list[CorrectionRequest]
    is_correct: list[bool]
    generated: Generated[Output] | None
    correction_right: list[bool]
    outcome: ShapingOutcome


def _untimed(phase: str) -> AbstractContextManager:
    return nullcontext()


def correction_step(group_ids: Sequence[Hashable], messages: Sequence[Sequence[Message]],
                    response_ids: Sequence[Sequence[int]], scores: Sequence[float], config: IBPOConfig, step: int,
                    generate: Callable[[list[CorrectionRequest]], Generated[Output]],
                    decode: Callable[[list[int]], str], encode: Callable[[str], list[int]] | None = None,
                    phase: Callable[[str], AbstractContextManager] = _untimed) -> CorrectionStep[Output]:
    """Steps B-C of Alg. 1 on a step's main rows (their group ids, prompt messages, response tokens and verifier
    scores): plan the corrections (:func:`plan_corrections`), have the caller ``generate`` them (called only when
    there is a request), judge them against ``correct_threshold`` and shape (:func:`shape_batch`). ``phase(name)``
    times the phases ``plan``, ``gen`` and ``shape`` (the trainer's verl timers)."""
    with phase("plan"):
        is_correct = (np.asarray(scores) >= config.correct_threshold).tolist()
        requests = plan_corrections(group_ids, is_correct, messages, response_ids, decode, config, step, encode)
    generated = None
    if requests:
        with phase("gen"):
            generated = generate(requests)
        if len(generated.ids) != len(requests) or len(generated.scores) != len(requests):
            raise RuntimeError(f"the correction pass returned {len(generated.ids)} rows for {len(requests)} requests")
    with phase("shape"):
        right = (np.asarray(generated.scores) >= config.correct_threshold).tolist() if generated else []
        outcome = shape_batch(requests, generated.ids if generated else [], right, response_ids, is_correct, config)
    return CorrectionStep(requests, is_correct, generated, right, outcome)


def joint_rewards(correction_scores: Sequence[float], rewrite: np.ndarray, config: IBPOConfig) -> np.ndarray:
    """The joint-training rows' rewards (App. C.3, E.2 (C)): r(ŷ) − rewrite_penalty·1[rewrite], per correction."""
    return np.asarray(correction_scores, dtype=np.float64) - rewrite_penalties(rewrite, config)


def rewrite_penalties(rewrite: np.ndarray, config: IBPOConfig) -> np.ndarray:
    """rewrite_penalty·1[rewrite] per correction: what a rewriting correction's joint-training row loses."""
    return config.rewrite_penalty * np.asarray(rewrite, dtype=np.float64)


def joint_row_uids(requests: Sequence[CorrectionRequest], grouping: str) -> np.ndarray:
    """Group ids of the joint-training rows; never equal to a main row's (:data:`CORRECTION_UID_SUFFIX`), so a
    correction sample is never normalised against the original responses.

    ``per_prompt``: every correction for prompt x shares one group; ``per_correction_prompt``: the
    ``corrections_per_target`` samples of one correction prompt x~ (one wrong target row) form a group."""
    if grouping == "per_prompt":
        return np.array([f"{r.group_id}{CORRECTION_UID_SUFFIX}" for r in requests], dtype=object)
    if grouping == "per_correction_prompt":
        return np.array([f"{r.group_id}{CORRECTION_UID_SUFFIX}:{r.target_row}" for r in requests], dtype=object)
    raise ValueError(f"unknown ibpo.joint_grouping {grouping!r}")
