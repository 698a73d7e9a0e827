"""The correction pass's token lengths as pure arithmetic, both ends of a correction in one place:

- **what a correction prompt x~ may hold** (docs/correction_pass.md, "Bounded cost"): how many tokens each
  candidate of x~ (Eq. 13/28) may show and how long x~ can get, from the data lengths, K and the model
  context. The pre-flight (``recipe.ibpo.start_checks``) and the Hydra config default of
  ``rollout.prompt_length`` (``recipe.ibpo.config``) call it.
- **what a correction may generate**: max_tokens = ⌈c·|y|⌉ + closing tokens for the correction of target y.
  A correction that is a local repair is about as long as its target; without a bound every correction may
  run to ``data.max_response_length`` and the slowest sets the correction pass's wall time. The bound is
  *not* exact for IBPO (docs/correction_pass.md, "Length bound"): Eq. 18 keeps a correction as shaped when
  d(y, ŷ) <= α or d(y, ŷ) <= d(ŷ, y_ref), so a long correction can still be shaped; a cut one is verified
  as it is (usually wrong, so Δ = 0) and, under joint training, trained on as a truncated sample.

How a request carries its bound through the pinned verl without forking it: verl's agent loop passes every
``non_tensor_batch`` column of a row to its agent loop as a keyword (``agent_loop.py:645``) and picks the
loop by the row's ``agent_name`` column. The correction rows name the ``ibpo_correction`` loop
(``recipe.ibpo.correction.agent_loop``, verl's single-turn loop that copies the row's ``ibpo_max_tokens``
into ``sampling_params["max_tokens"]``), which both verl's vLLM server and the CPU ``hf`` server honour
(``vllm_async_server.py:601``, ``verl_cpu/hf_rollout.resolve_max_tokens``); the ``verl.plugins`` entry point
(``recipe.ibpo.verl_plugin``) registers the name. This module holds the arithmetic and the names, no verl.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# ------------------------------------------------------------------ what a correction prompt may hold
# Allowance for the template's text where no tokenizer is at hand (the config-time default of
# rollout.prompt_length); the start check measures the real number.
CORRECTION_TEMPLATE_TOKENS = 256


class CorrectionBudgetError(ValueError):
    """The budgets cannot fit; the message names the option to change."""


# Tokens the truncation marker "[... n tokens omitted ...]" and its newlines can take.
TRUNCATION_MARKER_TOKENS = 16
# A derived candidate budget below this shows too little of a solution to compare: the start check fails.
MIN_DERIVED_CANDIDATE_TOKENS = 64


@dataclass(frozen=True)
class CorrectionBudget:
    """Token budgets of the correction pass (docs/correction_pass.md, "Bounded cost").

    ``max_tokens``: what a correction may generate, the main generation's ``max_response_length`` (a
    correction writes a whole solution, and verl's rollout serves it with ``rollout.response_length``);
    ``candidate_tokens``: each candidate's budget in tokens of its re-tokenised text;
    ``prompt_tokens``: the longest correction prompt, x + (1 + K-1) candidates (+ marker) + template.
    """

    max_tokens: int
    candidate_tokens: int
    prompt_tokens: int
    derived: bool  # True when candidate_tokens was derived (ibpo.max_candidate_tokens = 0)


def correction_prompt_tokens(max_prompt: int, template_tokens: int, num_candidates: int,
                             candidate_tokens: int) -> int:
    """Tokens of the longest correction prompt x~: the problem x, the template's own text and each of the
    1 + K-1 candidates shown at up to ``candidate_tokens`` with its truncation marker."""
    return int(max_prompt) + int(template_tokens) + int(num_candidates) * (int(candidate_tokens)
                                                                          + TRUNCATION_MARKER_TOKENS)


def correction_budget(max_prompt: int, max_response: int, num_references: int, max_candidate_tokens: int,
                      template_tokens: int = CORRECTION_TEMPLATE_TOKENS, context: int | None = None,
                      prompt_length: int | None = None) -> CorrectionBudget:
    """The correction pass's budgets; raises :class:`CorrectionBudgetError` naming the option when they cannot fit.

    An explicit ``max_candidate_tokens > 0`` is used as is. ``0`` derives the budget: the room a correction
    prompt has, ``min(context - max_response, prompt_length)`` (either may be unknown), minus x and the
    template, split over the 1 + K-1 candidates less the marker, capped at ``max_response`` (a candidate
    is a response: more room would only widen the padded prompt tensors). With neither bound known it is
    ``max_response`` (a candidate re-tokenising longer is still cut to it).
    """
    max_prompt, max_response, k = int(max_prompt), int(max_response), 1 + int(num_references)
    for name, value, least in (("data.max_prompt_length", max_prompt, 0), ("data.max_response_length", max_response, 1),
                               ("ibpo.num_references", k - 1, 0), ("template_tokens", int(template_tokens), 0)):
        if value < least:
            raise CorrectionBudgetError(f"{name}={value} must be >= {least}")
    fixed = int(max_prompt) + int(template_tokens)
    rooms = [r for r in (None if context is None else int(context) - max_response,
                         None if prompt_length is None else int(prompt_length)) if r is not None]
    derived = int(max_candidate_tokens) <= 0
    if not derived:
        candidate = int(max_candidate_tokens)
    elif not rooms:
        candidate = max_response
    else:
        candidate = min(max_response, (min(rooms) - fixed) // k - TRUNCATION_MARKER_TOKENS)
        if candidate < min(MIN_DERIVED_CANDIDATE_TOKENS, max_response):
            raise CorrectionBudgetError(
                f"ibpo.max_candidate_tokens=0 derives each candidate's budget from the room of a correction prompt, "
                f"min(context {context} - data.max_response_length {max_response}, rollout.prompt_length "
                f"{prompt_length}) - data.max_prompt_length {max_prompt} - template {template_tokens} over "
                f"{k} candidates - marker = {candidate} tokens < {min(MIN_DERIVED_CANDIDATE_TOKENS, max_response)}: the "
                f"context cannot "
                f"fit a correction prompt. Extend the context (rollout.max_model_len / rope scaling), raise "
                f"rollout.prompt_length, or lower data.max_response_length / data.max_prompt_length")
    prompt_tokens = correction_prompt_tokens(max_prompt, template_tokens, k, candidate)
    budget = CorrectionBudget(max_response, candidate, prompt_tokens, derived)
    if not derived and rooms and prompt_tokens > min(rooms):
        raise CorrectionBudgetError(
            f"ibpo.max_candidate_tokens={candidate} does not fit: a correction prompt can need {prompt_tokens} tokens "
            f"(data.max_prompt_length {max_prompt} + {k} candidates of {candidate} + marker + template "
            f"{template_tokens}) but has room for {min(rooms)} (min(context {context} - data.max_response_length "
            f"{max_response}, rollout.prompt_length {prompt_length})). Lower ibpo.max_candidate_tokens or set it "
            f"to 0 to derive it from the context")
    return budget


def correction_prompt_length(max_prompt: int, max_response: int, num_references: int, max_candidate_tokens: int,
                             template_tokens: int = CORRECTION_TEMPLATE_TOKENS, context: int | None = None) -> int:
    """Tokens a correction prompt x~ can need (:func:`correction_budget`); the config-time default of
    ``rollout.prompt_length``. Where the budgets cannot fit it falls back to the unbounded size so the
    config still composes and the start check reports the problem by name."""
    try:
        return correction_budget(max_prompt, max_response, num_references, max_candidate_tokens,
                                 template_tokens, context).prompt_tokens
    except CorrectionBudgetError:
        return correction_budget(max_prompt, max_response, num_references, max_candidate_tokens,
                                 template_tokens).prompt_tokens


# ------------------------------------------------------------------ what a correction may generate
AGENT_LOOP_NAME = "ibpo_correction"
MAX_TOKENS_KEY = "ibpo_max_tokens"  # non_tensor_batch column: the row's max_tokens (0: the rollout's own)


def correction_max_tokens(target_tokens: int, factor: float, closing_tokens: int, response_length: int) -> int:
    """⌈c·|y|⌉ + closing tokens, capped at the rollout's ``response_length`` (``factor <= 0``: no bound,
    ``response_length``). At least 1 (vLLM rejects max_tokens < 1)."""
    if response_length < 1:
        raise ValueError(f"response_length must be >= 1, got {response_length}")
    if target_tokens < 0 or closing_tokens < 0:
        raise ValueError(f"target_tokens and closing_tokens must be >= 0, got {target_tokens}, {closing_tokens}")
    if not math.isfinite(factor):
        raise ValueError(f"ibpo.correction_max_tokens_factor must be finite, got {factor}")
    if factor <= 0:
        return int(response_length)
    return int(max(1, min(response_length, math.ceil(factor * target_tokens) + closing_tokens)))


def bounded_lengths(target_lengths: Sequence[int], factor: float, closing_tokens: int,
                    response_length: int) -> np.ndarray:
    """:func:`correction_max_tokens` of every target length."""
    return np.array([correction_max_tokens(int(n), factor, closing_tokens, response_length)
                     for n in target_lengths], dtype=np.int64)
