"""Start-of-run checks: a misconfigured IBPO run fails before the first step, with a message naming the key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ibpo.compute import ModelShape
from ibpo.config import IBPOConfig
from counterfactual.importance import CounterfactualConfig
from ibpo.prompts import build_correction_messages
from recipe.ibpo.correction_rollout import check_correction_rollout

# Chat-template scaffolding around the correction prompt (role headers, generation prompt) plus slack.
CHAT_TEMPLATE_SLACK_TOKENS = 32
# Allowance for the template's text where no tokenizer is at hand (the config-time default of
# rollout.prompt_length); the start check measures the real number.
CORRECTION_TEMPLATE_TOKENS = 256


class IBPOSetupError(ValueError):
    """The verl config cannot run IBPO as configured."""


def ibpo_config_from(config: DictConfig) -> IBPOConfig:
    """The validated ``ibpo:`` block (G is ``actor_rollout_ref.rollout.n``, not an ``ibpo`` option)."""
    block = config.get("ibpo")
    if block is None:
        raise IBPOSetupError("config has no `ibpo:` block; start from recipe/ibpo/config/ibpo_trainer.yaml")
    return IBPOConfig.from_mapping(OmegaConf.to_container(block, resolve=True))


def counterfactual_config_from(config: DictConfig) -> CounterfactualConfig:
    """The validated ``counterfactual:`` block of a ``method: counterfactual`` config."""
    block = config.get("counterfactual")
    if block is None:
        raise IBPOSetupError("config has no `counterfactual:` block; start from "
                             "recipe/ibpo/config/counterfactual_trainer.yaml")
    return CounterfactualConfig.from_mapping(OmegaConf.to_container(block, resolve=True))


# `method:` (top level of the config) -> the trainer class that runs it and the check of its option block.
METHODS = {
    "ibpo": ("recipe.ibpo.ibpo_ray_trainer", "RayIBPOTrainer", ibpo_config_from),
    "counterfactual": ("recipe.ibpo.counterfactual_trainer", "RayCounterfactualTrainer", counterfactual_config_from),
}


def method_of(config: DictConfig) -> str:
    """The config's ``method`` (``ibpo`` | ``counterfactual``), its option block validated; a bad value,
    a missing block or the other method's block fails here, naming the key."""
    method = config.get("method")
    if method not in METHODS:
        raise IBPOSetupError(f"method={method!r} must be one of {sorted(METHODS)} (top-level key of "
                             "ibpo_trainer.yaml / counterfactual_trainer.yaml): it picks the trainer")
    for other in METHODS:
        if other != method and config.get(other) is not None:
            raise IBPOSetupError(f"method={method} but the config has a `{other}:` block; one method per run "
                                 f"(start from {other}_trainer.yaml for `{other}`)")
    METHODS[method][2](config)
    return method


def trainer_class_for(config: DictConfig) -> type:
    """The trainer class of the config's ``method`` (imported on demand)."""
    import importlib

    module, name, _ = METHODS[method_of(config)]
    return getattr(importlib.import_module(module), name)


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
    if ibpo.enable and algo.adv_estimator != "ibpo":
        raise IBPOSetupError(
            f"algorithm.adv_estimator={algo.adv_estimator!r} with ibpo.enable=True: IBPO's advantage is Eq. 23 "
            "(population std, ε = 1e-8, a one-sample group gets 0), which only algorithm.adv_estimator=ibpo "
            "computes; verl's 'grpo' uses the sample std and ε = 1e-6 and gives a one-member correction group "
            "its raw reward as advantage. Set algorithm.adv_estimator=ibpo")
    if ibpo.enable and config.reward.reward_model.get("enable", False):
        raise IBPOSetupError("reward.reward_model.enable=True: IBPO scores corrections with the streaming rule-based "
                             "reward (reward.custom_reward_function); a model reward is not supported")
    if config.get("skip", {}).get("rollout", {}).get("enable", False):
        raise IBPOSetupError("skip.rollout.enable=True would serve the correction generation from the main "
                             "generation's cache; turn it off")
    check_correction_rollout(config, ibpo)  # lookup speculation and the length bound (recipe/ibpo/correction_rollout.py)
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


