"""ibpo.grad_probe on the tiny local Qwen2 model against a slow reference: one unpadded forward and a full
backward per sample, then the gradient read at the chosen weight entries."""

from __future__ import annotations

import contextlib
import inspect
import os
from types import SimpleNamespace

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
from ibpo.diagnostics import total_variance, unnormalised_advantages
from ibpo.options import IBPOConfig

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


# The verl trainer's probe (RayIBPOTrainer.probe_gradient_variance through the worker method
# IBPOActorRolloutRefWorker.ibpo_grad_probe): both of its ratios, the trained pair and Theorem A.2's
# un-normalised pair, against the per-sample backward passes above, on one batch with a right answer, a shaped
# wrong one and an all-wrong group.


class LocalWorkerGroup:
    """One rank: calls the real worker method on a worker whose engine is the tiny model."""

    world_size = 1

    def __init__(self, model):
        from recipe.ibpo.workers import IBPOActorRolloutRefWorker

        engine = SimpleNamespace(module=model, eval_mode=contextlib.nullcontext)
        self.worker = SimpleNamespace(actor=SimpleNamespace(engine=engine), _ibpo_probe_subset=None)
        self.method = inspect.unwrap(IBPOActorRolloutRefWorker.ibpo_grad_probe)  # without verl's dispatch

    def ibpo_grad_probe(self, data):
        return self.method(self.worker, data)


def test_trainer_probe_ratios_match_per_sample_backward(tiny_model):
    from verl import DataProto

    from recipe.ibpo.correction import batch as corr
    from recipe.ibpo.step_record import IBPOStep
    from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer

    model = tiny_model
    input_ids, attention_mask, response_mask, rows = make_batch(model.config.vocab_size, seed=2)
    uids = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    delta = torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0, 0.0], dtype=torch.float64)
    lam = 0.6
    # the trained advantages: any (B,) vector of the step, here the paper's reward shaping normalised by hand
    shaped = (rewards + lam * delta).numpy()
    trained = np.zeros(6)
    for g in ("a", "b"):
        idx = np.flatnonzero(uids == g)
        trained[idx] = (shaped[idx] - shaped[idx].mean()) / (shaped[idx].std() + 1e-8)
    scores = torch.zeros(response_mask.shape, dtype=torch.float32)
    lengths = response_mask.sum(-1)
    scores[torch.arange(6), lengths - 1] = rewards.float()
    batch = DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": attention_mask,
                 "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0), "response_mask": response_mask,
                 "responses": input_ids[:, -response_mask.shape[1]:], "token_level_scores": scores,
                 "advantages": torch.as_tensor(trained, dtype=torch.float32)[:, None] * response_mask.float(),
                 corr.DELTA_KEY: delta.float(), corr.IS_CORRECTION_KEY: torch.zeros(6, dtype=torch.long),
                 corr.IS_PADDING_KEY: torch.zeros(6, dtype=torch.long)},
        non_tensors={"uid": uids})
    trainer = object.__new__(RayIBPOTrainer)
    trainer.ibpo = IBPOConfig(grad_probe_coordinates=64, grad_probe_micro_batch_size=0)
    trainer.actor_rollout_wg = LocalWorkerGroup(model)
    trainer._step = IBPOStep(lam=lam, rows=corr.IBPORows(delta.float(), torch.ones_like(response_mask, dtype=torch.float32),
                                                        torch.zeros(6, dtype=torch.bool), torch.zeros(6, dtype=torch.bool)))
    metrics: dict = {}
    trainer.probe_gradient_variance(batch, metrics)

    subset = select_parameter_subset(model, 64, seed=0)
    gspo = np.zeros(6)
    for g in ("a", "b"):  # group "b" is all wrong: GSPO gives it 0
        idx = np.flatnonzero(uids == g)
        r = rewards.numpy()[idx]
        gspo[idx] = (r - r.mean()) / (r.std() + 1e-8) if r.std() > 0 else 0.0

    def variance(sequence_adv: np.ndarray) -> float:
        coeffs = loss_token_coefficients(torch.as_tensor(sequence_adv), response_mask, "token_mean")
        return total_variance(reference_gradients(model, rows, coeffs, subset))

    theorem_gspo = variance(unnormalised_advantages(rewards.numpy(), list(uids)))
    theorem_ibpo = variance(unnormalised_advantages(shaped, list(uids)))
    assert metrics["ibpo/grad_probe/num_samples"] == 6.0
    assert metrics["ibpo/grad_probe/ratio"] == pytest.approx(variance(trained) / variance(gspo), rel=1e-4)
    assert metrics["ibpo/grad_probe/theorem_var_gspo"] == pytest.approx(theorem_gspo, rel=1e-4)
    assert metrics["ibpo/grad_probe/theorem_ratio"] == pytest.approx(theorem_ibpo / theorem_gspo, rel=1e-4)
    # the two pairs measure different things on this batch (normalisation rescales each group)
    assert abs(metrics["ibpo/grad_probe/theorem_ratio"] - metrics["ibpo/grad_probe/ratio"]) > 1e-2


