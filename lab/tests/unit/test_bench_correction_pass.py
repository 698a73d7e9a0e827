"""CPU-side parts of lab/scripts/bench_correction_pass.py (the vLLM run itself needs a GPU: see its --smoke)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab.analysis.correction_workload import LAYOUTS, build_workload, chat_prompt_ids, correction_requests
from verl_cpu.tiny_assets import build_tiny_tokenizer

ROOT = Path(__file__).resolve().parents[3]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "lab" / "scripts" / f"{name}.py")
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


# ------------------------------------------------------------------------------------------------
# speculation and the length bound (GPU rows of docs/correction_pass.md)


def test_speculation_settings_are_lossless_by_the_projects_start_check():
    from ibpo.options import IBPOConfigError
    from recipe.ibpo.correction.rollout import check_speculative_config

    assert bench.speculative_config("off") is None
    ngram = bench.speculative_config("ngram", "2:5:8")
    assert ngram == {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5, "num_speculative_tokens": 8}
    for name in ("ngram", "suffix"):  # what the benchmark measures is what training may use
        check_speculative_config(bench.speculative_config(name), "vllm", mtp_rollout=False)
    with pytest.raises(ValueError, match="unknown speculation"):
        bench.speculative_config("eagle")
    with pytest.raises(IBPOConfigError):
        check_speculative_config({"method": "eagle"}, "vllm", mtp_rollout=False)


def test_forced_lengths_follow_the_ratios_and_the_bound_caps_them():
    lengths = bench.forced_correction_lengths(600, 100, [0.5, 1.0, 3.0], seed=0)
    assert set(lengths) == {50, 100}  # 3.0 x L is capped at L (the rollout's own bound)
    assert 150 < lengths.count(50) < 250
    assert bench.forced_correction_lengths(600, 100, [0.5, 1.0, 3.0], seed=0) == lengths  # seeded
    assert bench.bounded([10, 80, 100], 50, 1.5, 4, 100) == [10, 79, 79]
    assert bench.bounded([10, 100], 50, 3.0, 4, 100) == [10, 100]


def test_bound_phases_cap_the_forced_lengths(tokenizer):
    phases = bench.build_phases(tokenizer, 2, 4, 1, 64, ["target_first"], seed=3, length_ratios=[0.5, 2.0],
                                bound_factor=1.0, closing=8)
    names = [p.name for p in phases]
    assert names[1:] == ["corrections, target_first, no prefix reuse", "corrections, target_first, prefix cache on",
                         "corrections, target_first, prefix cache on, bound c=1"]
    free, capped = phases[2].lengths, phases[3].lengths
    assert sorted(set(free)) <= [32, 64] and capped == [min(n, 64) for n in free]  # c·L + 8 > L: capped at L
    assert phases[0].lengths is None and phases[1].lengths == free
    tight = bench.build_phases(tokenizer, 2, 4, 1, 64, ["target_first"], seed=3, length_ratios=[2.0],
                               bound_factor=0.5 + 1e-9, closing=0, unique_salt_row=False)
    assert tight[-1].lengths == [33] * 6


class FakeSpecLLM(FakeLLM):
    """Adds vLLM's speculative counters: each generate call drafts 4 tokens twice per request, accepts 3."""

    def __init__(self):
        super().__init__()
        self.counts = {name: 0.0 for name in bench.SPEC_COUNTERS}

    def generate(self, prompts, params, use_tqdm=False):
        self.calls.append((prompts, params))
        per = params if isinstance(params, list) else [params] * len(prompts)
        self.counts["vllm:spec_decode_num_drafts"] += 2 * len(prompts)
        self.counts["vllm:spec_decode_num_draft_tokens"] += 8 * len(prompts)
        self.counts["vllm:spec_decode_num_accepted_tokens"] += 3 * len(prompts)
        return [SimpleNamespace(num_cached_tokens=0, outputs=[SimpleNamespace(token_ids=[0] * p["max_tokens"])])
                for p in per]

    def get_metrics(self):
        return [SimpleNamespace(name=k, value=v) for k, v in self.counts.items()] + [SimpleNamespace(name="x", value=1)]


def test_run_phase_forces_per_request_lengths_and_reads_vllms_acceptance():
    llm = FakeSpecLLM()
    row = bench.run_phase(llm, bench.Phase("c", [[1] * 10, [1] * 20], lengths=[5, 7]), 32, seed=0,
                          sampling_params_cls=lambda **kw: kw)
    full = llm.calls[-1][1]
    assert [p["max_tokens"] for p in full] == [5, 7] and [p["min_tokens"] for p in full] == [5, 7]
    assert all("logprobs" not in p for p in full)
    bench.run_phase(llm, bench.Phase("c", [[1] * 10]), 4, seed=0, sampling_params_cls=lambda **kw: kw, logprobs=True)
    assert llm.calls[-1][1]["logprobs"] == 0  # as verl asks for the sampled token's log-prob
    assert row["generated_tokens"] == 12
    row = bench.run_phase(llm, bench.Phase("c", [[1] * 10, [1] * 20], lengths=[5, 7]), 32, seed=0,
                          sampling_params_cls=lambda **kw: kw)
    assert row["accept_length"] == pytest.approx(1 + 6 / 4) and row["accept_rate"] == pytest.approx(6 / 16)
    plain = bench.run_phase(FakeLLM(), bench.Phase("m", [[1] * 10]), 8, seed=0, sampling_params_cls=lambda **kw: kw)
    assert plain["accept_length"] is None  # an engine without counters
    table = bench.format_table([{**plain, "speculation": "off"}, {**row, "speculation": "ngram 2:5:8"}],
                               base_time_s=plain["time_s"])
    assert table.splitlines()[0].startswith("| speculation | phase |")
    assert table.splitlines()[3].startswith("| ngram 2:5:8 | c | 2 |") and table.splitlines()[3].endswith("| 12 | 2.50 |")


def test_length_ratios_file_is_checked(tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text('{"a": 1}')
    with pytest.raises(SystemExit, match="positive numbers"):
        bench.length_ratios(bench.parse_args(["--length-ratios", str(bad)]))
    good = tmp_path / "g.json"
    good.write_text("[0.5, 1.5]")
    assert bench.length_ratios(bench.parse_args(["--length-ratios", str(good)])) == [0.5, 1.5]
    assert bench.length_ratios(bench.parse_args(["--no-ratios"])) is None
    assert bench.length_ratios(bench.parse_args([])) == bench.TOY_LENGTH_RATIOS
