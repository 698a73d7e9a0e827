"""Read the stored per-run CSVs (``docs/assets/*_runs.csv``, ``lab.analysis.curves_report``'s ``curves_runs.csv``
format: one row per warm start, arm and seed, an accuracy column per budget fraction) back into the form the readers
take, so that an arm run later can be paired with a baseline whose run folders are gone (docs/evidence.md 2k: the
oracle's runs against N's and O's stored GSPO runs), and the break-even's lines recomputed from the CSVs with the
crossing's interval:

    python -m lab.analysis.stored_runs --baseline-csv docs/assets/gpu_time_curves_addition_measured_h200_runs.csv \\
        --arm-csv OUT/addition/curves_runs.csv --arm 'oracle mask' \\
        --warm-start weak --warm-start w5 --warm-start medium --warm-start w6 --warm-start strong --seeds 0-3
    python -m lab.analysis.stored_runs --share 0=docs/assets/breakeven_lr1e-4_share0_addition_runs.csv --share 0.1=… \
        --warm-start weak --warm-start medium --warm-start strong --arm 'mask lam 0 mixed' --seeds 0-3

Statistics are ``lab.analysis.curves_report``'s (paired t per warm start; pooled, the stratified difference and the warm
start as a random factor; Holm over the warm starts at the full budget). Checks before any number: a run is paired
only with a baseline run of the same warm start (its sha256), seed and budget (unit and amount); a warm start or seed
with no row in either CSV, a row without an accuracy column of the CSV's, a baseline row twice, is an error naming
the file and row.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

import numpy as np

from lab.analysis.ablation_stats import parse_seeds, stratified_difference
from lab.analysis.curves_report import _fmt, holm, paired_at, random_warm_start_difference

ACCURACY_PREFIX = "accuracy_"


def read_runs_csv(path: Path) -> dict[str, dict[str, dict[int, dict]]]:
    """``{warm start: {arm: {seed: result}}}`` of a per-run CSV; a result holds what the CSV keeps of a run:
    ``evals`` (``[{"milestone", "accuracy"}]``, what ``lab.analysis.curves_report.accuracy_at`` reads), ``updates``,
    ``budget_unit``, ``budget`` and ``warm_start_sha256``. A row twice, or a bad number, is a ``ValueError`` naming
    the file and row."""
    out: dict[str, dict[str, dict[int, dict]]] = {}
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        milestones = [c for c in reader.fieldnames or [] if c.startswith(ACCURACY_PREFIX)]
        for line, row in enumerate(reader, start=2):
            try:
                seed = int(row["seed"])
                evals = [{"milestone": float(c[len(ACCURACY_PREFIX):]), "accuracy": float(row[c])} for c in milestones]
                result = {"evals": evals, "updates": int(row["updates"]), "budget_unit": row["budget_unit"],
                          "budget": float(row["budget"]), "warm_start_sha256": row["warm_start_sha256"]}
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}, row {line}: not a per-run row ({exc})") from None
            if any(not 0.0 <= e["accuracy"] <= 1.0 for e in evals):
                raise ValueError(f"{path}, row {line}: an accuracy outside [0, 1]")
            runs = out.setdefault(row["warm_start"], {}).setdefault(row["arm"], {})
            if seed in runs:
                raise ValueError(f"{path}, row {line}: {row['warm_start']} / {row['arm']} / seed {seed} twice")
            runs[seed] = result
    return out


def pair(baseline: dict, arm_runs: dict, warm_starts: list[str], baseline_arm: str, arm: str,
         seeds: set[int]) -> dict[str, dict[str, dict[int, dict]]]:
    """``{warm start: {baseline_arm: runs, arm: runs}}`` on ``seeds``: each of ``arm``'s runs beside the baseline's
    run of its warm start and seed, after checking they are the same warm start (sha256) at the same budget. A
    missing warm start, seed or run is a ``ValueError``."""
    out = {}
    for w in warm_starts:
        base, runs = baseline.get(w, {}).get(baseline_arm, {}), arm_runs.get(w, {}).get(arm, {})
        missing = sorted(s for s in seeds if s not in base or s not in runs)
        if missing:
            raise ValueError(f"warm start {w}: seeds {missing} lack a {baseline_arm!r} or an {arm!r} run")
        for s in seeds:
            for key in ("warm_start_sha256", "budget_unit"):
                if base[s][key] != runs[s][key]:
                    raise ValueError(f"warm start {w}, seed {s}: {key} {runs[s][key]!r} against the baseline's "
                                     f"{base[s][key]!r}: not the same protocol")
            if not math.isclose(base[s]["budget"], runs[s]["budget"], rel_tol=1e-9):
                raise ValueError(f"warm start {w}, seed {s}: budget {runs[s]['budget']!r} against the baseline's "
                                 f"{base[s]['budget']!r}: not the same budget")
        out[w] = {baseline_arm: {s: base[s] for s in seeds}, arm: {s: runs[s] for s in seeds}}
    return out


def compare(paired: dict, baseline_arm: str, arm: str, milestones: list[float]) -> str:
    """The markdown table of ``arm`` − ``baseline_arm`` per warm start and pooled at each milestone (Holm over the
    warm starts at the last), with the mean updates of both arms."""
    final = milestones[-1]
    per_ws = {(w, m): paired_at(res, arm, baseline_arm, m) for w, res in paired.items() for m in milestones}
    adjusted = holm({w: per_ws[(w, final)].p_value for w in paired if per_ws[(w, final)] is not None})
    lines = [f"Δ = {arm} − {baseline_arm}, paired by warm start and seed, 95% interval (Holm p over the warm starts "
             "at the full budget).", "",
             "| fraction | " + " | ".join(paired) + " | pooled, stratified | pooled, warm start random |",
             "|---:|" + "---:|" * (len(paired) + 2)]
    for m in milestones:
        cells, strata = [], []
        for w in paired:
            d = per_ws[(w, m)]
            cells.append("—" if d is None else _fmt(d.as_dict(), adjusted.get(w) if m == final else None))
            if d is not None:
                strata.append((d.diff, d.sd_diff, d.seeds))
        rand = random_warm_start_difference([s[0] for s in strata])
        lines.append(f"| {m:g} | " + " | ".join(cells) + f" | {_fmt(stratified_difference(strata))} | {_fmt(rand)} |")
    for a in (baseline_arm, arm):
        ups = [r["updates"] for res in paired.values() for r in res[a].values()]
        lines.append(f"\nUpdates, {a}: {sum(ups) / len(ups):.1f} (mean over {len(ups)} runs)")
    return "\n".join(lines)


def share_points_csv(runs: dict, share: float, warm_starts: list[str], arm: str, baseline: str, seeds: set[int],
                     milestone: float = 1.0) -> list:
    """``lab.analysis.breakeven.SharePoint``s of one share's per-run CSV (:func:`read_runs_csv`'s form), on ``seeds``,
    after :func:`pair`'s checks (same warm start, seed and budget as the baseline's run)."""
    from lab.analysis.breakeven import SharePoint
    from lab.analysis.curves_report import accuracy_at

    paired = pair(runs, runs, warm_starts, baseline, arm, seeds)
    return [SharePoint(share, w, s, accuracy_at(res[arm][s], milestone) - accuracy_at(res[baseline][s], milestone))
            for w, res in paired.items() for s in sorted(seeds)]


def breakeven_lines(csv_by_share: dict[float, Path], warm_starts: list[str], arms: list[str], baseline: str,
                    seeds: set[int], n_boot: int = 4000, milestone: float = 1.0) -> str:
    """``lab.analysis.breakeven``'s line for each arm (its fit, its seed bootstrap, its verdict) from the stored per-run
    CSVs of each share, with the crossing's own interval over the same resamples
    (``lab.analysis.breakeven.crossing_interval``)."""
    from lab.analysis.breakeven import bootstrap_line, crossing_interval, fit_line, line_break_even

    runs = {s: read_runs_csv(path) for s, path in csv_by_share.items()}
    lines = ["| arm | intercept a [95%] | slope b [95%] | line's verdict | crossing [95%] |", "|---|---:|---:|---|---:|"]
    for arm in arms:
        pts = [p for s in sorted(runs) for p in share_points_csv(runs[s], s, warm_starts, arm, baseline, seeds,
                                                                  milestone)]
        a, b = fit_line(pts)
        boot = bootstrap_line(pts, n_boot)
        (a_lo, a_hi), (b_lo, b_hi) = ((float(v) for v in np.percentile(boot[:, k], [2.5, 97.5])) for k in (0, 1))
        verdict, x = line_break_even(a, b, b_lo, b_hi)
        x_lo, x_hi = crossing_interval(boot)
        lines.append(f"| {arm} | {a:+.3f} [{a_lo:+.3f}, {a_hi:+.3f}] | {b:+.3f} [{b_lo:+.3f}, {b_hi:+.3f}] | {verdict}"
                     f" | {-a / b:.2f} [{x_lo:.2f}, {x_hi:.2f}] |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline-csv", type=Path, nargs="+", help="per-run CSVs holding the baseline")
    p.add_argument("--arm-csv", type=Path, nargs="+", help="per-run CSVs holding the arm")
    p.add_argument("--arm", nargs="+", required=True, help="the arm (with --share: the arms)")
    p.add_argument("--share", action="append", default=[], metavar="SHARE=CSV",
                   help="the break-even's lines instead: each share's per-run CSV (baseline and arms in it)")
    p.add_argument("--bootstrap", type=int, default=4000)
    p.add_argument("--baseline", default="GSPO G=n")
    p.add_argument("--warm-start", action="append", required=True, metavar="NAME")
    p.add_argument("--seeds", nargs="+", required=True, help="e.g. 0-3: the seeds every warm start has")
    args = p.parse_args(argv)
    seeds = set(parse_seeds(args.seeds))
    if args.share:
        try:
            shares = {float(s): Path(f) for s, _, f in (item.partition("=") for item in args.share)}
            print(breakeven_lines(shares, args.warm_start, args.arm, args.baseline, seeds, args.bootstrap))
        except (OSError, ValueError) as exc:
            p.error(f"--share: {exc}")
        return 0
    if not args.baseline_csv or not args.arm_csv or len(args.arm) != 1:
        p.error("without --share: --baseline-csv, --arm-csv and one --arm")
    try:
        baseline, arm_runs = ({}, {})
        for paths, into in ((args.baseline_csv, baseline), (args.arm_csv, arm_runs)):
            for path in paths:
                for w, by_arm in read_runs_csv(path).items():
                    into.setdefault(w, {}).update(by_arm)
        paired = pair(baseline, arm_runs, args.warm_start, args.baseline, args.arm[0], seeds)
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    milestones = sorted({e["milestone"] for res in paired.values() for r in res[args.arm[0]].values() for e in r["evals"]})
    print(compare(paired, args.baseline, args.arm[0], milestones))
    return 0


if __name__ == "__main__":
    sys.exit(main())
