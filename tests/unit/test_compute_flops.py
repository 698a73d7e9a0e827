"""The step FLOP counter against a slow per-token hand count and against torch's own FLOP counter on a
real (tiny) Qwen2 forward; the phase-seconds mapping."""

from __future__ import annotations

import pytest
import torch

from compute_accounting.flops import ModelShape, StepWork, forward_flops, step_flops
from recipe.ibpo.step_metrics import phase_seconds

SHAPE = ModelShape(matmul_params=1000, num_layers=3, attention_dim=8)


def slow_forward(lengths, shape: ModelShape) -> int:
    """Token by token: 2 FLOPs per matmul parameter, and per layer the query at position t scores t keys
    (QKᵀ, 2·t·d) and mixes t values (A·V, 2·t·d)."""
    total = 0
    for s in lengths:
        for t in range(1, s + 1):
            total += 2 * shape.matmul_params
            for _ in range(shape.num_layers):
                total += 2 * t * shape.attention_dim + 2 * t * shape.attention_dim
    return total


def test_forward_flops_matches_a_token_by_token_count():
    for lengths in ([1], [7], [3, 10, 2], [], [64, 1, 33]):
        assert forward_flops(lengths, SHAPE) == slow_forward(lengths, SHAPE)
    with pytest.raises(ValueError):
        forward_flops([-1], SHAPE)


def test_generation_with_a_kv_cache_costs_one_forward_over_prompt_and_response():
    p, g = 9, 5
    prefill = slow_forward([p], SHAPE)
    decode = sum(2 * SHAPE.matmul_params + SHAPE.num_layers * 4 * t * SHAPE.attention_dim for t in range(p + 1, p + g + 1))
    assert prefill + decode == forward_flops([p + g], SHAPE)


def test_step_flops_counts_every_phase_by_hand():
    work = StepWork(main_gen=[12, 15], correction_gen=[30, 41, 28], train_main=[12, 15], train_joint=[41],
                    train_padding=[2, 2], forward_phases={"scan": [10, 11]}, backward_phases={"probe": [12]}, ppo_epochs=2,
                    gradient_checkpointing=True, old_log_prob_forward=True, reference_forward=True)
    f = step_flops(work, SHAPE)
    train = slow_forward([12, 15, 41, 2, 2], SHAPE)
    assert f.main_gen == slow_forward([12, 15], SHAPE)
    assert f.correction_gen == slow_forward([30, 41, 28], SHAPE)
    assert f.old_log_prob == train and f.ref_log_prob == train
    assert f.actor_update == 2 * (1 + 2 + 1) * train  # 2 epochs x (forward + backward + checkpoint recompute)
    assert f.own == {"scan": slow_forward([10, 11], SHAPE), "probe": 4 * slow_forward([12], SHAPE)}  # a method's own
    passes = 2 * 4 + 1 + 1
    assert f.joint_rows == passes * slow_forward([41], SHAPE)
    assert f.padding_rows == passes * slow_forward([2, 2], SHAPE) > 0
    assert f.total == (f.main_gen + f.correction_gen + f.old_log_prob + f.ref_log_prob + f.actor_update
                       + f.own["scan"] + f.own["probe"])
    assert list(f.as_metrics("m/")) == ["m/main_gen", "m/correction_gen", "m/old_log_prob", "m/ref_log_prob",
                                        "m/actor_update", "m/scan", "m/probe", "m/joint_rows", "m/padding_rows"]
    plain = step_flops(StepWork(main_gen=[12, 15], train_main=[12, 15]), SHAPE)
    assert plain.actor_update == 3 * slow_forward([12, 15], SHAPE) and plain.ref_log_prob == 0
    assert plain.total == slow_forward([12, 15], SHAPE) * (1 + 1 + 3)
    bypass = step_flops(StepWork(main_gen=[4], train_main=[4], old_log_prob_forward=False), SHAPE)
    assert bypass.old_log_prob == 0


def test_model_shape_matches_torchs_flop_counter_on_a_real_forward(tmp_path):
    """torch's FlopCounterMode on a tiny Qwen2 forward (non-causal-aware: it counts the full s×s attention
    matmuls, 4·L·d·s²) and the rotary table leave exactly 2·N·s: N is the matmul parameter count."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM, Qwen2Config

    from recipe.common.preflight.model import model_flop_shape

    for tied in (True, False):
        config = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
                             attn_implementation="eager")
        path = tmp_path / f"tied_{tied}"
        config.save_pretrained(path)
        shape = model_flop_shape(str(path))
        model = AutoModelForCausalLM.from_config(config).eval()
        s = 11
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=torch.randint(0, 97, (1, s)))
        attention_full = 4 * shape.num_layers * shape.attention_dim * s * s
        rotary_table = 2 * (shape.attention_dim // 4 // 2) * s  # inv_freq (head_dim/2) x positions, once
        assert counter.get_total_flops() - attention_full - rotary_table == 2 * shape.matmul_params * s
        assert shape.num_layers == 2 and shape.attention_dim == 32


def test_phase_seconds_reads_verls_timers():
    timing = {"gen": 5.0, "ibpo_main_gen": 3.0, "ibpo_gen": 1.5, "ibpo_plan": 0.2, "ibpo_shape": 0.3,
              "reward": 0.1, "old_log_prob": 2.0, "update_actor": 4.0, "step": 12.0, "ibpo_lookup_proxy": 0.7}
    out = phase_seconds(timing)
    assert out["ibpo/time/lookup_proxy_s"] == 0.7  # a diagnostic: its own phase, not counted as IBPO's host work
    assert out["ibpo/time/gen_s"] == 5.0 and out["ibpo/time/correction_gen_s"] == 1.5
    assert out["ibpo/time/host_s"] == pytest.approx(0.5) and out["ibpo/time/update_actor_s"] == 4.0
    assert out["ibpo/time/ref_log_prob_s"] == 0.0 and out["ibpo/time/step_s"] == 12.0
