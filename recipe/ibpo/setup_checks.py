"""Start-of-run checks: a misconfigured IBPO run fails before the first step, with a message naming the key."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from ibpo.config import IBPOConfig
from counterfactual.importance import CounterfactualConfig
from ibpo.prompts import build_correction_messages

# Chat-template scaffolding around the correction prompt (role headers, generation prompt) plus slack.
CHAT_TEMPLATE_SLACK_TOKENS = 32
# Allowance for the template's text where no tokenizer is at hand (the config-time default of
# rollout.prompt_length); the start check measures the real number.
CORRECTION_TEMPLATE_TOKENS = 256


class IBPOSetupError(ValueError):
    """The verl config cannot run IBPO as configured."""


def ibpo_config_from(config: DictConfig) -> IBPOConfig:
    """The validated ``ibpo:`` block; G comes from ``actor_rollout_ref.rollout.n``."""
    block = config.get("ibpo")
    if block is None:
        raise IBPOSetupError("config has no `ibpo:` block; start from recipe/ibpo/config/ibpo_trainer.yaml")
    options = OmegaConf.to_container(block, resolve=True)
    n = int(config.actor_rollout_ref.rollout.n)
    if options.get("group_size") not in (None, n):
        raise IBPOSetupError(f"ibpo.group_size={options['group_size']} disagrees with actor_rollout_ref.rollout.n={n}; "
                             "leave ibpo.group_size unset (it follows rollout.n)")
    options["group_size"] = n
    return IBPOConfig.from_mapping(options)


def counterfactual_config_from(config: DictConfig) -> CounterfactualConfig | None:
    """The validated ``counterfactual:`` block, or ``None`` when the method is off (or the block absent)."""
    block = config.get("counterfactual")
    if block is None:
        return None
    options = OmegaConf.to_container(block, resolve=True)
    if not options.pop("enable", False):
        return None
    if config.get("ibpo") is not None and config.ibpo.get("enable", False):
        raise IBPOSetupError("counterfactual.enable=True and ibpo.enable=True: pick one credit-assignment method")
    return CounterfactualConfig.from_mapping(options)


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
    """The correction pass's budgets; raises :class:`IBPOSetupError` naming the option when they cannot fit.

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
            raise IBPOSetupError(
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
        raise IBPOSetupError(
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
    except IBPOSetupError:
        return correction_budget(max_prompt, max_response, num_references, max_candidate_tokens,
                                 template_tokens).prompt_tokens


def correction_template_tokens(ibpo: IBPOConfig, tokenizer) -> int:
    """Tokens of the correction template's own text (empty problem and candidates), by the run's tokenizer,
    plus the chat template's scaffolding allowance."""
    scaffold = build_correction_messages([{"role": "user", "content": ""}], "", [""] * ibpo.num_references, ibpo)
    return len(tokenizer.encode(scaffold[-1]["content"], add_special_tokens=False)) + CHAT_TEMPLATE_SLACK_TOKENS


def check_trainer_config(config: DictConfig, ibpo: IBPOConfig, tokenizer,
                         max_positions: int | None = None) -> IBPOConfig:
    """Fail early on settings that would make IBPO silently wrong; return ``ibpo`` with the candidate budget
    resolved (``max_candidate_tokens = 0`` replaced by the budget derived from the context and
    ``rollout.prompt_length``, :func:`correction_budget`). ``max_positions`` is the model's context length
    (``max_position_embeddings``), used when ``rollout.max_model_len`` is unset, as verl's vLLM server does."""
    algo = config.algorithm
    if algo.adv_estimator in ("remax",):
        raise IBPOSetupError("algorithm.adv_estimator=remax is not supported by the IBPO trainer")
    if ibpo.enable and algo.adv_estimator not in ("ibpo", "grpo"):
        raise IBPOSetupError(f"algorithm.adv_estimator={algo.adv_estimator!r}: IBPO needs group normalisation of the "
                             "shaped reward, use 'ibpo' (the paper's, ε = 1e-8, population std) or 'grpo'")
    if ibpo.enable and config.reward.reward_model.get("enable", False):
        raise IBPOSetupError("reward.reward_model.enable=True: IBPO scores corrections with the streaming rule-based "
                             "reward (reward.custom_reward_function); a model reward is not supported")
    if config.get("skip", {}).get("rollout", {}).get("enable", False):
        raise IBPOSetupError("skip.rollout.enable=True would serve the correction generation from the main "
                             "generation's cache; turn it off")
    if ibpo.enable and int(config.actor_rollout_ref.rollout.n) < 2 and ibpo.num_references > 0:
        raise IBPOSetupError("actor_rollout_ref.rollout.n must be >= 2 for reference-based correction "
                             "(or set ibpo.num_references=0 for self-correction)")
    if not ibpo.enable:
        return ibpo
    rollout = config.actor_rollout_ref.rollout
    have = int(rollout.prompt_length)
    context = rollout.get("max_model_len") or max_positions
    template = correction_template_tokens(ibpo, tokenizer)
    # first what the context allows (a derived budget that cannot fit names ibpo.max_candidate_tokens)
    correction_budget(config.data.max_prompt_length, config.data.max_response_length, ibpo.num_references,
                      ibpo.max_candidate_tokens, template, context)
    response_length = int(rollout.get("response_length") or config.data.max_response_length)
    total = have + response_length
    if context is not None and total > int(context):
        raise IBPOSetupError(
            f"actor_rollout_ref.rollout.prompt_length={have} + response_length={response_length} = {total} "
            f"exceeds the model context {context} (rollout.max_model_len, else max_position_embeddings): the "
            f"rollout would silently shorten long corrections, which then score wrong. Lower "
            f"rollout.prompt_length (ibpo.max_candidate_tokens = 0 derives the candidates' budget from what is "
            f"left; an explicit ibpo.max_candidate_tokens must fit it), or the response length, or extend the "
            f"context (rope scaling)."
        )
    k = 1 + ibpo.num_references
    shown = (ibpo.max_candidate_tokens if ibpo.max_candidate_tokens > 0
             else min(MIN_DERIVED_CANDIDATE_TOKENS, int(config.data.max_response_length)))
    need = int(config.data.max_prompt_length) + template + k * (shown + TRUNCATION_MARKER_TOKENS)
    if have < need:
        raise IBPOSetupError(
            f"actor_rollout_ref.rollout.prompt_length={have} is too small for correction prompts: they need "
            f"{need} tokens (data.max_prompt_length + {k} candidates of "
            f"{'ibpo.max_candidate_tokens=' if ibpo.max_candidate_tokens > 0 else 'at least '}{shown} tokens + marker "
            f"+ template {template}). verl would left-truncate them with only a warning. Raise rollout.prompt_length "
            f"or lower ibpo.max_candidate_tokens."
        )
    budget = correction_budget(config.data.max_prompt_length, config.data.max_response_length, ibpo.num_references,
                               ibpo.max_candidate_tokens, template, context, have)
    return ibpo.replace(max_candidate_tokens=budget.candidate_tokens)


def model_max_positions(model_path: str) -> int | None:
    """``max_position_embeddings`` of the HF model at ``model_path`` (None if the config has none)."""
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)
    text_config = getattr(hf_config, "text_config", None) or hf_config
    return getattr(text_config, "max_position_embeddings", None)


def count_model_params(model_path: str) -> int:
    """Parameter count of the HF model at ``model_path`` without loading its weights (meta device)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return int(sum(p.numel() for p in model.parameters()))
