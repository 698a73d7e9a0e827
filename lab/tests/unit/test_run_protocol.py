"""Runs of different protocols are never pooled (``lab.analysis.run_protocol``): a resumed ``lab.analysis.toy_loop`` folder
keeps its warm start and milestones; a warm start recorded for another task is refused; every reader that pools or
compares several toy_loop folders (breakeven, the ablation report, curves_report, lr_selection, lr_per_arm) refuses
folders that differ in a run-defining option it does not vary, one warm start under two names or a name given twice,
an unknown arm, baseline or seed, and the baseline among the arms; a budget in steps needs a baseline arm's step or an
explicit ``--budget-arm``; the table modules are not silent commands. Every folder here is hand-written in
``lab.analysis.toy_loop``'s format (meta.json + one JSON per arm and seed)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab.analysis import ablation, lr_per_arm, lr_selection, toy_loop
from lab.analysis.ablation_report import write_report
from lab.analysis.ablation_stats import parse_warm_starts
from lab.analysis.breakeven import analyse
from lab.analysis.curves_report import load_with_arm_folders, report
from lab.analysis.run_protocol import RUN_DEFINING_OPTIONS, check_comparable, sha256_of_dir

ROOT = Path(__file__).resolve().parents[3]


def _meta(sha: str = "a" * 64, split: str = "test", **options) -> dict:
    """A meta.json as lab.analysis.toy_loop writes it (``args`` holds every option; ``options`` change some)."""
    args = {**RUN_DEFINING_OPTIONS, "milestones": [1.0], "model": "ws/model", "assets": None, **options,
            "eval_split": split}
    return {"args": args, "warm_start_sha256": sha, "budget_flops": 40.0, "budget_unit": args["budget_unit"],
            "budget_arm": "GSPO G=n", f"warm_start_{split}_accuracy": 0.5, "task": args["task"]}


def _folder(folder: Path, meta: dict, accs: dict[str, list[float]]) -> Path:
    """One toy_loop output folder: ``accs[arm][seed]`` is that run's accuracy at the full budget."""
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps(meta))
    for arm, values in accs.items():
        for seed, acc in enumerate(values):
            run = {"arm": arm, "seed": seed, "steps": [{"step": 0, "flops": 40.0, "reward": 0.5, "updates": 1,
                                                         "flops_by_phase": {"main_gen": 40.0}}],
                   "evals": [{"milestone": 1.0, "step": 1, "flops": 40.0, "accuracy": acc}]}
            (folder / f"{arm.replace(' ', '_').replace('=', '_')}_s{seed}.json").write_text(json.dumps(run))
    return folder


RUNS = {"GSPO G=n": [0.5, 0.6, 0.55], "IBPO G=n": [0.52, 0.61, 0.58]}


# ------------------------------------------------------------------------------------- 1. resuming a folder
def _args(**changes) -> argparse.Namespace:
    return argparse.Namespace(**{**RUN_DEFINING_OPTIONS, "milestones": [1.0], "model": "ws/other", "assets": None,
                                 **changes})


def test_resuming_with_other_milestones_or_another_warm_start_is_refused(tmp_path):
    meta = _meta()
    toy_loop.check_same_protocol(meta, _args(), tmp_path, "GSPO G=n", "a" * 64)  # the same: accepted
    with pytest.raises(SystemExit, match=r"--milestones \[1.0\] there, \[0.25, 1.0\] now"):
        toy_loop.check_same_protocol(meta, _args(milestones=[0.25, 1.0]), tmp_path, "GSPO G=n", "a" * 64)
    with pytest.raises(SystemExit, match=r"warm start ws/model \(sha256 aaaaaaaaaaaa\) there, ws/other "
                                         r"\(sha256 bbbbbbbbbbbb\) now"):
        toy_loop.check_same_protocol(meta, _args(), tmp_path, "GSPO G=n", "b" * 64)
    # a meta.json written before --milestones existed: its runs were evaluated at 0.25, 0.5, 0.75 and 1
    old = {"args": {k: v for k, v in meta["args"].items() if k != "milestones"}}
    toy_loop.check_same_protocol(old, _args(milestones=[0.25, 0.5, 0.75, 1.0]), tmp_path)
    with pytest.raises(SystemExit, match=r"--milestones \[0.25, 0.5, 0.75, 1.0\] there, \[1.0\] now"):
        toy_loop.check_same_protocol(old, _args(), tmp_path)
    # the budget arm compared as the arm whose step set the budget: a folder that left --budget-arm to its first
    # arm (IBPO G=n) resumed with --budget-arm 'IBPO G=n' is the same protocol; with 'GSPO G=n' it is not
    first = {**meta, "budget_arm": "IBPO G=n"}
    toy_loop.check_same_protocol(first, _args(budget_arm="IBPO G=n"), tmp_path, "IBPO G=n", "a" * 64)
    with pytest.raises(SystemExit, match=r"--budget-arm 'IBPO G=n' there, 'GSPO G=n' now"):
        toy_loop.check_same_protocol(first, _args(budget_arm="GSPO G=n"), tmp_path, "GSPO G=n", "a" * 64)


