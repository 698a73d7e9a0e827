"""Legacy top-level reward keys (``custom_reward_function``, ``reward_model``, ``sandbox_fusion``): the
pinned verl's ``main_ppo`` reads the reward settings only under ``reward:``, so a value left at the top level
would be ignored silently; the check names the key and its new home."""

from __future__ import annotations

from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.reward_function import REWARD_PATH_KEY
from recipe.common.upstream import pinned_verl_version

# Top-level blocks of verl's legacy_reward_impl.yaml (all null by default). Only verl's fully-async entry point
# migrates them (verl.experimental.reward_loop.migrate_legacy_reward_impl); main_ppo and recipe.main ignore them.
LEGACY_REWARD_BLOCKS = ("custom_reward_function", "reward_model", "sandbox_fusion")


def legacy_key_home(key: str) -> str:
    """Where the pinned verl reads the setting the legacy top-level ``key`` held
    (``migrate_legacy_reward_impl``'s mapping)."""
    head, _, rest = key.partition(".")
    if head == "custom_reward_function":
        return f"reward.custom_reward_function.{rest}"
    if head == "sandbox_fusion":
        return f"reward.sandbox_fusion.{rest}"
    special = {"num_workers": "reward.num_workers", "reward_manager": "reward.reward_manager.name",
               "reward_kwargs": "reward.reward_kwargs", "model.path": "reward.reward_model.model_path",
               "reward_loop_source": "reward.reward_manager.source",
               "reward_loop_module_path": "reward.reward_manager.module.path",
               "reward_loop_class_name": "reward.reward_manager.module.name"}
    for legacy, home in special.items():
        if rest == legacy or rest.startswith(legacy + "."):
            return home + rest[len(legacy):]
    return f"reward.reward_model.{rest}"


def _set_leaves(node: Any, prefix: str) -> list[str]:
    if isinstance(node, Mapping):
        return [k for key, value in node.items() for k in _set_leaves(value, f"{prefix}.{key}")]
    return [] if node is None else [prefix]


def check_legacy_reward_keys(config: DictConfig) -> None:
    """A value under the legacy top-level ``custom_reward_function`` / ``reward_model`` / ``sandbox_fusion``
    blocks is never read by ``main_ppo`` (the pinned verl moved them under ``reward:``): the run would train on
    the configured ``reward:`` function instead, silently. Raise naming the key and its new home."""
    for block in LEGACY_REWARD_BLOCKS:
        node = config.get(block)
        if node is None:
            continue
        leaves = _set_leaves(OmegaConf.to_container(node, resolve=True), block)
        if leaves:
            raise SetupError(
                f"{leaves[0]} is a legacy top-level key that verl {pinned_verl_version()}'s main_ppo no longer reads "
                f"(the run would use {REWARD_PATH_KEY}="
                f"{config.reward.get('custom_reward_function', {}).get('path')} instead); "
                f"set {legacy_key_home(leaves[0])}")

