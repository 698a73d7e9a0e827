"""Registers the ``ibpo`` method (docs/method_ibpo.md) with the launcher's registry
(:mod:`recipe.common.methods`): its options, config, trainer, start check and actor worker. Imported by the
registry; the trainer, the check and the worker are imported only when a run needs them."""

from __future__ import annotations

from ibpo.options import IBPOConfig
from recipe.common.methods import register_folder_method
from recipe.ibpo.config import register_config_resolvers


def _trainer() -> type:
    from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer

    return RayIBPOTrainer


def _check(config, context) -> None:
    from recipe.ibpo.start_checks import check_ibpo_run

    check_ibpo_run(config, context)


def _actor_worker() -> type:
    from recipe.ibpo.workers import IBPOActorRolloutRefWorker

    return IBPOActorRolloutRefWorker


METHOD = register_folder_method(
    __name__, name="ibpo", options=IBPOConfig, trainer=_trainer, check=_check, owned_estimators=("ibpo",),
    block_file="ibpo_blocks.yaml",
    block_header="The `ibpo:` option block of ibpo_trainer.yaml. Every option is validated at start "
                 "(ibpo/options.py): a typo or out-of-range value fails.",
    register_resolvers=register_config_resolvers, actor_worker=_actor_worker)

