"""Registers the ``counterfactual`` method (docs/method_counterfactual.md) with the launcher's registry
(:mod:`recipe.common.methods`): its options, config, trainer (imported only when a run builds it) and start check."""

from __future__ import annotations

from counterfactual.importance import CounterfactualConfig
from recipe.common.methods import register_folder_method
from recipe.common.preflight.row_limits import register_row_resolver


def _trainer() -> type:
    from recipe.counterfactual.counterfactual_trainer import RayCounterfactualTrainer

    return RayCounterfactualTrainer


def _check(config, context) -> None:
    """The longest rows against verl's micro-batch token limits (``recipe.common.preflight.row_limits``); a mode that
    scores masked copies needs log-prob micro-batches of at least 2 rows at the longest masked copy: each
    response's unmasked row is scored in the micro-batch of its copies
    (``recipe.counterfactual.batch.micro_batch_rows``)."""
    from compute_accounting.row_lengths import phase_rows
    from recipe.common.methods import method_options
    from recipe.common.preflight.errors import SetupError
    from recipe.common.preflight.row_limits import check_row_limits, remove_padding, row_table
    from recipe.counterfactual.batch import micro_batch_rows

    scores_copies = method_options(config, "counterfactual").needs_forward_passes
    rollout = config.actor_rollout_ref.rollout
    rows = phase_rows(config.data.max_prompt_length, rollout.response_length, rollout.prompt_length,
                      masked_copies=scores_copies)
    print("[counterfactual] " + row_table(config, rows, context), flush=True)
    check_row_limits(config, rows)
    if not scores_copies:
        return
    try:
        micro_batch_rows(rollout, rows[-1].measured(remove_padding(config)))
    except ValueError as exc:
        raise SetupError(str(exc)) from None


METHOD = register_folder_method(
    __name__, name="counterfactual", options=CounterfactualConfig, trainer=_trainer, check=_check,
    register_resolvers=register_row_resolver,
    block_header="The `counterfactual:` option block of counterfactual_trainer.yaml (docs/method_counterfactual.md). "
                 "Every option is validated at start (counterfactual/importance.py, CounterfactualConfig): a typo "
                 "or out-of-range value fails.")

