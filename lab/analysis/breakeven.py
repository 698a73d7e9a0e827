"""The break-even correction cost over several shares at once (docs/evidence.md 2c D, 2f M).

``lab.analysis.ablation --correction-cost-share S`` charges the correction phase S of its cost; each share is its own
folder. This reads them together:

    python -m lab.analysis.breakeven --share 0=OUT_0 --share 0.5=OUT_05 --share 1=OUT_1 \\
        --warm-start weak --warm-start medium --warm-start strong \\
        --arms 'greedy disagreements' 'mask lam 0 mixed' [--baseline 'GSPO G=n'] [--out REPORT_DIR]

For each arm, Δ is arm − baseline at the full budget (or, with ``--fraction F``, at the evaluation made at that
fraction of it: one of the runs' ``--milestones``), paired by seed (the baseline's runs do not depend on the share:
one run per seed serves every share).

- **Per share (D's rule)**: the pooled stratified Δ and its interval, and whether the arm *matches* the baseline
  there: pooled Δ ≥ 0 and no warm start Holm-significantly behind (Holm over arms × warm starts at that share). The
  rule's break-even is the largest share that matches.
- **The line (2f M's rule)**: Δ(share) = a + b·share, least squares over every (warm start, seed, share)
  difference, each warm start weighted equally (:func:`fit_line`). 95% intervals by a bootstrap that resamples
  seeds within each warm start (:func:`bootstrap_line`): a seed keeps its differences at every share together, as
  they share its baseline run. The break-even is the share where the line crosses 0, reported only when b's
  interval lies below 0 (:func:`line_break_even`; an interval of width 0, every seed the same slope, is no interval:
  ``evaluation.stats.interval_text``), with the crossing's own percentile interval over the same resamples
  (:func:`crossing_interval`, added after 2g P's runs); otherwise the cost of a correction does not resolvably change
  the answer and the report says "not resolved" (or, when the slope is resolved but the line is below 0 from
  share 0, "behind at every share").
- **A check beside the line** (added after 2g P's runs, not pre-registered): the stratified t interval of the
  per-seed slopes (:func:`per_seed_slope_interval`), the last column; it decides nothing.

Writes ``OUT/breakeven.md`` and ``OUT/breakeven.json`` when ``--out`` is given; prints the table.

Checks before any number (:func:`load_shares`, ``lab.analysis.run_protocol``): a warm-start name given twice; folders
that differ in any run-defining option but the correction cost share (the evaluation split, budget, learning rate,
cost model, milestones, max steps...), or hold another warm start under a warm start's name at some share, or one warm
start under two names; a share mislabelled against its folder's ``correction_cost_share``; a ``--baseline``,
``--arms`` name or ``--seeds`` seed with no runs (the arms there are listed); the baseline among ``--arms``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab.analysis.ablation_stats import parse_seeds, stratified_difference
from lab.analysis.curves_report import accuracy_at, holm
from lab.analysis.equal_compute_report import load_results
from evaluation.stats import interval_text, no_interval_reason, paired_difference
from lab.analysis.run_protocol import check_arm_names, check_comparable, check_distinct, check_seeds


@dataclass(frozen=True)
class SharePoint:
    """One paired difference: arm − baseline on one warm start and seed, with the correction phase charged
    ``share`` of its cost."""

    share: float
    warm_start: str
    seed: int
    delta: float


def share_points(folder: Path, share: float, warm_starts: list[str], arm: str, baseline: str,
                 seeds: set[int] | None = None, milestone: float = 1.0, loaded: dict | None = None) -> list[SharePoint]:
    """The paired differences of one share's ``lab.analysis.ablation`` folder at ``milestone`` (seeds both arms
    evaluated there; ``seeds`` restricts them; ``loaded``: the folder's ``{warm start: (meta, results)}`` when
    already read). A warm start's folder whose runs charged another share (``meta.json``'s
    ``args.correction_cost_share``, 1 before the option existed) is a ``ValueError``: the same folder given for two
    shares, or a share mislabelled, would otherwise bend the line silently."""
    points = []
    for w in warm_starts:
        meta, results = loaded[w] if loaded is not None else load_results(folder / f"ws_{w}")
        if "args" in meta:  # every toy_loop meta.json has it; a hand-made folder may not
            charged = float(meta["args"].get("correction_cost_share", 1.0))
            if abs(charged - share) > 1e-9:
                raise ValueError(f"--share {share:g}={folder}: its ws_{w} runs charged the correction phase "
                                 f"{charged:g} of its cost (meta.json), not {share:g}")
        for seed, run in sorted(results.get(arm, {}).items()):
            if (seeds is not None and seed not in seeds) or seed not in results.get(baseline, {}):
                continue
            a, b = accuracy_at(run, milestone), accuracy_at(results[baseline][seed], milestone)
            if a is not None and b is not None:
                points.append(SharePoint(share, w, seed, a - b))
    return points


def load_shares(folders: dict[float, Path], warm_starts: list[str], arms: list[str], baseline: str,
                seeds: set[int] | None = None) -> dict[float, dict[str, tuple[dict, dict]]]:
    """``{share: {warm start: (meta, results)}}``, after the checks (``lab.analysis.run_protocol``): no warm-start name
    given twice; every folder of every share agrees on every run-defining option but ``--correction-cost-share``
    (the evaluation split, budget, learning rate, cost model, milestones, max steps... the same), a warm start's
    folders hold the same warm start at every share and different warm starts' different ones; at every share the
    baseline and every arm have runs, the baseline is not among the arms, and every requested seed has runs."""
    check_distinct("--warm-start", warm_starts)
    loaded = {s: {w: load_results(f / f"ws_{w}") for w in warm_starts} for s, f in folders.items()}
    check_comparable([(w, folders[s] / f"ws_{w}", meta) for s in loaded for w, (meta, _) in loaded[s].items()],
                     varies={"correction_cost_share"}, reader="breakeven")
    for s, by_ws in loaded.items():
        try:
            check_arm_names(by_ws, baseline, arms)
            check_seeds(by_ws, seeds)
        except ValueError as exc:
            raise ValueError(f"--share {s:g}={folders[s]}: {exc}") from None
    return loaded


def fit_line(points: list[SharePoint]) -> tuple[float, float]:
    """(a, b) of Δ = a + b·share by weighted least squares, each point weighted 1 / (its warm start's number of
    points): every warm start counts once, as in the pooled tables, whatever seeds each finished."""
    counts: dict[str, int] = {}
    for p in points:
        counts[p.warm_start] = counts.get(p.warm_start, 0) + 1
    x = np.array([p.share for p in points], dtype=np.float64)
    y = np.array([p.delta for p in points], dtype=np.float64)
    w = np.array([1.0 / counts[p.warm_start] for p in points], dtype=np.float64)
    xm, ym = float(np.sum(w * x) / np.sum(w)), float(np.sum(w * y) / np.sum(w))
    sxx = float(np.sum(w * (x - xm) ** 2))
    if sxx <= 0:
        raise ValueError("the line needs at least two different shares")
    b = float(np.sum(w * (x - xm) * (y - ym)) / sxx)
    return ym - b * xm, b


def bootstrap_line(points: list[SharePoint], n_boot: int = 4000, seed: int = 0) -> np.ndarray:
    """``n_boot`` × 2 array of (a, b) refitted on resamples: in each warm start, its seeds drawn with replacement,
    each drawn seed bringing all its shares' differences."""
    rng = np.random.default_rng(seed)
    by_ws: dict[str, dict[int, list[SharePoint]]] = {}
    for p in points:
        by_ws.setdefault(p.warm_start, {}).setdefault(p.seed, []).append(p)
    out = np.empty((n_boot, 2), dtype=np.float64)
    for i in range(n_boot):
        sample: list[SharePoint] = []
        for ws, seeds in by_ws.items():
            keys = sorted(seeds)
            for k in rng.choice(len(keys), size=len(keys), replace=True):
                sample += seeds[keys[k]]
        out[i] = fit_line(sample)
    return out


