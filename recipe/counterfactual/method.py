"""Registers the ``counterfactual`` method (docs/method_counterfactual.md) with the launcher's registry
(:mod:`recipe.common.methods`): its options, config and trainer (imported only when a run builds it)."""

from __future__ import annotations

from counterfactual.importance import CounterfactualConfig
from recipe.common.methods import register_folder_method


def _trainer() -> type:
    from recipe.counterfactual.counterfactual_trainer import RayCounterfactualTrainer

    return RayCounterfactualTrainer


METHOD = register_folder_method(
    __name__, name="counterfactual", options=CounterfactualConfig, trainer=_trainer,
    block_header="The `counterfactual:` option block of counterfactual_trainer.yaml (docs/method_counterfactual.md). "
                 "Every option is validated at start (counterfactual/importance.py, CounterfactualConfig): a typo "
                 "or out-of-range value fails.")

