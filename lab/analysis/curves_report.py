"""Learning curves at one budget (``lab.analysis.ablation --milestones 0.25 0.5 0.75 1.0``), per warm start and pooled:
every arm against the baseline at every budget fraction, localisation coverage and quality against the oracle,
and the cost per phase in both units (FLOPs and modelled GPU seconds).

    python -m lab.analysis.curves_report --out outputs/gpu_time_addition --baseline 'GSPO G=n' \\
        --warm-start weak --warm-start medium --warm-start strong

Statistics (fixed in ``docs/evidence.md`` before the runs): within a warm start, the paired t over the seeds
every arm has finished; pooled, the stratified difference (``lab.analysis.ablation_stats.stratified_difference``: seeds
nested in warm starts) and, beside it, the warm start as a random factor (:func:`random_warm_start_difference`);
Holm's step-down adjustment over the family arms × warm starts at the full budget (:func:`holm`).

Checks before any number (``lab.analysis.run_protocol``): a warm-start name given twice; warm-start folders that differ
in anything but their warm start (every run-defining option and the evaluation split the same) or hold the same warm
start under two names (warm starts of several tasks may be pooled, each task at its own learning rate: a table over
both tasks' warm starts); an ``--arm-folder`` that differs from ``--out``'s in anything but its learning rate, or holds
another warm start or budget; a ``--baseline``, ``--arms`` name or ``--seeds`` seed with no runs; the baseline among
``--arms``. The tables name the split the runs were evaluated on.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

import numpy as np

from lab.analysis.ablation_stats import parse_seeds
from lab.analysis.equal_compute_report import load_results
from evaluation.stats import (
    equal_but_for_rounding,
    interval_text,
    paired_difference,
    student_t_quantile,
    t_test_p_value,
)
from lab.analysis.run_protocol import (  # check_arm_names re-exported: lab.analysis.breakeven imported it from here
    SPLIT_NAMES,
    check_arm_names,
    check_comparable,
    check_distinct,
    check_seeds,
    eval_split,
)

LOCALISATION_KEYS = ("coverage", "precision", "recall", "first_position_error")
# not ``runs.csv``: that is lab.analysis.ablation's per-run record of the same folder, in its own format
CURVES_CSV = "curves_runs.csv"


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values: sorted ascending, p_(i) · (m − i + 1), made monotone, capped at 1. An
    undefined p (NaN: a t test over equal differences, ``evaluation.stats.t_test_p_value``) is no test:
    it is left out of the family and of the result (m counts the defined ones)."""
    items = sorted(((k, p) for k, p in p_values.items() if math.isfinite(p)), key=lambda kv: kv[1])
    m, running, out = len(items), 0.0, {}
    for i, (key, p) in enumerate(items):
        running = max(running, min(1.0, p * (m - i)))
        out[key] = running
    return out


def random_warm_start_difference(means: list[float], alpha: float = 0.05) -> dict[str, float]:
    """The warm start as a random factor: the mean of the W per-warm-start mean differences, with the t interval
    on W − 1 degrees of freedom (its spread is the warm starts' own, seed noise included)."""
    x = np.asarray([m for m in means if math.isfinite(m)], dtype=np.float64)
    if x.size < 2:
        return {"diff": float(x.mean()) if x.size else float("nan"), "low": float("nan"), "high": float("nan"),
                "p_value": float("nan"), "warm_starts": int(x.size)}
    se = float(x.std(ddof=1)) / math.sqrt(x.size)
    diff = float(x.mean())
    half = student_t_quantile(1 - alpha / 2, x.size - 1) * se
    if equal_but_for_rounding(x, max(1.0, float(np.abs(x).max()))):  # differences of accuracies in [0, 1]
        se, half = 0.0, 0.0
    p = t_test_p_value(diff, se, x.size - 1)  # NaN when every warm start's mean difference is the same
    return {"diff": diff, "low": diff - half, "high": diff + half, "p_value": float(p), "warm_starts": int(x.size)}


def accuracy_at(result: dict, milestone: float) -> float | None:
    e = next((e for e in result["evals"] if e["milestone"] is not None and abs(e["milestone"] - milestone) < 1e-9),
             None)
    return None if e is None else float(e["accuracy"])


