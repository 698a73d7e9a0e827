"""Registers ``scaled_advantage`` with the launcher's registry; the trainer is imported when a run builds it."""

from __future__ import annotations

from recipe.common.methods import register_folder_method
from recipe.common.preflight.errors import SetupError
from scaled_advantage.options import ScaledAdvantageConfig


def _trainer() -> type:
    from scaled_advantage.trainer import RayScaledAdvantageTrainer

    return RayScaledAdvantageTrainer


def check(config, context) -> None:
    """The method's own start check: a group of one response has a zero advantage, nothing to scale."""
    if int(config.actor_rollout_ref.rollout.n) < 2:
        raise SetupError(f"actor_rollout_ref.rollout.n={config.actor_rollout_ref.rollout.n}: scaled_advantage "
                         "needs groups of at least 2 responses")


METHOD = register_folder_method(
    __name__, name="scaled_advantage", options=ScaledAdvantageConfig, trainer=_trainer, check=check,
    block_header="The `scaled_advantage:` option block of scaled_advantage_trainer.yaml (a test-tree method).")
