"""Choosing a toy task's learning rate without the test set: the validation problems are disjoint from train and
test, a folder's runs are one protocol (resuming it with another lr or split is refused), and
``lab.analysis.lr_selection`` picks the rate with the highest mean validation accuracy from hand-made runs."""

from __future__ import annotations

import argparse
import json

import pytest

from lab.analysis import lr_selection
from lab.analysis.toy_loop import RUN_DEFINING_OPTIONS, TEST_SEED, check_same_protocol, validation_problems
from lab.toy_tasks.tasks import get_task


@pytest.mark.parametrize("task_name", ["addition", "three_sum_named"])
def test_validation_problems_are_distinct_and_outside_train_and_test(task_name):
    task = get_task(task_name)
    train, test = task.sample_problems(1024, 0), task.sample_problems(512, TEST_SEED)
    val = validation_problems(task, 512, exclude=set(train) | set(test))
    assert len(val) == 512 and len(set(val)) == 512
    assert not set(val) & (set(train) | set(test))
    assert val == validation_problems(task, 512, exclude=set(train) | set(test))  # the same on every call


def test_validation_problems_refuse_an_exhausted_space():
    task = get_task("addition")
    everything = set(task.sample_problems(64, 1) + task.sample_problems(256, 1) + task.sample_problems(1024, 1))
    with pytest.raises(ValueError, match="fewer than 16 validation problems"):
        validation_problems(task, 16, exclude=everything, seed=1)


def _args(**changes) -> argparse.Namespace:
    values = {k: v for k, v in RUN_DEFINING_OPTIONS.items()}
    values.update(changes)
    return argparse.Namespace(**values)


def test_a_folder_refuses_runs_of_another_protocol(tmp_path):
    meta = {"args": {**RUN_DEFINING_OPTIONS, "lr": 3e-4, "budget_steps": 12.0}}
    check_same_protocol(meta, _args(budget_steps=12.0), tmp_path / "meta.json")  # same options: accepted
    with pytest.raises(SystemExit, match=r"--lr 0.0003 there, 0.0001 now"):
        check_same_protocol(meta, _args(lr=1e-4, budget_steps=12.0), tmp_path / "meta.json")
    with pytest.raises(SystemExit, match=r"--eval-split 'test' there, 'val' now"):
        check_same_protocol(meta, _args(eval_split="val", budget_steps=12.0), tmp_path / "meta.json")
    # a meta.json written before an option existed holds that option's old value (the split was always test)
    old = {"args": {k: v for k, v in meta["args"].items() if k not in ("eval_split", "max_steps")}}
    check_same_protocol(old, _args(budget_steps=12.0), tmp_path / "meta.json")
    with pytest.raises(SystemExit, match="--max-steps None there, 12 now"):
        check_same_protocol(old, _args(budget_steps=12.0, max_steps=12), tmp_path / "meta.json")


def _lr_folder(out, lr: float, warm: float, accs: list[float], split: str = "val") -> None:
    folder = lr_selection.lr_folder(out, lr)
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"args": {"eval_split": split, "lr": lr},
                                                  f"warm_start_{split}_accuracy": warm}))
    for seed, acc in enumerate(accs):
        run = {"arm": "GSPO G=n", "seed": 100 + seed, "steps": [],
               "evals": [{"milestone": 1.0, "step": 12, "flops": 1.0, "accuracy": acc}]}
        (folder / f"gspo_g_n_s{100 + seed}.json").write_text(json.dumps(run))


def test_selection_chooses_the_highest_mean_validation_accuracy(tmp_path):
    _lr_folder(tmp_path, 3e-4, 0.20, [0.10, 0.14, 0.12])
    _lr_folder(tmp_path, 1e-4, 0.20, [0.22, 0.26, 0.24])
    _lr_folder(tmp_path, 3e-5, 0.20, [0.21, 0.21, 0.24])
    rows = lr_selection.selection_rows(tmp_path, [3e-4, 1e-4, 3e-5], "GSPO G=n")
    assert [r["val_accuracy"]["mean"] for r in rows] == pytest.approx([0.12, 0.24, 0.22])
    assert rows[0]["change"]["mean"] == pytest.approx(-0.08) and rows[0]["seeds"] == 3
    assert lr_selection.chosen_lr(rows) == 1e-4
    table = lr_selection.format_table(rows, "GSPO G=n")
    assert "| 0.0001 | 3 | 0.240 [" in table and table.count("| yes |") == 1
    lr_selection.write_runs_csv(rows, tmp_path / "runs.csv", "three_sum_named", "GSPO G=n")
    lines = (tmp_path / "runs.csv").read_text().splitlines()
    assert len(lines) == 1 + 9 and lines[4].split(",")[3:6] == ["0.0001", "100", "0.220000"]


