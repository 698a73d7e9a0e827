"""The GPU-time model wired into the trainers (``compute_budget.unit=modelled_gpu_seconds`` for every method):
the run's model shape read from its HF config, ``compute_budget.cost_model`` resolved with it, and the shared
trainer's end of step pricing the step's work (``compute/modelled_gpu_seconds/<phase>``) into the compute ledger,
whether the trainer priced its own work or not."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import ResourcePoolManager

from compute_accounting.flops import StepWork
from compute_accounting.gpu_time import GenerationWork, roofline_coefficients, serving_shape, step_seconds
from recipe.common.preflight.compute_budget import compute_budget_from, gpu_time_coefficients
from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.model import model_serving_shape
from recipe.common.step_io import generation_work
from recipe.common.trainer_base import MODELLED_SECONDS_METRIC, HookedRayPPOTrainer, StepCost


@pytest.fixture
def model_dir(tmp_path):
    from transformers import Qwen2Config

    Qwen2Config(vocab_size=53, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2).save_pretrained(tmp_path)
    return str(tmp_path)


def run_config(model_dir: str, **budget) -> OmegaConf:
    return OmegaConf.create({
        "actor_rollout_ref": {"model": {"path": model_dir}, "actor": {"ppo_epochs": 2}},
        "algorithm": {}, "trainer": {"test_freq": -1}, "compute_budget": budget})


def test_the_serving_shape_is_the_models_config(model_dir):
    # head_dim unset: hidden / heads = 8; per layer q,o 2·32·32, k,v 2·32·16, MLP 3·32·48; LM head 32·53
    shape = model_serving_shape(model_dir)
    assert shape == serving_shape(shape.name, 32, 2, 4, 2, 8, 48, 53)
    assert shape.matmul_params == 2 * (2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 48) + 32 * 53
    assert shape.kv_bytes_per_token == 2 * 2 * 2 * 8 * 2


def test_the_cost_model_is_resolved_with_the_runs_model(model_dir, tmp_path):
    config = run_config(model_dir, cost_model="roofline:H200")
    coeff = gpu_time_coefficients(config, compute_budget_from(config))
    assert coeff == roofline_coefficients("H200", model_serving_shape(model_dir))
    bad = run_config(model_dir, cost_model="roofline:A100")
    with pytest.raises(SetupError, match=r"compute_budget.cost_model='roofline:A100'.*unknown GPU"):
        gpu_time_coefficients(bad, compute_budget_from(bad))


def test_a_model_the_roofline_cannot_read_fails_only_under_its_unit(tmp_path, capsys):
    from transformers import GPT2Config

    GPT2Config(n_embd=32, n_layer=1, n_head=4, vocab_size=53).save_pretrained(tmp_path)  # no intermediate_size
    flops = run_config(str(tmp_path))
    assert gpu_time_coefficients(flops, compute_budget_from(flops)) is None
    assert "no modelled GPU seconds" in capsys.readouterr().out
    modelled = run_config(str(tmp_path), unit="modelled_gpu_seconds", limit=1.0)
    with pytest.raises(SetupError, match=r"intermediate_size"):
        gpu_time_coefficients(modelled, compute_budget_from(modelled))


def trainer(config) -> HookedRayPPOTrainer:
    """The shared trainer's budget state on a config, without Ray (``__init__`` would build the workers)."""
    t = HookedRayPPOTrainer.__new__(HookedRayPPOTrainer)
    t.config, t.use_reference_policy, t.global_steps, t.total_training_steps = config, False, 1, 10
    t.resource_pool_manager = ResourcePoolManager({"global_pool": [2]}, {})
    t._init_compute_budget()
    return t


def rows(prompts: list[int], responses: list[int], width: int = 8) -> DataProto:
    """Rows with ``prompts[i]`` valid prompt tokens and ``responses[i]`` response tokens (left-padded prompt,
    right-padded response, each ``width`` wide)."""
    attention = torch.zeros(len(prompts), 2 * width, dtype=torch.long)
    response = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        attention[i, width - p:width + r] = 1
        response[i, :r] = 1
    return DataProto.from_dict(tensors={"attention_mask": attention, "response_mask": response})


