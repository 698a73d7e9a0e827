"""Registers the ``counterfactual`` method (docs/method_counterfactual.md) with the launcher's registry
(:mod:`recipe.common.methods`): its options, config and trainer (imported only when a run builds it)."""

from __future__ import annotations

from pathlib import Path

from counterfactual.importance import CounterfactualConfig
from recipe.common.methods import Method, method_options, register_method


def _trainer() -> type:
    from recipe.counterfactual.counterfactual_trainer import RayCounterfactualTrainer

    return RayCounterfactualTrainer


def counterfactual_config_from(config) -> CounterfactualConfig:
    """The validated ``counterfactual:`` block of a ``method: counterfactual`` config."""
    return method_options(config, METHOD.name)


METHOD = register_method(Method(
    name="counterfactual", options=CounterfactualConfig, config_dir=Path(__file__).resolve().parent / "config",
    config_name="counterfactual_trainer", trainer=_trainer,
    block_file="counterfactual_block.yaml",
    block_header="The `counterfactual:` option block of counterfactual_trainer.yaml (docs/method_counterfactual.md). "
                 "Every option is validated at start (counterfactual/importance.py, CounterfactualConfig): a typo "
                 "or out-of-range value fails.",
    module=__name__))
