"""One reader of a model's context (``recipe.common.preflight.model.context_length``): the pre-flight (through
transformers), the ``ibpo_prompt_length`` resolver (``config.json`` read directly) and the trainer's start
checks agree, rope scaling and ``override_config`` included."""

from __future__ import annotations

import json

import pytest

from recipe.common.preflight.model import context_length, model_context_length
from recipe.ibpo.config import local_context_length

QWEN2_TINY = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "vocab_size": 512, "max_position_embeddings": 4096}


@pytest.mark.parametrize("scaling, expected", [
    (None, 4096),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}, 8192),  # of the original
    ({"rope_type": "yarn", "factor": 2.0}, 8192),
    ({"rope_type": "linear", "factor": 2.0}, 8192),
    ({"rope_type": "dynamic", "factor": 3.0}, 12288),
])
def test_the_three_readers_agree(tmp_path, scaling, expected):
    config = dict(QWEN2_TINY, **({"rope_scaling": scaling} if scaling else {}))
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert context_length(config) == expected
    assert local_context_length(str(tmp_path)) == expected  # the resolver, without transformers
    assert model_context_length(str(tmp_path)) == expected  # the pre-flight and the trainer, through transformers


def test_override_config_and_nested_text_config():
    assert context_length(QWEN2_TINY, {"max_position_embeddings": 1024}) == 1024
    assert context_length(QWEN2_TINY, {"rope_scaling": {"type": "linear", "factor": 2}}) == 8192
    assert context_length({"text_config": dict(QWEN2_TINY, rope_parameters={"rope_type": "yarn", "factor": 2.0})}) == 8192
    assert context_length({"model_type": "x"}) is None
    assert local_context_length(None) is None and local_context_length("Qwen/Qwen3-8B") is None  # a hub id: no read
