"""IBPO's Hydra config (``ibpo_trainer.yaml`` and its generated option block ``ibpo_blocks.yaml``) and the
OmegaConf resolver it uses. Whoever composes a config calls :func:`register_config_resolvers` first (the
launcher through ``Method.register_resolvers``, the tests): nothing is registered on import."""

from __future__ import annotations


def local_context_length(model_path: str | None) -> int | None:
    """The context of a model that is a local directory (``model_path/config.json``, read without transformers
    or hub access at config time; None otherwise: the start check then measures the context), by
    :func:`recipe.common.preflight.model.context_length`, rope scaling included."""
    import json
    import os

    from recipe.common.preflight.model import context_length

    if not model_path:
        return None
    config_file = os.path.join(os.path.expanduser(str(model_path)), "config.json")
    if not os.path.isfile(config_file):
        return None
    with open(config_file) as f:
        return context_length(json.load(f))


def ibpo_prompt_length(enable: bool, max_prompt: int, max_response: int, num_references: int,
                       max_candidate_tokens: int, max_model_len: int | None = None,
                       model_path: str | None = None) -> int:
    """Default ``rollout.prompt_length``: sized for correction prompts when IBPO is on, else the data's.
    The context (``rollout.max_model_len``, else a local model's context) bounds the
    candidate budget when ``ibpo.max_candidate_tokens = 0`` (``ibpo.correction_lengths.correction_budget``)."""
    from ibpo.correction_lengths import correction_prompt_length

    if not enable:
        return int(max_prompt)
    context = max_model_len if max_model_len else local_context_length(model_path)
    return correction_prompt_length(max_prompt, max_response, num_references, max_candidate_tokens, context=context)


def register_config_resolvers() -> None:
    """Register ``${ibpo_prompt_length:...}`` and the shared ``${row_tokens_per_gpu:...}``
    (``recipe.common.preflight.row_limits``; both used by ``ibpo_trainer.yaml``) with OmegaConf; idempotent."""
    from omegaconf import OmegaConf

    from recipe.common.preflight.row_limits import register_row_resolver

    OmegaConf.register_new_resolver("ibpo_prompt_length", ibpo_prompt_length, replace=True)
    register_row_resolver()
