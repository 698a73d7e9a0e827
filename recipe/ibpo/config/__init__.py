"""The recipe's Hydra configs (``ibpo_trainer.yaml``, ``counterfactual_trainer.yaml`` and their option
blocks) and the OmegaConf resolver they use. Whoever composes a config calls
:func:`register_config_resolvers` first (``main_ibpo.main``, the tests): nothing is registered on import."""

from __future__ import annotations


def ibpo_prompt_length(enable: bool, max_prompt: int, max_response: int, num_references: int,
                       max_candidate_tokens: int) -> int:
    """Default ``rollout.prompt_length``: sized for correction prompts when IBPO is on, else the data's."""
    from recipe.ibpo.setup_checks import correction_prompt_length

    if not enable:
        return int(max_prompt)
    return correction_prompt_length(max_prompt, max_response, num_references, max_candidate_tokens)


def register_config_resolvers() -> None:
    """Register ``${ibpo_prompt_length:...}`` (used by ``ibpo_trainer.yaml``) with OmegaConf; idempotent."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("ibpo_prompt_length", ibpo_prompt_length, replace=True)
