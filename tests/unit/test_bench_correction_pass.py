"""CPU-side parts of scripts/bench_correction_pass.py (the vLLM run itself needs a GPU: see its --smoke)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis.correction_workload import LAYOUTS, build_workload, chat_prompt_ids, correction_requests
from verl_cpu.tiny_assets import build_tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _load("bench_correction_pass")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def test_skips_with_a_reason_without_cuda_or_vllm(capsys, monkeypatch):
    monkeypatch.setattr(bench, "skip_reason", lambda: "no CUDA device (test)")
    assert bench.main(["--smoke"]) == 0
    assert "bench_correction_pass: skipped: no CUDA device (test)" in capsys.readouterr().out
    reason = bench.skip_reason()  # the real check on this machine
    import torch

    if not torch.cuda.is_available():
        assert reason is not None and "CUDA" in reason


def test_smoke_flag_shrinks_the_run():
    args = bench.parse_args(["--smoke"])
    assert (args.lengths, args.prompts, args.group_size, args.correct) == ([64], 2, 4, 1)
    assert bench.parse_args([]).lengths == [2048] and bench.parse_args([]).group_size == 8


def test_phases_are_the_projects_correction_prompts(tokenizer):
    layouts = ["target_first", "reference_first+per_group"]
    phases = bench.build_phases(tokenizer, 2, 4, 1, 64, layouts, seed=3)
    assert [p.name for p in phases] == ["main generation, 8 requests",
                                        "corrections, target_first, no prefix reuse",
                                        "corrections, target_first, prefix cache on",
                                        "corrections, reference_first+per_group, prefix cache on"]
    assert [p.unique_salt for p in phases] == [False, True, False, False]
    workload = build_workload(tokenizer, 2, 4, 1, 64, seed=3)
    for phase, layout in ((phases[2], "target_first"), (phases[3], "reference_first+per_group")):
        requests = correction_requests(tokenizer, workload, LAYOUTS[layout], max_candidate_tokens=64, seed=3)
        assert phase.prompts == [chat_prompt_ids(tokenizer, r.messages) for r in requests]
    assert phases[1].prompts == phases[2].prompts and len(phases[1].prompts) == 2 * 3


def test_model_dir_is_qwen2_1_5b_shaped(tmp_path):
    out = bench.write_model_dir(tmp_path / "m", 40000)
    config = json.loads((out / "config.json").read_text())
    assert config["hidden_size"] == 1536 and config["num_hidden_layers"] == 28
    assert config["max_position_embeddings"] == 40000 and (out / "tokenizer.json").exists()


class FakeLLM:
    """Records what the benchmark asks of vLLM's ``LLM``; every request reports 10 cached tokens."""

    def __init__(self):
        self.calls = []

    def reset_prefix_cache(self):
        self.calls.append("reset")

    def generate(self, prompts, params, use_tqdm=False):
        self.calls.append((prompts, params))
        n = params["max_tokens"]
        return [SimpleNamespace(num_cached_tokens=10, outputs=[SimpleNamespace(token_ids=[0] * n)]) for _ in prompts]


def test_run_phase_resets_the_cache_forces_lengths_and_reads_cached_tokens():
    llm = FakeLLM()
    phase = bench.Phase("x", [[1] * 40, [1] * 60], unique_salt=True)
    row = bench.run_phase(llm, phase, 32, seed=0, sampling_params_cls=lambda **kw: kw)
    assert llm.calls[0] == "reset" and llm.calls[2] == "reset"  # a fresh cache before each timed run
    prefill, full = llm.calls[1][1], llm.calls[3][1]
    assert prefill["max_tokens"] == 1
    assert full["min_tokens"] == full["max_tokens"] == 32 and full["ignore_eos"]
    salts = [p["cache_salt"] for p in llm.calls[3][0]]
    assert len(set(salts)) == 2  # no request can reuse another's prefix
    assert row["cached_frac"] == pytest.approx(20 / 100) and row["generated_tokens"] == 64
    table = bench.format_table([row, {**row, "phase": "y", "time_s": 2 * row["time_s"] + 1e-9}])
    assert "| x | 2 | 50 | 20.0% |" in table and table.count("\n") == 3


def test_cpu_proxy_script_table():
    proxy = _load("bench_correction_prompts")
    rows = proxy.run(2, 8, 2, 96, seed=0, layouts=["target_first", "reference_first+per_group"])
    assert [r["requests"] for r in rows] == [16, 12, 12]
    assert rows[2]["distinct_refs"] == 1.0 and rows[1]["distinct_refs"] >= 1.0
    assert rows[2]["shared_token_frac"] > rows[1]["shared_token_frac"]
    assert rows[2]["shared_block_frac"] <= rows[2]["shared_token_frac"]
    table = proxy.format_table(rows)
    assert table.splitlines()[3].startswith("| corrections, target_first | 12 |")
