"""lab.analysis.curves_report: Holm's adjustment and the random-warm-start interval against hand computations, and
the report over a folder of synthetic runs."""

from __future__ import annotations

import json
import math

import pytest

from lab.analysis.curves_report import holm, random_warm_start_difference, report


def test_holm_matches_the_step_down_rule():
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5})
    # sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1: 0.04, 0.09, 0.08 -> monotone 0.09, 0.5
    assert adjusted == pytest.approx({"a": 0.04, "c": 0.09, "b": 0.09, "d": 0.5})
    assert holm({"x": 0.6, "y": 0.7}) == pytest.approx({"x": 1.0, "y": 1.0})


def test_an_undefined_p_is_no_test_in_the_family_nor_a_win():
    # before: every t test over equal differences had p = 0 (a win at any level) unless each caller filtered SD 0
    assert holm({"a": 0.01, "b": float("nan"), "c": 0.04}) == pytest.approx({"a": 0.02, "c": 0.04})
    same = random_warm_start_difference([0.7 - 0.65, 0.6 - 0.55, 0.9 - 0.85])  # equal but for rounding
    assert (same["low"], same["high"]) == (same["diff"], same["diff"]) and math.isnan(same["p_value"])


def test_random_warm_start_interval_is_a_t_interval_over_warm_starts():
    out = random_warm_start_difference([0.01, 0.03, 0.05])
    se = 0.02 / math.sqrt(3)
    assert out["diff"] == pytest.approx(0.03)
    assert out["high"] - out["diff"] == pytest.approx(4.302652729911275 * se, rel=1e-6)  # t_{0.975, 2}
    assert math.isnan(random_warm_start_difference([0.02])["low"])


def _run(arm, seed, accs, coverage):
    steps = [{"flops": 10.0 * (i + 1), "flops_by_phase": {"main_gen": 4.0, "correction_gen": 1.0, "actor_update": 5.0},
              "modelled_gpu_seconds_by_phase": {"main_gen_decode": 1.0, "correction_gen_decode": 0.5},
              "localised/coverage": coverage, "localised/precision": 1.0, "localised/recall": 0.5,
              "localised/first_position_error": 0.0, "ibpo/num_corrections": 2.0 + 2 * i,
              "ibpo/num_right_corrections": 1.0} for i in range(4)]
    evals = [{"milestone": m, "accuracy": a} for m, a in zip((0.5, 1.0), accs)]
    return {"arm": arm, "seed": seed, "steps": steps, "evals": evals}


def test_report_pairs_seeds_and_writes_the_csv(tmp_path):
    for ws, shift in (("a", 0.0), ("b", 0.1)):
        folder = tmp_path / f"ws_{ws}"
        folder.mkdir()
        (folder / "meta.json").write_text(json.dumps({"warm_start_sha256": ws * 64, "budget_flops": 40.0}))
        for seed in range(3):
            base = 0.5 + 0.01 * seed
            (folder / f"base_s{seed}.json").write_text(json.dumps(_run("B", seed, (base, base), 0.0)))
            (folder / f"arm_s{seed}.json").write_text(json.dumps(_run("A", seed, (base + shift, base + 0.05), 0.4)))
    text = report(tmp_path, ["a", "b"], "B")
    final_row = next(line for line in text.splitlines() if line.startswith("| A | 1 |"))
    # every seed +0.05 on both warm starts: no spread, so no interval (not "[+0.050, +0.050]") and no p
    assert final_row == ("| A | 1 | +0.050 (zero spread over 3 seeds: no interval) (3) | +0.050 (zero spread over 3 "
                         "seeds: no interval) (3) | +0.050 (zero spread over 6 seeds: no interval) | +0.050 (zero "
                         "spread over 2 warm starts: no interval) |")
    half_row = next(line for line in text.splitlines() if line.startswith("| A | 0.5 |"))
    # pooled stratified: mean of 0.0 and 0.1, each warm start without spread over its seeds; the warm start random
    # has the warm starts' own spread
    assert half_row.split("|")[-3].strip() == "+0.050 (zero spread over 6 seeds: no interval)"
    assert half_row.split("|")[-2].strip().startswith("+0.050 [")
    assert "| A | 4.0 |" in text and "0.400 | 1.000 | 0.500" in text
    assert text.splitlines()[-1].endswith("| 0.0 | 0.200 |")  # 4 right of 2+4+6+8 corrections, not the mean 0.26
    rows = (tmp_path / "curves_runs.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 * 3 and rows[0].startswith("warm_start,")


def _folder(root, ws, arm_accs: dict, budget=40.0, sha="0" * 64):
    folder = root / f"ws_{ws}"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"warm_start_sha256": sha, "budget_flops": budget,
                                                  "budget_unit": "modelled_gpu_seconds"}))
    for arm, accs in arm_accs.items():
        for seed, acc in enumerate(accs):
            (folder / f"{arm}_s{seed}.json").write_text(json.dumps(_run(arm, seed, (acc, acc), 0.0)))


