"""ibpo.grad_probe on the tiny local Qwen2 model against a slow reference: one unpadded forward and a full
backward per sample, then the gradient read at the chosen weight entries."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from ibpo.grad_probe import (
    eligible_linear_modules,
    probe_gradient_variance,
    projected_per_sample_gradients,
    select_parameter_subset,
    loss_token_coefficients,
)
from ibpo.diagnostics import total_variance

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from verl_cpu.tiny_assets import build_tiny_assets

    paths = build_tiny_assets(tmp_path_factory.mktemp("tiny"))
    model = AutoModelForCausalLM.from_pretrained(paths["model"], dtype=torch.float64, attn_implementation="sdpa")
    return model.eval()


def make_batch(vocab: int, seed: int = 0):
    """Left-padded prompts and right-padded responses of different lengths, verl layout."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens, resp_lens = [3, 6, 4, 5, 2, 6], [5, 2, 7, 4, 7, 1]
    P, R = max(prompt_lens), max(resp_lens)
    B = len(prompt_lens)
    input_ids = torch.zeros(B, P + R, dtype=torch.long)
    attention_mask = torch.zeros(B, P + R, dtype=torch.long)
    response_mask = torch.zeros(B, R, dtype=torch.long)
    rows = []
    for b, (pl, rl) in enumerate(zip(prompt_lens, resp_lens)):
        prompt = torch.randint(5, vocab, (pl,), generator=g)
        resp = torch.randint(5, vocab, (rl,), generator=g)
        input_ids[b, P - pl:P] = prompt
        input_ids[b, P:P + rl] = resp
        attention_mask[b, P - pl:P + rl] = 1
        response_mask[b, :rl] = 1
        rows.append((prompt, resp))
    return input_ids, attention_mask, response_mask, rows


def reference_gradients(model, rows, coeffs, subset) -> torch.Tensor:
    """Per sample: unpadded forward, backward of Σ_t coeff_t log π(y_t) into every parameter, then project."""
    modules = dict(model.named_modules())
    out = torch.zeros(len(rows), subset.num_coordinates, dtype=torch.float64)
    for b, (prompt, resp) in enumerate(rows):
        model.zero_grad(set_to_none=True)
        ids = torch.cat([prompt, resp])[None]
        logits = model(input_ids=ids).logits[0]
        logp = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1).gather(-1, resp[:, None]).squeeze(-1)
        (coeffs[b, :len(resp)] * logp).sum().backward()
        col = 0
        for name, o, i in zip(subset.module_names, subset.out_index, subset.in_index):
            grad = modules[name].weight.grad
            out[b, col:col + o.numel()] = grad[o, i]
            col += o.numel()
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("aggregation", ["token_mean", "sum"])
def test_projected_gradients_match_per_sample_backward(tiny_model, aggregation):
    input_ids, attention_mask, response_mask, rows = make_batch(tiny_model.config.vocab_size)
    subset = select_parameter_subset(tiny_model, 300, seed=1)
    seq_adv = torch.tensor([1.2, -0.7, 0.3, -1.5, 0.9, -0.2], dtype=torch.float64)
    token_adv = seq_adv[:, None] * torch.tensor(np.random.default_rng(0).integers(0, 2, size=response_mask.shape))
    fast_seq, fast_tok = projected_per_sample_gradients(
        tiny_model, input_ids, attention_mask, response_mask, [seq_adv, token_adv], subset,
        aggregation=aggregation, micro_batch_size=4)
    for adv, fast in ((seq_adv, fast_seq), (token_adv, fast_tok)):
        slow = reference_gradients(tiny_model, rows, loss_token_coefficients(adv, response_mask, aggregation), subset)
        assert slow.abs().max() > 1e-4  # the reference is not trivially zero
        torch.testing.assert_close(fast, slow, rtol=1e-6, atol=1e-9)


def test_probe_variances_and_ratio(tiny_model):
    input_ids, attention_mask, response_mask, _ = make_batch(tiny_model.config.vocab_size, seed=3)
    subset = select_parameter_subset(tiny_model, 200, seed=2)
    base = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    result = probe_gradient_variance(tiny_model, input_ids, attention_mask, response_mask, base, 0.5 * base, subset)
    # scaling every advantage by 0.5 scales every per-sample gradient by 0.5 -> variance by 0.25
    assert result.ratio == pytest.approx(0.25, rel=1e-9)
    assert result.var_baseline > 0 and result.num_samples == 6 and result.num_coordinates == 200
    g, = projected_per_sample_gradients(tiny_model, input_ids, attention_mask, response_mask, [base], subset)
    manual = sum(np.var(g[:, k].numpy(), ddof=1) for k in range(g.shape[1]))
    assert result.var_baseline == pytest.approx(manual, rel=1e-9)
    metrics = result.as_metrics()
    assert metrics["ibpo/grad_probe/ratio"] == pytest.approx(0.25, rel=1e-9)


def test_subset_is_fixed_distinct_and_skips_tied_weights(tiny_model):
    a = select_parameter_subset(tiny_model, 500, seed=7)
    b = select_parameter_subset(tiny_model, 500, seed=7)
    c = select_parameter_subset(tiny_model, 500, seed=8)
    assert a.module_names == b.module_names and all(torch.equal(x, y) for x, y in zip(a.out_index, b.out_index))
    assert a.num_coordinates == 500
    pairs = {(n, int(o), int(i)) for n, os_, is_ in zip(a.module_names, a.out_index, a.in_index)
             for o, i in zip(os_, is_)}
    assert len(pairs) == 500  # distinct entries
    assert a.module_names != c.module_names or any(not torch.equal(x, y) for x, y in zip(a.out_index, c.out_index))
    names = [n for n, _ in eligible_linear_modules(tiny_model)]
    assert "lm_head" not in names  # tied to the input embedding in the tiny model
    assert any("mlp" in n for n in names) and any("self_attn" in n for n in names)
    with pytest.raises(ValueError, match="num_coordinates"):
        select_parameter_subset(tiny_model, 10**9)


def test_total_variance_and_bad_shapes():
    g = torch.tensor([[1.0, 0.0], [3.0, 2.0]], dtype=torch.float64)
    assert total_variance(g) == pytest.approx(2.0 + 2.0)
    assert total_variance(g[:1]) == 0.0
    with pytest.raises(ValueError, match="aggregation"):
        loss_token_coefficients(torch.ones(2), torch.ones(2, 3), "max")
    with pytest.raises(ValueError, match="advantages shape"):
        loss_token_coefficients(torch.ones(2, 2), torch.ones(2, 3), "sum")