def test_selection_refuses_runs_scored_on_the_test_set(tmp_path):
    _lr_folder(tmp_path, 3e-4, 0.20, [0.10, 0.14], split="test")
    with pytest.raises(ValueError, match="not evaluated on the validation split"):
        lr_selection.selection_rows(tmp_path, [3e-4], "GSPO G=n")


@pytest.mark.parametrize("argv, message", [
    (["--lrs", "3e-4", "3e-4"], "--lrs must be distinct positive rates"),
    (["--lrs", "0", "1e-4"], "--lrs must be distinct positive rates"),
    (["--lrs", "1e-4", "--val-size", "0"], "--val-size must be >= 1"),
    (["--lrs", "1e-4", "--arm", "GSPO"], "--arm: unknown 'GSPO'"),
])
def test_selection_refuses_bad_options_before_any_run(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        lr_selection.main(["--model", str(tmp_path / "absent"), "--out", str(tmp_path / "out"), *argv])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_toy_loop_refuses_a_non_positive_lr(tmp_path, capsys):
    from lab.analysis import toy_loop

    with pytest.raises(SystemExit):
        toy_loop.main(["--model", str(tmp_path / "absent"), "--out", str(tmp_path / "out"), "--lr", "0"])
    assert "--lr must be a finite number > 0, got 0.0" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--lr", "inf"], "--lr must be a finite number > 0, got inf"),
    (["--budget-steps", "nan"], "--budget-steps must be a finite number > 0, got nan"),
    (["--budget-steps", "-3"], "--budget-steps must be a finite number > 0, got -3.0"),
    (["--budget-flops", "0"], "--budget-flops must be a finite number > 0, got 0.0"),
    (["--warmup-steps", "-1"], "--warmup-steps must be a finite number >= 0, got -1.0"),
    (["--budget-unit", "modelled_gpu_seconds", "--budget-flops", "1e9"],
     "--budget-flops is a budget in FLOPs; with --budget-unit modelled_gpu_seconds give --budget-steps"),
    (["--milestones", "1.0", "0.5"], "--milestones must be increasing fractions of the budget in (0, 1]"),
    (["--milestones", "nan"], "--milestones must be increasing fractions"),
    (["--milestones", "0", "1"], "--milestones must be increasing fractions"),
    (["--n", "1"], "--n must be >= 2, got 1"), (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--test-size", "0"], "--test-size must be >= 1, got 0"),
    (["--seeds", "1", "1"], "--seeds must be distinct integers >= 0"), (["--seeds", "-1"], "--seeds must be distinct"),
])
def test_toy_loop_refuses_a_numeric_option_no_run_can_use(tmp_path, capsys, argv, message):
    # before: a NaN budget ran every arm max_steps (10000) steps, unsorted milestones evaluated 0.5 at the full
    # budget, a repeated seed ran twice into one file; all after the model was loaded and probed
    from lab.analysis import toy_loop

    with pytest.raises(SystemExit):
        toy_loop.main(["--model", str(tmp_path / "absent"), "--out", str(tmp_path / "out"), *argv])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------- each arm's own rate (lab.analysis.lr_per_arm)