def test_load_or_measure_meta_compares_the_models_sha_and_names_an_unreadable_meta(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "meta.json"
    path.write_text(json.dumps(_meta(sha=sha256_of_dir(model))))
    baseline = toy_loop.default_arms()["GSPO G=n"]
    toy = SimpleNamespace(model_dir=str(model))
    assert toy_loop.load_or_measure_meta(path, toy, baseline, _args(), [])["budget_flops"] == 40.0
    (model / "config.json").write_text('{"other": 1}')  # another warm start at the same path
    with pytest.raises(SystemExit, match="warm start ws/model .* there, ws/other .* now"):
        toy_loop.load_or_measure_meta(path, toy, baseline, _args(), [])
    path.write_text('{"args": {')  # a run stopped while writing it: before, a JSONDecodeError with no path
    with pytest.raises(SystemExit, match=f"{path}: not readable JSON"):
        toy_loop.load_or_measure_meta(path, toy, baseline, _args(), [])


# ------------------------------------------------------------------------------ 2. the warm start's task
def test_a_warm_start_recorded_for_another_task_is_refused_before_loading(tmp_path, capsys):
    out = tmp_path / "assets"
    (out / "model_sft").mkdir(parents=True)
    (out / "model_sft" / "config.json").write_text("{}")
    (out / "assets.json").write_text(json.dumps({"model": str(out / "model_sft"), "task": "three_sum_named"}))
    assert toy_loop.warm_start_task(out / "model_sft") == "three_sum_named"
    for source in (["--assets", str(out)], ["--model", str(out / "model_sft")]):
        with pytest.raises(SystemExit):
            toy_loop.main([*source, "--out", str(tmp_path / "o"), "--task", "addition", "--arms", "GSPO G=n",
                           "--seeds", "0"])
        assert "--task addition: the warm start" in capsys.readouterr().err
        assert not (tmp_path / "o").exists()
    # the addition builder writes assets.json without a task
    (out / "assets.json").write_text(json.dumps({"model": str(out / "model_sft")}))
    assert toy_loop.warm_start_task(out / "model_sft") == "addition"
    with pytest.raises(SystemExit):
        toy_loop.main(["--model", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"), "--arms", "GSPO G=n"])
    assert "no config.json there" in capsys.readouterr().err


def test_every_committed_warm_start_records_its_task_and_a_mismatch_is_refused(tmp_path, capsys):
    from lab.toy_tasks.tasks import TASKS

    folders = sorted(p for p in (ROOT / "lab" / "toy_tasks" / "warm_starts").iterdir() if p.is_dir())
    assert folders
    for folder in folders:  # tasks.json beside them, not a file inside (their sha256 would change)
        assert toy_loop.warm_start_task(folder) in TASKS, folder
    assert toy_loop.warm_start_task(ROOT / "lab" / "toy_tasks" / "warm_starts" / "three_sum_named_seed0") == "three_sum_named"
    with pytest.raises(SystemExit):
        toy_loop.main(["--model", str(ROOT / "lab" / "toy_tasks" / "warm_starts" / "addition_seed0"), "--out",
                       str(tmp_path / "o"), "--task", "three_sum_named", "--arms", "GSPO G=n", "--seeds", "0"])
    assert "--task three_sum_named: the warm start" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------ 3. readers of several folders
def test_check_comparable_names_both_folders_and_the_option(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    check_comparable([("w", a, _meta()), ("w", b, _meta(lr=1e-4))], varies={"lr"})
    with pytest.raises(ValueError, match=rf"{a} and {b} were run with different --lr \(0.0003 and 0.0001\)"):
        check_comparable([("w", a, _meta()), ("w", b, _meta(lr=1e-4))])
    # a meta.json without a newer key holds its old value: no --cost-model recorded is the default roofline
    old = _meta()
    del old["args"]["cost_model"]
    check_comparable([("w", a, _meta()), ("w", b, old)])


def _shares(root: Path, metas: dict[tuple[float, str], dict]) -> dict[float, Path]:
    for (share, w), meta in metas.items():
        _folder(root / f"s{share}" / f"ws_{w}", meta, RUNS)
    return {share: root / f"s{share}" for share in {s for s, _ in metas}}


def test_breakeven_refuses_mixed_protocols_and_names(tmp_path):
    good = {(s, w): _meta(sha=w * 64, correction_cost_share=s) for s in (0.0, 1.0) for w in ("a", "b")}
    folders = _shares(tmp_path / "good", good)
    assert analyse(folders, ["a", "b"], ["IBPO G=n"], "GSPO G=n", n_boot=100)["arms"]["IBPO G=n"]
    # H3: one share's weak folder evaluated on the validation split
    mixed = {**good, (0.0, "a"): _meta(sha="a" * 64, split="val", correction_cost_share=0.0)}
    with pytest.raises(ValueError, match=r"different --eval-split \('test' and 'val'\)|\('val' and 'test'\)"):
        analyse(_shares(tmp_path / "split", mixed), ["a", "b"], ["IBPO G=n"], "GSPO G=n", n_boot=100)
    # H3: another warm start under the name "a" at share 0
    swapped = {**good, (0.0, "a"): _meta(sha="c" * 64, correction_cost_share=0.0)}
    with pytest.raises(ValueError, match="warm start 'a': .* not the same warm start"):
        analyse(_shares(tmp_path / "swap", swapped), ["a", "b"], ["IBPO G=n"], "GSPO G=n", n_boot=100)
    cases = [  # H4, H5, M1: a name given twice, the baseline as its own arm, unknown arm, baseline, seed
        (dict(warm_starts=["a", "a"]), "--warm-start: the name 'a' is given twice"),
        (dict(arms=["GSPO G=n"]), "'GSPO G=n' is the baseline"),
        (dict(arms=["IBPO G=N"]), r"no run of \['IBPO G=N'\] .* the arms are \['GSPO G=n', 'IBPO G=n'\]"),
        (dict(baseline="GSPO"), r"--baseline 'GSPO': no run of that arm .* the arms are"),
        (dict(seeds={0, 7}), r"--seeds: no run of seed\(s\) \[7\] .* the seeds are \[0, 1, 2\]"),
    ]
    for change, message in cases:
        kwargs = {"warm_starts": ["a", "b"], "arms": ["IBPO G=n"], "baseline": "GSPO G=n", **change}
        with pytest.raises(ValueError, match=message):
            analyse(folders, kwargs["warm_starts"], kwargs["arms"], kwargs["baseline"], kwargs.get("seeds"),
                    n_boot=100)


def _ablation(root: Path, metas: dict[str, dict]) -> Path:
    for name, meta in metas.items():
        _folder(root / f"ws_{name}", meta, RUNS)
    return root


def test_the_ablation_report_refuses_mixed_folders_and_writes_nothing(tmp_path):
    out = _ablation(tmp_path / "mixed", {"weak": _meta(sha="a" * 64), "medium": _meta(sha="b" * 64, train_size=16)})
    with pytest.raises(ValueError, match=r"ws_weak and .*ws_medium were run with different --train-size"):
        write_report(out, ["weak", "medium"], "GSPO G=n", [])
    out = _ablation(tmp_path / "same_sha", {"medium": _meta(sha="a" * 64), "strong": _meta(sha="a" * 64)})
    with pytest.raises(ValueError, match="'medium' .* and 'strong' .* are the same warm start"):
        write_report(out, ["medium", "strong"], "GSPO G=n", [])
    assert not (out / "report.md").exists() and not (out / "runs.csv").exists()
    # NAME=MODEL_DIR against the folder's sha
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = _ablation(tmp_path / "models", {"weak": _meta(sha=sha256_of_dir(model))})
    write_report(out, ["weak"], "GSPO G=n", [], models={"weak": str(model)}, arms=["IBPO G=n"])
    (out / "report.md").write_text("kept")
    (model / "config.json").write_text('{"other": 1}')
    with pytest.raises(ValueError, match=f"--warm-start {model}: .*ws_weak's runs started from warm start"):
        write_report(out, ["weak"], "GSPO G=n", [], models={"weak": str(model)})
    # M3: a baseline with no runs errors before report.md / runs.csv are overwritten
    with pytest.raises(ValueError, match=r"the baseline \(the first of --arms\) 'GSPO G=4n': no run of that arm"):
        write_report(out, ["weak"], "GSPO G=4n", [], arms=["IBPO G=n"])
    assert (out / "report.md").read_text() == "kept"


def test_ablation_refuses_a_warm_start_name_or_model_given_twice(tmp_path):
    for name in ("m1", "m2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match="the name 'weak' is given twice"):
        parse_warm_starts([f"weak={tmp_path / 'm1'}", f"weak={tmp_path / 'm2'}"])
    with pytest.raises(SystemExit, match="already given as 'weak'"):
        parse_warm_starts([f"weak={tmp_path / 'm1'}", f"strong={tmp_path / 'm1'}/"])


def test_curves_report_refuses_mixed_splits_and_names_the_split(tmp_path):
    out = _ablation(tmp_path / "mix", {"weak": _meta(sha="a" * 64, split="val"), "medium": _meta(sha="b" * 64)})
    with pytest.raises(ValueError, match="different --eval-split"):
        report(out, ["weak", "medium"], "GSPO G=n")
    val = _ablation(tmp_path / "val", {"weak": _meta(sha="a" * 64, split="val"), "medium": _meta(sha="b" * 64, split="val")})
    assert "Δ = arm − baseline, validation accuracy" in report(val, ["weak", "medium"], "GSPO G=n")
    test = _ablation(tmp_path / "test", {"weak": _meta(sha="a" * 64), "medium": _meta(sha="b" * 64)})
    assert "Δ = arm − baseline, test accuracy" in report(test, ["weak", "medium"], "GSPO G=n")
    # H7: an --arm-folder of the same warm start and budget but the validation split; its own lr is allowed
    with pytest.raises(ValueError, match="--arm-folder IBPO G=n=.*different --eval-split"):
        load_with_arm_folders(test, ["weak"], {"IBPO G=n": val})
    own_lr = _ablation(tmp_path / "own_lr", {"weak": _meta(sha="a" * 64, lr=1e-4)})
    assert load_with_arm_folders(test, ["weak"], {"IBPO G=n": own_lr})
    for args, message in ((dict(warm_starts=["weak", "weak"]), "given twice"),
                          (dict(arms=["GSPO G=n", "IBPO G=n"]), "is the baseline"),
                          (dict(seeds={0, 9}), r"seed\(s\) \[9\]")):
        kwargs = {"warm_starts": ["weak", "medium"], "arms": None, "seeds": None, **args}
        with pytest.raises(ValueError, match=message):
            report(test, kwargs["warm_starts"], "GSPO G=n", kwargs["arms"], seeds=kwargs["seeds"])


def test_curves_report_pools_tasks_each_at_its_own_rate_but_one_task_at_one_rate(tmp_path):
    # docs/evidence.md A′: six warm starts of two tasks in one table, each task at the rate its selection chose
    two = _ablation(tmp_path / "two", {"add": _meta(sha="a" * 64), "tsn": _meta(sha="b" * 64, task="three_sum_named",
                                                                               lr=1e-4)})
    assert "| IBPO G=n | 1 |" in report(two, ["add", "tsn"], "GSPO G=n")
    mixed = _ablation(tmp_path / "one", {"w1": _meta(sha="a" * 64), "w2": _meta(sha="b" * 64, lr=1e-4)})
    with pytest.raises(ValueError, match=r"different --lr \(0.0003 and 0.0001\)"):
        report(mixed, ["w1", "w2"], "GSPO G=n")
    other = _ablation(tmp_path / "other", {"add": _meta(sha="a" * 64), "tsn": _meta(sha="b" * 64, task="three_sum_named",
                                                                                   budget_steps=12)})
    with pytest.raises(ValueError, match="different --budget-steps"):
        report(other, ["add", "tsn"], "GSPO G=n")


def _rate_folder(folder: Path, lr: float, sha: str = "a" * 64, **options) -> None:
    _folder(folder, _meta(sha=sha, split="val", lr=lr, **options), {"GSPO G=n": [0.5, 0.6], "IBPO G=n": [0.4, 0.5]})


def test_lr_selection_refuses_folders_of_other_budgets_or_another_warm_start(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    sha = sha256_of_dir(model)
    _rate_folder(lr_selection.lr_folder(tmp_path / "ok", 3e-4), 3e-4, sha)
    _rate_folder(lr_selection.lr_folder(tmp_path / "ok", 1e-4), 1e-4, sha)
    assert len(lr_selection.selection_rows(tmp_path / "ok", [3e-4, 1e-4], "GSPO G=n", model)) == 2
    with pytest.raises(ValueError, match=f"--model {model}: .* started from warm start bbbbbbbbbbbb"):
        _rate_folder(lr_selection.lr_folder(tmp_path / "other", 3e-4), 3e-4, "b" * 64)
        lr_selection.selection_rows(tmp_path / "other", [3e-4], "GSPO G=n", model)
    _rate_folder(lr_selection.lr_folder(tmp_path / "budget", 3e-4), 3e-4, sha)
    _rate_folder(lr_selection.lr_folder(tmp_path / "budget", 1e-4), 1e-4, sha, budget_steps=2)
    with pytest.raises(ValueError, match=r"different --budget-steps \(20 and 2\)"):
        lr_selection.selection_rows(tmp_path / "budget", [3e-4, 1e-4], "GSPO G=n")


def test_lr_per_arm_refuses_another_warm_start_or_budget_at_one_rate(tmp_path):
    for lr in (3e-4, 1e-4):
        for ws, sha in (("weak", "a" * 64), ("medium", "b" * 64)):
            _rate_folder(lr_selection.lr_folder(tmp_path / "ok", lr) / f"ws_{ws}", lr, sha)
            _rate_folder(lr_selection.lr_folder(tmp_path / "bad", lr) / f"ws_{ws}", lr,
                         "c" * 64 if (lr, ws) == (1e-4, "weak") else sha)
    assert len(lr_per_arm.per_arm_rows(tmp_path / "ok", [3e-4, 1e-4], ["weak", "medium"], ["GSPO G=n"])) == 2
    with pytest.raises(ValueError, match="warm start 'weak': .* not the same warm start"):
        lr_per_arm.per_arm_rows(tmp_path / "bad", [3e-4, 1e-4], ["weak", "medium"], ["GSPO G=n"])
    with pytest.raises(ValueError, match="given twice"):
        lr_per_arm.per_arm_rows(tmp_path / "ok", [3e-4], ["weak", "weak"], ["GSPO G=n"])


# ------------------------------------------------------------------------------------ 4. the budget arm
def test_the_budget_is_in_gspo_g_n_steps_unless_the_budget_arm_is_named(tmp_path, capsys):
    # before: the first of --arms set the budget; 'GSPO G=4n' first silently gave a budget 4x the protocol's (an IBPO
    # arm first was refused); now the unit does not depend on the order of --arms
    assert toy_loop.budget_arm_name(["GSPO G=n", "greedy disagreements"], None) == "GSPO G=n"
    for first in ("GSPO G=4n", "IBPO G=n", "greedy disagreements", "oracle mask"):
        assert toy_loop.budget_arm_name([first, "GSPO G=n"], None) == "GSPO G=n"
    assert toy_loop.budget_arm_name(["IBPO G=n"], "IBPO G=n") == "IBPO G=n"
    assert toy_loop.budget_arm_name(["GSPO G=n"], "GSPO G=4n") == "GSPO G=4n"


# ------------------------------------------------------------------------ 5. modules that are not commands
@pytest.mark.parametrize("module, command", [
    ("equal_compute_report", "lab/scripts/compare_methods.py --report-only"),
    ("ablation_report", "python -m lab.analysis.ablation"),
    ("credit_localisation", "python -m lab.analysis.toy_loop"),
    ("correction_workload", "lab/scripts/bench_correction_prompts.py"),
])
def test_a_module_that_is_not_a_command_says_which_to_run(module, command):
    # before: exit 0 and no output, whatever the arguments
    done = subprocess.run([sys.executable, "-m", f"lab.analysis.{module}", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and command in done.stderr and "not a command" in done.stderr
