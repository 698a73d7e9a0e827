"""Registers the ``counterfactual`` method (docs/method_counterfactual.md) with the launcher's registry
(:mod:`recipe.common.methods`): its options, config, trainer (imported only when a run builds it) and start check."""

from __future__ import annotations

from counterfactual.importance import CounterfactualConfig
from recipe.common.methods import register_folder_method


def _trainer() -> type:
    from recipe.counterfactual.counterfactual_trainer import RayCounterfactualTrainer

    return RayCounterfactualTrainer


def _check(config, context) -> None:
    """A mode that scores masked copies needs log-prob micro-batches of at least 2 rows at the longest row
    (``data.max_prompt_length + data.max_response_length``): each response's unmasked row is scored in the
    micro-batch of its copies (``recipe.counterfactual.batch.micro_batch_rows``)."""
    from recipe.common.methods import method_options
    from recipe.common.preflight.errors import SetupError
    from recipe.counterfactual.batch import micro_batch_rows

    if not method_options(config, "counterfactual").needs_forward_passes:
        return
    longest = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    try:
        micro_batch_rows(config.actor_rollout_ref.rollout, longest)
    except ValueError as exc:
        raise SetupError(str(exc)) from None


METHOD = register_folder_method(
    __name__, name="counterfactual", options=CounterfactualConfig, trainer=_trainer, check=_check,
    block_header="The `counterfactual:` option block of counterfactual_trainer.yaml (docs/method_counterfactual.md). "
                 "Every option is validated at start (counterfactual/importance.py, CounterfactualConfig): a typo "
                 "or out-of-range value fails.")

