"""A mixture-of-experts model is priced by what a token computes with (k routed experts of E) and, in decode, by
every expert's bytes; before, its config's dense ``intermediate_size`` priced it as a dense model, silently."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from compute_accounting.flops import active_matmul_params
from compute_accounting.gpu_time import kv_bytes_per_token
from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.model import mixture_of_experts, model_flop_shape, model_serving_shape


def _tiny_qwen3_moe(path):
    from transformers import Qwen3MoeConfig

    Qwen3MoeConfig(vocab_size=100, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=8,
                   num_experts_per_tok=2, tie_word_embeddings=False).save_pretrained(path)
    return str(path)


def test_a_tiny_qwen3_moe_counts_its_routed_experts_k_of_e(tmp_path):
    model = _tiny_qwen3_moe(tmp_path)
    # per layer: q, o 32·32 each, k, v 16·32 each; router 8·32; experts 8 · (gate_up 32·32 + down 32·16);
    # LM head 100·32 (untied; the input embedding is a lookup)
    attention, router, one_expert = 2 * 1024 + 2 * 512, 8 * 32, 32 * 32 + 32 * 16
    matrices = 2 * (attention + router + 8 * one_expert) + 3200
    active = 2 * (attention + router + 2 * one_expert) + 3200  # 2 of 8 experts per token
    assert model_flop_shape(model).matmul_params == active == 16000
    shape = model_serving_shape(model)
    assert (shape.matmul_params, shape.weight_bytes) == (active, 2.0 * matrices)  # decode reads every expert
    assert shape.kv_bytes_per_token == kv_bytes_per_token(2, 2, 8) == 2 * 2 * 2 * 8 * 2


def test_mixtral_names_its_experts_otherwise_and_is_counted_alike(tmp_path):
    from transformers import MixtralConfig

    MixtralConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2).save_pretrained(tmp_path)
    attention, router, one_expert = 2 * 1024 + 2 * 512, 4 * 32, 3 * 32 * 64
    assert model_flop_shape(str(tmp_path)).matmul_params == 2 * (attention + router + 2 * one_expert) + 3200
    assert model_serving_shape(str(tmp_path)).weight_bytes == 2.0 * (2 * (attention + router + 4 * one_expert) + 3200)


def test_qwen3_30b_a3b_has_the_model_cards_total_and_active_parameters(tmp_path):
    """Qwen3-30B-A3B's model card: 30.5B parameters in total, 3.3B activated (both with the input embedding)."""
    from transformers import Qwen3MoeConfig

    Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                   num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                   num_experts_per_tok=8, tie_word_embeddings=False).save_pretrained(tmp_path)
    embedding = 151936 * 2048
    shape = model_serving_shape(str(tmp_path))
    assert round((shape.weight_bytes / 2 + embedding) / 1e9, 1) == 30.5
    # 3,352,821,760 with the embedding: the card's "3.3B activated" (attention, router, 8 of 128 experts, LM head)
    assert shape.matmul_params + embedding == 3_352_821_760
    assert model_flop_shape(str(tmp_path)).matmul_params == shape.matmul_params


def test_active_parameters_are_the_mean_over_every_routing():
    """Slow reference: a token's N under each of the C(E, k) routings, averaged (every routing equally likely)."""
    rng = random.Random(0)
    for _ in range(20):
        experts = rng.randint(1, 7)
        per_token = rng.randint(1, experts)
        per_expert, other = rng.randint(1, 500), rng.randint(0, 5000)
        routings = list(itertools.combinations(range(experts), per_token))
        mean = sum(other + per_expert * len(r) for r in routings) / len(routings)
        assert active_matmul_params(other + experts * per_expert, experts * per_expert, experts, per_token) == round(mean)


@pytest.mark.parametrize("config, expected", [
    ({}, None), ({"num_experts": 0}, None), ({"num_experts": 8, "num_experts_per_tok": 2}, (8, 2)),
    ({"num_local_experts": 4, "num_experts_per_tok": 1}, (4, 1)), ({"n_routed_experts": 64, "num_experts_per_tok": 6},
                                                                    (64, 6))])
def test_the_routing_is_read_from_each_families_keys(config, expected):
    assert mixture_of_experts(SimpleNamespace(**config), "m") == expected


def test_bad_mixture_of_experts_configs_are_refused_by_name(tmp_path):
    with pytest.raises(SetupError, match="8 experts but no num_experts_per_tok"):
        mixture_of_experts(SimpleNamespace(num_experts=8, num_experts_per_tok=None), "m")
    with pytest.raises(ValueError, match="3 experts per token of 2"):
        active_matmul_params(100, 50, 2, 3)
    from transformers import Qwen2Config

    # a dense architecture whose config claims experts: no weight is a routed expert's
    config = Qwen2Config(vocab_size=53, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    config.num_experts, config.num_experts_per_tok = 8, 2
    config.save_pretrained(tmp_path)
    with pytest.raises(SetupError, match="no weight is named like transformers' routed experts"):
        model_flop_shape(str(tmp_path))


def test_a_mixture_of_experts_with_a_measured_dense_models_active_parameters_is_another_shape(tmp_path):
    """A Qwen3-MoE config built to compute with Qwen3-1.7B's parameters per token (8 of 64 experts of 766: within
    0.05%, same layers, heads and KV) reads 8x the MLP weights per decode pass: the H200 measurement at Qwen3-1.7B
    must not price it (``same_shape`` compares weight bytes, not only the active parameters and KV bytes)."""
    from transformers import Qwen3MoeConfig

    from compute_accounting.gpu_time import MODEL_SHAPES, resolve_coefficients, same_shape

    Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=766,
                   num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128, num_experts=64,
                   num_experts_per_tok=8, tie_word_embeddings=True).save_pretrained(tmp_path)
    shape, dense = model_serving_shape(str(tmp_path)), MODEL_SHAPES["Qwen3-1.7B"]
    assert abs(shape.matmul_params / dense.matmul_params - 1) < 0.001
    assert shape.kv_bytes_per_token == dense.kv_bytes_per_token and shape.weight_bytes > 3 * dense.weight_bytes
    assert not same_shape("Qwen3-1.7B", shape)
    with pytest.raises(ValueError, match="no measured coefficients for H200 at "):
        resolve_coefficients("measured:H200", shape)