def test_probe_input_refuses_an_unknown_advantage_name():
    from recipe.ibpo.workers import probe_input

    batch = SimpleNamespace(batch={k: torch.zeros(2, 3) for k in ("input_ids", "attention_mask", "position_ids",
                                                                   "response_mask")})
    batch.__len__ = lambda: 2
    with pytest.raises(ValueError, match=r"unknown advantage name\(s\) \['theorem'\]"):
        probe_input(batch, 8, 0, 0, baseline=torch.zeros(2, 3), theorem=torch.zeros(2, 3))


def test_trainer_probe_leaves_a_ratio_over_zero_variance_out(tiny_model):
    """Every group all wrong: GSPO's advantages are all 0, both GSPO variances are 0 and a ratio over them is left
    out of the step's metrics (docs/metrics.md), not logged as NaN; the variances themselves are logged."""
    from verl import DataProto

    from recipe.ibpo.correction import batch as corr
    from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer
    from recipe.ibpo.step_record import IBPOStep

    input_ids, attention_mask, response_mask, _ = make_batch(tiny_model.config.vocab_size, seed=2)
    uids = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    delta = torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0, 0.0])
    trained = torch.tensor([-0.7, 1.4, -0.7, 1.4, -0.7, -0.7])  # the shaped rows' advantages
    batch = DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": attention_mask,
                 "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0), "response_mask": response_mask,
                 "responses": input_ids[:, -response_mask.shape[1]:],
                 "token_level_scores": torch.zeros(response_mask.shape), "advantages": trained[:, None] * response_mask,
                 corr.DELTA_KEY: delta, corr.IS_CORRECTION_KEY: torch.zeros(6, dtype=torch.long),
                 corr.IS_PADDING_KEY: torch.zeros(6, dtype=torch.long)},
        non_tensors={"uid": uids})
    trainer = object.__new__(RayIBPOTrainer)
    trainer.ibpo = IBPOConfig(grad_probe_coordinates=64, grad_probe_micro_batch_size=0)
    trainer.actor_rollout_wg = LocalWorkerGroup(tiny_model)
    no_rows = torch.zeros(6, dtype=torch.bool)
    trainer._step = IBPOStep(lam=0.6, rows=corr.IBPORows(delta, torch.ones_like(response_mask, dtype=torch.float32),
                                                         no_rows, no_rows))
    metrics: dict = {}
    trainer.probe_gradient_variance(batch, metrics)
    assert metrics["ibpo/grad_probe/var_gspo"] == 0.0 and metrics["ibpo/grad_probe/theorem_var_gspo"] == 0.0
    assert metrics["ibpo/grad_probe/var_ibpo"] > 0 and metrics["ibpo/grad_probe/theorem_var_ibpo"] > 0
    assert "ibpo/grad_probe/ratio" not in metrics and "ibpo/grad_probe/theorem_ratio" not in metrics
    assert metrics["ibpo/grad_probe/num_samples"] == 6.0
