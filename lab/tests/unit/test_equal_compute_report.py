"""lab.analysis.equal_compute_report on hand-made toy_loop results: paired differences at the milestones, compute to
the threshold, updates, the collapse check and the localisation table, worked out by hand."""

from __future__ import annotations

import json

import pytest

from lab.analysis import equal_compute_report as report


def result(arm: str, seed: int, final: float, half: float, rewards: list[float], flops_per_step: float,
           locs: list[dict] | None = None) -> dict:
    steps = [{"step": i + 1, "flops": flops_per_step * (i + 1), "reward": r, "updates": 1,
              "time": {"main_gen": 1.0, "update": 0.5}} for i, r in enumerate(rewards)]
    n = len(steps)
    return {"arm": arm, "seed": seed, "budget": flops_per_step * n, "wall_s": 10.0, "steps": steps,
            "evals": [{"milestone": 0.5, "step": n // 2, "flops": flops_per_step * (n // 2), "accuracy": half},
                      {"milestone": 1.0, "step": n, "flops": flops_per_step * n, "accuracy": final}],
            "localisation": locs or []}


def loc(step: int, modified: int, wrong: int, overlap: int, first: bool, copy: bool, ref_right: bool) -> dict:
    return {"step": step, "shaped": True, "rewrite": False, "modified": modified, "wrong": wrong, "overlap": overlap,
            "covers_first_error": first, "copy_of_reference": copy, "reference_right": ref_right}


def write(tmp_path):
    meta = {"warm_start_sha256": "ab" * 32, "budget_flops": 100.0, "warm_start_test_accuracy": 0.5,
            "command": "python -m lab.analysis.toy_loop --x"}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    base = {0: 0.60, 1: 0.70, 2: 0.80}
    diffs = {0: 0.02, 1: 0.06, 2: 0.04}  # mean 0.04, SD 0.02
    for s in base:
        (tmp_path / f"gspo_s{s}.json").write_text(json.dumps(
            result("GSPO G=n", s, base[s], 0.55, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], 10.0)))
        locs = [loc(1, 4, 2, 2, True, False, False), loc(6, 10, 2, 1, False, True, True)]
        (tmp_path / f"ibpo_s{s}.json").write_text(json.dumps(
            result("IBPO G=n", s, base[s] + diffs[s], 0.55, [0.5, 0.4, 0.3, 0.2, 0.1], 20.0, locs)))


def test_summary_by_hand(tmp_path):
    write(tmp_path)
    meta, results = report.load_results(tmp_path)
    summary = report.summarise_runs(meta, results, "GSPO G=n", effect=0.05, threshold=0.3, window=2)
    ibpo = summary["arms"]["IBPO G=n"]
    d = ibpo["milestones"][1.0]["diff"]
    assert d["diff"] == pytest.approx(0.04) and d["sd_diff"] == pytest.approx(0.02)
    # t(0.975, 2) = 4.3027: 0.04 ± 4.3027 · 0.02 / √3
    assert d["low"] == pytest.approx(0.04 - 4.3027 * 0.02 / 3 ** 0.5, abs=1e-4)
    assert d["correlation"] == pytest.approx(0.022 / (0.02 ** 0.5 * 0.0248 ** 0.5), abs=1e-9)
    assert ibpo["milestones"][0.5]["diff"]["diff"] == pytest.approx(0.0)
    # GSPO: trailing mean of 2 reaches 0.3 at step 3 (0.25 at step 2, 0.25... (0.2+0.3)/2 = 0.25 < 0.3; step 4: 0.35)
    gspo = summary["arms"]["GSPO G=n"]
    assert gspo["compute_to_threshold"]["mean"] == pytest.approx(40.0)
    assert ibpo["compute_to_threshold"]["mean"] == pytest.approx(40.0)  # (0.5+0.4)/2 at step 2 -> 40 FLOPs
    assert gspo["optimizer_updates"] == 10 and ibpo["optimizer_updates"] == 5
    # collapse: IBPO's reward fell (0.15 - 0.45), test rose; GSPO's reward rose and test rose for 2 of 3 seeds
    assert ibpo["collapse"]["seeds_reward_up_test_down"] == 0
    assert gspo["collapse"]["train_reward_change"]["mean"] == pytest.approx(0.8)
    assert gspo["collapse"]["seeds_reward_up_test_down"] == 0
    locs = ibpo["localisation"]
    assert locs["reference wrong (control)"] == {"count": 3, "precision": 0.5, "recall": 1.0,
                                                 "covers_first_error": 1.0, "copy_of_reference": 0.0}
    assert locs["reference right"]["precision"] == pytest.approx(0.1)
    assert locs["reference right"]["copy_of_reference"] == 1.0
    assert set(locs["by_step"]) == {"1", "6"}
    text = report.format_report(summary)
    assert "+0.040 [" in text and "ab" * 32 in text and "reference wrong (control)" in text


def test_power_formula_matches_the_normal_limit():
    # many seeds: power -> Φ(δ√n/σ − 1.96); δ√n/σ = 0.05·√100/0.1 = 5 -> Φ(3.04) ≈ 0.9988
    assert report.paired_power(0.1, 0.05, 100) == pytest.approx(0.9988, abs=5e-4)
    assert report.paired_power(0.0, 0.05, 10) != report.paired_power(0.0, 0.05, 10)  # NaN: no spread observed


