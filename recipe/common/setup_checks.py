"""Start-of-run checks: a misconfigured IBPO run fails before the first step, with a message naming the key."""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from ibpo.compute import ModelShape
from ibpo.config import IBPOConfig
from counterfactual.importance import CounterfactualConfig
from ibpo.budget import (MIN_DERIVED_CANDIDATE_TOKENS, TRUNCATION_MARKER_TOKENS, CorrectionBudgetError,
                         correction_budget)
from ibpo.prompts import build_correction_messages
from recipe.ibpo.correction_rollout import check_correction_rollout

# Chat-template scaffolding around the correction prompt (role headers, generation prompt) plus slack.
CHAT_TEMPLATE_SLACK_TOKENS = 32


class IBPOSetupError(ValueError):
    """The verl config cannot run IBPO as configured."""


def _type_name(annotation: Any) -> str:
    """``float``, ``bool``, ``float | None``, ``a list of str`` (a ``tuple[str, ...]`` field from a YAML list)."""
    if typing.get_origin(annotation) in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return f"a list of {_type_name(args[0])}" if args else "a list"
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    return "None" if annotation is type(None) else getattr(annotation, "__name__", None) or str(annotation)


def _matches(value: Any, annotation: Any) -> bool:
    """Whether an option value from the YAML / command line has the option's declared type (an int is a
    float; a bool is neither a number nor a string; a list of strings is a ``tuple[str, ...]``)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (tuple, list):
        item = args[0] if args else Any
        return isinstance(value, (list, tuple)) and (item is Any or all(_matches(v, item) for v in value))
    return True


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def check_option_types(block: Mapping[str, Any], cls: type, prefix: str) -> None:
    """Raise :class:`IBPOSetupError` naming ``prefix.option``, its value and the expected type when a value of
    an option block (``ibpo:`` / ``counterfactual:``) does not have the dataclass field's declared type
    (``ibpo.lam=abc``), instead of a ``TypeError`` traceback from a comparison in the dataclass."""
    hints = typing.get_type_hints(cls)
    for name, value in block.items():
        annotation = hints.get(name)
        if _is_interpolation(value):  # checked once resolved
            continue
        if annotation is not None and not _matches(value, annotation):
            raise IBPOSetupError(f"{prefix}.{name}={value!r} has type {type(value).__name__}; expected "
                                 f"{_type_name(annotation)} (default {getattr(cls, name, None)!r})")


def ibpo_config_from(config: DictConfig) -> IBPOConfig:
    """The validated ``ibpo:`` block (G is ``actor_rollout_ref.rollout.n``, not an ``ibpo`` option)."""
    block = config.get("ibpo")
    if block is None:
        raise IBPOSetupError("config has no `ibpo:` block; start from recipe/ibpo/config/ibpo_trainer.yaml")
    options = OmegaConf.to_container(block, resolve=True)
    check_option_types(options, IBPOConfig, "ibpo")
    return IBPOConfig.from_mapping(options)


def counterfactual_config_from(config: DictConfig) -> CounterfactualConfig:
    """The validated ``counterfactual:`` block of a ``method: counterfactual`` config."""
    block = config.get("counterfactual")
    if block is None:
        raise IBPOSetupError("config has no `counterfactual:` block; start from "
                             "recipe/ibpo/config/counterfactual_trainer.yaml")
    options = OmegaConf.to_container(block, resolve=True)
    check_option_types(options, CounterfactualConfig, "counterfactual")
    return CounterfactualConfig.from_mapping(options)


# `method:` (top level of the config) -> the trainer class that runs it and the check of its option block.
METHODS = {
    "ibpo": ("recipe.ibpo.ibpo_ray_trainer", "RayIBPOTrainer", ibpo_config_from),
    "counterfactual": ("recipe.counterfactual.counterfactual_trainer", "RayCounterfactualTrainer", counterfactual_config_from),
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
    try:
        correction_budget(config.data.max_prompt_length, config.data.max_response_length, ibpo.num_references,
                          ibpo.max_candidate_tokens, template, context)
    except CorrectionBudgetError as exc:
        raise IBPOSetupError(str(exc)) from None
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
    try:
        budget = correction_budget(config.data.max_prompt_length, config.data.max_response_length,
                                   ibpo.num_references, ibpo.max_candidate_tokens, template, context, have)
    except CorrectionBudgetError as exc:
        raise IBPOSetupError(str(exc)) from None
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


# ---- legacy keys: verl 0.9.1's main_ppo reads the reward settings only under `reward:` --------------------

# Top-level blocks of verl's legacy_reward_impl.yaml (all null by default). Only verl's fully-async entry point
# migrates them (verl.experimental.reward_loop.migrate_legacy_reward_impl); main_ppo and main_ibpo ignore them.
LEGACY_REWARD_BLOCKS = ("custom_reward_function", "reward_model", "sandbox_fusion")


def legacy_key_home(key: str) -> str:
    """Where verl 0.9.1 reads the setting the legacy top-level ``key`` held
    (``migrate_legacy_reward_impl``'s mapping)."""
    head, _, rest = key.partition(".")
    if head == "custom_reward_function":
        return f"reward.custom_reward_function.{rest}"
    if head == "sandbox_fusion":
        return f"reward.sandbox_fusion.{rest}"
    special = {"num_workers": "reward.num_workers", "reward_manager": "reward.reward_manager.name",
               "reward_kwargs": "reward.reward_kwargs", "model.path": "reward.reward_model.model_path",
               "reward_loop_source": "reward.reward_manager.source",
               "reward_loop_module_path": "reward.reward_manager.module.path",
               "reward_loop_class_name": "reward.reward_manager.module.name"}
    for legacy, home in special.items():
        if rest == legacy or rest.startswith(legacy + "."):
            return home + rest[len(legacy):]
    return f"reward.reward_model.{rest}"


def _set_leaves(node: Any, prefix: str) -> list[str]:
    if isinstance(node, Mapping):
        return [k for key, value in node.items() for k in _set_leaves(value, f"{prefix}.{key}")]
    return [] if node is None else [prefix]


def check_legacy_reward_keys(config: DictConfig) -> None:
    """A value under the legacy top-level ``custom_reward_function`` / ``reward_model`` / ``sandbox_fusion``
    blocks is never read by ``main_ppo`` (verl 0.9.1 moved them under ``reward:``): the run would train on the
    configured ``reward:`` function instead, silently. Raise naming the key and its new home."""
    for block in LEGACY_REWARD_BLOCKS:
        node = config.get(block)
        if node is None:
            continue
        leaves = _set_leaves(OmegaConf.to_container(node, resolve=True), block)
        if leaves:
            raise IBPOSetupError(
                f"{leaves[0]} is a legacy top-level key that verl 0.9.1's main_ppo no longer reads (the run would "
                f"use {REWARD_PATH_KEY}={config.reward.get('custom_reward_function', {}).get('path')} instead); "
                f"set {legacy_key_home(leaves[0])}")


# ---- the reward function and its keyword arguments ----------------------------------------------------------

REWARD_KWARGS_KEY = "reward.custom_reward_function.reward_kwargs"
# The keywords verl 0.9.1's reward managers call the function with (experimental/reward_loop/reward_manager).
VERL_REWARD_CALL = ("data_source", "solution_str", "ground_truth", "extra_info")
# ... and add when a reward model is served (not options a user sets).
VERL_REWARD_EXTRAS = ("reward_router_address", "reward_model_tokenizer")
# What verl's reward managers read from `reward.reward_kwargs` (dapo: overlong buffer); nothing else reads it.
REWARD_MANAGER_KWARGS = {"dapo": ("overlong_buffer_cfg", "max_resp_len")}


def raw_reward_function(fn):
    """The user's function behind verl's ``partial(_call_with_kwargs, fn, reward_kwargs)`` wrapper."""
    import functools

    while isinstance(fn, functools.partial):
        fn = next((a for a in fn.args if callable(a)), fn.func) if fn.args else fn.func
    return fn


def check_reward_kwargs(config: DictConfig, fn) -> None:
    """``reward.custom_reward_function.reward_kwargs`` against the function's signature (``inspect``): an unknown
    keyword (a typo) raises naming it and the keywords the function takes; a value of the wrong type for an
    annotated parameter raises too; and the function must accept verl's call keywords. A function taking
    ``**kwargs`` cannot be checked: a warning says so. ``reward.reward_kwargs`` holds only what the reward
    manager reads (verl passes none of it to the function)."""
    import inspect
    import warnings

    kwargs = project_reward_kwargs(config)  # as verl binds them to any function (get_custom_reward_fn)
    manager = str((config.reward.get("reward_manager") or {}).get("name", "naive"))
    manager_kwargs = config.reward.get("reward_kwargs")
    if manager_kwargs:
        known = REWARD_MANAGER_KWARGS.get(manager, ())
        for key in manager_kwargs:
            if key not in known:
                raise IBPOSetupError(
                    f"reward.reward_kwargs.{key}: verl's reward manager {manager!r} does not read it (it reads "
                    f"{list(known) or 'no reward.reward_kwargs'}); options of the reward function go under "
                    f"{REWARD_KWARGS_KEY}.{key}")
    raw = raw_reward_function(fn)
    try:
        signature = inspect.signature(raw)
    except (TypeError, ValueError):
        return
    name = f"{REWARD_NAME_KEY}={getattr(raw, '__name__', raw)!s}"
    params = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [p.name for p in params.values()
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    missing = [k for k in VERL_REWARD_CALL if k not in named and not takes_any]
    if missing:
        raise IBPOSetupError(f"{name}: verl calls it with the keywords {list(VERL_REWARD_CALL)} but it takes no "
                             f"{missing}; it takes {named}")
    options = [p for p in named if p not in VERL_REWARD_CALL + VERL_REWARD_EXTRAS]
    for key, value in kwargs.items():
        if key in VERL_REWARD_CALL + VERL_REWARD_EXTRAS:
            raise IBPOSetupError(f"{REWARD_KWARGS_KEY}.{key}: verl passes {key} itself for every sample")
        if key not in params:
            if takes_any:
                continue
            raise IBPOSetupError(f"{REWARD_KWARGS_KEY}.{key}: {name} takes no keyword {key!r}; it takes "
                                 f"{sorted(options)}")
        try:
            annotation = typing.get_type_hints(raw).get(key)
        except Exception:  # noqa: BLE001 - unresolvable annotations are simply not checked
            annotation = None
        if annotation is not None and not _matches(value, annotation):
            raise IBPOSetupError(f"{REWARD_KWARGS_KEY}.{key}={value!r} has type {type(value).__name__}; {name} "
                                 f"expects {_type_name(annotation)}")
    unchecked = [k for k in kwargs if k not in params]
    if unchecked:
        warnings.warn(f"{REWARD_KWARGS_KEY} {unchecked}: {name} takes **kwargs, so these keywords cannot be "
                      "checked against its signature; a misspelt one would be ignored", stacklevel=2)


def _call_reward(reward_fn, **kwargs):
    import asyncio
    import inspect

    result = reward_fn(**kwargs)
    return asyncio.run(result) if inspect.isawaitable(result) else result


def score_row(config: DictConfig, reward_fn, path: str, row_index: int, row: dict) -> float:
    """Score an empty response to one row with ``reward_fn`` the way verl's reward loop calls it (keywords
    ``data_source``, ``solution_str``, ``ground_truth``, ``extra_info``); the result must be a number or a dict
    with a numeric ``score``. Returns the score."""
    block = config.reward.get("custom_reward_function") or {}
    where = (f"{REWARD_PATH_KEY}={block.get('path')} {REWARD_NAME_KEY}={block.get('name')} on {path}, row "
             f"{row_index} (data_source={row['data_source']!r})")
    try:
        result = _call_reward(reward_fn, data_source=row["data_source"], solution_str="",
                              ground_truth=(row.get("reward_model") or {}).get("ground_truth"),
                              extra_info=dict(row.get("extra_info") or {}))
    except Exception as exc:  # noqa: BLE001 - any failure of the user's function is reported with its option
        raise IBPOSetupError(f"{where}: the reward function raised {type(exc).__name__}: "
                             + " ".join(str(exc).split())) from exc
    score = result.get("score") if isinstance(result, dict) else result
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise IBPOSetupError(f"{where}: returned {result!r:.200}; verl needs a number or a dict with a numeric "
                             "'score'")
    return float(score)


def read_rows(path: str, rows: list[int]) -> list[dict]:
    """The given (0-based) rows of a parquet file as dicts."""
    import pyarrow.parquet as pq

    return pq.read_table(path).take(rows).to_pylist()


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


PROJECT_REWARD = ("pkg://reward_fns", "compute_score")


def run_verifier_self_test(config: DictConfig, data_sources: list[str]) -> None:
    """When the configured reward is the project's own (``pkg://reward_fns`` ``compute_score``), score its
    built-in known-right and known-wrong samples for every data source of the run's files through it
    (``reward_fns.self_test``): a verifier that cannot run (sandbox, broken install) fails here instead of
    scoring every response 0."""
    from reward_fns import VerifierSelfTestError, compute_score, self_test

    if not uses_project_reward(config):
        return
    try:
        self_test(data_sources, compute_score, project_reward_kwargs(config))
    except VerifierSelfTestError as exc:
        raise IBPOSetupError(f"{REWARD_PATH_KEY}=pkg://reward_fns: verifier self-test failed: "
                             + " | ".join(str(exc).splitlines())) from exc


def uses_project_reward(config: DictConfig) -> bool:
    block = config.reward.get("custom_reward_function") or {}
    return (block.get("path"), block.get("name")) == PROJECT_REWARD


def project_reward_kwargs(config: DictConfig) -> dict:
    """``reward.custom_reward_function.reward_kwargs`` as verl binds them to the function
    (``get_custom_reward_fn``), for the project's function or any other."""
    block = config.reward.get("custom_reward_function") or {}
    value = block.get("reward_kwargs")
    return dict(OmegaConf.to_container(value, resolve=True)) if value is not None else {}


# ---- verl's own validation and option types, in the driver ------------------------------------------------

@functools.lru_cache(maxsize=1)
def verl_default_config() -> DictConfig:
    """verl 0.9.1's full default PPO config (``verl/trainer/config/_generated_ppo_trainer.yaml``, the flattened
    ``ppo_trainer`` composition verl generates and tests against)."""
    from importlib.resources import files

    return OmegaConf.load(str(files("verl.trainer.config").joinpath("_generated_ppo_trainer.yaml")))


def check_verl_option_types(config: DictConfig, defaults: DictConfig | None = None, resolve: bool = True) -> None:
    """Every option whose verl default is a number or a bool must hold one (``data.train_batch_size=abc``
    otherwise reaches ``validate_config`` as a string: ``"abc" * n`` is string repetition). Raises naming the
    key, its value and the expected type. An int default also takes a float (``entropy_coeff: 0``)."""
    defaults = verl_default_config() if defaults is None else defaults
    ours = OmegaConf.to_container(config, resolve=resolve)
    theirs = OmegaConf.to_container(defaults, resolve=False)

    def walk(mine: Any, default: Any, prefix: str) -> None:
        if isinstance(default, dict) and isinstance(mine, dict):
            for key, value in mine.items():
                if key in default:
                    walk(value, default[key], f"{prefix}.{key}" if prefix else str(key))
            return
        if mine is None or default is None or _is_interpolation(mine):
            return
        if isinstance(default, bool):
            ok, expected = isinstance(mine, bool), "bool (true/false)"
        elif isinstance(default, (int, float)):
            ok, expected = isinstance(mine, (int, float)) and not isinstance(mine, bool), "a number"
        else:
            return
        if not ok:
            raise IBPOSetupError(f"{prefix}={mine!r} has type {type(mine).__name__}; verl expects {expected} "
                                 f"(default {default!r})")

    walk(ours, theirs, "")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    import re

    unexpected = re.search(r"unexpected keyword argument '(\w+)'.*?full_key: ([\w.]+)", text)
    if unexpected:
        return f"{unexpected.group(2)}.{unexpected.group(1)} is not an option of verl's config ({text})"
    return text


def run_verl_validation(config: DictConfig) -> None:
    """What stock ``main_ppo.main`` runs in the driver before Ray: ``verl.utils.config.validate_config``
    (batch sizes, micro-batch options, the actor config's dataclass with its own ``validate``), plus the
    dataclass conversion verl's workers do of the rollout and algorithm blocks (an unknown key or a bad value
    there otherwise surfaces inside a Ray worker). Raises :class:`IBPOSetupError` with verl's message."""
    import contextlib
    import io

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    steps = [("validate_config", lambda: validate_config(config=config,
                                                         use_reference_policy=need_reference_policy(config),
                                                         use_critic=need_critic(config))),
             ("actor_rollout_ref.rollout", lambda: omega_conf_to_dataclass(config.actor_rollout_ref.rollout)),
             ("algorithm", lambda: omega_conf_to_dataclass(config.algorithm))]
    for what, step in steps:
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # validate_config prints its passing line
                step()
        except Exception as exc:  # noqa: BLE001 - AssertionError/ValueError/TypeError/Hydra errors from verl
            raise IBPOSetupError(f"verl's config validation ({what}, as main_ppo runs it in the driver) failed: "
                                 f"{type(exc).__name__}: {_one_line(exc)}") from exc


# ---- the context length against the model ------------------------------------------------------------------

def model_context_length(model_path: str, override: Mapping[str, Any] | None = None) -> int | None:
    """The longest sequence the model is built for: ``max_position_embeddings`` (with
    ``actor_rollout_ref.model.override_config`` applied), times a rope-scaling ``factor`` where the scaling
    extends it (``yarn``/``dynamic``/``linear``: of ``original_max_position_embeddings`` when given), as vLLM
    derives its max_model_len. None when the model config has no such field."""
    from transformers import AutoConfig

    try:
        hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise IBPOSetupError(f"actor_rollout_ref.model.path={model_path}: cannot read the model's config "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]})") from exc
    text = getattr(hf_config, "text_config", None) or hf_config
    override = dict(override or {})
    positions = override.get("max_position_embeddings", getattr(text, "max_position_embeddings", None))
    if positions is None:
        return None
    scaling = override.get("rope_scaling", getattr(text, "rope_scaling", None)) or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = scaling.get("factor")
    if factor and kind in ("yarn", "dynamic", "linear"):
        base = scaling.get("original_max_position_embeddings") or positions
        return int(base * float(factor)) if kind == "yarn" else int(positions * float(factor))
    return int(positions)


