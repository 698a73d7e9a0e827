"""The GPU bench's step part (``lab/scripts/bench_gpu.py``: ``step_command``) run on CPU through ``verl_cpu``: the same
launch of ``recipe/ibpo/run_ibpo_qwen3_1p7b_1gpu.sh`` with the bench-only ``ibpo_then_gspo`` method, at Qwen3-1.7B's
vocabulary (151,936 ids, the full-vocabulary tokenizer) and a tiny width, trains IBPO, IBPO, then GSPO in one
launch; step 3 makes no corrections. What differs from the GPU command is only what a CPU needs (verl_cpu's
environment and overrides, appended) and ``ignore_eos=False`` (the hf rollout refuses it; a random 151,936-way
model ends a 16-token response at its EOS with probability ~1e-4)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from verl_cpu.launch import cpu_env, cpu_overrides, process_env, read_metrics_jsonl, run_with_timeout

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "lab" / "scripts" / "bench_gpu.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_gpu"] = bench
spec.loader.exec_module(bench)

RESPONSE = 16


def test_the_bench_step_runs_ibpo_ibpo_then_gspo_in_one_launch_on_cpu(tmp_path):
    from toy_task.synthetic_task import write_task_parquets

    args = bench.parse_args(["--step-prompts", "1", "--step-response", str(RESPONSE), "--step-draft-k", "0"])
    model = bench.shape.write_random_model(tmp_path / "model", tiny=True)
    data = write_task_parquets(tmp_path / "data", n_train=8, n_val=2)
    cmd, env = bench.step_command(args, tmp_path, model, data)
    cmd += [*cpu_overrides(model, data["train"], data["val"], total_training_steps=bench.STEP_COUNT,
                           train_batch_size=1, rollout_n=8, max_prompt_length=bench.STEP_MAX_PROMPT,
                           max_response_length=RESPONSE),
            "actor_rollout_ref.rollout.ignore_eos=False"]
    result = run_with_timeout(cmd, process_env(os.environ, {**cpu_env(), **env}), timeout_s=600,
                              log_path=tmp_path / "train.log", cwd=ROOT)
    log = result.log_path.read_text(errors="replace")
    assert not result.timed_out and result.returncode == 0, log[-6000:]
    assert "method=ibpo_then_gspo trainer=IBPOThenGSPOTrainer" in log and bench.WORKERS_READY in log
    rows = bench.step_report(read_metrics_jsonl(tmp_path / "metrics.jsonl"))
    assert [(r["step"], r["method"]) for r in rows] == [(1, "IBPO"), (2, "IBPO"), (3, "GSPO")]
    for r in rows[:2]:  # random weights: every response wrong, each corrected (ibpo.correct_groups=all)
        assert r["wrong"] > 0 and r["corrections"] == r["wrong"] and r["correction_gen"] > 0
        # the candidates keep their length through decode and re-encode: each prompt shows two whole responses
        assert r["correction_prompt_tokens"] / r["corrections"] > 2 * RESPONSE
    assert rows[2]["correction_gen"] == 0.0 and not rows[2]["corrections"]
    assert all(r["main_gen"] > 0 and r["update_actor"] > 0 and r["step_s"] > 0 for r in rows)
    report = bench.Report({"gpu": "CPU (test)", "commit": "test", "date": "test", "budget_s": 0.0}, [],
                          step_rows=rows, step_run={"shape": {"vllm": args.step_vllm}})
    table = bench.format_report(report)
    assert "| 1 IBPO |" in table and "| 3 GSPO |" in table and "step 1: 8 corrections ran for 8 wrong responses" in table
