"""CPU-side parts of lab/scripts/bench_one_gpu_shape.py (the run itself needs a GPU)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("bench_one_gpu_shape", ROOT / "lab" / "scripts" / "bench_one_gpu_shape.py")
shape = importlib.util.module_from_spec(spec)
sys.modules["bench_one_gpu_shape"] = shape
spec.loader.exec_module(shape)


def test_the_shape_is_qwen3_1p7b():
    c = shape.QWEN3_1P7B_SHAPE
    h, i, layers, heads, kv, d = (c[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                 "num_attention_heads", "num_key_value_heads", "head_dim"))
    # tied embeddings + 28 x (q, k, v, o, gate/up/down, two norms, q/k norms) + final norm: Qwen3-1.7B's 1.72B
    per_layer = h * heads * d + 2 * h * kv * d + heads * d * h + 3 * h * i + 2 * h + 2 * d
    total = c["vocab_size"] * h + layers * per_layer + h
    assert 1.70e9 < total < 1.75e9 and c["tie_word_embeddings"] and c["max_position_embeddings"] == 40960


def test_launch_command_runs_the_launch_script_unchanged(tmp_path):
    cmd, env = shape.launch_command(tmp_path / "m", {"train": "/d/t.parquet", "val": "/d/v.parquet"}, tmp_path, 3,
                                    ["ibpo.correction_max_tokens_factor=1.5"])
    assert cmd[:2] == ["bash", str(ROOT / "recipe" / "ibpo" / "run_ibpo_qwen3_1p7b_1gpu.sh")]
    assert "actor_rollout_ref.rollout.ignore_eos=True" in cmd and cmd[-1] == "ibpo.correction_max_tokens_factor=1.5"
    assert env["TOTAL_STEPS"] == "3" and env["TRAIN_FILES"] == "['/d/t.parquet']"
    assert (env["MAX_PROMPT"], env["MAX_RESPONSE"]) == ("1024", "8192")  # the script's own lengths, candidates whole
    assert f"actor_rollout_ref.rollout.prompt_length={shape.correction_prompt_length(1024, 8192)}" in cmd
    assert env["VERL_FILE_LOGGER_PATH"].endswith("metrics.jsonl")


def test_table_shares():
    metrics = {1: {"timing_s/step": 100.0, "ibpo/time/main_gen_s": 20.0, "ibpo/time/correction_gen_s": 30.0,
                   "ibpo/time/update_actor_s": 40.0, "ibpo/correction/lookup_decode_step_reduction": 0.5}}
    rows = shape.step_rows(metrics)
    assert rows[0]["correction_vs_main"] == pytest.approx(1.5) and rows[0]["correction_share_step"] == pytest.approx(0.3)
    assert rows[0]["correction_share_gen"] == pytest.approx(0.6)
    table = shape.format_table(rows, 40960)
    assert "| 1 | 100.0 | 20.0 | 30.0 | 0.0 | 0.0 | 0.0 | 40.0 | 0.0 | 1.50 | 30% | 50.0% |" in table
    assert "40.0 GiB" in table
    assert rows[0]["spec_accepted_per_decode_step"] is None  # no speculation: nothing claimed
    spec = shape.step_rows({1: {"rollout/spec_accepted_per_decode_step": 0.7, "rollout/spec_drafted_step_share": 0.4,
                                "rollout/spec_stats_reported": 1.0}})[0]
    assert (spec["spec_accepted_per_decode_step"], spec["spec_drafted_step_share"]) == (0.7, 0.4)


def test_skips_without_cuda(capsys, monkeypatch):
    monkeypatch.setattr(shape, "skip_reason", lambda: "no CUDA device (test)")
    assert shape.main(["--out", "x"]) == 0
    assert "skipped: no CUDA device (test)" in capsys.readouterr().out


def test_prints_how_many_corrections_ran():
    rows = shape.step_rows({1: {"ibpo/num_corrections": 256.0, "ibpo/num_wrong": 256.0},
                            2: {"ibpo/num_wrong": 8.0}})
    table = shape.format_table(rows, 1024)
    assert "step 1: 256 corrections ran for 256 wrong responses" in table
    assert "step 2: corrections not reported" in table  # a missing count is said, never printed as 0


def test_command_passes_the_papers_rule(tmp_path):
    cmd, _ = shape.launch_command(tmp_path / "m", {"train": "t", "val": "v"}, tmp_path, 1, [])
    assert "ibpo.correct_groups=all" in cmd