def check_context_length(config: DictConfig, context: int | None) -> None:
    """``rollout.max_model_len`` must not exceed the model's context (its positions beyond were never
    trained; the HF rollout accepts it silently), and a prompt of ``data.max_prompt_length`` plus a response
    of ``data.max_response_length`` must fit the context the rollout serves."""
    if context is None:
        return
    rollout = config.actor_rollout_ref.rollout
    max_model_len = rollout.get("max_model_len")
    if max_model_len is not None and int(max_model_len) > context:
        raise IBPOSetupError(
            f"actor_rollout_ref.rollout.max_model_len={max_model_len} exceeds the model's context {context} "
            f"(max_position_embeddings of {config.actor_rollout_ref.model.path}, with rope scaling): lower it, or "
            "extend the context with actor_rollout_ref.model.override_config.rope_scaling")
    served = int(max_model_len) if max_model_len is not None else context
    total = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    if total > served:
        raise IBPOSetupError(
            f"data.max_prompt_length={config.data.max_prompt_length} + data.max_response_length="
            f"{config.data.max_response_length} = {total} exceeds the context {served} "
            f"({'rollout.max_model_len' if max_model_len is not None else 'the model max_position_embeddings'}): "
            "long prompts would leave no room to answer; lower one of them")


# ---- every row of the data files -------------------------------------------------------------------------

