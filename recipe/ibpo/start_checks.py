"""IBPO's own start checks: the trainer config against what IBPO needs (its advantage estimator, the
rule-based streaming reward, the correction pass's rollout) and the correction prompts against the context
(the budget arithmetic is the pure :mod:`ibpo.correction_lengths`), and the longest rows against verl's
micro-batch token limits (``recipe.common.preflight.row_limits``).

Run twice: in the driver before Ray, by the shared pre-flight (:func:`recipe.common.preflight.preflight`,
through the ``check`` of the method ``recipe/ibpo/method.py`` registers), and by
:class:`recipe.ibpo.ibpo_ray_trainer.RayIBPOTrainer` at construction, which keeps the resolved candidate
budget."""

from __future__ import annotations

from omegaconf import DictConfig

from compute_accounting.row_lengths import PhaseRow, phase_rows
from ibpo.correction_lengths import (MIN_DERIVED_CANDIDATE_TOKENS, CorrectionBudgetError, correction_budget,
                                     correction_prompt_tokens)
from ibpo.mechanism import reinforces_wrong_answers
from ibpo.options import IBPOConfig
from ibpo.prompts import build_correction_messages
from recipe.common.methods import method_options
from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.row_limits import check_row_limits, row_table
from recipe.ibpo.correction.rollout import check_correction_rollout

# Chat-template scaffolding around the correction prompt (role headers, generation prompt) plus slack.
CHAT_TEMPLATE_SLACK_TOKENS = 32


def correction_template_tokens(ibpo: IBPOConfig, tokenizer) -> int:
    """Tokens of the correction template's own text (empty problem and candidates), by the run's tokenizer,
    plus the chat template's scaffolding allowance."""
    scaffold = build_correction_messages([{"role": "user", "content": ""}], "", [""] * ibpo.num_references, ibpo)
    return len(tokenizer.encode(scaffold[-1]["content"], add_special_tokens=False)) + CHAT_TEMPLATE_SLACK_TOKENS


def check_trainer_config(config: DictConfig, ibpo: IBPOConfig, tokenizer,
                         model_context: int | None = None) -> IBPOConfig:
    """Fail early on settings that would make IBPO silently wrong; return ``ibpo`` with the candidate budget
    resolved (``max_candidate_tokens = 0`` replaced by the budget derived from the context and
    ``rollout.prompt_length``, :func:`correction_budget`). ``model_context`` is the model's context length
    (:func:`recipe.common.preflight.model.context_length`, rope scaling included), used when
    ``rollout.max_model_len`` is unset, as verl's vLLM server does."""
    check_ibpo_settings(config, ibpo)
    if not ibpo.enable:
        return ibpo
    return resolve_prompt_budget(config, ibpo, correction_template_tokens(ibpo, tokenizer), model_context)


def check_ibpo_settings(config: DictConfig, ibpo: IBPOConfig) -> None:
    """The trainer settings IBPO needs: its estimator, the rule-based reward, a fresh correction generation,
    the correction rollout and groups that hold references."""
    algo = config.algorithm
    if algo.adv_estimator in ("remax",):
        raise SetupError("algorithm.adv_estimator=remax is not supported by the IBPO trainer")
    if ibpo.enable and algo.adv_estimator != "ibpo":
        raise SetupError(
            f"algorithm.adv_estimator={algo.adv_estimator!r} with ibpo.enable=True: IBPO's advantage is Eq. 23 "
            "(population std, ε = 1e-8, a one-sample group gets 0), which only algorithm.adv_estimator=ibpo "
            "computes; verl's 'grpo' uses the sample std and ε = 1e-6 and gives a one-member correction group "
            "its raw reward as advantage. Set algorithm.adv_estimator=ibpo")
    if ibpo.enable and config.reward.reward_model.get("enable", False):
        raise SetupError("reward.reward_model.enable=True: IBPO scores corrections with the streaming rule-based "
                             "reward (reward.custom_reward_function); a model reward is not supported")
    if config.get("skip", {}).get("rollout", {}).get("enable", False):
        raise SetupError("skip.rollout.enable=True would serve the correction generation from the main "
                             "generation's cache; turn it off")
    check_correction_rollout(config, ibpo)  # lookup speculation and the length bound (recipe/ibpo/correction/rollout.py)
    if ibpo.enable and int(config.actor_rollout_ref.rollout.n) < 2 and ibpo.num_references > 0:
        raise SetupError("actor_rollout_ref.rollout.n must be >= 2 for reference-based correction "
                             "(or set ibpo.num_references=0 for self-correction)")
    if algo.adv_estimator == "ibpo" and int(config.actor_rollout_ref.rollout.n) < 2:
        raise SetupError(f"actor_rollout_ref.rollout.n={config.actor_rollout_ref.rollout.n} with "
                         "algorithm.adv_estimator='ibpo': the advantage is normalised within each prompt's group "
                         "(Eq. 23), and a group of one sample gets 0 (nothing is learned); set n >= 2")