def paired_at(results: dict[str, dict[int, dict]], arm: str, baseline: str, milestone: float):
    """Paired difference arm − baseline at ``milestone`` over the seeds both have evaluated there."""
    pairs = [(accuracy_at(r, milestone), accuracy_at(results[baseline][s], milestone))
             for s, r in sorted(results.get(arm, {}).items()) if s in results.get(baseline, {})]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    if len(pairs) < 2:
        return None
    return paired_difference([a for a, _ in pairs], [b for _, b in pairs])


def step_mean(result: dict, key: str) -> float:
    values = [s[key] for s in result["steps"] if key in s and s[key] is not None and math.isfinite(s[key])]
    return float(np.mean(values)) if values else float("nan")


def arm_cost(runs: dict[int, dict], correction_share: float = 1.0) -> dict[str, float]:
    """Means over the arm's runs: updates, FLOPs and modelled GPU seconds per step, the correction phase's share
    of each, localisation coverage / precision / recall / first-position error per step, and the share of the
    run's corrections that came out right (NaN for an arm that decodes none). Both shares are of the charged cost
    (the folder's ``--correction-cost-share``, ``correction_share``): a step's ``flops`` and modelled seconds are
    charged, its ``flops_by_phase["correction_gen"]`` is the phase's full FLOPs, so it is scaled here."""
    out: dict[str, list[float]] = {}
    for r in runs.values():
        steps = r["steps"]
        if not steps:
            continue
        flops = [s["flops_by_phase"] for s in steps]
        secs = [s.get("modelled_gpu_seconds_by_phase", {}) for s in steps]
        total_f = steps[-1]["flops"]
        total_s = sum(sum(x.values()) for x in secs)
        corr_f = correction_share * sum(x.get("correction_gen", 0.0) for x in flops)
        corr_s = sum(x.get("correction_gen_prefill", 0.0) + x.get("correction_gen_decode", 0.0) for x in secs)
        row = {"updates": float(len(steps)), "flops_per_step": total_f / len(steps),
               "modelled_s_per_step": total_s / len(steps),
               "correction_flop_share": corr_f / total_f if total_f else float("nan"),
               "correction_modelled_share": corr_s / total_s if total_s else float("nan")}
        row.update({k: step_mean(r, f"localised/{k}") for k in LOCALISATION_KEYS})
        corrections = sum(s.get("ibpo/num_corrections", 0.0) for s in steps)
        # the run's right corrections over its corrections (a ratio of sums: a step with few corrections weighs less)
        row["correction_success"] = (sum(s.get("ibpo/num_right_corrections", 0.0) for s in steps) / corrections
                                     if corrections else float("nan"))
        for k, v in row.items():
            out.setdefault(k, []).append(v)
    return {k: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan") for k, v in out.items()}


def correction_share(meta: dict) -> float:
    """The share of the correction phase's cost a folder's runs were charged (1 before the option existed)."""
    return float(meta.get("args", {}).get("correction_cost_share", 1.0))


def _fmt(d: dict | None, holm_p: float | None = None) -> str:
    """``Δ [low, high]`` over the seeds (``seeds``) or, for the warm start random, over the warm starts
    (``warm_starts``); the estimate and why there is no interval otherwise (``interval_text``)."""
    if d is None or not math.isfinite(d.get("diff", float("nan"))):
        return "—"
    n, unit = (d["warm_starts"], "warm starts") if "warm_starts" in d else (d["seeds"], "seeds")
    text = interval_text(d["diff"], d["low"], d["high"], n, "{:+.3f}", unit)
    if holm_p is not None:
        text += f" (Holm p {holm_p:.3f})"
    return text


def load_with_arm_folders(out: Path, warm_starts: list[str], arm_folders: dict[str, Path] | None = None) -> dict:
    """``{warm start: (meta, {arm: {seed: result}})}`` of ``out``, with each arm of ``arm_folders`` read from that
    other ``lab.analysis.ablation`` folder instead (its own learning rate, ``lab.analysis.lr_per_arm``). A folder is only
    comparable at the same budget on the same warm start: its ``budget_unit``, budget and warm-start hash must be
    ``out``'s, or this stops naming the field; the warm starts' folders differ in their warm start only, and an arm's
    folder differs from ``out``'s in its learning rate only (``lab.analysis.run_protocol.check_comparable``: every other
    run-defining option and the evaluation split the same)."""
    check_distinct("--warm-start", warm_starts)
    loaded = {w: load_results(out / f"ws_{w}") for w in warm_starts}
    # warm starts of several tasks may be pooled (docs/evidence.md A′: six warm starts of two tasks), each task at
    # its own learning rate; warm starts of one task agree on every run-defining option
    check_comparable([(w, out / f"ws_{w}", meta) for w, (meta, _) in loaded.items()], reader="curves_report",
                     per_task={"task", "lr"})
    for arm, folder in (arm_folders or {}).items():
        for w in warm_starts:
            meta, results = loaded[w]
            other_meta, other = load_results(Path(folder) / f"ws_{w}")
            try:
                check_comparable([(w, out / f"ws_{w}", meta), (w, Path(folder) / f"ws_{w}", other_meta)],
                                 varies={"lr"})
            except ValueError as exc:
                raise ValueError(f"--arm-folder {arm}={folder}: {exc}") from None
            for key in ("warm_start_sha256", "budget_unit", "budget_flops"):
                if other_meta.get(key) != meta.get(key):
                    raise ValueError(f"--arm-folder {arm}={folder}: ws_{w} has {key} {other_meta.get(key)!r}, "
                                     f"{out}/ws_{w} has {meta.get(key)!r}: not the same budget on the same warm start")
            if correction_share(other_meta) != correction_share(meta):
                raise ValueError(f"--arm-folder {arm}={folder}: ws_{w} charged the correction phase "
                                 f"{correction_share(other_meta):g} of its cost, {out}/ws_{w} "
                                 f"{correction_share(meta):g}: not the same budget")
            if arm not in other:
                raise ValueError(f"--arm-folder {arm}={folder}: ws_{w} has no {arm!r} run")
            results[arm] = other[arm]
    return loaded


def only_seeds(loaded: dict, seeds: set[int]) -> dict:
    """``loaded`` with every arm's runs cut to ``seeds`` (two rounds compared on the same seeds)."""
    return {w: (meta, {a: {s: r for s, r in runs.items() if s in seeds} for a, runs in res.items()})
            for w, (meta, res) in loaded.items()}


def report(out: Path, warm_starts: list[str], baseline: str, arms: list[str] | None = None,
           arm_folders: dict[str, Path] | None = None, seeds: set[int] | None = None) -> str:
    """The markdown tables and ``curves_runs.csv`` (one row per warm start, arm and seed, one accuracy column per
    milestone) under ``out`` (``arm_folders``: arms read from other folders, :func:`load_with_arm_folders`). With
    ``seeds`` only those seeds' runs are read, and ``curves_runs.csv`` (the folder's whole record) is left as it is.
    Its own name: ``lab.analysis.ablation`` writes ``runs.csv`` into the same folder in another format."""
    from lab.analysis.ablation_stats import stratified_difference

    loaded = load_with_arm_folders(out, warm_starts, arm_folders)
    check_seeds(loaded, seeds)
    if seeds is not None:
        loaded = only_seeds(loaded, seeds)
    check_arm_names(loaded, baseline, arms)
    split = SPLIT_NAMES[eval_split(next(iter(loaded.values()))[0])]  # one split: check_comparable compared them
    arms = arms or sorted({a for _, res in loaded.values() for a in res if a != baseline})
    milestones = sorted({e["milestone"] for _, res in loaded.values() for runs in res.values() for r in runs.values()
                         for e in r["evals"] if e["milestone"] is not None})
    final = milestones[-1] if milestones else 1.0
    per_ws = {(w, a, m): paired_at(res, a, baseline, m) for w, (_, res) in loaded.items() for a in arms
              for m in milestones}
    # a warm start whose paired differences are all equal (SD 0, e.g. two seeds both one problem apart) has no
    # t test (p NaN): holm leaves it out of the family
    adjusted = holm({f"{a}|{w}": per_ws[(w, a, final)].p_value for w in warm_starts for a in arms
                     if per_ws[(w, a, final)] is not None})
    lines = [f"Baseline {baseline}; budget fractions {milestones}; Δ = arm − baseline, {split} accuracy, 95% interval.",
             "", "| arm | fraction | " + " | ".join(f"{w} (seeds)" for w in warm_starts)
             + " | pooled, stratified | pooled, warm start random |", "|---|---:|" + "---:|" * (len(warm_starts) + 2)]
    for a in arms:
        for m in milestones:
            cells, strata = [], []
            for w in warm_starts:
                d = per_ws[(w, a, m)]
                cells.append("—" if d is None else f"{_fmt(d.as_dict(), adjusted.get(f'{a}|{w}') if m == final else None)} ({d.seeds})")
                if d is not None:
                    strata.append((d.diff, d.sd_diff, d.seeds))
            pooled = stratified_difference(strata)
            rand = random_warm_start_difference([s[0] for s in strata])
            lines.append(f"| {a} | {m:g} | " + " | ".join(cells) + f" | {_fmt(pooled)} | {_fmt(rand)} |")
    lines += ["", "Cost and localisation (means over runs and warm starts; coverage = wrong responses trained with a "
              "token mask / wrong responses; precision, recall and first-position error against the oracle's wrong "
              "tokens, over the masked ones):", "",
              "| arm | updates | FLOPs/step | modelled GPU s/step | correction share of FLOPs | of modelled s | "
              "coverage | precision | recall | first-position error (tokens) | right corrections / corrections |",
              "|---|" + "---:|" * 10]
    for a in [baseline] + arms:
        costs = [arm_cost(res.get(a, {}), correction_share(meta)) for meta, res in loaded.values() if res.get(a)]
        if not costs:
            continue
        c = {k: float(np.nanmean([x[k] for x in costs])) if any(math.isfinite(x[k]) for x in costs) else float("nan")
             for k in costs[0]}
        lines.append(f"| {a} | {c['updates']:.1f} | {c['flops_per_step']:.3g} | {c['modelled_s_per_step']:.3f} | "
                     f"{c['correction_flop_share']:.3f} | {c['correction_modelled_share']:.3f} | {c['coverage']:.3f} | "
                     f"{c['precision']:.3f} | {c['recall']:.3f} | {c['first_position_error']:.1f} | "
                     f"{c['correction_success']:.3f} |")
    if seeds is None:
        write_runs_csv(out / CURVES_CSV, loaded, milestones)
    else:
        lines.insert(0, f"Seeds {sorted(seeds)} only.\n")
    return "\n".join(lines)


def write_runs_csv(path: Path, loaded: dict, milestones: list[float]) -> None:
    fields = ["warm_start", "warm_start_sha256", "arm", "seed", "updates", "budget_unit", "budget"] + [
        f"accuracy_{m:g}" for m in milestones] + [f"{k}_mean" for k in LOCALISATION_KEYS]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for w, (meta, res) in loaded.items():
            for arm, runs in sorted(res.items()):
                for seed, r in sorted(runs.items()):
                    row = {"warm_start": w, "warm_start_sha256": meta["warm_start_sha256"], "arm": arm, "seed": seed,
                           "updates": len(r["steps"]), "budget_unit": meta.get("budget_unit", "flops"),
                           "budget": meta["budget_flops"]}
                    row.update({f"accuracy_{m:g}": accuracy_at(r, m) for m in milestones})
                    row.update({f"{k}_mean": step_mean(r, f"localised/{k}") for k in LOCALISATION_KEYS})
                    writer.writerow(row)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="an lab.analysis.ablation output folder (ws_<name>/ per warm start)")
    p.add_argument("--warm-start", action="append", required=True, metavar="NAME")
    p.add_argument("--baseline", default="GSPO G=n")
    p.add_argument("--arms", nargs="+", default=None)
    p.add_argument("--arm-folder", action="append", default=[], metavar="ARM=FOLDER",
                   help="read ARM's runs from another lab.analysis.ablation folder at the same budget (its own "
                        "learning rate); the baseline too")
    p.add_argument("--seeds", nargs="+", default=None,
                   help="only these seeds (e.g. 0-5: two rounds compared on the seeds both ran); curves_runs.csv is not "
                        "rewritten")
    args = p.parse_args(argv)
    missing = [w for w in args.warm_start if not (Path(args.out) / f"ws_{w}" / "meta.json").is_file()]
    if missing:
        p.error(f"--warm-start {missing}: no {args.out}/ws_<name>/meta.json")
    arm_folders = {}
    for item in args.arm_folder:
        arm, sep, folder = item.rpartition("=")
        if not sep or not arm or not folder:
            p.error(f"--arm-folder {item!r}: expected ARM=FOLDER")
        arm_folders[arm] = Path(folder)
    try:
        seeds = None if args.seeds is None else set(parse_seeds(args.seeds))
        print(report(Path(args.out), args.warm_start, args.baseline, args.arms, arm_folders, seeds))
    except ValueError as exc:
        p.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
