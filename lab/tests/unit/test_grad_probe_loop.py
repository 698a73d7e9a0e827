"""lab.analysis.grad_probe_loop: the probe hook in verl's layout agrees with the toy loop's own loss, gives ratio
exactly 1 when IBPO's advantages are GSPO's (no shaping) and 4 when they are doubled; the summary pools steps
per seed and leaves steps without a GSPO ratio out."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lab.analysis import grad_probe_loop
from ibpo.diagnostics import unnormalised_advantages


@pytest.fixture(scope="module")
def model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=53, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).to(torch.float64)


def _batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(1, 53, size=int(rng.integers(2, 6))).tolist() for _ in range(6)]
    responses = [rng.integers(1, 53, size=int(rng.integers(1, 7))).tolist() for _ in range(6)]
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    return prompts, responses, rewards, [0, 0, 0, 1, 1, 1]


def _gspo_token_advantages(responses, rewards, group_ids, scale=1.0):
    from ibpo.advantages import group_normalized_advantages

    adv = group_normalized_advantages(torch.as_tensor(rewards), group_ids).numpy()
    return [np.full(len(r), scale * adv[i]) for i, r in enumerate(responses)]


@pytest.mark.parametrize("scale,ratio", [(1.0, 1.0), (2.0, 4.0)])
def test_ratio_is_exact_for_equal_and_doubled_advantages(model, scale, ratio):
    prompts, responses, rewards, groups = _batch()
    hook = grad_probe_loop.ProbeHook(num_coordinates=64)
    out = hook(model=model, prompts=prompts, responses=responses, rewards=rewards, group_ids=groups,
               token_advantages=_gspo_token_advantages(responses, rewards, groups, scale),
               delta=np.zeros(6), pad_id=0)
    assert out["var_gspo"] > 0 and out["shaped"] == 0
    assert out["ratio"] == pytest.approx(ratio, rel=1e-10)


def test_probe_layout_sums_to_the_loops_own_loss_gradient(model):
    """Σ_i g_i (left-padded verl layout, token_mean) = −B · ∇ gspo_loss (the loop's right-padded batch) on the
    probe's coordinates: the hook probes the gradient the loop trains with."""
    from lab.analysis.toy_loop import gspo_loss
    from ibpo.grad_probe import projected_per_sample_gradients, select_parameter_subset

    prompts, responses, rewards, groups = _batch(1)
    token_adv = _gspo_token_advantages(responses, rewards, groups)
    subset = select_parameter_subset(model, 64, seed=0)
    ids, attn, resp = grad_probe_loop.verl_layout(prompts, responses, pad_id=0)
    adv = grad_probe_loop.padded_token_advantages(token_adv, resp.shape[1])
    (per_sample,) = projected_per_sample_gradients(model, ids, attn, resp, [adv], subset)
    model.zero_grad(set_to_none=True)
    gspo_loss(model, prompts, responses, token_adv, pad_id=0).backward()
    direct = torch.cat([model.get_submodule(name).weight.grad[o, i]
                        for name, o, i in zip(subset.module_names, subset.out_index, subset.in_index)])
    torch.testing.assert_close(per_sample.sum(0), -len(prompts) * direct.to(torch.float64), rtol=1e-6, atol=1e-9)


def test_summary_pools_steps_per_seed_and_skips_steps_without_ratio():
    steps = {0: [{"var_gspo": 1.0, "var_ibpo": 2.0, "ratio": 2.0, "shaped": 1},
                 {"var_gspo": 3.0, "var_ibpo": 2.0, "ratio": 2 / 3, "shaped": 0},
                 {"var_gspo": 0.0, "var_ibpo": 1.0, "ratio": None, "shaped": 2}],
             1: [{"var_gspo": 2.0, "var_ibpo": 1.0, "ratio": 0.5, "shaped": 1}]}
    s = grad_probe_loop.summarise(steps)
    assert s["per_seed_pooled_ratio"] == {0: 1.0, 1: 0.5}
    assert s["steps"] == 4 and s["steps_without_ratio"] == 1 and s["steps_with_shaping"] == 3
    assert s["median_step_ratio"] == pytest.approx(2 / 3)
    assert s["mean_ratio"][0] == pytest.approx(0.75)
    assert s["geometric_mean_ratio"][0] == pytest.approx(math.sqrt(0.5))
    assert s["seeds_below_1"] == 1


def test_unnormalised_and_per_kind_variances():
    """Theorem A.2's un-normalised advantages (r − mean_g, r + λΔ − mean_g) by hand, and the hook's per-kind
    variances: with no shaping every IBPO/GSPO ratio is exactly 1; the un-normalised GSPO variance of a group
    whose std is s is s² times the normalised one (the per-sample gradients scale by s + ε), checked on one
    mixed group of 4 (s = √3/4) and 2 all-wrong groups (no GSPO signal: left out)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    assert unnormalised_advantages(np.array([1.0, 0, 0, 0, 0.3, 0]), [0, 0, 0, 0, 1, 1]).tolist() == \
        pytest.approx([0.75, -0.25, -0.25, -0.25, 0.15, -0.15])
    torch.manual_seed(1)
    config = Qwen2Config(vocab_size=53, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config).to(torch.float64)
    rng = np.random.default_rng(3)
    prompts = [rng.integers(1, 53, size=3).tolist() for _ in range(8)]
    responses = [rng.integers(1, 53, size=int(rng.integers(2, 6))).tolist() for _ in range(8)]
    rewards = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    groups = [0, 0, 0, 0, 1, 1, 2, 2]
    hook = grad_probe_loop.ProbeHook(num_coordinates=64, lam=0.6)
    out = hook(model=model, prompts=prompts, responses=responses, rewards=rewards, group_ids=groups,
               token_advantages=_gspo_token_advantages(responses, rewards, groups), delta=np.zeros(8), pad_id=0)
    for key in ("ratio", "unnorm_ratio", "mixed_ratio", "mixed_unnorm_ratio"):
        assert out[key] == pytest.approx(1.0, rel=1e-10)
    # (Eq. 23 divides by std + ε, ε = 1e-8)
    assert out["mixed_unnorm_var_gspo"] == pytest.approx(out["mixed_var_gspo"] * (math.sqrt(3) / 4 + 1e-8) ** 2,
                                                         rel=1e-6)  # float32 steps in the probe
    assert out["all_wrong_var_gspo"] == 0.0 and out["all_wrong_ratio"] is None  # no signal in all-wrong groups
    # shaping one all-wrong row: the normalised IBPO advantage there is ±1 (group of 2), un-normalised ±0.15
    delta = np.zeros(8)
    delta[4] = 0.5
    from ibpo.advantages import group_normalized_advantages

    adv = group_normalized_advantages(torch.as_tensor(rewards + 0.6 * delta), groups).numpy()
    shaped = hook(model=model, prompts=prompts, responses=responses, rewards=rewards, group_ids=groups,
                  token_advantages=[np.full(len(r), adv[i]) for i, r in enumerate(responses)], delta=delta, pad_id=0)
    assert shaped["all_wrong_var_ibpo"] > 0 and shaped["all_wrong_unnorm_var_ibpo"] == pytest.approx(
        shaped["all_wrong_var_ibpo"] * (0.15 + 1e-8) ** 2, rel=1e-6)  # float32 steps in the probe