def crossing_interval(boot: np.ndarray, alpha: float = 0.05) -> tuple[float, float]:
    """The (1 − alpha) percentile interval of the share where the line crosses 0, x = −a/b, over the bootstrap's
    refitted lines (``boot``: :func:`bootstrap_line`'s rows (a, b)), as the intervals of a and b are read. A resample
    whose slope is exactly 0 never crosses: it counts as beyond either end (+inf when a > 0, −inf when a < 0, 0
    when both are 0). Added after 2g P's runs (the issue that closed the toy answer): a crossing is a ratio of two
    noisy numbers, and its interval is much wider than the slope's."""
    a, b = boot[:, 0], boot[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(b != 0, -a / np.where(b != 0, b, 1.0), np.sign(a) * np.inf)
    low, high = np.percentile(x, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(low), float(high)


def per_seed_slope_interval(points: list[SharePoint], alpha: float = 0.05) -> dict:
    """A check beside the bootstrap (added after 2g P's runs, not pre-registered): each (warm start, seed)'s own
    least-squares slope of Δ over its shares, then the stratified t interval over seeds within warm starts
    (:func:`lab.analysis.ablation_stats.stratified_difference`). With few seeds per warm start the seed bootstrap's
    percentile interval is narrower than a t interval; this one is the more conservative reading."""
    by_seed: dict[str, dict[int, list[SharePoint]]] = {}
    for p in points:
        by_seed.setdefault(p.warm_start, {}).setdefault(p.seed, []).append(p)
    strata = []
    for seeds in by_seed.values():
        slopes = [fit_line(pts)[1] for pts in seeds.values() if len({p.share for p in pts}) >= 2]
        if len(slopes) >= 2:
            strata.append((float(np.mean(slopes)), float(np.std(slopes, ddof=1)), len(slopes)))
    if not strata:
        raise ValueError("the per-seed slopes need two seeds of some warm start with two shares each")
    return stratified_difference(strata, alpha)


def line_break_even(a: float, b: float, b_low: float, b_high: float) -> tuple[str, float | None]:
    """What the line says about the break-even: ``("crosses", x)`` where Δ = a + b·x = 0 when b's interval lies
    below 0 and a ≥ 0 (``"crosses beyond the shares tried"`` when x > 1); ``("behind at every share", None)`` when
    b's interval lies below 0 and a < 0; ``("rises with the share", None)`` when it lies above 0; else
    ``("not resolved", None)``: the cost of a correction does not resolvably change Δ."""
    if b_high < 0:
        if a < 0:
            return "behind at every share", None
        x = -a / b
        return ("crosses" if x <= 1.0 else "crosses beyond the shares tried"), x
    if b_low > 0:
        return "rises with the share", None
    return "not resolved", None


def per_share_rule(points_by_share: dict[float, dict[str, list[SharePoint]]], warm_starts: list[str],
                   alpha: float = 0.05) -> dict[float, dict[str, dict]]:
    """D's rule at each share: ``{share: {arm: {pooled interval, holm p per warm start, matches}}}``."""
    out: dict[float, dict[str, dict]] = {}
    for share, by_arm in sorted(points_by_share.items()):
        per_ws = {}
        for arm, points in by_arm.items():
            for w in warm_starts:
                deltas = [p.delta for p in points if p.warm_start == w]
                if len(deltas) >= 2:
                    per_ws[(arm, w)] = paired_difference(deltas, [0.0] * len(deltas))
        adjusted = holm({f"{a}|{w}": d.p_value for (a, w), d in per_ws.items()})  # an undefined p left out
        out[share] = {}
        for arm in by_arm:
            strata = [(d.diff, d.sd_diff, d.seeds) for (a, _), d in per_ws.items() if a == arm]
            pooled = stratified_difference(strata, alpha)
            behind = [w for w in warm_starts if (arm, w) in per_ws and per_ws[(arm, w)].diff < 0
                      and adjusted.get(f"{arm}|{w}", 1.0) < alpha]
            out[share][arm] = {"pooled": pooled, "holm_p": {w: adjusted.get(f"{arm}|{w}") for w in warm_starts},
                               "matches": bool(pooled["diff"] >= 0 and not behind)}
    return out


def analyse(folders: dict[float, Path], warm_starts: list[str], arms: list[str], baseline: str,
            seeds: set[int] | None = None, n_boot: int = 4000, fraction: float = 1.0) -> dict:
    """Both rules for every arm at ``fraction`` of the budget (module docstring), after :func:`load_shares`' checks."""
    loaded = load_shares(folders, warm_starts, arms, baseline, seeds)
    points = {s: {a: share_points(f, s, warm_starts, a, baseline, seeds, fraction, loaded[s]) for a in arms}
              for s, f in folders.items()}
    for s, by_arm in points.items():
        for arm, pts in by_arm.items():
            if not pts:
                raise ValueError(f"share {s:g} ({folders[s]}): no seed with both a finished {arm!r} run and a "
                                 f"{baseline!r} run evaluated at {_at(fraction)}")
    check_every_seed_at_every_share(points, folders, warm_starts)
    rule = per_share_rule(points, warm_starts)
    arms_out = {}
    for arm in arms:
        pts = [p for s in sorted(points) for p in points[s][arm]]
        a, b = fit_line(pts)
        boot = bootstrap_line(pts, n_boot)
        b_low, b_high = (float(v) for v in np.percentile(boot[:, 1], [2.5, 97.5]))
        x_low, x_high = crossing_interval(boot)
        a_low, a_high = (float(v) for v in np.percentile(boot[:, 0], [2.5, 97.5]))
        matching = [s for s in sorted(rule) if rule[s][arm]["matches"]]
        seeds = {w: len({p.seed for p in pts if p.warm_start == w}) for w in warm_starts}
        # every seed the same slope: the bootstrap's interval has width 0, which is no interval (interval_text says
        # so in the table) and resolves nothing
        no_interval = no_interval_reason(b, b_low, b_high, sum(seeds.values())) is not None
        arms_out[arm] = {"a": a, "a_low": a_low, "a_high": a_high, "b": b, "b_low": b_low, "b_high": b_high,
                         "crossing_low": x_low, "crossing_high": x_high,
                         "b_per_seed_t": per_seed_slope_interval(pts),
                         "line_break_even": ("not resolved", None) if no_interval else line_break_even(a, b, b_low,
                                                                                                         b_high),
                         "rule_break_even": max(matching) if matching else None,
                         "seeds_per_warm_start": seeds}
    return {"per_share": {str(s): v for s, v in rule.items()}, "arms": arms_out, "baseline": baseline,
            "fraction": fraction}


def check_every_seed_at_every_share(points: dict[float, dict[str, list[SharePoint]]], folders: dict[float, Path],
                                    warm_starts: list[str]) -> None:
    """Every arm has the same paired seeds of every warm start at every share, or a ``ValueError`` names the first
    gap. A warm start missing at one share would leave the pooled Δ there over fewer warm starts and pull the line
    by the warm starts' own differences; a seed missing at one share can make a bootstrap resample hold one share
    only (no line: the bootstrap would stop at random)."""
    for arm in next(iter(points.values())):
        seen = {w: {p.seed for s in points for p in points[s][arm] if p.warm_start == w} for w in warm_starts}
        for s in sorted(points):
            for w in warm_starts:
                here = {p.seed for p in points[s][arm] if p.warm_start == w}
                if here != seen[w]:
                    missing = sorted(seen[w] - here) or "every seed"
                    raise ValueError(f"share {s:g} ({folders[s]}): {arm!r} on warm start {w} has no paired difference "
                                     f"for seeds {missing} (the other shares have {sorted(seen[w])}); the line and "
                                     "its seed bootstrap need every seed at every share: pass --seeds to keep those")
                if not here:
                    raise ValueError(f"{arm!r} on warm start {w}: no seed paired with the baseline at any share")


def _at(fraction: float) -> str:
    return "the full budget" if fraction == 1.0 else f"{fraction:g} of the budget"

def _interval(d: dict) -> str:
    """A stratified difference (``stratified_difference``) as ``Δ [low, high]``, or Δ and why there is none."""
    return interval_text(d["diff"], d["low"], d["high"], d["seeds"], "{:+.3f}")


def format_report(result: dict, shares: list[float]) -> str:
    arms = list(result["arms"])
    lines = [f"Δ = arm − {result['baseline']} at {_at(result['fraction'])}, paired by seed; pooled stratified 95% "
             "interval; "
             "✓ = matches (pooled Δ ≥ 0, no warm start Holm-significantly behind).", "",
             "| share | " + " | ".join(arms) + " |", "|---:|" + "---:|" * len(arms)]
    for s in shares:
        cells = [f"{_interval(result['per_share'][str(s)][a]['pooled'])} "
                 f"{'✓' if result['per_share'][str(s)][a]['matches'] else '✗'}" for a in arms]
        lines.append(f"| {s:g} | " + " | ".join(cells) + " |")
    lines += ["", "| arm | intercept a [95%] | slope b per unit share [95%] | break-even, line | break-even, D's rule "
              "| seeds per warm start | slope, per-seed t check [95%] |", "|---|---:|---:|---:|---:|---|---:|"]
    for arm, r in result["arms"].items():
        verdict, x = r["line_break_even"]
        line = verdict if x is None else f"{verdict} at {x:.2f} [{r['crossing_low']:.2f}, {r['crossing_high']:.2f}]"
        rule = "none" if r["rule_break_even"] is None else f"{r['rule_break_even']:g}"
        seeds = ", ".join(f"{w} {n}" for w, n in r["seeds_per_warm_start"].items())
        n = sum(r["seeds_per_warm_start"].values())  # the bootstrap's resampling units
        lines.append(f"| {arm} | {interval_text(r['a'], r['a_low'], r['a_high'], n, '{:+.3f}')} | "
                     f"{interval_text(r['b'], r['b_low'], r['b_high'], n, '{:+.3f}')} | {line} | {rule} | {seeds} | "
                     f"{_interval(r['b_per_seed_t'])} |")
    return "\n".join(lines)


def parse_shares(items: list[str]) -> dict[float, Path]:
    out: dict[float, Path] = {}
    for item in items:
        share, sep, folder = item.partition("=")
        try:
            value = float(share)
        except ValueError:
            value = math.nan
        if not sep or not folder or not 0.0 <= value <= 1.0:
            raise ValueError(f"--share {item!r}: expected SHARE=FOLDER with SHARE in [0, 1]")
        if not Path(folder).is_dir():
            raise ValueError(f"--share {item!r}: {folder} is not a folder")
        if value in out:
            raise ValueError(f"--share {item!r}: share {value:g} is given twice")
        out[value] = Path(folder)
    if len(out) < 2:
        raise ValueError("--share: at least two shares (the line needs two)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--share", action="append", required=True, help="SHARE=FOLDER (an lab.analysis.ablation --out)")
    p.add_argument("--warm-start", action="append", required=True, help="a warm start's name (its ws_<name> folder)")
    p.add_argument("--arms", nargs="+", required=True)
    p.add_argument("--baseline", default="GSPO G=n")
    p.add_argument("--seeds", nargs="+", default=None, help="only these seeds (e.g. 0-3)")
    p.add_argument("--bootstrap", type=int, default=4000)
    p.add_argument("--fraction", type=float, default=1.0,
                   help="read every run at this fraction of the budget (one of its --milestones; default the end)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    try:
        folders = parse_shares(args.share)
    except ValueError as exc:
        p.error(str(exc))
    for s, folder in folders.items():
        missing = [w for w in args.warm_start if not (folder / f"ws_{w}").is_dir()]
        if missing:
            p.error(f"--share {s:g}={folder}: no ws_{missing[0]} folder")
        no_meta = [w for w in args.warm_start if not (folder / f"ws_{w}" / "meta.json").is_file()]
        if no_meta:
            p.error(f"--share {s:g}={folder}: no ws_{no_meta[0]}/meta.json (no run has started there)")
    if not 0.0 < args.fraction <= 1.0:
        p.error(f"--fraction must be in (0, 1], got {args.fraction}")
    if args.bootstrap < 100:
        p.error(f"--bootstrap must be >= 100, got {args.bootstrap}")
    try:
        seeds = set(parse_seeds(args.seeds)) if args.seeds else None
        result = analyse(folders, args.warm_start, args.arms, args.baseline, seeds, args.bootstrap, args.fraction)
    except ValueError as exc:
        p.error(str(exc))
    text = format_report(result, sorted(folders))
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "breakeven.md").write_text(text + "\n")
        (args.out / "breakeven.json").write_text(json.dumps(result, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