def check_data_rows(config: DictConfig, reward_fn, paths: list[str]) -> list[str]:
    """Every row of every data file (``data_prep.row_checks.check_rows``): a data source the reward function
    knows, a chat-list prompt and, for the project's verifiers, a gold answer they score as right when stated
    plainly. Then the configured function scores one row of each data source (the first), as verl calls it.
    Returns the data sources in order of appearance."""
    from data_prep.row_checks import RowCheckError, check_rows

    project = uses_project_reward(config)
    known = None
    if project:
        from reward_fns import KNOWN_DATA_SOURCES

        known = KNOWN_DATA_SOURCES
    prompt_key = str(config.data.get("prompt_key") or "prompt")
    sources: dict[str, None] = {}
    for path in paths:
        try:
            report = check_rows(path, known_sources=known, prompt_key=prompt_key, check_gold_answers=project,
                                reward_kwargs=project_reward_kwargs(config) if project else None)
        except RowCheckError as exc:
            raise IBPOSetupError(str(exc)) from exc
        firsts = sorted(report.first_row_of_source.values())
        for index, row in zip(firsts, read_rows(path, firsts)):
            score_row(config, reward_fn, path, index, row)
        sources.update(dict.fromkeys(report.data_sources))
    return list(sources)


def resolve_config(config: DictConfig) -> None:
    """Resolve the config's interpolations in place, after checking the option types the interpolations read
    (``ibpo.num_references=abc`` would otherwise fail inside ``${ibpo_prompt_length:...}`` with a
    traceback naming rollout.prompt_length); a resolution failure raises naming the key."""
    from omegaconf.errors import OmegaConfBaseException

    for block, (_, _, _) in METHODS.items():
        if config.get(block) is not None:
            cls = IBPOConfig if block == "ibpo" else CounterfactualConfig
            check_option_types(OmegaConf.to_container(config[block], resolve=False), cls, block)
    check_verl_option_types(config, resolve=False)
    try:
        OmegaConf.resolve(config)
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        key = getattr(exc, "full_key", None)
        raise IBPOSetupError(f"{key or 'config'}: cannot resolve its interpolation: "
                             f"{' '.join(str(exc).split())}") from exc