def budget_or_setup_error(config: DictConfig, ibpo: IBPOConfig, template: int, context: int | None,
                          prompt_length: int | None = None):
    """:func:`correction_budget` of the run's lengths; a budget that cannot fit is a :class:`SetupError`."""
    try:
        return correction_budget(config.data.max_prompt_length, config.data.max_response_length,
                                 ibpo.num_references, ibpo.max_candidate_tokens, template, context, prompt_length)
    except CorrectionBudgetError as exc:
        raise SetupError(str(exc)) from None


def resolve_prompt_budget(config: DictConfig, ibpo: IBPOConfig, template: int,
                          model_context: int | None) -> IBPOConfig:
    """The correction prompts against the context and ``rollout.prompt_length``; ``ibpo`` with the candidate
    budget resolved (``template``: tokens of the correction template's own text)."""
    rollout = config.actor_rollout_ref.rollout
    have = int(rollout.prompt_length)
    context = rollout.get("max_model_len") or model_context
    # first what the context allows (a derived budget that cannot fit names ibpo.max_candidate_tokens)
    budget_or_setup_error(config, ibpo, template, context)
    response_length = int(rollout.get("response_length") or config.data.max_response_length)
    total = have + response_length
    if context is not None and total > int(context):
        raise SetupError(
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
    need = correction_prompt_tokens(config.data.max_prompt_length, template, k, shown)
    if have < need:
        raise SetupError(
            f"actor_rollout_ref.rollout.prompt_length={have} is too small for correction prompts: they need "
            f"{need} tokens (data.max_prompt_length + {k} candidates of "
            f"{'ibpo.max_candidate_tokens=' if ibpo.max_candidate_tokens > 0 else 'at least '}{shown} tokens + marker "
            f"+ template {template}). verl would left-truncate them with only a warning. Raise rollout.prompt_length "
            f"or lower ibpo.max_candidate_tokens."
        )
    budget = budget_or_setup_error(config, ibpo, template, context, have)
    return ibpo.replace(max_candidate_tokens=budget.candidate_tokens)


def candidate_share_line(ibpo: IBPOConfig, max_response_length: int) -> str:
    """What the correction prompt shows of a candidate under the resolved budget (``ibpo`` from
    :func:`check_trainer_config`): the share kept of an answer of the full response length (long wrong answers
    run to it) and of half of it; docs/correction_pass.md measures what cutting costs."""
    budget, full = int(ibpo.max_candidate_tokens), int(max_response_length)
    view = "without its thinking block" if ibpo.candidate_view == "strip_thinking" else "whole text"
    if budget <= 0 or budget >= full:
        return (f"correction candidates ({view}): shown whole, up to the response length {full} tokens "
                "(100% of any answer)")
    share = lambda n: min(1.0, budget / n)  # noqa: E731
    return (f"correction candidates ({view}): middle-truncated to {budget} tokens each: an answer of the full "
            f"response length {full} keeps {share(full):.0%}, one of {full // 2} keeps {share(full // 2):.0%}, "
            f"one of {full // 4} keeps {share(full // 4):.0%} (whole up to {budget} tokens; the cost of cutting: "
            "docs/correction_pass.md)")


def ibpo_rows(config: DictConfig, ibpo: IBPOConfig, tokenizer) -> tuple[PhaseRow, ...]:
    """The longest row of each phase (``compute_accounting.row_lengths.phase_rows``), the correction prompt x~ at
    its budget by the run's tokenizer (``ibpo`` with the candidate budget resolved, :func:`check_trainer_config`)."""
    rollout = config.actor_rollout_ref.rollout
    correction = None
    if ibpo.enable:
        correction = correction_prompt_tokens(config.data.max_prompt_length, correction_template_tokens(ibpo, tokenizer),
                                              1 + ibpo.num_references, ibpo.max_candidate_tokens)
    return phase_rows(config.data.max_prompt_length, rollout.response_length, rollout.prompt_length, correction,
                      joint_training=ibpo.enable and ibpo.joint_training)


def check_ibpo_run(config: DictConfig, context: int | None) -> None:
    """The pre-flight's IBPO check (the ``ibpo`` method's ``check``): :func:`check_trainer_config` with the
    run's tokenizer and the model's context (``context``: rope scaling applied; None when the model config
    gives none)."""
    from verl.utils import hf_tokenizer

    model = config.actor_rollout_ref.model
    tokenizer = hf_tokenizer(model.get("tokenizer_path") or str(model.path),
                             trust_remote_code=model.get("trust_remote_code", False))
    ibpo = check_trainer_config(config, method_options(config, "ibpo"), tokenizer, context)
    if ibpo.enable:
        print("[ibpo] " + candidate_share_line(ibpo, int(config.data.max_response_length)), flush=True)
    rows = ibpo_rows(config, ibpo, tokenizer)
    print("[ibpo] " + row_table(config, rows, context), flush=True)
    check_row_limits(config, rows)
    if reinforces_wrong_answers(ibpo.enable, ibpo.shaping, ibpo.lam):
        print(f"[ibpo] note: ibpo.shaping=reward with ibpo.lam={ibpo.lam} (the paper's rule) gives a shaped wrong answer "
              "a positive advantage wherever λΔ exceeds its group's mean reward, always in a group with no right "
              "answer; on a weak starting model such runs unlearn (docs/evidence.md, section 2). "
              "ibpo.shaping=advantage or reward_capped never reinforce a wrong answer", flush=True)