def test_runs_csv_has_one_row_per_arm_and_seed(tmp_path):
    import csv

    write(tmp_path)
    _, results = report.load_results(tmp_path)
    path = report.write_runs_csv(results, tmp_path / "runs.csv")
    rows = list(csv.DictReader(open(path, encoding="utf-8")))
    assert [(r["arm"], r["seed"]) for r in rows] == [("GSPO G=n", "0"), ("GSPO G=n", "1"), ("GSPO G=n", "2"),
                                                     ("IBPO G=n", "0"), ("IBPO G=n", "1"), ("IBPO G=n", "2")]
    ibpo1 = rows[4]
    assert float(ibpo1["accuracy_at_1"]) == pytest.approx(0.76) and float(ibpo1["accuracy_at_0.5"]) == 0.55
    assert (ibpo1["steps"], ibpo1["step_at_1"], ibpo1["step_at_0.5"], float(ibpo1["flops"])) == ("5", "5", "2", 100.0)


@pytest.mark.parametrize("name, content, message", [
    ("ibpo_s1.json", '{"arm": "IBPO G=n", "seed": 1, "steps": [{"st', "not readable JSON (JSONDecodeError: "),
    ("meta.json", "{", "not readable JSON (JSONDecodeError: "),
    ("ibpo_s1.json", "[]", "expected a JSON object, got list"),
    ("ibpo_s1.json", '{"seed": 1}', "not an lab.analysis.toy_loop result (expected a string 'arm' and an integer 'seed'"),
    # JSON allows NaN: before, it went on into the means and lines (or stopped a t-test naming no run)
    ("ibpo_s1.json", '{"arm": "IBPO G=n", "seed": 1, "steps": [], "evals": [{"milestone": 1.0, "accuracy": NaN}]}',
     "the evaluation at milestone 1.0 has accuracy nan; expected a number in [0, 1]"),
    ("ibpo_s1.json", '{"arm": "IBPO G=n", "seed": 1, "steps": [], "evals": [{"milestone": 0.5}]}',
     "the evaluation at milestone 0.5 has accuracy None"),
])
def test_a_truncated_or_foreign_result_file_is_named(tmp_path, name, content, message):
    # before: a bare JSONDecodeError / KeyError / TypeError traceback naming no file
    write(tmp_path)
    (tmp_path / name).write_text(content)
    with pytest.raises(ValueError) as info:
        report.load_results(tmp_path)
    assert str(info.value).startswith(f"{tmp_path / name}: {message}"), str(info.value)


def test_a_folder_without_results_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="meta.json: no such file; .* not an lab.analysis.toy_loop output folder"):
        report.load_results(tmp_path / "nowhere")


def _rows(text: str, arm: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"| {arm} |")]


def test_one_seed_and_zero_spread_print_why_there_is_no_interval(tmp_path):
    # before: "[-, -]" for one seed, and "+0.040 [+0.040, +0.040]" (a t interval of width 0 read as certainty) with
    # p = 0.000 and "seeds for 80%" 2 from an observed SD of 0
    write(tmp_path)
    for s in (0, 1, 2):  # every seed exactly 0.04 above the baseline at both milestones
        r = json.loads((tmp_path / f"ibpo_s{s}.json").read_text())
        base = json.loads((tmp_path / f"gspo_s{s}.json").read_text())
        r["evals"][0]["accuracy"], r["evals"][1]["accuracy"] = 0.59, base["evals"][1]["accuracy"] + 0.04
        (tmp_path / f"ibpo_s{s}.json").write_text(json.dumps(r))
    meta, results = report.load_results(tmp_path)
    text = report.format_report(report.summarise_runs(meta, results, "GSPO G=n", threshold=0.3, window=2))
    table = _rows(text, "IBPO G=n")[0].split(" | ")
    assert table[5:12] == ["0.740 [0.492, 0.988]", "+0.040 (zero spread over 3 seeds: no interval)", "-", "0.000",
                           "1.00", "-", "-"]
    assert _rows(text, "IBPO G=n")[1] == ("| IBPO G=n | +0.040 (zero spread over 3 seeds: no interval) | +0.040 (zero "
                                          "spread over 3 seeds: no interval) |")
    one = {"GSPO G=n": {0: results["GSPO G=n"][0]}, "IBPO G=n": {0: results["IBPO G=n"][0]}}
    text = report.format_report(report.summarise_runs(meta, one, "GSPO G=n", threshold=0.3, window=2))
    assert "[-, -]" not in text and "[" not in "".join(_rows(text, "IBPO G=n"))
    assert _rows(text, "IBPO G=n")[0].split(" | ")[5:7] == ["0.640 (n = 1: no interval)",
                                                            "+0.040 (n = 1: no interval)"]
    assert "| 40 (n = 1: no interval) (1/1) |" in _rows(text, "GSPO G=n")[0]


def test_seeds_needed_says_when_it_is_beyond_the_search():
    # before: seeds_for_power scanned n = 2..100000 for minutes and then returned 100000 as if it sufficed
    assert report.seeds_needed(0.1, 1e-9) == "> 100000"
    assert report.seeds_needed(0.06, 0.05) == 14
    assert report.seeds_needed(0.0, 0.05) is None and report.seeds_needed(float("nan"), 0.05) is None
