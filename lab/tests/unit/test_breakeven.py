"""lab.analysis.breakeven: the weighted line against a slow reference on random inputs, the bootstrap's resampling
unit (a seed with all its shares), the verdicts, and the per-share rule over synthetic ablation folders."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lab.analysis.breakeven import (
    SharePoint,
    analyse,
    bootstrap_line,
    crossing_interval,
    fit_line,
    format_report,
    line_break_even,
    main,
    parse_shares,
    per_seed_slope_interval,
)


def slow_weighted_line(points: list[SharePoint]) -> tuple[float, float]:
    """argmin Σ w_i (y_i − a − b x_i)² with w_i = 1 / (points of i's warm start), by the 2×2 normal equations
    built term by term."""
    counts = {}
    for p in points:
        counts[p.warm_start] = counts.get(p.warm_start, 0) + 1
    s0 = s1 = s2 = t0 = t1 = 0.0
    for p in points:
        w = 1.0 / counts[p.warm_start]
        s0 += w
        s1 += w * p.share
        s2 += w * p.share * p.share
        t0 += w * p.delta
        t1 += w * p.share * p.delta
    det = s0 * s2 - s1 * s1
    return (s2 * t0 - s1 * t1) / det, (s0 * t1 - s1 * t0) / det


@pytest.mark.parametrize("seed", range(5))
def test_fit_line_is_weighted_least_squares_with_every_warm_start_counted_once(seed):
    rng = np.random.default_rng(seed)
    shares = [0.0, 0.1, 0.25, 0.5, 1.0]
    points = [SharePoint(s, w, k, float(rng.normal(0.01 - 0.02 * s, 0.03)))
              for w, n in (("weak", 3), ("medium", 5), ("strong", 8)) for k in range(n) for s in shares
              if rng.random() > 0.2]
    assert fit_line(points) == pytest.approx(slow_weighted_line(points), rel=1e-10, abs=1e-12)
    # each warm start counts once: duplicating one warm start's points changes nothing
    doubled = points + [p for p in points if p.warm_start == "strong"]
    assert fit_line(doubled) == pytest.approx(fit_line(points), rel=1e-10, abs=1e-12)
    with pytest.raises(ValueError, match="two different shares"):
        fit_line([SharePoint(0.5, "weak", 0, 0.1), SharePoint(0.5, "weak", 1, 0.2)])


def test_the_bootstrap_resamples_seeds_with_all_their_shares():
    # every seed: its own intercept, the same slope -0.03: any resample of whole seeds has slope exactly -0.03,
    # while resampling single points would not
    points = [SharePoint(s, w, k, 0.05 * k - 0.03 * s) for w in ("a", "b") for k in range(6)
              for s in (0.0, 0.5, 1.0)]
    boot = bootstrap_line(points, n_boot=200, seed=1)
    assert np.allclose(boot[:, 1], -0.03, atol=1e-12)
    assert boot[:, 0].std() > 0.01  # the intercepts do vary
    assert np.array_equal(boot, bootstrap_line(points, n_boot=200, seed=1))


def slow_percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between order statistics, rank (n − 1)·q/100."""
    xs = sorted(values)
    rank = (len(xs) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    if xs[lo] == xs[hi]:  # also two equal infinities, where (hi − lo) · 0 would be NaN
        return xs[lo]
    return xs[lo] + (rank - lo) * (xs[hi] - xs[lo])


@pytest.mark.parametrize("seed", range(5))
def test_the_crossing_interval_against_a_slow_reference(seed):
    rng = np.random.default_rng(seed)
    boot = np.column_stack([rng.normal(0.01, 0.005, 999), rng.normal(-0.02, 0.01, 999)])
    boot[:7, 1] = 0.0  # slope exactly 0: no crossing, beyond the end on a's side
    xs = []
    for a, b in boot:
        xs.append(-a / b if b != 0 else (math.inf if a > 0 else -math.inf if a < 0 else 0.0))
    low, high = crossing_interval(boot)
    assert low == pytest.approx(slow_percentile(xs, 2.5), rel=1e-12)
    assert high == pytest.approx(slow_percentile(xs, 97.5), rel=1e-12)
    assert crossing_interval(boot, alpha=0.5)[0] == pytest.approx(slow_percentile(xs, 25), rel=1e-12)


def test_a_crossing_is_reported_with_its_interval(tmp_path):
    text = format_report({"baseline": "GSPO G=n", "fraction": 1.0, "per_share": {}, "arms": {"m": {
        "a": 0.009, "a_low": 0.003, "a_high": 0.015, "b": -0.018, "b_low": -0.026, "b_high": -0.009,
        "crossing_low": 0.181, "crossing_high": 1.156, "line_break_even": ("crosses", 0.52), "rule_break_even": 0.5,
        "seeds_per_warm_start": {"w": 4}, "b_per_seed_t": {"diff": -0.018, "low": -0.032, "high": -0.003,
                                                            "seeds": 4}}}}, [])
    assert "crosses at 0.52 [0.18, 1.16]" in text


def test_line_verdicts():
    assert line_break_even(0.02, -0.04, -0.06, -0.01) == ("crosses", pytest.approx(0.5))
    assert line_break_even(0.06, -0.04, -0.06, -0.01) == ("crosses beyond the shares tried", pytest.approx(1.5))
    assert line_break_even(-0.01, -0.04, -0.06, -0.01) == ("behind at every share", None)
    assert line_break_even(0.01, 0.02, 0.005, 0.04) == ("rises with the share", None)
    assert line_break_even(0.01, -0.02, -0.05, 0.01) == ("not resolved", None)


def _run(arm: str, seed: int, accuracy: float) -> dict:
    return {"arm": arm, "seed": seed, "steps": [], "evals": [{"milestone": 1.0, "accuracy": accuracy}]}


def _share_folder(root, share: float, slope: float, seeds: int = 6, slope_wobble: float = 0.0) -> None:
    """Two warm starts; GSPO the same at every share (its runs do not depend on it); the arm ahead by
    0.03 + slope · share with a seed-to-seed wobble (times 1 + ``slope_wobble`` · share: with 0 every seed has the
    same slope)."""
    for w, base in (("weak", 0.3), ("strong", 0.8)):
        folder = root / f"s{share}" / f"ws_{w}"
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(json.dumps({"budget_flops": 1.0}))
        for k in range(seeds):
            wobble = 0.004 * ((k % 3) - 1) * (1 + slope_wobble * share)
            (folder / f"gspo_s{k}.json").write_text(json.dumps(_run("GSPO G=n", k, base + 0.01 * k)))
            (folder / f"arm_s{k}.json").write_text(
                json.dumps(_run("A", k, base + 0.01 * k + 0.03 + slope * share + wobble)))


def test_analyse_reads_the_share_folders_and_both_rules(tmp_path):
    for share in (0.0, 0.5, 1.0):
        _share_folder(tmp_path, share, slope=-0.04, slope_wobble=1.0)  # the seeds' slopes differ (mean -0.04)
    folders = {s: tmp_path / f"s{s}" for s in (0.0, 0.5, 1.0)}
    result = analyse(folders, ["weak", "strong"], ["A"], "GSPO G=n", n_boot=300)
    r = result["arms"]["A"]
    assert r["a"] == pytest.approx(0.03, abs=1e-9) and r["b"] == pytest.approx(-0.04, abs=1e-9)
    assert r["line_break_even"] == ("crosses", pytest.approx(0.75, abs=1e-6))
    # per share: +0.03 and +0.01 match, -0.01 is behind on both warm starts (every seed, Holm p small)
    assert [result["per_share"][str(s)]["A"]["matches"] for s in (0.0, 0.5, 1.0)] == [True, True, False]
    assert r["rule_break_even"] == 0.5
    assert result["per_share"]["1.0"]["A"]["pooled"]["diff"] == pytest.approx(-0.01, abs=1e-9)
    assert max(result["per_share"]["1.0"]["A"]["holm_p"].values()) < 0.05
    assert r["seeds_per_warm_start"] == {"weak": 6, "strong": 6}
    text = format_report(result, [0.0, 0.5, 1.0])
    assert "| 1 | -0.010 [" in text and "✗ |" in text and "crosses at 0.75" in text
    assert "| A | +0.030 [" in text and "| -0.040 [" in text
    only = analyse(folders, ["weak", "strong"], ["A"], "GSPO G=n", seeds={0, 1, 2}, n_boot=50)
    assert only["arms"]["A"]["seeds_per_warm_start"] == {"weak": 3, "strong": 3}


def test_a_zero_width_bootstrap_interval_is_no_interval_and_resolves_nothing(tmp_path):
    # every seed the same slope -0.04: every resample refits b = -0.04, a "95% interval" of width 0, which crossed
    # at 0.75 and printed as "-0.040 [-0.040, -0.040]"; it is no interval (evaluation.stats.interval_text)
    for share in (0.0, 0.5, 1.0):
        _share_folder(tmp_path, share, slope=-0.04)
    result = analyse({s: tmp_path / f"s{s}" for s in (0.0, 0.5, 1.0)}, ["weak", "strong"], ["A"], "GSPO G=n",
                     n_boot=200)
    r = result["arms"]["A"]
    assert r["b"] == pytest.approx(-0.04, abs=1e-9) and r["b_high"] - r["b_low"] < 1e-12
    assert r["line_break_even"] == ("not resolved", None)
    row = format_report(result, [0.0, 0.5, 1.0]).splitlines()[-1]
    assert row.startswith("| A | +0.030 [") and "| -0.040 (zero spread over 12 seeds: no interval) | not resolved |" \
        in row


def test_bad_shares_stop_before_reading(tmp_path, capsys):
    (tmp_path / "s0").mkdir()
    with pytest.raises(ValueError, match="SHARE=FOLDER"):
        parse_shares(["0.5"])
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        parse_shares([f"1.5={tmp_path}"])
    with pytest.raises(ValueError, match="is not a folder"):
        parse_shares([f"0={tmp_path / 'nowhere'}", f"1={tmp_path}"])
    with pytest.raises(ValueError, match="at least two shares"):
        parse_shares([f"0={tmp_path}"])
    with pytest.raises(ValueError, match="share 0 is given twice"):
        parse_shares([f"0={tmp_path}", f"0.0={tmp_path / 's0'}"])
    with pytest.raises(SystemExit):
        main(["--share", f"0={tmp_path / 's0'}", "--share", f"1={tmp_path}", "--warm-start", "weak", "--arms", "A"])
    assert "no ws_weak folder" in capsys.readouterr().err
    assert math.isfinite(fit_line([SharePoint(0, "w", 0, 0.0), SharePoint(1, "w", 0, 1.0)])[1])


def test_an_arm_missing_at_a_share_is_named(tmp_path, capsys):
    for share in (0.0, 1.0):
        _share_folder(tmp_path, share, slope=-0.04, slope_wobble=1.0)
    args = ["--share", f"0={tmp_path / 's0.0'}", "--share", f"1={tmp_path / 's1.0'}", "--warm-start", "weak",
            "--warm-start", "strong"]
    with pytest.raises(SystemExit):
        main([*args, "--arms", "B"])
    # an unknown arm is named with the arms there are (before: "no seed with both a finished 'B' run and ...")
    assert "--arms: no run of ['B'] in the warm starts ['strong', 'weak']; the arms are ['A', 'GSPO G=n']" in (
        capsys.readouterr().err)
    with pytest.raises(SystemExit):
        main([*args, "--arms", "A", "--seeds", "x-y"])
    with pytest.raises(SystemExit):
        main([*args, "--arms", "A", "--bootstrap", "10"])
    assert main([*args, "--arms", "A", "--bootstrap", "200", "--out", str(tmp_path / "report")]) == 0
    assert "crosses at 0.75" in (tmp_path / "report" / "breakeven.md").read_text()
    assert json.loads((tmp_path / "report" / "breakeven.json").read_text())["arms"]["A"]["b"] == pytest.approx(-0.04)


def test_fraction_reads_the_evaluation_made_there(tmp_path, capsys):
    # at 1/4 of the budget the arm leads by 0.05 − 0.02·share; at the end by 0.03 − 0.04·share (the runs' own
    # milestones); --fraction picks which evaluation every run is read at, both arms the same
    for share in (0.0, 1.0):
        for w, base in (("weak", 0.3), ("strong", 0.8)):
            folder = tmp_path / f"s{share}" / f"ws_{w}"
            folder.mkdir(parents=True)
            (folder / "meta.json").write_text(json.dumps({"budget_flops": 1.0}))
            for k in range(4):
                gspo = {"milestone": 0.25, "accuracy": base - 0.1 + 0.01 * k}, {"milestone": 1.0,
                                                                                 "accuracy": base + 0.01 * k}
                arm = ({"milestone": 0.25, "accuracy": gspo[0]["accuracy"] + 0.05 - 0.02 * share},
                       {"milestone": 1.0, "accuracy": gspo[1]["accuracy"] + 0.03 - 0.04 * share})
                for name, evals, stem in (("GSPO G=n", gspo, "gspo"), ("A", arm, "arm")):
                    (folder / f"{stem}_s{k}.json").write_text(
                        json.dumps({"arm": name, "seed": k, "steps": [], "evals": list(evals)}))
    folders = {s: tmp_path / f"s{s}" for s in (0.0, 1.0)}
    quarter = analyse(folders, ["weak", "strong"], ["A"], "GSPO G=n", n_boot=100, fraction=0.25)["arms"]["A"]
    end = analyse(folders, ["weak", "strong"], ["A"], "GSPO G=n", n_boot=100)["arms"]["A"]
    assert (quarter["a"], quarter["b"]) == (pytest.approx(0.05, abs=1e-9), pytest.approx(-0.02, abs=1e-9))
    assert (end["a"], end["b"]) == (pytest.approx(0.03, abs=1e-9), pytest.approx(-0.04, abs=1e-9))
    with pytest.raises(ValueError, match="evaluated at 0.5 of the budget"):
        analyse(folders, ["weak", "strong"], ["A"], "GSPO G=n", n_boot=100, fraction=0.5)
    args = ["--share", f"0={folders[0.0]}", "--share", f"1={folders[1.0]}", "--warm-start", "weak", "--warm-start",
            "strong", "--arms", "A", "--bootstrap", "100"]
    assert main([*args, "--fraction", "0.25"]) == 0
    assert "at 0.25 of the budget" in capsys.readouterr().out
    for bad in ("0", "1.5", "nan"):
        with pytest.raises(SystemExit):
            main([*args, "--fraction", bad])
        assert "--fraction must be in (0, 1]" in capsys.readouterr().err


@pytest.mark.parametrize("seed", range(3))
def test_the_per_seed_slope_check_against_polyfit(seed):
    # each (warm start, seed)'s own slope by numpy's polyfit; the warm starts weighted equally, as the pooled tables
    rng = np.random.default_rng(seed)
    shares = [0.0, 0.1, 0.25, 0.5, 1.0]
    points = [SharePoint(s, w, k, float(rng.normal(0.01 - 0.02 * s, 0.02)))
              for w, n in (("weak", 3), ("medium", 4), ("strong", 6)) for k in range(n) for s in shares]
    slopes = {w: [np.polyfit(shares, [p.delta for p in points if p.warm_start == w and p.seed == k], 1)[0]
                  for k in range(n)] for w, n in (("weak", 3), ("medium", 4), ("strong", 6))}
    check = per_seed_slope_interval(points)
    assert check["diff"] == pytest.approx(np.mean([np.mean(v) for v in slopes.values()]), abs=1e-12)
    assert check["low"] < check["diff"] < check["high"]
    # the seed-to-seed spread of the slopes sets its width: the same slopes with ten times the spread, wider
    wide = [SharePoint(p.share, p.warm_start, p.seed, 10 * p.delta) for p in points]
    assert per_seed_slope_interval(wide)["high"] - per_seed_slope_interval(wide)["low"] == pytest.approx(
        10 * (check["high"] - check["low"]), rel=1e-9)
    with pytest.raises(ValueError, match="two seeds"):
        per_seed_slope_interval([SharePoint(0.0, "w", 0, 0.1), SharePoint(1.0, "w", 0, 0.0)])


def test_a_seed_or_warm_start_missing_at_one_share_is_named(tmp_path, capsys):
    # share 1 has seeds 0-1 only: before, a bootstrap resample of seeds 2-3 alone held share 0 only and stopped at
    # random ("the line needs at least two different shares"; with 200 resamples, about every other bootstrap seed)
    _share_folder(tmp_path, 0.0, slope=-0.04, seeds=4)
    _share_folder(tmp_path, 1.0, slope=-0.04, seeds=2)
    folders = {s: tmp_path / f"s{s}" for s in (0.0, 1.0)}
    with pytest.raises(ValueError, match=r"share 1 .*'A' on warm start weak has no paired difference for seeds "
                                         r"\[2, 3\].*pass --seeds"):
        analyse(folders, ["weak", "strong"], ["A"], "GSPO G=n", n_boot=200)
    assert analyse(folders, ["weak", "strong"], ["A"], "GSPO G=n", seeds={0, 1}, n_boot=200)["arms"]["A"]["b"] == (
        pytest.approx(-0.04, abs=1e-9))
    # a warm start with no arm run at one share: before, that share's pooled Δ and the line silently left it out there
    for f in (tmp_path / "s1.0" / "ws_strong").glob("arm_s*.json"):
        f.unlink()
    with pytest.raises(ValueError, match=r"'A' on warm start strong has no paired difference for seeds \[0, 1\]"):
        analyse(folders, ["weak", "strong"], ["A"], "GSPO G=n", seeds={0, 1}, n_boot=200)


def test_a_folder_of_another_share_or_without_meta_is_refused(tmp_path, capsys):
    # the runs' meta.json records the share they were charged: the share-0 folder given again as share 1 (before:
    # a flat line, no error) is refused; a ws_ folder with no meta.json (before: a FileNotFoundError traceback)
    for share in (0.0, 1.0):
        _share_folder(tmp_path, share, slope=-0.04)
        for w in ("weak", "strong"):
            (tmp_path / f"s{share}" / f"ws_{w}" / "meta.json").write_text(
                json.dumps({"budget_flops": 1.0, "args": {"correction_cost_share": share}}))
    ws = ["--warm-start", "weak", "--warm-start", "strong", "--arms", "A", "--bootstrap", "100"]
    assert main(["--share", f"0={tmp_path / 's0.0'}", "--share", f"1={tmp_path / 's1.0'}", *ws]) == 0
    with pytest.raises(SystemExit):
        main(["--share", f"0={tmp_path / 's0.0'}", "--share", f"1={tmp_path / 's0.0'}", *ws])
    assert "its ws_weak runs charged the correction phase 0 of its cost (meta.json), not 1" in capsys.readouterr().err
    (tmp_path / "s1.0" / "ws_strong" / "meta.json").unlink()
    with pytest.raises(SystemExit):
        main(["--share", f"0={tmp_path / 's0.0'}", "--share", f"1={tmp_path / 's1.0'}", *ws])
    assert "no ws_strong/meta.json" in capsys.readouterr().err
