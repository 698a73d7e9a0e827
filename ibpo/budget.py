"""The correction pass's token budgets as pure arithmetic (docs/correction_pass.md, "Bounded cost"): how many
tokens each candidate of a correction prompt x~ (Eq. 13/28) may show and how long x~ can get, from the data
lengths, K and the model context. The pre-flight (``recipe.ibpo.start_checks``) and the Hydra config default
of ``rollout.prompt_length`` (``recipe.ibpo.config``) call it."""

from __future__ import annotations

from dataclasses import dataclass

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
    prompt_tokens = fixed + k * (candidate + TRUNCATION_MARKER_TOKENS)
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