def test_an_arm_at_its_own_rate_is_read_from_its_folder_and_must_share_the_budget(tmp_path):
    from lab.analysis.curves_report import load_with_arm_folders

    _folder(tmp_path / "main", "a", {"B": [0.5, 0.6, 0.7], "A": [0.0, 0.0, 0.0]})
    _folder(tmp_path / "own", "a", {"A": [0.55, 0.66, 0.77]})  # A at its own rate: +0.05, +0.06, +0.07
    text = report(tmp_path / "main", ["a"], "B", ["A"], {"A": tmp_path / "own"})
    final_row = next(line for line in text.splitlines() if line.startswith("| A | 1 |"))
    assert "+0.060 [" in final_row  # the other folder's runs, not main's zeros
    _folder(tmp_path / "other_budget", "a", {"A": [0.5, 0.5, 0.5]}, budget=41.0)
    with pytest.raises(ValueError, match="budget_flops 41.0.*40.0"):
        load_with_arm_folders(tmp_path / "main", ["a"], {"A": tmp_path / "other_budget"})
    _folder(tmp_path / "other_ws", "a", {"A": [0.5, 0.5, 0.5]}, sha="1" * 64)
    with pytest.raises(ValueError, match="warm_start_sha256"):
        load_with_arm_folders(tmp_path / "main", ["a"], {"A": tmp_path / "other_ws"})
    with pytest.raises(ValueError, match="has no 'C' run"):
        load_with_arm_folders(tmp_path / "main", ["a"], {"C": tmp_path / "own"})


def test_seeds_cut_every_arm_to_those_seeds_and_leave_the_csv(tmp_path):
    # seeds 0-2 differ by +0.02, seeds 3-4 by +0.50: only the first three may enter the pooled row
    _folder(tmp_path, "a", {"B": [0.5, 0.5, 0.5, 0.1, 0.1], "A": [0.52, 0.52, 0.52, 0.6, 0.6]})
    report(tmp_path, ["a"], "B")
    whole_csv = (tmp_path / "curves_runs.csv").read_text()
    text = report(tmp_path, ["a"], "B", seeds={0, 1, 2})
    final_row = next(line for line in text.splitlines() if line.startswith("| A | 1 |"))
    # without the cut: +0.212 over 5
    assert final_row.startswith("| A | 1 | +0.020 (zero spread over 3 seeds: no interval) (3) |")
    assert text.startswith("Seeds [0, 1, 2] only.")
    assert (tmp_path / "curves_runs.csv").read_text() == whole_csv  # the folder's record is not cut


def test_the_report_leaves_the_ablations_runs_csv_alone(tmp_path):
    # lab.analysis.ablation writes runs.csv (its own columns) into the folder the report reads
    _folder(tmp_path, "a", {"B": [0.5, 0.6], "A": [0.5, 0.7]})
    (tmp_path / "runs.csv").write_text("task,warm_start,arm,seed,accuracy_at_1\n")
    report(tmp_path, ["a"], "B")
    assert (tmp_path / "runs.csv").read_text() == "task,warm_start,arm,seed,accuracy_at_1\n"
    assert (tmp_path / "curves_runs.csv").read_text().startswith("warm_start,warm_start_sha256,arm,seed,updates,")


@pytest.mark.parametrize("baseline, arms, message", [
    ("GSPO", None, "--baseline 'GSPO': no run of that arm in the warm starts ['a']; the arms are ['A', 'B']"),
    ("B", ["A", "Z"], "--arms: no run of ['Z'] in the warm starts ['a']; the arms are ['A', 'B']"),
])
def test_a_misspelt_baseline_or_arm_is_named(tmp_path, baseline, arms, message):
    # before: a report whose every difference cell was "—", exit status 0
    _folder(tmp_path, "a", {"B": [0.5, 0.6], "A": [0.5, 0.7]})
    with pytest.raises(ValueError) as info:
        report(tmp_path, ["a"], baseline, arms)
    assert str(info.value) == message


def test_one_warm_start_prints_no_nan_interval_and_the_flop_share_is_of_the_charged_cost(tmp_path):
    # one warm start: the warm start random has no interval ("n = 1", not "[+nan, +nan]"); the folder's runs
    # charged the correction phase 0.5 of its cost: a step's "flops" (10 a step) is charged, its flops_by_phase
    # correction_gen (1) the phase's full cost, so the phase's share of the charged FLOPs is 0.5 / 10
    folder = tmp_path / "ws_a"
    folder.mkdir()
    meta = {"warm_start_sha256": "0" * 64, "budget_flops": 40.0, "args": {"correction_cost_share": 0.5}}
    (folder / "meta.json").write_text(json.dumps(meta))
    for seed in range(3):
        base = 0.5 + 0.01 * seed
        (folder / f"base_s{seed}.json").write_text(json.dumps(_run("B", seed, (base, base), 0.0)))
        (folder / f"arm_s{seed}.json").write_text(json.dumps(_run("A", seed, (base + 0.01 * seed, base), 0.4)))
    text = report(tmp_path, ["a"], "B")
    assert "nan" not in text.split("Cost and localisation")[0]
    assert next(line for line in text.splitlines() if line.startswith("| A | 0.5 |")).endswith(
        "| +0.010 (n = 1: no interval) |")
    cost_row = next(line for line in text.splitlines() if line.startswith("| A | 4.0 |"))
    assert cost_row.split("|")[5].strip() == "0.050"