def preflight(config: DictConfig) -> None:
    """Every check that needs no Ray worker, in the driver, in seconds, cheapest first: ``method`` and its
    option block with types (``ibpo:`` / ``counterfactual:``), legacy reward keys, verl's option types, the
    data files, the reward function and its keyword arguments (:func:`check_reward_kwargs`), the model's
    context (:func:`check_context_length`) and, for IBPO, the tokenizer against the correction prompt budget
    (:func:`check_trainer_config`), verl's own validation (:func:`run_verl_validation`), every data row
    (:func:`check_data_rows`) and, for the project's own verifiers, their self-test. ``config`` must be
    resolved (:func:`resolve_config` first, as ``main_ibpo`` does).
    Raises :class:`IBPOSetupError` (or ``ValueError`` from the option dataclasses) naming the option."""
    method = method_of(config)  # validates the method's option block, rejects the other method's
    check_legacy_reward_keys(config)
    check_verl_option_types(config)
    train_files = data_files(config, "train_files")
    val_files = data_files(config, "val_files")
    model = config.actor_rollout_ref.model
    model_path = str(model.path)
    if model_path.startswith(("/", "~", ".")) and not Path(model_path).expanduser().is_dir():
        raise IBPOSetupError(f"actor_rollout_ref.model.path={model_path} is not a directory")
    reward_fn = load_reward_function(config)
    check_reward_kwargs(config, reward_fn)
    override = OmegaConf.to_container(model.get("override_config") or {}, resolve=True)
    context = model_context_length(model_path, override)
    check_context_length(config, context)
    if method == "ibpo":
        from verl.utils import hf_tokenizer

        tokenizer = hf_tokenizer(model.get("tokenizer_path") or model_path,
                                 trust_remote_code=model.get("trust_remote_code", False))
        check_trainer_config(config, ibpo_config_from(config), tokenizer, context)
    run_verl_validation(config)  # after the IBPO checks: they name the IBPO-specific reason for a setting
    sources = check_data_rows(config, reward_fn, train_files + [f for f in val_files if f not in train_files])
    run_verifier_self_test(config, sources)
