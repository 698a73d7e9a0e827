"""lab.analysis.stored_runs: a per-run CSV written by lab.analysis.curves_report reads back to the same accuracies, an arm is
paired only with a baseline run of the same warm start and budget, the pooled Δ is the mean of the warm starts' mean
differences, and the break-even's line from the CSVs is lab.analysis.breakeven's from the run folders."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from lab.analysis.breakeven import analyse
from lab.analysis.curves_report import write_runs_csv
from lab.analysis.stored_runs import breakeven_lines, compare, main, pair, read_runs_csv

MILESTONES = [0.25, 1.0]


def _result(arm: str, seed: int, accs: list[float]) -> dict:
    return {"arm": arm, "seed": seed, "steps": [{}] * (48 if arm == "GSPO G=n" else 40),
            "evals": [{"milestone": m, "accuracy": a} for m, a in zip(MILESTONES, accs)]}


def _loaded(offset: float, budget: float = 16.8) -> dict:
    """Two warm starts × three seeds: GSPO and an arm ahead by ``offset`` + 0.01·seed at the end."""
    out = {}
    for w, base, sha in (("weak", 0.3, "aa"), ("strong", 0.8, "bb")):
        res = {"GSPO G=n": {k: _result("GSPO G=n", k, [base, base + 0.01 * k]) for k in range(3)},
               "oracle mask": {k: _result("oracle mask", k, [base + 0.02, base + 0.01 * k + offset + 0.01 * k])
                               for k in range(3)}}
        out[w] = ({"warm_start_sha256": sha, "budget_unit": "modelled_gpu_seconds", "budget_flops": budget}, res)
    return out


def test_a_written_csv_reads_back_to_the_same_runs(tmp_path):
    write_runs_csv(tmp_path / "runs.csv", _loaded(0.05), MILESTONES)
    runs = read_runs_csv(tmp_path / "runs.csv")
    r = runs["strong"]["oracle mask"][2]
    assert r["evals"] == [{"milestone": 0.25, "accuracy": pytest.approx(0.82)},
                          {"milestone": 1.0, "accuracy": pytest.approx(0.8 + 0.02 + 0.05 + 0.02)}]
    assert (r["updates"], r["budget"], r["warm_start_sha256"]) == (40, 16.8, "bb")


def test_the_pooled_difference_and_the_pairing_checks(tmp_path):
    write_runs_csv(tmp_path / "base.csv", _loaded(0.05), MILESTONES)
    write_runs_csv(tmp_path / "other_budget.csv", _loaded(0.05, budget=19.0), MILESTONES)
    base = read_runs_csv(tmp_path / "base.csv")
    paired = pair(base, base, ["weak", "strong"], "GSPO G=n", "oracle mask", {0, 1, 2})
    text = compare(paired, "GSPO G=n", "oracle mask", MILESTONES)
    end = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    # per warm start the differences are 0.05, 0.06, 0.07 (mean 0.06); pooled: the mean of the two means
    assert end.split(" | ")[1].startswith("+0.060 [") and end.split(" | ")[3].startswith("+0.060 [")
    with pytest.raises(ValueError, match="not the same budget"):
        pair(read_runs_csv(tmp_path / "other_budget.csv"), base, ["weak"], "GSPO G=n", "oracle mask", {0})
    with pytest.raises(ValueError, match=r"seeds \[3\]"):
        pair(base, base, ["weak"], "GSPO G=n", "oracle mask", {2, 3})


def test_a_row_twice_is_named(tmp_path, capsys):
    write_runs_csv(tmp_path / "runs.csv", _loaded(0.05), MILESTONES)
    rows = list(csv.reader((tmp_path / "runs.csv").open()))
    with (tmp_path / "runs.csv").open("a", newline="") as f:
        csv.writer(f).writerow(rows[1])
    with pytest.raises(SystemExit):
        main(["--baseline-csv", str(tmp_path / "runs.csv"), "--arm-csv", str(tmp_path / "runs.csv"), "--arm",
              "oracle mask", "--warm-start", "weak", "--seeds", "0-2"])
    assert f"row {len(rows) + 1}" in capsys.readouterr().err


def test_the_line_from_the_csvs_is_breakeven_from_the_folders(tmp_path):
    """The same runs as run folders (lab.analysis.breakeven) and as curves_report's CSVs give the same line."""
    rng = np.random.default_rng(0)
    folders, csvs = {}, {}
    for share in (0.0, 0.5, 1.0):
        loaded = {}
        for w, base, sha in (("weak", 0.3, "aa"), ("strong", 0.8, "bb")):
            folder = tmp_path / f"s{share}" / f"ws_{w}"
            folder.mkdir(parents=True)
            meta = {"warm_start_sha256": sha, "budget_flops": 1.0, "budget_unit": "flops",
                    "args": {"correction_cost_share": share}}
            (folder / "meta.json").write_text(json.dumps(meta))
            res = {"GSPO G=n": {}, "A": {}}
            for k in range(4):
                for arm, acc in (("GSPO G=n", base + 0.01 * k),
                                 ("A", base + 0.01 * k + 0.02 - 0.03 * share + rng.normal(0, 0.01))):
                    r = {"arm": arm, "seed": k, "steps": [], "evals": [{"milestone": 1.0, "accuracy": acc}]}
                    (folder / f"{arm[0]}_s{k}.json").write_text(json.dumps(r))
                    res[arm][k] = r
            loaded[w] = (meta, res)
        folders[share], csvs[share] = tmp_path / f"s{share}", tmp_path / f"s{share}.csv"
        write_runs_csv(csvs[share], loaded, [1.0])
    r = analyse(folders, ["weak", "strong"], ["A"], "GSPO G=n", n_boot=500)["arms"]["A"]
    row = breakeven_lines(csvs, ["weak", "strong"], ["A"], "GSPO G=n", {0, 1, 2, 3}, n_boot=500).splitlines()[-1]
    assert row.startswith(f"| A | {r['a']:+.3f} [{r['a_low']:+.3f}, {r['a_high']:+.3f}] | {r['b']:+.3f} "
                          f"[{r['b_low']:+.3f}, {r['b_high']:+.3f}] |")
    assert row.endswith(f"| {-r['a'] / r['b']:.2f} [{r['crossing_low']:.2f}, {r['crossing_high']:.2f}] |")
