"""The measured GPU-time coefficients shipped with the package (``compute_accounting/measured/``): each one
recomputes from the raw output of ``lab/scripts/bench_gpu.py`` committed under ``docs/assets/``, ``measured:<GPU>``
resolves them only at the shape they were measured at, and the toy loop and the trainers' pre-flight take them
(``--cost-model``, ``compute_budget.cost_model``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from compute_accounting.budget import ComputeBudgetConfig, ComputeBudgetError
from compute_accounting.gpu_time import (
    MODEL_SHAPES,
    coefficients_from_json,
    fit_decode_coefficients,
    measured_files,
    resolve_coefficients,
    serving_shape,
    shipped_coefficients,
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab" / "scripts"))
RAW = ROOT / "docs" / "assets" / "bench_gpu_h200_coefficients.json"
COPY_AND_STEP = ROOT / "docs" / "assets" / "bench_gpu_h200_copy_and_step.json"
TERMS = ("decode_step_s", "decode_s_per_token", "decode_s_per_context_token", "prefill_tokens_per_s",
         "train_forward_tokens_per_s", "weight_sync_s")


def test_the_shipped_h200_coefficients_are_the_raw_runs_and_say_measured():
    assert ("H200", "Qwen3-1.7B") in measured_files()
    shipped = shipped_coefficients("H200", "Qwen3-1.7B")
    raw = json.loads(RAW.read_text())
    assert raw["meta"]["gpu"] == "NVIDIA H200"
    for name in TERMS:
        assert getattr(shipped, name) == raw["coefficients"][name]
        # the record names the bench by the path it had when it ran (scripts/, before lab/ existed)
        assert shipped.sources[name].startswith("measured: scripts/bench_gpu.py"), name
    assert "lower bound" in shipped.sources["weight_sync_s"]  # in-process load_weights, not verl's sync


def test_the_shipped_decode_and_prefill_coefficients_recompute_from_the_raw_grid():
    from bench_gpu import DecodeCell, decode_samples, prefill_tokens_per_s

    grid = json.loads(RAW.read_text())["decode_grid"]
    cells = [DecodeCell(r["batch"], r["context"], r["new_tokens"]) for r in grid]
    samples = decode_samples(cells, [r["full_s"] for r in grid], [r["prefill_s"] for r in grid])
    assert np.allclose(samples["pass_s"], [r["pass_s"] for r in grid], rtol=1e-12, atol=0)
    fit = fit_decode_coefficients(samples["batch"], samples["context_tokens"], samples["pass_s"])
    shipped = shipped_coefficients("H200", "Qwen3-1.7B")
    for name, value in fit.items():
        assert value == pytest.approx(getattr(shipped, name), rel=1e-9)
    assert prefill_tokens_per_s(cells, [r["prefill_s"] for r in grid]) == pytest.approx(
        shipped.prefill_tokens_per_s, rel=1e-12)


def test_the_held_out_generations_priced_by_the_shipped_coefficients():
    """The copy part's two generations (16 requests x 512 tokens, prompts of 256 and 1,024 tokens: a batch,
    prompt lengths and output lengths the fit never saw) against the cost model's seconds for the same work,
    recomputed here from the shipped coefficients. docs/gpu_time_model.md quotes the two ratios."""
    from bench_gpu import spec_row

    from recipe.ibpo.correction.spec_counters import SpecCounters

    rows = json.loads(COPY_AND_STEP.read_text())["copy_part"]["speculation"]
    shipped = shipped_coefficients("H200", "Qwen3-1.7B")
    ratios = {}
    for row in rows:
        prompt = 256 if row["workload"] == "ordinary" else 256 + 512 + 256
        counts = SpecCounters(drafts=0.0, draft_tokens=0.0, accepted_tokens=0.0,
                              generated_tokens=row["generated_tokens"])
        again = spec_row(row["workload"], 0, row["seconds"], row["requests"], [prompt] * row["requests"], counts,
                         row["agreement"], shipped)
        assert again["modelled_seconds"] == pytest.approx(row["modelled_seconds"], rel=1e-9)
        ratios[row["workload"]] = row["seconds"] / row["modelled_seconds"]
    assert ratios == pytest.approx({"ordinary": 0.980, "copy": 0.959}, abs=5e-4)


def test_measured_resolves_only_at_the_measured_shape():
    shipped = shipped_coefficients("H200", "Qwen3-1.7B")
    assert resolve_coefficients("measured:H200", "Qwen3-1.7B") == shipped
    same = serving_shape("a local Qwen3-1.7B", 2048, 28, 16, 8, 128, 6144, 151936)
    assert resolve_coefficients("measured:H200", same) == shipped
    with pytest.raises(ValueError, match=r"no measured coefficients for H200 at Qwen3-8B's shape; measured: "
                                         r"\['H200 Qwen3-1.7B'\]"):
        resolve_coefficients("measured:H200", "Qwen3-8B")
    with pytest.raises(ValueError, match="no measured coefficients for H100-SXM"):
        resolve_coefficients("measured:H100-SXM", "Qwen3-1.7B")
    with pytest.raises(ValueError, match="needs the run's model shape"):
        resolve_coefficients("measured:H200", None)


def test_a_bench_json_measured_at_another_shape_is_refused(tmp_path):
    data = json.loads(RAW.read_text())
    data["meta"]["model_shape"] = "Qwen3-1.7B"
    path = tmp_path / "bench_gpu.json"
    path.write_text(json.dumps(data))
    assert coefficients_from_json(path, MODEL_SHAPES["Qwen3-1.7B"]).decode_step_s == data["coefficients"]["decode_step_s"]
    with pytest.raises(ValueError, match=r"measured at Qwen3-1.7B's shape, not this run's model \(Qwen3-32B\)"):
        resolve_coefficients(str(path), "Qwen3-32B")


def test_the_budget_block_accepts_measured_and_the_preflight_checks_the_models_shape(tmp_path):
    from transformers import Qwen2Config

    from recipe.common.preflight.compute_budget import compute_budget_from, gpu_time_coefficients
    from recipe.common.preflight.errors import SetupError

    assert ComputeBudgetConfig(cost_model="measured:H200").cost_model == "measured:H200"
    with pytest.raises(ComputeBudgetError, match="measured:<GPU>"):
        ComputeBudgetConfig(cost_model="measured:")
    Qwen2Config(vocab_size=53, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2).save_pretrained(tmp_path)
    config = OmegaConf.create({"actor_rollout_ref": {"model": {"path": str(tmp_path)}, "actor": {"ppo_epochs": 1}},
                               "algorithm": {}, "trainer": {"test_freq": -1},
                               "compute_budget": {"cost_model": "measured:H200"}})
    with pytest.raises(SetupError, match=r"compute_budget.cost_model='measured:H200': no measured coefficients for "
                                         r"H200 at .*'s shape"):
        gpu_time_coefficients(config, compute_budget_from(config))


def test_the_toy_loop_takes_a_cost_model_and_refuses_a_bad_one_before_any_run(tmp_path, capsys):
    from lab.analysis import toy_loop

    args = ["--model", "lab/toy_tasks/warm_starts/addition_seed0", "--out", str(tmp_path / "out"), "--seeds", "0"]
    with pytest.raises(SystemExit):
        toy_loop.main([*args, "--cost-model", "measured:A100"])
    assert "--cost-model: no measured coefficients for A100" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    parsed = toy_loop.schedule_from(type("Args", (), {"budget_unit": "modelled_gpu_seconds", "correction_cost_share": 1.0,
                                                      "warmup_unit": "budget", "cost_model": "measured:H200"})())
    assert parsed.coefficients == shipped_coefficients("H200", "Qwen3-1.7B")
    assert toy_loop.RUN_DEFINING_OPTIONS["cost_model"] == toy_loop.DEFAULT_COST_MODEL == "roofline:H100-SXM"


def test_the_measured_files_ship_with_the_package():
    setup = (ROOT / "setup.py").read_text()
    assert '"compute_accounting": ["measured/*.json"]' in setup
    for (gpu, model), path in measured_files().items():
        data = json.loads(path.read_text())
        assert data["gpu"] == gpu and data["model_shape"] == model and model in MODEL_SHAPES
        assert (ROOT / data["raw"]).is_file()


def test_a_runs_qwen3_1p7b_config_resolves_to_the_measurement(tmp_path):
    """The pre-flight reads the run's own config (meta device, no weights): Qwen3-1.7B's published config is the
    measured shape, so ``measured:H200`` prices it with the shipped coefficients."""
    from bench_one_gpu_shape import qwen3_1p7b_config

    from recipe.common.preflight.compute_budget import compute_budget_from, gpu_time_coefficients

    qwen3_1p7b_config().save_pretrained(tmp_path)
    config = OmegaConf.create({"actor_rollout_ref": {"model": {"path": str(tmp_path)}, "actor": {"ppo_epochs": 1}},
                               "algorithm": {}, "trainer": {"test_freq": -1},
                               "compute_budget": {"cost_model": "measured:H200", "unit": "modelled_gpu_seconds",
                                                  "limit": 100.0}})
    assert gpu_time_coefficients(config, compute_budget_from(config)) == shipped_coefficients("H200", "Qwen3-1.7B")


def test_the_shape_tolerance_admits_a_recount_and_refuses_another_model():
    """``same_shape`` allows 0.5% in the matrix parameters and the weight bytes (a config may count its LM head or
    norms a little differently) and nothing in the KV bytes: a model 1% bigger, with other KV heads, or reading
    more weights per pass than it computes with (experts), is another shape."""
    from compute_accounting.gpu_time import ServingShape, same_shape

    base = MODEL_SHAPES["Qwen3-1.7B"]
    near = ServingShape("recount", int(base.matmul_params * 1.004), base.weight_bytes, base.kv_bytes_per_token)
    far = ServingShape("bigger", int(base.matmul_params * 1.01), base.weight_bytes, base.kv_bytes_per_token)
    other_kv = ServingShape("kv", base.matmul_params, base.weight_bytes, base.kv_bytes_per_token * 2)
    assert same_shape("Qwen3-1.7B", near)
    assert not same_shape("Qwen3-1.7B", far) and not same_shape("Qwen3-1.7B", other_kv)
    assert not same_shape("no such shape", base)
    # a mixture of experts computing with the dense model's parameters but reading 8x its weights per decode pass
    experts = ServingShape("experts", base.matmul_params, base.weight_bytes * 8, base.kv_bytes_per_token)
    near_bytes = ServingShape("bytes recount", base.matmul_params, base.weight_bytes * 1.004, base.kv_bytes_per_token)
    assert not same_shape("Qwen3-1.7B", experts) and same_shape("Qwen3-1.7B", near_bytes)
    with pytest.raises(ValueError, match="no measured coefficients for H200 at experts's shape"):
        resolve_coefficients("measured:H200", experts)
    with pytest.raises(ValueError, match="no measured coefficients for H200 at bigger's shape"):
        resolve_coefficients("measured:H200", far)
