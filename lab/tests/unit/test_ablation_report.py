"""lab.analysis.ablation / lab.analysis.ablation_report on hand-made runs: the stratified pooled difference against a
direct computation, the per-warm-start rows, and the equal-updates axis (runs evaluated after their last step)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from lab.analysis.ablation_stats import parse_seeds, stratified_difference
from lab.analysis.ablation_report import final_eval, warm_start_rows, write_report
from evaluation.stats import student_t_quantile


def test_parse_seeds_ranges_and_singles():
    assert parse_seeds(["0-2", "5", "7-8"]) == [0, 1, 2, 5, 7, 8]


@pytest.mark.parametrize("spec, message", [
    (["3-1"], "--seeds '3-1': the range is empty"), (["a"], "--seeds 'a': expected a seed N"),
    (["-1"], "--seeds '-1': expected"), (["1-"], "--seeds '1-': expected"), (["0-2", "1"], "seed 1 is given twice"),
    ([], "--seeds: no seed given"),
])
def test_parse_seeds_refuses_a_malformed_list_naming_the_item(spec, message):
    # before: '3-1' gave no seed at all (the run did nothing), '0-2 1' ran seed 1 twice, 'a' a bare int() error
    with pytest.raises(SystemExit, match=message):
        parse_seeds(spec)


def test_stratified_difference_matches_a_direct_computation():
    """Mean of the stratum means; variance Σ s²/n / W²; Welch-Satterthwaite df rounded down: recomputed here
    term by term on random strata."""
    rng = np.random.default_rng(3)
    strata = [(float(rng.normal()), float(rng.uniform(0.05, 0.3)), int(n)) for n in (30, 30, 12)]
    got = stratified_difference(strata)
    w = 3
    terms = [sd ** 2 / n / w ** 2 for _, sd, n in strata]
    var = sum(terms)
    df = math.floor(var ** 2 / sum(t ** 2 / (n - 1) for t, (_, _, n) in zip(terms, strata)))
    centre = sum(d for d, _, _ in strata) / w
    half = student_t_quantile(0.975, df) * math.sqrt(var)
    assert got["diff"] == pytest.approx(centre, rel=1e-12)
    assert got["df"] == df and got["strata"] == 3
    assert got["low"] == pytest.approx(centre - half, rel=1e-12) and got["high"] == pytest.approx(centre + half, rel=1e-12)
    # a stratum with one seed has no SD: it is left out, not counted as certain
    assert stratified_difference([(0.1, float("nan"), 1)])["strata"] == 0


def _run(arm: str, seed: int, accuracy: float, milestone: float | None, updates: int, rewards: list[float]) -> dict:
    steps = [{"step": i, "flops": float(i + 1), "reward": r, "updates": 1} for i, r in enumerate(rewards[:updates])]
    return {"arm": arm, "seed": seed, "steps": steps, "budget": 1.0,
            "evals": [{"milestone": milestone, "step": updates, "flops": float(updates), "accuracy": accuracy}]}


def _write_folder(folder, meta: dict, runs: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps(meta))
    for r in runs:
        slug = r["arm"].lower().replace(" ", "_").replace("=", "_")
        (folder / f"{slug}_s{r['seed']}.json").write_text(json.dumps(r))


@pytest.mark.parametrize("milestone", [1.0, None], ids=["equal_compute", "equal_updates"])
def test_report_rows_per_warm_start_and_pooled(tmp_path, milestone):
    """Two warm starts, four seeds, baseline and one arm: the paired Δ, the change from the warm start and the
    updates are the hand-computed ones, whether the runs end at the compute budget or after --max-steps."""
    rng = random.Random(0)
    accs = {"weak": ([0.50, 0.55, 0.52, 0.58], [0.40, 0.41, 0.45, 0.44]),
            "strong": ([0.90, 0.91, 0.89, 0.92], [0.91, 0.93, 0.90, 0.92])}
    for ws, (base, arm) in accs.items():
        runs = [_run("GSPO G=n", s, a, milestone, 12, [rng.random() for _ in range(12)]) for s, a in enumerate(base)]
        runs += [_run("IBPO G=n", s, a, milestone, 8, [0.5] * 8) for s, a in enumerate(arm)]
        _write_folder(tmp_path / f"ws_{ws}", {"warm_start_test_accuracy": 0.45 if ws == "weak" else 0.88,
                                            "warm_start_sha256": ws * 8}, runs)
    text = write_report(tmp_path, ["weak", "strong"], "GSPO G=n", ["--arms", "GSPO G=n", "IBPO G=n"])
    from lab.analysis.equal_compute_report import load_results

    meta, results = load_results(tmp_path / "ws_weak")
    rows = {r["arm"]: r for r in warm_start_rows(meta, results, "GSPO G=n")}
    ibpo = rows["IBPO G=n"]
    assert ibpo["seeds"] == 4 and ibpo["updates"] == 8.0 and rows["GSPO G=n"]["updates"] == 12.0
    assert ibpo["diff"]["diff"] == pytest.approx(np.mean(accs["weak"][1]) - np.mean(accs["weak"][0]))
    assert ibpo["change"]["mean"] == pytest.approx(np.mean(accs["weak"][1]) - 0.45)
    pooled_line = next(line for line in text.splitlines() if line.startswith("| IBPO G=n | 2 |"))
    pooled = (np.mean(accs["weak"][1]) - np.mean(accs["weak"][0]) + np.mean(accs["strong"][1])
              - np.mean(accs["strong"][0])) / 2
    assert pooled_line.split("|")[3].strip().startswith(f"{pooled:+.3f}")
    assert pooled_line.rstrip().endswith("| 0/2 | 1/2 |")  # no significant win; weak ends below its start
    csv_text = (tmp_path / "runs.csv").read_text().splitlines()
    assert len(csv_text) == 1 + 16 and csv_text[0].startswith("task,warm_start,")


def test_final_eval_prefers_the_budget_and_is_none_before_any():
    both = {"evals": [{"milestone": None, "accuracy": 0.1}, {"milestone": 1.0, "accuracy": 0.2}]}
    assert final_eval(both)["accuracy"] == 0.2
    assert final_eval({"evals": [{"milestone": 0.5, "accuracy": 0.3}]}) is None


def test_a_validation_ablation_reports_against_the_validation_warm_start(tmp_path):
    """``--eval-split val`` folders: the change from the warm start uses the warm start's validation accuracy
    (not its test accuracy), the table and CSV say the split, and folders of two splits are one report refused."""
    for ws in ("a", "b"):
        runs = [_run("GSPO G=n", s, 0.5 + 0.01 * s, 1.0, 12, [0.5] * 12) for s in range(3)]
        runs += [_run("IBPO G=n", s, 0.6 + 0.01 * s, 1.0, 9, [0.5] * 9) for s in range(3)]
        _write_folder(tmp_path / f"ws_{ws}", {"warm_start_val_accuracy": 0.3, "warm_start_test_accuracy": 0.9,
                                            "warm_start_sha256": ws * 8, "args": {"eval_split": "val"}}, runs)
    text = write_report(tmp_path, ["a", "b"], "GSPO G=n", [])
    assert "| validation accuracy [95% CI] |" in text and "test accuracy" not in text
    line = next(row for row in text.splitlines() if row.startswith("| a (0.300,") and "| IBPO G=n |" in row)
    assert line.split("|")[8].strip().startswith("+0.310")  # mean 0.61 - 0.30
    rows = (tmp_path / "runs.csv").read_text().splitlines()
    assert rows[0].split(",")[3:5] == ["warm_start_accuracy", "eval_split"] and rows[1].split(",")[3:5] == ["0.3", "val"]
    meta_b = json.loads((tmp_path / "ws_b" / "meta.json").read_text())
    meta_b["args"]["eval_split"] = "test"
    (tmp_path / "ws_b" / "meta.json").write_text(json.dumps(meta_b))
    with pytest.raises(ValueError, match=r"ws_a and .*ws_b were run with different --eval-split \('val' and 'test'\)"):
        write_report(tmp_path, ["a", "b"], "GSPO G=n", [])


def test_ablation_refuses_a_chunk_below_one_before_any_run(tmp_path, capsys):
    # before: range(0, n, 0) raised a bare "range() arg 3 must not be zero"
    from lab.analysis import ablation

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "config.json").write_text("{}")
    with pytest.raises(SystemExit):
        ablation.main(["--out", str(tmp_path / "out"), "--warm-start", f"w={tmp_path / 'ws'}", "--arms", "GSPO G=n",
                       "--seeds", "0", "--chunk", "0"])
    assert "--chunk must be >= 1, got 0" in capsys.readouterr().err


def test_a_report_with_no_warm_start_folder_is_refused_and_a_missing_one_is_said(tmp_path, capsys):
    # before: an empty report (headers only), exit status 0, for an --out or --warm-start that names no runs
    with pytest.raises(SystemExit, match=r"no ws_<name>/meta.json for the warm starts \['weak'\]: nothing to report"):
        write_report(tmp_path, ["weak"], "GSPO G=n", [])
    assert not (tmp_path / "report.md").exists()
    runs = [_run(arm, s, 0.5, 1.0, 4, [0.5] * 4) for arm in ("GSPO G=n", "IBPO G=n") for s in range(2)]
    _write_folder(tmp_path / "ws_weak", {"warm_start_test_accuracy": 0.45, "warm_start_sha256": "w" * 8}, runs)
    write_report(tmp_path, ["weak", "strnog"], "GSPO G=n", [])
    assert "no runs of the warm start(s) ['strnog']" in capsys.readouterr().err


def test_a_warm_start_with_equal_differences_is_not_counted_a_significant_win(tmp_path):
    # warm start "flat": both seeds exactly 8 of 512 problems ahead (SD 0, no t test; the paired t's p would read 0);
    # "real": a positive Δ with spread. Only a warm start with a t test can count as "p < 0.05 and Δ > 0"
    for name, deltas in (("flat", (8 / 512, 8 / 512)), ("real", (0.30, 0.32, 0.31))):
        meta = {"warm_start_sha256": name * 16, "warm_start_test_accuracy": 0.5}
        runs = []
        for seed, d in enumerate(deltas):
            runs += [_run("G", seed, (200 + 30 * seed) / 512, 1.0, 3, [0.5, 0.5, 0.5]),
                     _run("A", seed, (200 + 30 * seed) / 512 + d, 1.0, 3, [0.5, 0.5, 0.5])]
        _write_folder(tmp_path / f"ws_{name}", meta, runs)
    text = write_report(tmp_path, ["flat", "real"], "G", [])
    pooled = next(line for line in text.splitlines() if line.startswith("| A | 2 |"))
    assert pooled.split("|")[5].strip() == "1/2"


def test_a_pooled_difference_without_spread_has_no_p_and_prints_no_interval():
    # before: p = 0.0 (a "significant" pooled win) and "+0.050 [+0.050, +0.050]"
    from lab.analysis.ablation_report import format_interval

    pooled = stratified_difference([(0.05, 0.0, 3), (0.05, 0.0, 4)])
    assert math.isnan(pooled["p_value"]) and pooled["seeds"] == 7
    assert format_interval(pooled) == "+0.050 (zero spread over 7 seeds: no interval)"
    assert format_interval({"mean": 0.5, "low": math.nan, "high": math.nan, "seeds": 1}, "{:.3f}") == \
        "0.500 (n = 1: no interval)"


def _three_arm_folder(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "config.json").write_text("{}")
    runs = [_run(arm, s, 0.5 + 0.01 * s + 0.1 * k, 1.0, 3, [0.5] * 3)
            for k, arm in enumerate(("GSPO G=n", "IBPO G=n", "oracle mask")) for s in range(3)]
    _write_folder(tmp_path / "out" / "ws_w", {"warm_start_test_accuracy": 0.45, "warm_start_sha256": "w" * 8}, runs)


def test_report_only_reports_the_listed_arms_and_given_seeds(tmp_path, capsys, monkeypatch):
    # before: --report-only --arms 'GSPO G=n' 'IBPO G=n' still reported 'oracle mask' (every arm in the folder),
    # and --seeds was ignored (every seed on disk)
    from lab.analysis import ablation

    _three_arm_folder(tmp_path)
    # hand-written folders: no model to hash
    monkeypatch.setattr("lab.analysis.ablation_report.check_models", lambda *a, **k: None)
    common = ["--out", str(tmp_path / "out"), "--warm-start", f"w={tmp_path / 'ws'}", "--report-only"]
    assert ablation.main([*common, "--arms", "GSPO G=n", "IBPO G=n"]) == 0
    text = capsys.readouterr().out
    assert "oracle mask" not in text and "| IBPO G=n | 3 |" in text
    assert "oracle mask" not in (tmp_path / "out" / "runs.csv").read_text()
    assert ablation.main([*common, "--arms", "GSPO G=n", "oracle mask", "--seeds", "0-1"]) == 0
    text = capsys.readouterr().out
    assert "IBPO G=n" not in text and "| oracle mask | 2 |" in text
    with pytest.raises(SystemExit):
        ablation.main([*common, "--arms", "GSPO G=n", "IBPO G=n", "--seeds", "7"])
    assert "--seeds: no run of seed(s) [7]" in capsys.readouterr().err


@pytest.mark.parametrize("extra, named", [(["--lr", "1e-4"], "--lr"), (["--budget-s", "48"], "--budget-steps"),
                                          (["--jobs", "2", "--milestones", "0.5", "1"], "--jobs, --milestones"),
                                          (["--budget-arm", "GSPO G=n"], "--budget-arm")])
def test_report_only_refuses_options_that_only_shape_new_runs(tmp_path, capsys, extra, named):
    # before: accepted and ignored (the table then looked like a table at that learning rate or budget)
    from lab.analysis import ablation

    _three_arm_folder(tmp_path)
    with pytest.raises(SystemExit):
        ablation.main(["--out", str(tmp_path / "out"), "--warm-start", f"w={tmp_path / 'ws'}", "--report-only",
                       "--arms", "GSPO G=n", "IBPO G=n", *extra])
    assert f"{named}: not used with --report-only" in capsys.readouterr().err
    assert not (tmp_path / "out" / "report.md").exists()
