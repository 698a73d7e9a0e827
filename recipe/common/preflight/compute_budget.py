"""The ``compute_budget:`` block every method's run may carry (``compute_accounting.budget``): its declared types and
its validation against the run's validation schedule. Read by the pre-flight and by
``recipe.common.trainer_base.HookedRayPPOTrainer`` (the budget is the same for every method)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from compute_accounting.budget import ComputeBudgetConfig, check_validation_schedule
from recipe.common.preflight.option_types import check_option_types


def check_compute_budget_types(config: DictConfig) -> None:
    """The declared types of the ``compute_budget:`` block, if present, before the config is resolved."""
    if config.get("compute_budget") is not None:
        check_option_types(OmegaConf.to_container(config.compute_budget, resolve=False), ComputeBudgetConfig,
                           "compute_budget")


def compute_budget_from(config: DictConfig) -> ComputeBudgetConfig:
    """The validated ``compute_budget:`` block every method's trainer reads (``compute_accounting.budget``; a config
    without the block has no budget), checked against ``trainer.test_freq`` (validation follows the budget)."""
    block = config.get("compute_budget")
    options = {} if block is None else OmegaConf.to_container(block, resolve=True)
    check_option_types(options, ComputeBudgetConfig, "compute_budget")
    budget = ComputeBudgetConfig.from_mapping(options)
    check_validation_schedule(budget, config.trainer.get("test_freq", -1))
    return budget
