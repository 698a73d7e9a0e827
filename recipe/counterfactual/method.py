"""Registers the ``counterfactual`` method (docs/method_counterfactual.md) with the launcher's registry
(:mod:`recipe.common.methods`): its options, config and trainer (imported only when a run builds it)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from counterfactual.importance import CounterfactualConfig
from recipe.common.methods import register_folder_method
from recipe.common.preflight.errors import SetupError


def _trainer() -> type:
    from recipe.counterfactual.counterfactual_trainer import RayCounterfactualTrainer

    return RayCounterfactualTrainer


def _check(config: DictConfig, context: int | None) -> None:
    """Refuse verl's rollout-correction bypass mode: there the answer's full log-probability (``old_log_probs``)
    is the rollout engine's while the masked copies are scored by the training model, so every span's drop carries
    the engines' mismatch, divided by the span's length: the weights change, not just shift."""
    if OmegaConf.select(config, "algorithm.rollout_correction.bypass_mode", default=False):
        raise SetupError("algorithm.rollout_correction.bypass_mode=true: the counterfactual drops compare the answer's "
                         "log-probability under the training model with and without each span, and bypass mode takes "
                         "the unmasked one from the rollout engine; set it to false for method=counterfactual")


METHOD = register_folder_method(
    __name__, name="counterfactual", options=CounterfactualConfig, trainer=_trainer, check=_check,
    block_header="The `counterfactual:` option block of counterfactual_trainer.yaml (docs/method_counterfactual.md). "
                 "Every option is validated at start (counterfactual/importance.py, CounterfactualConfig): a typo "
                 "or out-of-range value fails.")

