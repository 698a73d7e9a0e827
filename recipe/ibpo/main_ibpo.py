"""Entry point of the IBPO recipe: ``python -m recipe.ibpo.main_ibpo [hydra overrides]``.

Mirrors verl 0.9.1's legacy ``main_ppo_v0.TaskRunner.run`` (the path the DAPO recipe uses) with the
trainer swapped for :class:`RayIBPOTrainer`. ``TaskRunner`` itself is a Ray actor class and cannot be
subclassed, so the runner subclasses ``BaseTaskRunner``.
"""

from __future__ import annotations

import os
import socket

import hydra
import ray
from omegaconf import OmegaConf

def local_max_positions(model_path: str | None) -> int | None:
    """``max_position_embeddings`` from ``model_path/config.json`` when the model is a local directory (no
    hub access at config time; None otherwise: the start check then measures the context)."""
    import json

    if not model_path:
        return None
    config_file = os.path.join(os.path.expanduser(str(model_path)), "config.json")
    if not os.path.isfile(config_file):
        return None
    with open(config_file) as f:
        hf = json.load(f)
    value = (hf.get("text_config") or {}).get("max_position_embeddings") or hf.get("max_position_embeddings")
    return int(value) if value else None


def ibpo_prompt_length(enable: bool, max_prompt: int, max_response: int, num_references: int,
                       max_candidate_tokens: int, max_model_len: int | None = None,
                       model_path: str | None = None) -> int:
    """Default ``rollout.prompt_length``: sized for correction prompts when IBPO is on, else the data's.
    The context (``rollout.max_model_len``, else a local model's ``max_position_embeddings``) bounds the
    candidate budget when ``ibpo.max_candidate_tokens = 0`` (``setup_checks.correction_budget``)."""
    from recipe.ibpo.setup_checks import correction_prompt_length

    if not enable:
        return int(max_prompt)
    context = max_model_len if max_model_len else local_max_positions(model_path)
    return correction_prompt_length(max_prompt, max_response, num_references, max_candidate_tokens, context=context)


OmegaConf.register_new_resolver("ibpo_prompt_length", ibpo_prompt_length, replace=True)


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
        from pprint import pprint

        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
        from verl.utils.config import omega_conf_to_dataclass, validate_config
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.workers.config import HFModelConfig

        from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer

        print(f"IBPOTaskRunner hostname: {socket.gethostname()}, PID: {os.getpid()}")
        OmegaConf.resolve(config)
        pprint(OmegaConf.to_container(config, resolve=True))

        actor_rollout_cls, ray_worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_resource_pool(config)
        self.add_teacher_model_resource_pool(config)
        self.add_ref_policy_worker(config, actor_rollout_cls)
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))

        model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        tokenizer, processor = model_config.tokenizer, model_config.processor
        resource_pool_manager = self.init_resource_pool_mgr(config)
        train_dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, processor, is_train=True,
                                          max_samples=config.data.get("train_max_samples", -1))
        val_dataset = create_rl_dataset(config.data.val_files, config.data, tokenizer, processor, is_train=False,
                                        max_samples=config.data.get("val_max_samples", -1))
        trainer = RayIBPOTrainer(
            config=config,
            tokenizer=tokenizer,
            processor=processor,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=resource_pool_manager,
            ray_worker_group_cls=ray_worker_group_cls,
            train_dataset=train_dataset,
            val_dataset=val_dataset,
            collate_fn=collate_fn,
            train_sampler=create_rl_sampler(config.data, train_dataset),
        )
        trainer.init_workers()
        trainer.fit()


@hydra.main(config_path="config", config_name="ibpo_trainer", version_base=None)
def main(config) -> None:
    from verl.trainer.main_ppo import run_ppo
    from verl.utils.device import auto_set_device

    from recipe.ibpo.setup_checks import ibpo_config_from

    auto_set_device(config)
    OmegaConf.resolve(config)
    ibpo_config_from(config)  # unknown or out-of-range ibpo options fail here, before Ray starts
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(IBPOTaskRunner))


if __name__ == "__main__":
    main()
