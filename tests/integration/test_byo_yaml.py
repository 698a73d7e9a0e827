"""README "Bring your own verl YAML": the YAML block of the README, composed against verl 0.9.1's real
``ppo_trainer`` config (as ``python -m recipe.main --config-path DIR --config-name NAME method=ibpo`` composes it), gives the same
IBPO settings as the recipe's own ``ibpo_trainer.yaml``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir, initialize_config_module
from omegaconf import OmegaConf

from ibpo.options import IBPOConfig
from recipe.ibpo.config import register_config_resolvers
from recipe.common.preflight import SetupError
from recipe.common.methods import method_of, trainer_class_for

README = Path(__file__).resolve().parents[2] / "README.md"
SEARCHPATH = "hydra:\n  searchpath:\n    - pkg://verl.trainer.config\n    - pkg://recipe.ibpo.config\n"


def readme_yaml() -> str:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- byo-yaml:begin.*?-->\s*```yaml\n(.*?)```\s*<!-- byo-yaml:end -->", text, re.S)
    assert block, "README lost its byo-yaml block"
    return block.group(1)


def compose_file(directory: Path, name: str, text: str, overrides: list[str] | None = None):
    (directory / f"{name}.yaml").write_text(text, encoding="utf-8")
    register_config_resolvers()
    with initialize_config_dir(config_dir=str(directory), version_base=None):
        cfg = compose(config_name=name, overrides=overrides or [])
    OmegaConf.resolve(cfg)
    return cfg


def recipe_config(overrides: list[str]):
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer", overrides=overrides)
    OmegaConf.resolve(cfg)
    return cfg


def test_the_readme_yaml_composes_against_verl_and_runs_the_ibpo_trainer(tmp_path):
    from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer

    cfg = compose_file(tmp_path, "my_ibpo_run", readme_yaml())
    # verl's whole ppo_trainer is there (keys the YAML never names)
    assert cfg.trainer.total_epochs == 30 and cfg.actor_rollout_ref.actor.strategy in ("fsdp", "fsdp2")
    assert cfg.critic is not None and "val_kwargs" in cfg.actor_rollout_ref.rollout
    # IBPO's keys: method, estimator, carrier loss, verifiers, the user's own values
    assert method_of(cfg) == "ibpo" and trainer_class_for(cfg) is RayIBPOTrainer
    assert cfg.algorithm.adv_estimator == "ibpo"
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "gspo"
    assert cfg.reward.custom_reward_function.path == "pkg://reward_fns"
    assert cfg.data.max_prompt_length == 1024 and cfg.ibpo.lam == 0.6
    assert IBPOConfig.from_mapping(OmegaConf.to_container(cfg.ibpo)) == IBPOConfig(lam=0.6)  # the YAML's own λ
    # the correction prompt budget resolves exactly as in the recipe's own config
    ours = recipe_config(["data.max_prompt_length=1024", "data.max_response_length=4096", "ibpo.lam=0.6"])
    assert cfg.actor_rollout_ref.rollout.prompt_length == ours.actor_rollout_ref.rollout.prompt_length > 1024
    for key in ("algorithm", "actor_rollout_ref.actor.policy_loss", "reward.custom_reward_function", "ibpo"):
        assert OmegaConf.select(cfg, key) == OmegaConf.select(ours, key), key


def test_overrides_reach_the_readme_yaml(tmp_path):
    cfg = compose_file(tmp_path, "my_ibpo_run", readme_yaml(), ["ibpo.variant=ratio", "actor_rollout_ref.rollout.n=4",
                                                                 "data.max_response_length=512"])
    assert cfg.ibpo.variant == "ratio" and cfg.actor_rollout_ref.rollout.n == 4
    assert cfg.actor_rollout_ref.rollout.prompt_length == recipe_config(
        ["data.max_prompt_length=1024", "data.max_response_length=512"]).actor_rollout_ref.rollout.prompt_length


def test_a_yaml_missing_what_ibpo_needs_is_named(tmp_path):
    """ppo_trainer + ibpo_blocks alone: no `method` -> the pre-flight's first check names it."""
    cfg = compose_file(tmp_path, "bare", SEARCHPATH + "defaults:\n  - ppo_trainer\n  - ibpo_blocks\n  - _self_\n")
    with pytest.raises(SetupError, match=r"^method=None must be one of \['counterfactual', 'ibpo'\]"):
        method_of(cfg)