def _ws_runs(out, lr: float, ws: str, accs: dict[str, list[float]], split: str = "val") -> None:
    folder = lr_selection.lr_folder(out, lr) / f"ws_{ws}"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"args": {"eval_split": split, "lr": lr}}))
    for arm, values in accs.items():
        for seed, acc in enumerate(values):
            run = {"arm": arm, "seed": 100 + seed, "steps": [],
                   "evals": [{"milestone": 0.5, "step": 6, "flops": 0.5, "accuracy": 0.0},  # not the final one
                             {"milestone": 1.0, "step": 12, "flops": 1.0, "accuracy": acc}]}
            (folder / f"{arm.replace(' ', '_')}_s{100 + seed}.json").write_text(json.dumps(run))


def test_each_arm_gets_its_own_rate_by_the_mean_of_warm_start_means(tmp_path):
    from lab.analysis import lr_per_arm

    # G: 1e-4 wins (0.55 against 0.50); L: 3e-4 wins (0.70 against 0.55); T ties at 0.50: the rate listed first
    _ws_runs(tmp_path, 3e-4, "a", {"G": [0.2, 0.4], "L": [0.8, 0.8], "T": [0.5, 0.5]})
    _ws_runs(tmp_path, 3e-4, "b", {"G": [0.7, 0.7], "L": [0.6, 0.6], "T": [0.5, 0.5]})
    _ws_runs(tmp_path, 1e-4, "a", {"G": [0.4, 0.4], "L": [0.5, 0.5], "T": [0.4, 0.6]})
    _ws_runs(tmp_path, 1e-4, "b", {"G": [0.7, 0.7], "L": [0.6, 0.6], "T": [0.5, 0.5]})
    rows = lr_per_arm.per_arm_rows(tmp_path, [3e-4, 1e-4], ["a", "b"], ["G", "L", "T"])
    by = {(r["arm"], r["lr"]): r for r in rows}
    assert by["G", 3e-4]["mean"] == pytest.approx(0.5) and by["G", 1e-4]["mean"] == pytest.approx(0.55)
    assert by["G", 3e-4]["per_warm_start"]["a"] == {"mean": pytest.approx(0.3), "seeds": 2}
    # stratified interval of the mean of means: SE² = (0.1414²/2 + 0²/2)/4, df 1 -> half-width 12.706 * 0.05
    assert by["G", 3e-4]["pooled"]["high"] - 0.5 == pytest.approx(12.7062 * 0.05, rel=1e-4)
    assert lr_per_arm.chosen_lrs(rows) == {"G": 1e-4, "L": 3e-4, "T": 3e-4}
    table = lr_per_arm.format_table(rows, ["a", "b"])
    assert table.count("| yes |") == 3 and "| G | 0.0001 | 0.400 (2) | 0.700 (2) |" in table
    lr_per_arm.write_runs_csv(rows, tmp_path / "runs.csv", "addition")
    assert len((tmp_path / "runs.csv").read_text().splitlines()) == 1 + 3 * 2 * 2 * 2


def test_per_arm_selection_refuses_test_set_runs_and_missing_arms(tmp_path):
    from lab.analysis import lr_per_arm

    _ws_runs(tmp_path / "t", 3e-4, "a", {"G": [0.2, 0.4]}, split="test")
    with pytest.raises(ValueError, match="not evaluated on the validation split"):
        lr_per_arm.per_arm_rows(tmp_path / "t", [3e-4], ["a"], ["G"])
    _ws_runs(tmp_path / "v", 3e-4, "a", {"G": [0.2, 0.4]})
    with pytest.raises(ValueError, match=r"lr_0.0003: --arms: no run of \['L'\] in the warm starts \['a'\]; the arms are \['G'\]"):
        lr_per_arm.per_arm_rows(tmp_path / "v", [3e-4], ["a"], ["G", "L"])


