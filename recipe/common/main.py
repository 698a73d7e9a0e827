"""The launcher of every method: ``python -m recipe.main method=<name> [hydra overrides]``
(a method folder may keep an older launcher name as an alias: the same launcher with that method as its default).

``method=<name>`` picks a registered method (:mod:`recipe.common.methods`) and with it the Hydra config the run
starts from (the method's ``config_dir`` / ``config_name``; ``--config-path``/``--config-name`` still override).
The task runner copies the pinned verl's legacy ``main_ppo_v0.TaskRunner.run`` (the path the DAPO recipe uses;
manifest entry in ``recipe/common/upstream/manifest.toml``) with the trainer swapped for the one the config's
``method`` names. ``TaskRunner`` itself is a Ray actor class and cannot be subclassed, so the runner subclasses
``BaseTaskRunner``.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import hydra
import ray
from omegaconf import OmegaConf

from recipe.common.methods import Method, registered_methods
from recipe.common.preflight.errors import SetupError


def register_config_resolvers() -> None:
    """Every method's OmegaConf resolvers. At import, not in main(): Hydra's ``--cfg job --resolve`` prints the
    resolved config before main() runs, and a method's config may use its resolvers
    (``Method.register_resolvers``)."""
    for method in registered_methods().values():
        if method.register_resolvers is not None:
            method.register_resolvers()


register_config_resolvers()


def _task_runner_base():
    from verl.trainer.main_ppo_v0 import BaseTaskRunner

    return BaseTaskRunner


class MethodTaskRunner(_task_runner_base()):
    """Builds workers, datasets and the config's method's trainer inside the Ray driver actor, then runs ``fit``."""

    def add_actor_rollout_worker(self, config):
        """verl's worker mapping, with the actor class swapped for the method's own when it has one
        (``Method.actor_worker``; IBPO's also serves the gradient probe)."""
        from verl.trainer.ppo.ray_trainer import Role

        from recipe.common.methods import method_of

        actor_rollout_cls, ray_worker_group_cls = super().add_actor_rollout_worker(config)
        worker = registered_methods()[method_of(config)].actor_worker
        if worker is None:
            return actor_rollout_cls, ray_worker_group_cls
        worker_cls = worker()
        for role in (Role.ActorRollout, Role.ActorRolloutRef):
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(worker_cls)
        return worker_cls, ray_worker_group_cls

    def run(self, config):
        """The pinned verl's ``main_ppo_v0.TaskRunner.run``, copied as text (manifest entry ``TaskRunner.run``
        in ``recipe/common/upstream/manifest.toml``) with one change, its lines marked ``# RECIPE``: the trainer
        class is the one the config's ``method`` names (``recipe.common.methods.trainer_class_for``), not
        ``RayPPOTrainer``; the imports of verl's module scope are repeated here."""
        # Print the initial configuration. `resolve=True` will evaluate symbolic values.
        from pprint import pprint

        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler  # RECIPE
        from verl.trainer.ppo.utils import need_critic, need_reference_policy  # RECIPE
        from verl.utils.config import validate_config  # RECIPE: verl's module-level imports

        from recipe.common.methods import trainer_class_for  # RECIPE

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
        trainer_cls = trainer_class_for(config)  # RECIPE: the trainer of the config's `method`
        print(f"MethodTaskRunner: method={config.method} trainer={trainer_cls.__name__}")  # RECIPE
        trainer = trainer_cls(  # RECIPE
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
    from recipe.common.preflight import SetupError, preflight, resolve_config

    start = time.perf_counter()
    try:
        resolve_config(config)
        preflight(config)
    except (SetupError, ValueError) as exc:
        print(f"[recipe] configuration error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    print(f"[recipe] pre-flight checks passed in {time.perf_counter() - start:.1f} s (options and their types, "
          f"verl's validate_config, data files and every row, reward function and its kwargs, context and prompt "
          f"budget, verifier self-test); starting Ray", flush=True)


def launch(config) -> None:
    """Pre-flight, then verl's ``run_ppo`` with :class:`MethodTaskRunner` as the Ray driver actor."""
    from verl.trainer.main_ppo import run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    run_preflight(config)  # resolves the config; options, data, reward, context: fails here, before Ray starts
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(MethodTaskRunner))


def _argument(argv: list[str], flag: str) -> str | None:
    """The value of ``--flag=value`` or ``--flag value`` in ``argv``."""
    for i, arg in enumerate(argv):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


def method_from_argv(argv: list[str], default: str | None = None) -> Method:
    """The method a command line runs: its ``method=<name>`` override, else the method whose config
    ``--config-name`` names, else ``default``; exits naming the registered methods when there is none."""
    methods = registered_methods()
    named = [a.split("=", 1)[1] for a in argv if a.startswith("method=")]
    if len(set(named)) > 1:  # Hydra would apply the last, the config would be the first's
        print(f"[recipe] configuration error: method= is given {len(named)} times ({', '.join(named)}); give one",
              file=sys.stderr, flush=True)
        raise SystemExit(2)
    name = named[0] if named else None
    config_name = _argument(argv, "--config-name") or _argument(argv, "-cn")
    if name is None and config_name is not None:
        name = next((m.name for m in methods.values() if m.config_name == config_name), None)
    name = name or default
    if name not in methods:
        print(f"[recipe] configuration error: method={name!r} must be one of {sorted(methods)}: "
              f"`python -m recipe.main method=<name> [overrides]`", file=sys.stderr, flush=True)
        raise SystemExit(2)
    return methods[name]


def main(default_method: str | None = None) -> None:
    """Compose the config of the method the command line names (``method=...``) and :func:`launch` it."""
    method = method_from_argv(sys.argv[1:], default_method)
    hydra.main(config_path=str(method.config_dir), config_name=method.config_name, version_base=None)(launch)()


if __name__ == "__main__":
    main()
