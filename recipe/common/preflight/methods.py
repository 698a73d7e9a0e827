"""The method registry: the config's top-level ``method:`` picks an entry of :data:`METHODS`, which gives
its option block's dataclass, the trainer class that runs it and the method's own pre-flight check.

The trainer and the check belong to the method's recipe (``recipe/ibpo``, ``recipe/counterfactual``), which
imports this shared layer; so an entry names them by import path (``"module:attribute"``), resolved on
first use, and nothing in ``recipe/common`` imports a method's recipe. A new method is one entry here plus
its recipe (docs/architecture.md)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from counterfactual.importance import CounterfactualConfig
from ibpo.compute_budget import ComputeBudgetConfig, check_validation_schedule
from ibpo.config import IBPOConfig
from recipe.common.preflight.errors import IBPOSetupError
from recipe.common.preflight.option_types import check_option_types


@dataclass(frozen=True)
class Method:
    """One ``method:`` value. Its option block is the config key of the same name."""

    options: type  # the option block's dataclass (with ``from_mapping``)
    config_name: str  # the Hydra config a run of this method starts from (recipe/ibpo/config/)
    trainer: str  # "module:Class" of the trainer (imported when a run builds it: Ray, verl workers)
    # "module:function" of the method's own pre-flight check, called as ``check(config, context)`` with the
    # model's context length (None when the model config gives none); None when the method has none
    check: str | None = None


def _resolve(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


# `method:` (top level of the config) -> its option block, trainer and pre-flight check.
METHODS: dict[str, Method] = {
    "ibpo": Method(IBPOConfig, "ibpo_trainer.yaml", trainer="recipe.ibpo.ibpo_ray_trainer:RayIBPOTrainer",
                   check="recipe.ibpo.preflight:check_ibpo_run"),
    "counterfactual": Method(CounterfactualConfig, "counterfactual_trainer.yaml",
                             trainer="recipe.counterfactual.counterfactual_trainer:RayCounterfactualTrainer"),
}


def method_options(config: DictConfig, method: str) -> Any:
    """The validated option block of ``method`` (``ibpo:`` / ``counterfactual:``), as its dataclass."""
    entry = METHODS[method]
    block = config.get(method)
    if block is None:
        raise IBPOSetupError(f"config has no `{method}:` block; start from recipe/ibpo/config/{entry.config_name}")
    options = OmegaConf.to_container(block, resolve=True)
    check_option_types(options, entry.options, method)
    return entry.options.from_mapping(options)


def ibpo_config_from(config: DictConfig) -> IBPOConfig:
    """The validated ``ibpo:`` block (G is ``actor_rollout_ref.rollout.n``, not an ``ibpo`` option)."""
    return method_options(config, "ibpo")


def counterfactual_config_from(config: DictConfig) -> CounterfactualConfig:
    """The validated ``counterfactual:`` block of a ``method: counterfactual`` config."""
    return method_options(config, "counterfactual")


def method_of(config: DictConfig) -> str:
    """The config's ``method`` (``ibpo`` | ``counterfactual``), its option block validated; a bad value,
    a missing block or the other method's block fails here, naming the key."""
    method = config.get("method")
    if method not in METHODS:
        raise IBPOSetupError(f"method={method!r} must be one of {sorted(METHODS)} (top-level key of "
                             "ibpo_trainer.yaml / counterfactual_trainer.yaml): it picks the trainer")
    estimator = (config.get("algorithm") or {}).get("adv_estimator")
    if estimator == "ibpo" and method != "ibpo":
        raise IBPOSetupError(f"algorithm.adv_estimator=ibpo with method={method}: the ibpo estimator normalises "
                             "the reward IBPO's correction pass shapes, which only method=ibpo runs; use "
                             "algorithm.adv_estimator=grpo (or method=ibpo)")
    for other in METHODS:
        if other != method and config.get(other) is not None:
            raise IBPOSetupError(f"method={method} but the config has a `{other}:` block; one method per run "
                                 f"(start from {other}_trainer.yaml for `{other}`)")
    method_options(config, method)
    return method


def trainer_class_for(config: DictConfig) -> type:
    """The trainer class of the config's ``method`` (imported on demand)."""
    return _resolve(METHODS[method_of(config)].trainer)


def check_option_block_types(config: DictConfig) -> None:
    """The declared types of every method option block present, and of the ``compute_budget:`` block, before
    the config is resolved (its interpolations read them)."""
    for name, entry in METHODS.items():
        if config.get(name) is not None:
            check_option_types(OmegaConf.to_container(config[name], resolve=False), entry.options, name)
    if config.get("compute_budget") is not None:
        check_option_types(OmegaConf.to_container(config.compute_budget, resolve=False), ComputeBudgetConfig,
                           "compute_budget")


def compute_budget_from(config: DictConfig) -> ComputeBudgetConfig:
    """The validated ``compute_budget:`` block every method's trainer reads (``ibpo.compute_budget``; a config
    without the block has no budget), checked against ``trainer.test_freq`` (validation follows the budget)."""
    block = config.get("compute_budget")
    options = {} if block is None else OmegaConf.to_container(block, resolve=True)
    check_option_types(options, ComputeBudgetConfig, "compute_budget")
    budget = ComputeBudgetConfig.from_mapping(options)
    check_validation_schedule(budget, config.trainer.get("test_freq", -1))
    return budget


def run_method_check(config: DictConfig, method: str, context: int | None) -> None:
    """The method's own pre-flight check (IBPO: the tokenizer against the correction prompt budget), if any."""
    check = METHODS[method].check
    if check is not None:
        _resolve(check)(config, context)
