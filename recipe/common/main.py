"""Entry point of the IBPO recipe: ``python -m recipe.ibpo.main_ibpo [hydra overrides]``.

Copies the pinned verl's legacy ``main_ppo_v0.TaskRunner.run`` (the path the DAPO recipe uses; manifest entry in
``recipe/common/upstream/manifest.toml``) with the
trainer swapped for the one the config's ``method`` names (``ibpo``: :class:`RayIBPOTrainer`,
``counterfactual``: :class:`RayCounterfactualTrainer`; ``recipe.common.preflight.methods.METHODS``). ``TaskRunner`` itself is a Ray actor class and cannot be
subclassed, so the runner subclasses ``BaseTaskRunner``.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import hydra
import ray
from omegaconf import OmegaConf

from recipe.ibpo.config import register_config_resolvers

# At import, not in main(): Hydra's `--cfg job --resolve` prints the resolved config before main() runs, and
# ibpo_trainer.yaml uses ${ibpo_prompt_length:...}.
register_config_resolvers()


def _task_runner_base():
    from verl.trainer.main_ppo_v0 import BaseTaskRunner

    return BaseTaskRunner


class IBPOTaskRunner(_task_runner_base()):
    """Builds workers, datasets and the IBPO trainer inside the Ray driver actor, then runs ``fit``."""

    def add_actor_rollout_worker(self, config):
        """verl's worker mapping with the actor class swapped for one that also serves the gradient probe."""
        from verl.trainer.ppo.ray_trainer import Role

        from recipe.ibpo.workers import IBPOActorRolloutRefWorker

        actor_rollout_cls, ray_worker_group_cls = super().add_actor_rollout_worker(config)
        for role in (Role.ActorRollout, Role.ActorRolloutRef):
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(IBPOActorRolloutRefWorker)
        return IBPOActorRolloutRefWorker, ray_worker_group_cls

    def run(self, config):
        """The pinned verl's ``main_ppo_v0.TaskRunner.run``, copied as text (manifest entry ``TaskRunner.run``
        in ``recipe/common/upstream/manifest.toml``) with one change, its lines marked ``# IBPO``: the trainer
        class is the one the config's ``method`` names (``recipe.common.preflight.methods.trainer_class_for``), not
        ``RayPPOTrainer``; the imports of verl's module scope are repeated here."""
        # Print the initial configuration. `resolve=True` will evaluate symbolic values.
        from pprint import pprint

        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler  # IBPO
        from verl.trainer.ppo.utils import need_critic, need_reference_policy  # IBPO
        from verl.utils.config import validate_config  # IBPO: verl's module-level imports

        from recipe.common.preflight.methods import trainer_class_for  # IBPO

        print(f"TaskRunner hostname: {socket.gethostname()}, PID: {os.getpid()}")
        pprint(OmegaConf.to_container(config, resolve=True))
        OmegaConf.resolve(config)

        actor_rollout_cls, ray_worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)

        self.add_reward_model_resource_pool(config)

        self.add_teacher_model_resource_pool(config)

        # Add a reference policy worker if KL loss or KL reward is used.
        self.add_ref_policy_worker(config, actor_rollout_cls)

        # validate config
        validate_config(
            config=config,
            use_reference_policy=need_reference_policy(config),
            use_critic=need_critic(config),
        )

        # Instantiate the tokenizer and processor from the model config.
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        tokenizer = model_config.tokenizer
        # Used for multimodal LLM, could be None
        processor = model_config.processor

        resource_pool_manager = self.init_resource_pool_mgr(config)

        from verl.utils.dataset.rl_dataset import collate_fn

        # Create training and validation datasets.
        train_dataset = create_rl_dataset(
            config.data.train_files,
            config.data,
            tokenizer,
            processor,
            is_train=True,
            max_samples=config.data.get("train_max_samples", -1),
        )
        val_dataset = create_rl_dataset(
            config.data.val_files,
            config.data,
            tokenizer,
            processor,
            is_train=False,
            max_samples=config.data.get("val_max_samples", -1),
        )
        train_sampler = create_rl_sampler(config.data, train_dataset)

        # Initialize the PPO trainer.
        trainer_cls = trainer_class_for(config)  # IBPO: the trainer of the config's `method`
        print(f"IBPOTaskRunner: method={config.method} trainer={trainer_cls.__name__}")  # IBPO
        trainer = trainer_cls(  # IBPO
            config=config,
            tokenizer=tokenizer,
            processor=processor,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=resource_pool_manager,
            ray_worker_group_cls=ray_worker_group_cls,
            train_dataset=train_dataset,
            val_dataset=val_dataset,
            collate_fn=collate_fn,
            train_sampler=train_sampler,
        )
        # Initialize the workers of the trainer.
        trainer.init_workers()

        # Start the training process.
        trainer.fit()


def run_preflight(config) -> None:
    """:func:`recipe.common.preflight.preflight` in the driver, before Ray starts: a configuration mistake
    exits (status 2) within seconds with one line naming the option instead of a worker traceback."""
    from recipe.common.preflight import IBPOSetupError, preflight, resolve_config

    start = time.perf_counter()
    try:
        resolve_config(config)
        preflight(config)
    except (IBPOSetupError, ValueError) as exc:
        print(f"[ibpo] configuration error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    print(f"[ibpo] pre-flight checks passed in {time.perf_counter() - start:.1f} s (options and their types, verl's "
          f"validate_config, data files and every row, reward function and its kwargs, context and prompt budget, "
          f"verifier self-test); starting Ray", flush=True)


@hydra.main(config_path="config", config_name="ibpo_trainer", version_base=None)
def main(config) -> None:
    from verl.trainer.main_ppo import run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    run_preflight(config)  # resolves the config; options, data, reward, context: fails here, before Ray starts
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(IBPOTaskRunner))


if __name__ == "__main__":
    main()