def test_a_trainer_that_prices_nothing_is_priced_as_verls_plain_step(model_dir):
    t = trainer(run_config(model_dir, unit="modelled_gpu_seconds", limit=1e9))
    batch = rows([3, 5, 1], [4, 2, 6])
    assert generation_work(batch) == GenerationWork([3, 5, 1], [4, 2, 6])
    metrics = {}
    t._step_metrics(batch, metrics, {"step": 2.0})
    expected = step_seconds(StepWork(main_gen=[7, 7, 7], train_main=[7, 7, 7], ppo_epochs=2),
                            GenerationWork([3, 5, 1], [4, 2, 6]), None, t.gpu_time_coefficients)
    assert metrics[MODELLED_SECONDS_METRIC] == pytest.approx(expected.total) and expected.total > 0
    assert metrics[MODELLED_SECONDS_METRIC + "/main_gen_decode"] == pytest.approx(expected.phases["main_gen_decode"])
    assert t.compute_ledger.modelled_gpu_seconds == pytest.approx(expected.total)  # roofline: one GPU
    assert t.compute_ledger.gpu_seconds == pytest.approx(4.0)  # 2 s x 2 GPUs
    assert t.compute_ledger.spent() == metrics["compute_budget/modelled_gpu_seconds"] == pytest.approx(expected.total)


def test_coefficients_for_two_gpus_log_gpu_seconds_the_ledger_adds_up(model_dir):
    """Coefficients measured on 2 GPUs (``gpus=2``: their seconds are wall seconds of both): every
    ``compute/modelled_gpu_seconds`` metric is GPU seconds, twice the wall seconds, and the ledger adds exactly the
    logged total (it logged the wall seconds under the GPU-seconds name and doubled only the ledger's)."""
    t = trainer(run_config(model_dir, unit="modelled_gpu_seconds", limit=1e9))
    one_gpu = t.gpu_time_coefficients
    t.gpu_time_coefficients = dataclasses.replace(one_gpu, gpus=2)
    batch = rows([3, 5, 1], [4, 2, 6])
    metrics = {}
    t._step_metrics(batch, metrics, {"step": 2.0})
    wall = step_seconds(StepWork(main_gen=[7, 7, 7], train_main=[7, 7, 7], ppo_epochs=2),
                        GenerationWork([3, 5, 1], [4, 2, 6]), None, one_gpu)
    assert metrics[MODELLED_SECONDS_METRIC] == pytest.approx(2 * wall.total) and wall.total > 0
    assert metrics[MODELLED_SECONDS_METRIC + "/weight_sync"] == pytest.approx(2 * one_gpu.weight_sync_s)
    assert t.compute_ledger.modelled_gpu_seconds == pytest.approx(metrics[MODELLED_SECONDS_METRIC])


def test_a_trainers_own_pricing_reaches_the_ledger(model_dir):
    """A method that prices its step (a correction generation, extra forwards) logs it before the end of the
    step; the ledger takes that total, not the plain step's."""
    t = trainer(run_config(model_dir, unit="modelled_gpu_seconds", limit=1e9))
    batch = rows([3, 5], [4, 2])
    work = StepWork(main_gen=[7, 7], train_main=[7, 7], forward_phases={"counterfactual_forward": [7, 7, 7]}, ppo_epochs=2)
    correction = GenerationWork([20, 30], [6, 1])
    metrics = {}
    t.step_cost = StepCost(None, t._model_gpu_seconds(work, generation_work(batch), correction, metrics))
    t._step_metrics(batch, metrics, {"step": 1.0})
    own = step_seconds(work, GenerationWork([3, 5], [4, 2]), correction, t.gpu_time_coefficients)
    plain = step_seconds(StepWork(main_gen=[7, 7], train_main=[7, 7], ppo_epochs=2), GenerationWork([3, 5], [4, 2]),
                         None, t.gpu_time_coefficients)
    assert own.phases["correction_gen_prefill"] > 0 and own.total > plain.total
    assert t.compute_ledger.modelled_gpu_seconds == pytest.approx(own.total)
    assert metrics[MODELLED_SECONDS_METRIC + "/counterfactual_forward"] == pytest.approx(
        own.phases["counterfactual_forward"])


