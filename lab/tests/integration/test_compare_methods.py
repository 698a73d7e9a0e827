"""lab/scripts/compare_methods.py --engine verl --report-only on synthetic verl file-logger logs: Student-t eval
intervals over seeds, paired differences, compute to the threshold on the seed mean, optimizer updates and phase
times, worked out by hand; the micro-batch cap."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "lab" / "scripts" / "compare_methods.py"
EVAL = "val-core/ibpo/toy_addition/acc/mean@1"


def write_log(path: Path, slope: float, eval_final: float, steps: int = 10, joint_rows: float = 0.0) -> None:
    from verl.utils.tracking import FileLogger

    import os

    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    logger = FileLogger("proj", path.stem)
    logger.log(data={EVAL: 0.1}, step=0)
    for step in range(1, steps + 1):
        data = {"ibpo/raw_score_mean": slope * step, "ibpo/compute/total_flops": 100.0 * step,
                "actor/grad_norm": 1.0, "ibpo/num_joint_rows": joint_rows, "timing_s/step": 2.0,
                "timing_s/update_actor": 1.0, "ibpo/time/main_gen_s": 0.5}
        if step % 5 == 0:
            data[EVAL] = eval_final if step == steps else 0.2
        logger.log(data=data, step=step)
    logger.finish()


def test_report_only_table(tmp_path, monkeypatch):
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    # GSPO G=n: seeds with slopes 0.04 and 0.06 (mean 0.05·s); IBPO G=n: 0.1·s; GSPO G=4n: never reaches 0.5
    for seed, slope, final in ((0, 0.04, 0.3), (1, 0.06, 0.5)):
        write_log(tmp_path / f"gspo_g_n_s{seed}_metrics.jsonl", slope, final)
    for seed in (0, 1):
        write_log(tmp_path / f"ibpo_g_n_s{seed}_metrics.jsonl", 0.1, 0.6, joint_rows=32.0)
        write_log(tmp_path / f"gspo_g_4n_s{seed}_metrics.jsonl", 0.01, 0.2)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--assets", str(tmp_path / "none"), "--out", str(tmp_path),
                           "--seeds", "0", "1", "--report-only", "--engine", "verl", "--threshold", "0.3", "--smooth", "1",
                           "--n", "4", "--batch-size", "8"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    gspo, ibpo, big = summary["GSPO G=n"], summary["IBPO G=n"], summary["GSPO G=4n"]
    assert gspo["final_eval"]["mean"] == pytest.approx(0.4) and gspo["final_eval"]["seeds"] == 2
    # Student t with 1 degree of freedom: 0.4 ± 12.706 · 0.1414 / √2 (a 2-seed bootstrap would give [0.3, 0.5])
    assert gspo["final_eval"]["low"] == pytest.approx(0.4 - 1.2706, abs=1e-3)
    assert gspo["final_eval"]["high"] == pytest.approx(0.4 + 1.2706, abs=1e-3)
    # paired by seed: IBPO 0.6 vs GSPO 0.3 / 0.5 -> differences 0.3 and 0.1
    assert ibpo["final_eval_diff"]["diff"] == pytest.approx(0.2)
    assert ibpo["final_eval_diff"]["sd_diff"] == pytest.approx(0.1414, abs=1e-3)
    assert "best_eval" not in gspo
    assert gspo["eval_step0"]["mean"] == pytest.approx(0.1)
    # seed mean 0.05·s reaches 0.3 at step 6 -> 600 FLOPs; IBPO 0.1·s at step 3 -> 300 FLOPs (ratio 0.5)
    assert gspo["threshold"]["compute"] == pytest.approx(600.0, rel=1e-3)
    assert ibpo["threshold"]["compute"] == pytest.approx(300.0, rel=1e-3)
    assert ibpo["threshold"]["relative"] == pytest.approx(0.5, rel=1e-3)
    assert big["threshold"]["reached_share"] == 0.0
    # one update per step; IBPO's 32 joint rows on top of 8·4 = 32 rows make 2 mini-batches of 32 rows
    assert gspo["optimizer_updates"] == [10, 10] and ibpo["optimizer_updates"] == [20, 20]
    assert big["optimizer_updates"] == [10, 10]  # G = 16: 128 rows, mini-batch 8·16
    assert gspo["wall_s_by_phase"]["step"] == pytest.approx(20.0)
    table = (tmp_path / "table.md").read_text()
    assert "| GSPO G=4n | 2 | 10 |" in table and "not reached" in table
    assert "Equal steps, not equal compute" in table and "Command: `python lab/scripts/compare_methods.py" in table
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_micro_batches_are_capped_without_touching_other_overrides():
    spec = importlib.util.spec_from_file_location("compare_methods", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_methods"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    overrides = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=128", "actor_rollout_ref.rollout.n=16",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=128",
                 "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    assert module.cap_micro_batches(overrides, 32) == [
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32", "actor_rollout_ref.rollout.n=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    assert module.cap_micro_batches(overrides, 0) == overrides


def test_report_of_budget_matched_runs_says_they_are_matched_on_compute(tmp_path, monkeypatch):
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    for slug, slope in (("gspo_g_n", 0.05), ("ibpo_g_n", 0.1)):
        write_log(tmp_path / f"{slug}_s0_metrics.jsonl", slope, 0.5)
        path = tmp_path / f"{slug}_s0_metrics.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for rec in lines:  # what the trainer's compute ledger adds under a budget
            rec["data"].update({"compute_budget/flops": 100.0 * rec["step"], "compute_budget/limit_flops": 1000.0})
        path.write_text("\n".join(json.dumps(rec) for rec in lines) + "\n")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--assets", str(tmp_path / "none"), "--out", str(tmp_path),
                           "--seeds", "0", "--report-only", "--engine", "verl", "--threshold", "0.3", "--smooth", "1",
                           "--methods", "GSPO G=n", "IBPO G=n", "--budget-flops", "1000"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    table = (tmp_path / "table.md").read_text()
    assert "**Equal compute**: every arm stopped at the trainer's budget of 1e+03 FLOPs" in table


@pytest.mark.parametrize("setup, message", [
    (None, "meta.json: no such file; "),
    ("truncated", "ibpo_s0.json: not readable JSON (JSONDecodeError: "),
])
def test_report_only_of_a_missing_or_corrupt_loop_folder_is_one_line(tmp_path, capsys, setup, message):
    # before: a FileNotFoundError / JSONDecodeError traceback (the latter naming no file)
    spec = importlib.util.spec_from_file_location("compare_methods", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_methods"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    out = tmp_path / "runs"
    if setup == "truncated":
        out.mkdir()
        (out / "meta.json").write_text(json.dumps({"warm_start_sha256": "ab" * 32, "budget_flops": 1.0}))
        (out / "ibpo_s0.json").write_text('{"arm": "IBPO G=n", "seed": 0, "st')
    code = module.main(["--assets", str(tmp_path / "none"), "--out", str(out), "--report-only", "--seeds", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("option, value, message", [
    ("--smooth", "0", "--smooth must be >= 1"),
    ("--threshold", "nan", "--threshold must be a finite training reward, got nan"),
    ("--effect", "nan", "--effect must be a finite difference > 0, got nan"),
    ("--effect", "-0.05", "--effect must be a finite difference > 0, got -0.05"),
])
def test_a_report_option_out_of_range_stops_before_any_run(tmp_path, capsys, option, value, message):
    # before: --smooth 0 / --threshold nan reported every arm as never reaching the threshold, --effect nan ran the
    # power search for minutes, --effect -0.05 raised after all runs had finished
    spec = importlib.util.spec_from_file_location("compare_methods", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_methods"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as info:
        module.main(["--assets", str(tmp_path / "none"), "--out", str(tmp_path / "runs"), "--seeds", "0",
                     "--report-only", option, value])  # --report-only: never a run, even were the check missing
    assert info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "none").exists()