@pytest.mark.parametrize("extra, message", [
    (["--lrs", "3e-4", "3e-4"], "--lrs must be distinct positive rates"),
    (["--lrs", "1e-4", "--arms", "GSPO"], "--arms: unknown ['GSPO']"),
    (["--lrs", "1e-4", "--", "--lr", "3e-4"], "are set by lr_per_arm itself"),
    (["--lrs", "1e-4", "--", "--eval-split=test"], "are set by lr_per_arm itself"),
])
def test_per_arm_selection_refuses_bad_options_before_any_run(tmp_path, capsys, extra, message):
    from lab.analysis import lr_per_arm

    argv = ["--out", str(tmp_path / "out"), "--warm-start", f"a={tmp_path}", "--arms", "GSPO G=n"]
    if "--arms" in extra:
        argv = argv[:-2]
    with pytest.raises(SystemExit):
        lr_per_arm.main(argv + extra)
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_warm_start_with_one_seed_leaves_the_pooled_column_the_mean_that_chooses(tmp_path):
    # warm start "a" has one seed per rate (no SD): before, the pooled column dropped it and showed the other warm
    # start's mean (0.510 and 0.560) while the rule chose by the mean over both (0.705 and 0.630), so the table said
    # "highest pooled mean" beside the lower one
    from lab.analysis import lr_per_arm

    for lr, one, three in ((1e-4, 0.9, [0.50, 0.51, 0.52]), (3e-4, 0.7, [0.55, 0.56, 0.57])):
        _ws_runs(tmp_path, lr, "a", {"G": [one]})
        _ws_runs(tmp_path, lr, "b", {"G": three})
    rows = lr_per_arm.per_arm_rows(tmp_path, [1e-4, 3e-4], ["a", "b"], ["G"])
    assert [r["pooled"]["mean"] for r in rows] == pytest.approx([0.705, 0.630])
    assert lr_per_arm.chosen_lrs(rows) == {"G": 1e-4}
    table = lr_per_arm.format_table(rows, ["a", "b"])
    assert "| 0.705 (no interval) | yes |" in table and "nan" not in table


@pytest.mark.parametrize("extra, named", [(["--seeds", "100"], "--seeds"), (["--budget-steps", "48"], "--budget-steps"),
                                          (["--task", "three_sum_named", "--jobs", "2"], "--jobs, --task")])
def test_selection_report_only_refuses_options_that_only_shape_new_runs(tmp_path, capsys, extra, named):
    # before: accepted and ignored (--seeds 100: the table still chose over every seed on disk)
    _lr_folder(tmp_path, 3e-4, 0.20, [0.10, 0.14, 0.12])
    with pytest.raises(SystemExit):
        lr_selection.main(["--model", str(tmp_path), "--out", str(tmp_path), "--lrs", "3e-4", "--report-only", *extra])
    assert f"{named}: not used with --report-only" in capsys.readouterr().err
    assert not (tmp_path / "selection.md").exists()


def test_selection_csv_names_the_task_the_runs_recorded(tmp_path, monkeypatch):
    # before: the --task option's value (default addition) labelled a report-only CSV of another task's runs
    _lr_folder(tmp_path, 3e-4, 0.20, [0.10, 0.14])
    meta = json.loads((lr_selection.lr_folder(tmp_path, 3e-4) / "meta.json").read_text())
    meta["args"]["task"] = "three_sum_named"
    (lr_selection.lr_folder(tmp_path, 3e-4) / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setattr(lr_selection, "check_models", lambda *a, **k: None)  # hand-written folder: no model to hash
    assert lr_selection.main(["--model", str(tmp_path), "--out", str(tmp_path), "--lrs", "3e-4", "--report-only"]) == 0
    assert (tmp_path / "runs.csv").read_text().splitlines()[1].startswith("three_sum_named,")


@pytest.mark.parametrize("extra, named", [(["--seeds", "100"], "--seeds: not used with --report-only"),
                                          (["--chunk", "1"], "--chunk: not used with --report-only"),
                                          (["--", "--budget-steps", "48"],
                                           "after --: ['--budget-steps', '48'] not used")])
def test_per_arm_report_only_refuses_options_that_only_shape_new_runs(tmp_path, capsys, extra, named):
    from lab.analysis import lr_per_arm

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "config.json").write_text("{}")
    _ws_runs(tmp_path / "out", 3e-4, "a", {"GSPO G=n": [0.2, 0.4]})
    with pytest.raises(SystemExit):
        lr_per_arm.main(["--out", str(tmp_path / "out"), "--warm-start", f"a={tmp_path / 'ws'}", "--arms", "GSPO G=n",
                         "--lrs", "3e-4", "--report-only", *extra])
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out" / "selection.md").exists()