def model_flop_shape(model_path: str) -> ModelShape:
    """The FLOP counter's :class:`ibpo.compute.ModelShape` of the HF model at ``model_path``, built on the meta
    device (no weights loaded): N = the weight matrices but the input embedding (a tied LM head reuses it
    and counts once; biases and norm scales are no matmuls), L = ``num_hidden_layers``, d = heads × head dim."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    tied = output is not None and output.weight is embedding
    # weight matrices (shared tensors are yielded once); biases and norm scales are not multiply-adds
    matrices = int(sum(p.numel() for p in model.parameters() if p.dim() >= 2))
    text = getattr(hf_config, "text_config", None) or hf_config
    heads = int(text.num_attention_heads)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return ModelShape(matmul_params=matrices if tied else matrices - int(embedding.numel()),
                      num_layers=int(text.num_hidden_layers), attention_dim=heads * int(head_dim))



# ---------------------------------------------------------------------------------------------
# Pre-flight: everything that can be checked in the driver, before Ray and the workers start
# ---------------------------------------------------------------------------------------------

REWARD_PATH_KEY = "reward.custom_reward_function.path"
REWARD_NAME_KEY = "reward.custom_reward_function.name"


def data_files(config: DictConfig, key: str) -> list[str]:
    """``data.train_files`` / ``data.val_files`` (``key`` = ``train_files`` / ``val_files``) as a list of paths,
    each checked to exist."""
    value = config.data.get(key)
    files = [value] if isinstance(value, str) else list(value or [])
    if not files:
        raise IBPOSetupError(f"data.{key} is empty")
    for path in files:
        if not Path(path).expanduser().is_file():
            raise IBPOSetupError(f"data.{key}: {path} does not exist (build it with data_prep, see the README's Data)")
    return [str(Path(p).expanduser()) for p in files]


def first_row(path: str) -> dict:
    """Row 0 of a verl parquet file (``data_source``, ``reward_model.ground_truth``, ``extra_info``)."""
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path).read_row_group(0)
    if table.num_rows == 0:
        raise IBPOSetupError(f"{path} has no rows")
    row = table.slice(0, 1).to_pylist()[0]
    for field_name in ("data_source", "reward_model"):
        if field_name not in row:
            raise IBPOSetupError(f"{path}, row 0: no field {field_name!r} (not a verl RL parquet file)")
    if not isinstance(row["reward_model"], dict) or "ground_truth" not in row["reward_model"]:
        raise IBPOSetupError(f"{path}, row 0: field reward_model has no ground_truth")
    return row


def data_sources_of(paths: list[str]) -> list[str]:
    """The distinct ``data_source`` values of verl parquet files, in order of appearance."""
    import pyarrow.parquet as pq

    seen: dict[str, None] = {}
    for path in paths:
        for value in pq.read_table(path, columns=["data_source"]).column("data_source").to_pylist():
            seen.setdefault(str(value), None)
    return list(seen)


def load_reward_function(config: DictConfig):
    """The reward function verl's reward loop will call, loaded the way verl loads it
    (``verl.trainer.ppo.reward.get_custom_reward_fn``: ``reward_kwargs`` bound), or verl's
    ``default_compute_score`` when no custom function is configured. A wrong path or name raises
    :class:`IBPOSetupError` naming the option."""
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.utils.reward_score import default_compute_score

    block = config.reward.get("custom_reward_function") or {}
    path, name = block.get("path"), block.get("name")
    if not path:
        return default_compute_score
    if not name:
        raise IBPOSetupError(f"{REWARD_PATH_KEY}={path} is set but {REWARD_NAME_KEY} is empty")
    try:
        fn = get_custom_reward_fn(config)
    except (ImportError, FileNotFoundError) as exc:
        raise IBPOSetupError(f"{REWARD_PATH_KEY}={path}: cannot import it ({type(exc).__name__}: {exc}); use "
                             "pkg://<module> for an installed module or a file path that exists") from exc
    except AttributeError as exc:
        raise IBPOSetupError(f"{REWARD_NAME_KEY}={name}: {path} has no function of that name ({exc})") from exc
    except RuntimeError as exc:  # verl's wrapper around an exception raised while executing a file module
        raise IBPOSetupError(f"{REWARD_PATH_KEY}={path}: importing it failed ({exc.__cause__ or exc})") from exc
    return fn


def score_first_row(config: DictConfig, reward_fn, train_file: str) -> float:
    """Score an empty response to row 0 of ``train_file`` with ``reward_fn`` the way verl's reward loop calls it
    (keywords ``data_source``, ``solution_str``, ``ground_truth``, ``extra_info``); the result must be a number
    or a dict with a numeric ``score``. Returns the score."""
    import asyncio
    import inspect

    row = first_row(train_file)
    where = (f"{REWARD_PATH_KEY}={config.reward.custom_reward_function.get('path')} "
             f"{REWARD_NAME_KEY}={config.reward.custom_reward_function.get('name')} on {train_file}, row 0 "
             f"(data_source={row['data_source']!r})")
    kwargs = dict(data_source=row["data_source"], solution_str="", ground_truth=row["reward_model"]["ground_truth"],
                  extra_info=dict(row.get("extra_info") or {}))
    try:
        result = reward_fn(**kwargs)
        if inspect.isawaitable(result):
            result = asyncio.run(result)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's function is reported with its option
        raise IBPOSetupError(f"{where}: the reward function raised {type(exc).__name__}: {exc}") from exc
    score = result.get("score") if isinstance(result, dict) else result
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise IBPOSetupError(f"{where}: returned {result!r:.200}; verl needs a number or a dict with a numeric "
                             "'score'")
    return float(score)


PROJECT_REWARD = ("pkg://reward_fns", "compute_score")


def run_verifier_self_test(config: DictConfig, data_files_: list[str]) -> None:
    """When the configured reward is the project's own (``pkg://reward_fns`` ``compute_score``), score its
    built-in known-right and known-wrong samples for every data source of the run's files through it
    (``reward_fns.self_test``): a verifier that cannot run (sandbox, broken install) fails here instead of
    scoring every response 0."""
    from reward_fns import VerifierSelfTestError, compute_score, self_test

    block = config.reward.get("custom_reward_function") or {}
    if (block.get("path"), block.get("name")) != PROJECT_REWARD:
        return
    kwargs = dict(block.get("reward_kwargs") or {})  # as verl binds them (get_custom_reward_fn)
    try:
        self_test(data_sources_of(data_files_), compute_score, kwargs)
    except VerifierSelfTestError as exc:
        raise IBPOSetupError(f"{REWARD_PATH_KEY}=pkg://reward_fns: verifier self-test failed: "
                             + " | ".join(str(exc).splitlines())) from exc


def preflight(config: DictConfig) -> None:
    """Every check that needs no Ray worker, in the driver, in seconds: ``method`` and its option block
    (``ibpo:`` / ``counterfactual:``), the data files, the model's tokenizer and context against the IBPO prompt budget
    (:func:`check_trainer_config`), the reward function (imported and run on one training row) and, for the
    project's own verifiers, their self-test (:func:`run_verifier_self_test`).
    Raises :class:`IBPOSetupError` (or ``ValueError`` from the option dataclasses) naming the option."""
    from verl.utils import hf_tokenizer

    method = method_of(config)  # validates the method's option block, rejects the other method's
    train_files = data_files(config, "train_files")
    data_files(config, "val_files")
    model_path = str(config.actor_rollout_ref.model.path)
    if model_path.startswith(("/", "~", ".")) and not Path(model_path).expanduser().is_dir():
        raise IBPOSetupError(f"actor_rollout_ref.model.path={model_path} is not a directory")
    model = config.actor_rollout_ref.model
    tokenizer = hf_tokenizer(model.get("tokenizer_path") or model_path,
                             trust_remote_code=model.get("trust_remote_code", False))
    if method == "ibpo":
        check_trainer_config(config, ibpo_config_from(config), tokenizer, model_max_positions(model_path))
    reward_fn = load_reward_function(config)
    score_first_row(config, reward_fn, train_files[0])
    run_verifier_self_test(config, train_files + data_files(config, "val_files"))
