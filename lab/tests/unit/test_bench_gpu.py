"""CPU-side parts of lab/scripts/bench_gpu.py: the plan, the decode fit, the copy workload's bookkeeping, the step's
metric parsing, the table and the JSON (which compute_accounting.gpu_time.coefficients_from_json reads back).
The GPU parts themselves need CUDA and vLLM: ``main`` says so and exits 0 here."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from compute_accounting.gpu_time import (
    GenerationWork,
    coefficients_from_json,
    fit_decode_coefficients,
    generation_seconds,
    roofline_coefficients,
    train_forward_tokens_per_s,
)
from recipe.ibpo.correction.spec_counters import SpecCounters, spec_counter_metrics
from recipe.ibpo.step_metrics import phase_seconds
from verl_cpu.launch import read_metrics_jsonl

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "lab" / "tests" / "fixtures" / "bench_gpu" / "step_metrics.jsonl"
spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "lab" / "scripts" / "bench_gpu.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_gpu"] = bench
spec.loader.exec_module(bench)


# ------------------------------------------------------------------ plan and budget
def test_the_default_command_plans_the_step_in_six_minutes_and_the_copy_tail_when_the_budget_has_room():
    args = bench.parse_args([])
    assert (args.budget_s, args.skip, args.draft_lengths) == (360.0, ["coefficients"], [8])
    plan = bench.plan_parts(args.budget_s, args.skip, args.draft_lengths)
    assert [(p.name, p.runs) for p in plan] == [("coefficients", False), ("step", True), ("copy", False)]
    assert bench.STEP_MIN_S < plan[1].estimate_s <= 360
    assert plan[0].reason == "skipped (--skip)"
    assert plan[2].reason == "does not fit: needs ~70 s, 30 s of --budget-s left"
    tail = bench.plan_parts(430, ["coefficients"], [8])
    assert [p.runs for p in tail] == [False, True, True]  # the step first: the copy workload is the optional tail
    every = bench.plan_parts(480, [], [4, 8])
    assert [p.runs for p in every] == [True, True, False] and sum(p.estimate_s for p in every if p.runs) <= 480
    assert bench.plan_parts(480, [], [2, 4, 8, 16])[2].estimate_s == 4 * bench.PART_ESTIMATE_S["copy_per_draft_length"]
    with pytest.raises(ValueError, match=r"--skip \['prefill'\]"):
        bench.plan_parts(480, ["prefill"], [8])
    # with a step the copy workload runs after it; without one it shares the coefficients part's engine
    assert bench.vllm_child_parts({"step", "copy"}) == (set(), {"copy"})
    assert bench.vllm_child_parts({"coefficients", "step", "copy"}) == ({"coefficients"}, {"copy"})
    assert bench.vllm_child_parts({"coefficients", "copy"}) == ({"coefficients", "copy"}, set())
    assert bench.vllm_child_parts({"step"}) == (set(), set())


def test_budget_counts_from_the_start():
    now = [100.0]
    budget = bench.Budget(60, clock=lambda: now[0])
    now[0] = 125.0
    assert (budget.used(), budget.left()) == (25.0, 35.0)


# ------------------------------------------------------------------ the decode fit against a slow reference
def slow_nnls(design: list[list[float]], y: list[float], sweeps: int = 20000) -> list[float]:
    """Projected coordinate descent on ||Ax - y||², x >= 0, in plain Python: slow, obviously correct."""
    n, k = len(design), len(design[0])
    x = [0.0] * k
    for _ in range(sweeps):
        for j in range(k):
            col = [design[i][j] for i in range(n)]
            resid = [y[i] - sum(design[i][m] * x[m] for m in range(k) if m != j) for i in range(n)]
            x[j] = max(0.0, sum(c * r for c, r in zip(col, resid)) / sum(c * c for c in col))
    return x


def test_decode_fit_recovers_known_coefficients_and_matches_a_slow_reference():
    rng = np.random.default_rng(0)
    truth = {"decode_step_s": 4e-3, "decode_s_per_token": 2e-5, "decode_s_per_context_token": 3e-8}
    cells = bench.decode_grid([1, 8, 32, 64], [256, 2048], 64)
    prefill = rng.uniform(0.05, 0.5, len(cells)).tolist()
    exact = [p + (c.new_tokens - 1) * (truth["decode_step_s"] + c.batch * truth["decode_s_per_token"] +
                                       c.batch * (c.context + c.new_tokens / 2) * truth["decode_s_per_context_token"])
             for c, p in zip(cells, prefill)]
    samples = bench.decode_samples(cells, exact, prefill)
    fit = fit_decode_coefficients(samples["batch"], samples["context_tokens"], samples["pass_s"])
    assert fit == pytest.approx(truth, rel=1e-6)
    noisy = samples["pass_s"] * rng.uniform(0.97, 1.03, len(cells))
    fit = fit_decode_coefficients(samples["batch"], samples["context_tokens"], noisy)
    # scaled columns: the reference's coordinate descent converges in a few thousand sweeps
    scale = [1.0, 64.0, 64.0 * 2080.0]
    design = [[1.0 / scale[0], b / scale[1], c / scale[2]] for b, c in zip(samples["batch"], samples["context_tokens"])]
    ref = [v / s for v, s in zip(slow_nnls(design, noisy.tolist()), scale)]
    assert [fit[k] for k in bench.DECODE_TERMS] == pytest.approx(ref, rel=1e-4, abs=1e-12)
    assert fit["decode_s_per_token"] == pytest.approx(truth["decode_s_per_token"], rel=0.5)


def test_decode_fit_is_nonnegative_and_refuses_a_grid_that_cannot_separate_the_terms():
    # a pass time that falls with the batch: least squares would give a negative per-token cost; the fit says 0
    batch, context = np.array([1.0, 8, 32, 64, 1, 8]), np.array([300.0, 2400, 9600, 19200, 2000, 16000])
    seconds = 5e-3 - 1e-6 * batch + 1e-8 * context
    fit = fit_decode_coefficients(batch, context, seconds)
    assert fit["decode_s_per_token"] == 0.0 and fit["decode_step_s"] > 0 and fit["decode_s_per_context_token"] > 0
    design = [[1.0, b / 64, c / 19200] for b, c in zip(batch, context)]
    ref = slow_nnls(design, seconds.tolist())
    assert [fit["decode_step_s"], fit["decode_s_per_token"] * 64, fit["decode_s_per_context_token"] * 19200] == \
        pytest.approx(ref, rel=1e-4, abs=1e-10)
    with pytest.raises(ValueError, match="at least two batch sizes and two context lengths"):
        fit_decode_coefficients([8, 8, 8], [100, 100, 100], [1e-3, 1e-3, 1e-3])
    with pytest.raises(ValueError, match="finite number > 0"):
        fit_decode_coefficients([1, 8, 32], [100, 900, 200], [1e-3, -1e-3, 2e-3])


def test_prefill_rate_and_actor_forward_equivalents():
    cells = [bench.DecodeCell(8, 1000, 64), bench.DecodeCell(32, 2000, 64)]
    assert bench.prefill_tokens_per_s(cells, [0.1, 0.5]) == pytest.approx((8000 + 64000) / 0.6)
    assert train_forward_tokens_per_s(8192, 2.0, True) == pytest.approx(4 * 8192 / 2.0)
    assert train_forward_tokens_per_s(8192, 2.0, False) == pytest.approx(3 * 8192 / 2.0)
    with pytest.raises(ValueError):
        train_forward_tokens_per_s(0, 1.0, True)


# ------------------------------------------------------------------ copy workload and counters
def test_copy_prompts_and_agreement():
    assert bench.copy_prompts([[1, 2]], [[7, 8, 9]]) == [[1, 2, 7, 8, 9, 1, 2]]
    assert bench.agreement([[7, 8, 9], [5, 8, 9]], [[7, 8, 9], [7, 8, 9]]) == pytest.approx(3 / 6)
    assert bench.agreement([[7, 8, 0]], [[7, 8, 9]]) == pytest.approx(2 / 3)  # up to the first difference
    with pytest.raises(ValueError, match="2 prompts but 1 targets"):
        bench.copy_prompts([[1], [2]], [[3]])


def test_spec_counters_read_vllm_metric_objects():
    metric = lambda name, value: SimpleNamespace(name=name, value=value)  # noqa: E731
    counts = bench.spec_counters_from_metrics([
        metric("vllm:spec_decode_num_drafts", 10.0), metric("vllm:spec_decode_num_draft_tokens_total", 80.0),
        metric("vllm:spec_decode_num_accepted_tokens", 30.0), metric("vllm:generation_tokens", 200.0),
        metric("vllm:generation_tokens", 100.0),  # a second engine's label set: summed
        metric("vllm:num_requests_running", 3.0)])
    assert counts == SpecCounters(10.0, 80.0, 30.0, 300.0)
    assert bench.spec_counters_from_metrics([metric("vllm:spec_decode_num_drafts", 1.0)]) is None  # stats off


def test_spec_row_uses_the_trainers_definitions_and_the_cost_model():
    coeff = roofline_coefficients("H100-SXM", "Qwen3-1.7B")
    counts = SpecCounters(drafts=400.0, draft_tokens=3200.0, accepted_tokens=1200.0, generated_tokens=4 * 512.0)
    row = bench.spec_row("copy", 8, 3.0, 4, [1024] * 4, counts, 0.9, coeff)
    trainer = spec_counter_metrics(True, counts)
    assert row["spec_decode_steps"] == trainer["rollout/spec_decode_steps"] == 2048 - 1200
    assert row["spec_accepted_per_decode_step"] == trainer["rollout/spec_accepted_per_decode_step"]
    # per request: 512 tokens, (2048 - 1200) / 4 = 212 forward passes of which the first is the prefill, 800 drafts
    work = GenerationWork([1024] * 4, [512] * 4, [211] * 4, [800] * 4)
    assert row["modelled_seconds"] == pytest.approx(sum(generation_seconds(work, coeff).values()))
    assert bench.spec_row("copy", 8, 3.0, 4, [1] * 4, None, 0.0, coeff)["spec_stats_reported"] == 0.0


# ------------------------------------------------------------------ the step's metrics
def test_fixture_names_are_the_ones_the_code_emits():
    emitted = set(phase_seconds({})) | set(spec_counter_metrics(True, SpecCounters(1, 1, 1, 2))) | {  # every rate
        "timing_s/step", "ibpo/num_wrong", "ibpo/num_corrections", bench.IBPO_ENABLED_METRIC, *bench.STEP_KEYS.values()}
    names = {k for step in read_metrics_jsonl(FIXTURE).values() for k in step}
    assert names <= emitted, sorted(names - emitted)


def test_step_report_parses_the_recorded_metrics():
    (row,) = bench.step_report(read_metrics_jsonl(FIXTURE))
    assert (row["step"], row["step_s"], row["main_gen"], row["correction_gen"], row["update_weights"]) == (
        1, 95.0, 18.0, 21.0, 2.5)
    assert row["correction_vs_main"] == pytest.approx(21.0 / 18.0)
    assert (row["corrections"], row["wrong"]) == (16.0, 16.0)
    assert row["rollout_probs_diff_mean"] == 0.0011 and row["actor_peak_allocated_gb"] == 21.5
    assert row["spec_drafts"] == 900.0 and row["spec_acceptance_rate"] == 0.05 and row["spec_stats_reported"] == 1.0
    assert row["reward"] == 0.2 and row["method"] == "IBPO"
    empty = bench.step_report({2: {"timing_s/step": 10.0}})[0]
    assert empty["rollout_probs_diff_mean"] is None and "spec_drafts" not in empty  # not reported, not 0
    assert empty["method"] == ""  # a run without the bench method names none


# ------------------------------------------------------------------ report: table, JSON, round trip
def report_with_everything():
    plan = bench.plan_parts(700, [], [8])
    report = bench.Report({"gpu": "NVIDIA H100 80GB HBM3", "commit": "abc1234", "date": "2026-11-26 21:00 UTC",
                           "budget_s": 480.0}, plan)
    report.measured.update({"decode_step_s": 4e-3, "decode_s_per_token": 2e-5, "decode_s_per_context_token": 3e-8,
                            "prefill_tokens_per_s": 5e4, "train_forward_tokens_per_s": 1.2e5,
                            "weight_sync_load_weights_s": 0.4})
    report.decode_rows = [{"batch": 8, "context": 256, "new_tokens": 64, "pass_s": 0.0045, "fitted_s": 0.0044}]
    report.actor = {"tokens": 8192, "seconds": 0.27, "peak_gb": 30.0}
    report.spec_rows = [{"workload": "copy", "draft_k": 0, "seconds": 4.0, "requests": 16, "agreement": 1.0},
                        {"workload": "copy", "draft_k": 8, "seconds": 2.0, "requests": 16, "agreement": 1.0,
                         "spec_decode_steps": 1500.0, "spec_accepted_per_decode_step": 4.5,
                         "spec_acceptance_rate": 0.6, "modelled_seconds": 1.8}]
    report.step_rows = bench.step_report(read_metrics_jsonl(FIXTURE))
    report.step_run = {"status": "finished", "peak_mib": 40960}
    return report


def test_json_round_trips_through_coefficients_from_json(tmp_path):
    report = report_with_everything()
    budget = bench.Budget(480)
    bench.write_report(report, tmp_path, budget)
    coeff = coefficients_from_json(tmp_path / "bench_gpu.json")
    assert coeff == report.coefficients()
    assert coeff.decode_step_s == 4e-3 and coeff.prefill_tokens_per_s == 5e4
    assert coeff.sources["decode_step_s"] == ("measured: lab/scripts/bench_gpu.py coefficients decode grid, "
                                              "NVIDIA H100 80GB HBM3, abc1234")
    # the step's verl weight sync (2.5 s in the fixture) is not in `measured` until run_step puts it there:
    assert coeff.weight_sync_s == 0.4 and "lower bound" in coeff.sources["weight_sync_s"]
    data = json.loads((tmp_path / "bench_gpu.json").read_text())
    assert data["step"][0]["corrections"] == 16.0 and data["meta"]["commit"] == "abc1234"
    assert (tmp_path / "bench_gpu.md").read_text().startswith("bench_gpu: NVIDIA H100 80GB HBM3 · commit abc1234")


def test_unmeasured_coefficients_keep_the_roofline_and_say_so(tmp_path):
    report = bench.Report({"gpu": "G", "commit": "c", "date": "d", "budget_s": 60.0}, [])
    report.measured["train_forward_tokens_per_s"] = 9e4
    report.measured["weight_sync_s"] = 2.5
    bench.write_report(report, tmp_path, bench.Budget(60))
    coeff = coefficients_from_json(tmp_path / "bench_gpu.json")
    roof = roofline_coefficients("H100-SXM", "Qwen3-1.7B")
    assert coeff.decode_step_s == roof.decode_step_s
    assert coeff.sources["decode_step_s"].startswith("not measured in this run; roofline")
    assert coeff.sources["weight_sync_s"] == "measured: lab/scripts/bench_gpu.py step update_weights, G, c"
    empty = bench.Report({"gpu": "G", "commit": "c", "date": "d", "budget_s": 60.0}, [])
    assert "coefficients" not in empty.to_json()  # nothing measured: nothing that reads as a measurement


def test_table_shows_each_part():
    table = bench.format_report(report_with_everything())
    assert "| decode_step_s | 0.004 | measured: lab/scripts/bench_gpu.py coefficients decode grid" in table
    assert "| 8 | 256 | 0.00450 | 0.00440 |" in table
    assert "| copy | off | 4.00 | 1.00x |" in table and "| copy | 8 | 2.00 | 2.00x | 1500 | 4.50 | 0.60 | 1.00 | 1.80 |" in table
    assert "step 1: 16 corrections ran for 16 wrong responses" in table
    assert "training/rollout_probs_diff_mean 0.0011" in table and "40.0 GiB" in table
    assert "rollout/spec_*: random weights propose few ngram drafts and accept ~none" in table
    assert "step: planned" in table
    assert "| coefficients | decode_step_s | 0.004 | NVIDIA H100 80GB HBM3 | abc1234 | 2026-11-26 |" in table
    assert "| copy | copy, draft length 8: accepted / decode step, acceptance rate, agreement | 4.50, 0.60, 1.00 |" in table
    assert "| step | step 1 training/rollout_probs_diff_mean | 0.0011 |" in table
    assert "| coefficients / step | weight_sync_s | 0.4 |" in table
    assert "| step | step 1 seconds: step, main gen, correction gen, actor update (vLLM compiled) | 95.0, 18.0, 21.0, " \
           "30.0 |" in table
    assert "| 1 IBPO | 95.0 | 18.0 | 21.0 | 0.2 | 0.4 | 6.0 | 30.0 | 2.5 | 1.17 | 22% |" in table
    eager = report_with_everything()
    eager.step_run["shape"] = {"prompts": 2, "group": 8, "response": 1024, "draft_k": 8, "vllm": "eager"}
    assert ("| step | step 1 seconds: step, main gen, correction gen, actor update (vLLM eager) |"
            in bench.format_report(eager))  # eager-mode seconds never read as a compiled engine's
    assert "step: vLLM eager (--step-vllm)" in bench.format_report(eager) and "vLLM eager" not in table
    nothing = bench.Report({"gpu": "G", "commit": "c", "date": "d", "budget_s": 60.0}, [])
    nothing.step_run = {"status": "stopped at the budget after 200 s"}
    text = bench.format_report(nothing)
    assert "(no coefficient measured)" in text and "(no step finished: stopped at the budget after 200 s)" in text


def test_main_without_cuda_prints_the_plan_and_exits_0(capsys, monkeypatch):
    monkeypatch.setattr(bench.shape, "skip_reason", lambda: "no CUDA device (test)")
    assert bench.main(["--budget-s", "200"]) == 0
    out = capsys.readouterr().out
    assert "skipped: no CUDA device (test)" in out and "step: does not fit: needs ~330 s, 200 s of --budget-s left" in out
    assert "copy: would run" in out and "coefficients: skipped (--skip)" in out


# ------------------------------------------------------------------ stopping at the budget with what finished
def test_child_partial_results_reach_the_report(tmp_path):
    child = bench.Report({}, [])
    child.measured["prefill_tokens_per_s"] = 4e4
    child.spec_rows.append({"workload": "copy", "draft_k": 0, "seconds": 1.0, "requests": 2, "agreement": 1.0})
    child.notes.append("decode grid stopped after 3 of 8 cells (budget)")
    path = tmp_path / "partial.json"
    bench.save_partial(child, path)
    parent = bench.Report({"gpu": "G", "commit": "c", "date": "d", "budget_s": 60.0}, [])
    bench.merge_partial(parent, path)
    bench.merge_partial(parent, tmp_path / "absent.json")  # a child that wrote nothing adds nothing
    assert parent.measured == {"prefill_tokens_per_s": 4e4} and parent.spec_rows == child.spec_rows
    assert parent.notes == ["decode grid stopped after 3 of 8 cells (budget)"]
    args = bench.parse_args(["--batches", "2", "4", "--draft-lengths", "3"])
    again = bench.parse_args(bench.child_options(args))
    assert (again.batches, again.draft_lengths, again.copy_tokens) == ([2, 4], [3], args.copy_tokens)


def test_a_child_past_its_limit_is_ended(tmp_path):
    watchdog = bench.Watchdog(bench.Report({}, []), tmp_path, bench.Budget(60))
    status = bench.run_child(["sleep", "30"], 1.0, watchdog, tmp_path / "log")
    assert status == "stopped at the budget after 1 s" and watchdog.child_pgid is None
    assert bench.run_child(["true"], 10.0, watchdog, tmp_path / "log") == "exited 0"


def test_a_childs_log_is_stamped_and_its_start_up_reaches_the_report(tmp_path, monkeypatch):
    watchdog = bench.Watchdog(bench.Report({}, []), tmp_path, bench.Budget(60))
    script = ("import sys, time; w = sys.stdout.buffer.write\n"
              "w(b'[recipe] pre-flight checks passed in 3.1 s\\n'); sys.stdout.flush(); time.sleep(0.3)\n"
              "w(b'(TaskRunner pid=7) Started a local Ray instance.\\n'); w(b'bad \\xff byte\\n')\n"
              "[w(b'line %d\\n' % i) for i in range(100)]\n"
              "w(b'(TaskRunner pid=7) step:1 - timing_s/gen:1.0\\n'); sys.stdout.flush(); time.sleep(30)\n")
    target: dict = {}
    status = bench.run_child([sys.executable, "-c", script], 2.0, watchdog, tmp_path / "log", target=target)
    assert status == "stopped at the budget after 2 s"
    seen = target["startup_s"]
    assert list(seen) == ["pre_flight_passed", "ray_started", "first_step_logged"]  # vLLM's marker never came
    assert seen["pre_flight_passed"] < 0.3 <= seen["ray_started"] <= seen["first_step_logged"] < 2.0
    assert len(target["log_tail"]) == 80 and target["log_tail"][-1].endswith("step:1 - timing_s/gen:1.0")
    lines = (tmp_path / "log").read_text().splitlines()
    assert len(lines) == 104 and all(line.startswith("[") and " s] " in line for line in lines)
    assert lines[2].endswith("bad \ufffd byte")  # undecodable output is replaced, not fatal
    text = "\n".join(bench.step_lines(bench.Report({}, [], step_run={"status": status, **target})))
    assert "(no step finished: stopped at the budget after 2 s)" in text
    assert "step start-up: pre flight passed 0 s, ray started 0 s, first step logged 0 s (not seen: task runner " \
           "started, vllm engine ready, workers ready, last step logged)" in text
    # a grandchild that outlives the child and keeps the pipe open holds the caller up only READER_JOIN_S
    monkeypatch.setattr(bench, "READER_JOIN_S", 0.5)
    start = time.monotonic()
    daemon = "import subprocess, sys; subprocess.Popen(['sleep', '20'], start_new_session=True); print('bye')"
    assert bench.run_child([sys.executable, "-c", daemon], 10.0, watchdog, tmp_path / "log2") == "exited 0"
    assert time.monotonic() - start < 5.0
    assert (tmp_path / "log2").read_text().endswith("] bye\n")


def test_watchdog_writes_what_finished_at_the_budget(tmp_path, monkeypatch):
    exits = []
    monkeypatch.setattr(bench.os, "_exit", exits.append)
    report = report_with_everything()
    report.step_rows, report.step_run = [], {}
    partial = tmp_path / "partial.json"
    child = bench.Report({}, [])
    child.measured["decode_step_s"] = 5e-3
    bench.save_partial(child, partial)
    watchdog = bench.Watchdog(report, tmp_path, bench.Budget(0), grace_s=0.0)
    watchdog.partial = partial
    watchdog.run()  # the budget is spent: it writes and exits at once
    assert exits == [3]
    data = json.loads((tmp_path / "bench_gpu.json").read_text())
    assert data["coefficients"]["decode_step_s"] == 5e-3  # the child's result made it in
    assert "stopped at --budget-s by the watchdog" in (tmp_path / "bench_gpu.md").read_text()


# ------------------------------------------------------------------ provenance of a run on a sent copy
def test_source_tree_names_the_commit_whose_files_ran_even_when_git_is_older(tmp_path):
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (tmp_path / ".gitignore").write_text("out/\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-qm", "one")
    first_tree = git("rev-parse", "HEAD^{tree}").strip()
    assert bench.source_tree_id(tmp_path) == first_tree
    (tmp_path / "a.py").write_text("x = 2\n")  # the files of a later commit, .git still at the first
    (tmp_path / "new.py").write_text("y = 1\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "big.bin").write_text("ignored")
    later = bench.source_tree_id(tmp_path)
    assert git("diff", "--cached", "--name-only") == ""  # the checkout's own index is untouched
    git("add", "-A")
    git("commit", "-qm", "two")
    assert later == git("rev-parse", "HEAD^{tree}").strip() != first_tree
    assert bench.source_tree_id(tmp_path / "nowhere") == "unknown"


# ------------------------------------------------------------------ the step part's bench-only method
def test_the_bench_method_runs_ibpos_block_and_the_registry_still_refuses_another_methods(monkeypatch):
    from omegaconf import OmegaConf

    from recipe.common import methods
    from recipe.common.preflight.errors import SetupError

    monkeypatch.setattr(methods, "_REGISTRY", dict(methods.registered_methods()))  # restored after the test
    monkeypatch.setenv(methods.EXTRA_MODULES_ENV, "ibpo_then_gspo.method")  # as bench.step_command sets it
    try:
        entry = methods.registered_methods()["ibpo_then_gspo"]
    finally:
        sys.modules.pop("ibpo_then_gspo.method", None)
    assert entry.block_key() == "ibpo" and entry.check is methods.registered_methods()["ibpo"].check
    config = OmegaConf.create({"method": "ibpo_then_gspo", "ibpo": {"lam": 0.5},
                               "algorithm": {"adv_estimator": "ibpo"}})
    assert methods.method_of(config) == "ibpo_then_gspo"  # the `ibpo:` block and the ibpo estimator are its own
    assert methods.method_options(config, "ibpo_then_gspo").lam == 0.5
    with pytest.raises(SetupError, match="method=ibpo_then_gspo but the config has a `counterfactual:` block"):
        methods.method_of(OmegaConf.merge(config, {"counterfactual": {}}))
    with pytest.raises(SetupError, match="algorithm.adv_estimator=ibpo with method=counterfactual"):
        methods.method_of(OmegaConf.create({"method": "counterfactual", "counterfactual": {},
                                            "algorithm": {"adv_estimator": "ibpo"}}))


def test_the_parent_looks_vllm_up_without_importing_it(tmp_path, monkeypatch):
    """The bench's own process only checks that vLLM is installed and reads its version from the metadata: an
    import there cost 10-15 s of a GPU slot (and verl's run imports it again in every worker)."""
    fake = tmp_path / "site" / "vllm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    monkeypatch.setattr(bench.shape, "skip_reason", bench.shape.skip_reason)  # the real one
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "GPU (test)")  # where nvidia-smi is absent
    assert bench.shape.skip_reason() is None  # found by importlib.util.find_spec
    monkeypatch.setattr(bench, "source_tree_id", lambda: "tree")
    meta = bench.run_meta(SimpleNamespace(budget_s=1.0, out=tmp_path))
    assert meta["versions"]["vllm"] == "absent"  # no installed metadata for the fake package: not imported to ask
    assert not (tmp_path / "imported").exists() and "vllm" not in sys.modules
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None)
    assert bench.shape.skip_reason() == "vLLM is not installed"