def test_a_speculative_rollout_is_priced_by_the_replayed_proposer():
    """Under ngram speculation each request's decode passes and verified drafts are the proposer's replay on its
    realised output (``ibpo.lookup_decoding.simulate_lookup``), so a response that copies its prompt costs fewer
    passes than plain decode and the modelled decode seconds fall; a response with nothing to copy is unchanged."""
    from ibpo.lookup_decoding import NgramParams, simulate_lookup
    from recipe.ibpo.correction.batch import speculative_generation_work

    params = NgramParams(prompt_lookup_min=2, prompt_lookup_max=5, num_speculative_tokens=4)
    prompts = [[11, 12, 13, 14, 15, 16, 17, 18], [3, 4]]
    responses = [[11, 12, 13, 14, 15, 16, 17, 18], [21, 22, 23, 24, 25]]  # a copy; nothing to copy
    width = 8
    prompt_t = torch.zeros(2, width, dtype=torch.long)
    resp_t = torch.zeros(2, width, dtype=torch.long)
    attention = torch.zeros(2, 2 * width, dtype=torch.long)
    resp_mask = torch.zeros(2, width, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        prompt_t[i, width - len(p):] = torch.tensor(p)  # left-padded prompt
        resp_t[i, :len(r)] = torch.tensor(r)
        attention[i, width - len(p):width + len(r)] = 1
        resp_mask[i, :len(r)] = 1
    output = DataProto.from_dict(tensors={"prompts": prompt_t, "responses": resp_t, "attention_mask": attention,
                                          "response_mask": resp_mask})
    work = speculative_generation_work(output, params)
    stats = [simulate_lookup(p, r, params) for p, r in zip(prompts, responses)]
    assert work == GenerationWork([8, 2], [8, 5], [s.decode_steps for s in stats], [s.drafted_tokens for s in stats])
    assert work.decode_steps[0] < 7 and work.drafted_tokens[0] > 0  # the copy: fewer passes than 8 - 1
    assert work.decode_steps[1] == 4 and work.drafted_tokens[1] == 0  # no n-gram recurs: plain decode
    coeff = roofline_coefficients("H100-SXM", serving_shape("tiny", 32, 2, 4, 2, 8, 48, 53))
    from compute_accounting.gpu_time import generation_seconds
    assert generation_seconds(work, coeff)["decode"] < generation_seconds(generation_work(output), coeff)["decode"]


def test_the_runs_own_batch_cap_sets_the_decode_waves(model_dir):
    # before: the coefficients' 256 priced every run, so a run with max_num_seqs=1024 paid 4 waves for 1024 requests
    config = run_config(model_dir, cost_model="roofline:H200")
    config.actor_rollout_ref.rollout = {"max_num_seqs": 1024}
    coeff = gpu_time_coefficients(config, compute_budget_from(config))
    assert coeff.max_num_seqs == 1024
    assert coeff.sources["max_num_seqs"] == "the run's actor_rollout_ref.rollout.max_num_seqs"
    assert coeff == dataclasses.replace(roofline_coefficients("H200", model_serving_shape(model_dir)),
                                        max_num_seqs=1024, sources=coeff.sources)
    for bad in (0, 2.5, True):
        config.actor_rollout_ref.rollout.max_num_seqs = bad
        with pytest.raises(SetupError, match=r"actor_rollout_ref.rollout.max_num_seqs=.* must be an integer >= 1"):
            gpu_time_coefficients(config, compute_budget_from(config))


def test_the_ledger_takes_the_typed_step_cost_not_a_logged_metric(model_dir):
    """The step's cost reaches the ledger as the hook's :class:`StepCost` (FLOPs and modelled seconds), whatever
    the metrics dict holds under the logged names; it is used once (the next step without one is priced plain)."""
    t = trainer(run_config(model_dir, unit="modelled_gpu_seconds", limit=1e9))
    batch = rows([3, 5], [4, 2])
    work = StepWork(main_gen=[7, 7], train_main=[7, 7], ppo_epochs=2)
    seconds = step_seconds(work, GenerationWork([3, 5], [4, 2]), GenerationWork([9], [9]), t.gpu_time_coefficients)
    t.step_cost = StepCost(flops=123.0, modelled=seconds)
    metrics = {"ibpo/compute/step_flops": 7.0, MODELLED_SECONDS_METRIC: 1e6}  # logged names: not what is counted
    t._step_metrics(batch, metrics, {"step": 1.0})
    assert t.compute_ledger.flops == 123.0 and t.compute_ledger.modelled_gpu_seconds == pytest.approx(seconds.total)
    assert t.step_cost is None
    t._step_metrics(batch, {}, {"step": 1.0})
    plain = step_seconds(work, GenerationWork([3, 5], [4, 2]), None, t.gpu_time_coefficients)
    assert t.compute_ledger.modelled_gpu_seconds == pytest.approx(seconds.total + plain.total)
    assert t.compute_ledger.flops == 123.0
