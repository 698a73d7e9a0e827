"""Tables of ``lab.analysis.ablation``: per warm start and pooled, every arm against the baseline at equal compute,
with the mechanism measured in the same runs (``ibpo.mechanism``) and the unlearning check; plus ``runs.csv``,
one row per (task, warm start, arm, seed), small enough to keep in git beside the published tables.

Before anything is written (:func:`load_checked`): the warm-start folders must differ in their warm start only (every
run-defining option of ``lab.analysis.run_protocol`` and the evaluation split the same), hold different warm starts
(``warm_start_sha256``), each the ``MODEL_DIR`` its ``--warm-start`` names, and the baseline and arms must have runs.
Run it through ``python -m lab.analysis.ablation --report-only``.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np

from lab.analysis.ablation_stats import stratified_difference
from lab.analysis.equal_compute_report import load_results
from evaluation.stats import interval_text, p_value_text, paired_difference, t_interval
from lab.analysis.run_protocol import (  # eval_split and SPLIT_NAMES re-exported: callers import them from here
    SPLIT_NAMES,
    check_arm_names,
    check_comparable,
    check_distinct,
    check_models,
    check_seeds,
    eval_split,
)
from ibpo.mechanism import alarm_steps

MECHANISM_KEYS = ("positive_adv_mass_on_wrong", "shaped_all_wrong_groups", "shaped_wrong_positive",
                  "wrong_tokens_shared_with_right_sibling")


def final_eval(result: dict) -> dict | None:
    """The run's final evaluation: at the full compute budget (milestone 1.0), or, for a run at equal optimizer
    updates (``--max-steps``), the one after its last step (milestone ``None``); ``None`` while it has neither."""
    return next((e for e in result["evals"] if e["milestone"] is not None and abs(e["milestone"] - 1.0) < 1e-9),
                next((e for e in result["evals"] if e["milestone"] is None), None))


def alarm_fired(result: dict) -> bool:
    """Whether ``ibpo.mechanism.RewardDropAlarm`` fired at any step of the run (recomputed from the per-step
    training rewards, so runs recorded before the loop logged it are judged by the same rule)."""
    return any(alarm_steps([s["reward"] for s in result["steps"]]))


def run_mean(result: dict, key: str) -> float:
    """Mean over the run's steps of a per-step record key (nan when no step has it)."""
    values = [s[key] for s in result["steps"] if key in s]
    return float(np.mean(values)) if values else float("nan")


def warm_start_accuracy(meta: dict) -> float:
    """The warm start's greedy accuracy on the split the folder's runs are evaluated on."""
    return meta[f"warm_start_{eval_split(meta)}_accuracy"]


def warm_start_rows(meta: dict, results: dict[str, dict[int, dict]], baseline: str) -> list[dict]:
    """One row per arm of one warm start: accuracy, paired Δ to the baseline, change from the warm start,
    updates, the mechanism means and the share of seeds whose collapse alarm fired."""
    base = results.get(baseline, {})
    rows = []
    for arm, runs in results.items():
        seeds = sorted(s for s in runs if s in base and final_eval(runs[s]) and final_eval(base[s]))
        if not seeds:
            continue
        acc = [final_eval(runs[s])["accuracy"] for s in seeds]
        d = paired_difference(acc, [final_eval(base[s])["accuracy"] for s in seeds])
        change = t_interval(np.asarray(acc) - warm_start_accuracy(meta))
        row = {"arm": arm, "seeds": len(seeds), "accuracy": t_interval(acc).as_dict(), "diff": d.as_dict(),
               "change": change.as_dict(), "warm_start_accuracy": warm_start_accuracy(meta),
               "updates": float(np.mean([sum(st["updates"] for st in runs[s]["steps"]) for s in seeds])),
               "alarm_share": float(np.mean([alarm_fired(runs[s]) for s in seeds])),
               "sd_diff": d.sd_diff}
        for key in MECHANISM_KEYS:
            values = [run_mean(runs[s], f"mechanism/{key}") for s in seeds]
            values = [v for v in values if math.isfinite(v)]
            row[key] = float(np.mean(values)) if values else float("nan")
        rows.append(row)
    return rows


def format_interval(x: dict, fmt: str = "{:+.3f}") -> str:
    """A t interval (``mean`` or ``diff``, ``low``, ``high`` and ``seeds``: a ``SeedInterval``, a
    ``PairedDifference`` or a ``stratified_difference`` as a dict) as ``centre [low, high]``, or the centre and why
    there is no interval (``evaluation.stats.interval_text``: one seed, or no spread)."""
    centre = x["mean"] if "mean" in x else x["diff"]
    return interval_text(centre, x["low"], x["high"], int(x["seeds"]), fmt)


def _num(x: float, fmt: str = "{:.2f}") -> str:
    return fmt.format(x) if math.isfinite(x) else "-"


def load_checked(out: Path, warm_starts: list[str], baseline: str, models: dict[str, str] | None = None,
                 arms: list[str] | None = None, seeds: set[int] | None = None) -> dict[str, tuple[dict, dict]]:
    """``{warm start: (meta, results)}`` of the warm starts with a ``ws_<name>/meta.json`` under ``out``, after the
    checks every pooled table needs (``lab.analysis.run_protocol``): no name given twice; the folders agree on every
    run-defining option and the split (they differ in their warm start only), hold different warm starts, and each
    started from its ``models[name]``; the baseline, ``arms`` and ``seeds`` have runs. The results are cut to the
    baseline and ``arms`` (when given) and to ``seeds`` (when given): the report is over what its command names,
    not every run in the folder. Nothing is written."""
    check_distinct("--warm-start", warm_starts)
    loaded = {name: load_results(out / f"ws_{name}") for name in warm_starts
              if (out / f"ws_{name}" / "meta.json").exists()}
    if not loaded:
        raise SystemExit(f"{out}: no ws_<name>/meta.json for the warm starts {warm_starts}: nothing to report (no run "
                         "has started there, or --out / --warm-start names another folder)")
    absent = [name for name in warm_starts if name not in loaded]
    if absent:
        print(f"[ablation] note: no runs of the warm start(s) {absent} under {out} (no ws_<name>/meta.json); the "
              "report leaves them out", file=sys.stderr, flush=True)
    check_comparable([(name, out / f"ws_{name}", meta) for name, (meta, _) in loaded.items()],
                     reader="the ablation report")
    if models:
        check_models(((out / f"ws_{name}", meta, models[name]) for name, (meta, _) in loaded.items()))
    check_arm_names(loaded, baseline, arms, baseline_option="the baseline (the first of --arms)")
    check_seeds(loaded, seeds)
    keep = None if arms is None else {baseline, *arms}
    return {name: (meta, {a: {s: r for s, r in runs.items() if seeds is None or s in seeds}
                          for a, runs in results.items() if keep is None or a in keep})
            for name, (meta, results) in loaded.items()}


def write_report(out: Path, warm_starts: list[str], baseline: str, argv: list[str],
                 models: dict[str, str] | None = None, arms: list[str] | None = None,
                 seeds: set[int] | None = None) -> str:
    """``report.md`` and ``runs.csv`` under ``out`` from the runs on disk of the baseline and ``arms`` (every arm
    when ``None``) and of ``seeds`` (every seed when ``None``); returns the markdown. The folders are checked first
    (:func:`load_checked`; a ``ValueError`` or ``SystemExit`` leaves both files as they were)."""
    per_ws: dict[str, list[dict]] = {}
    csv_rows = []
    loaded = load_checked(out, warm_starts, baseline, models, arms, seeds)
    metas = {name: meta for name, (meta, _) in loaded.items()}
    for name, (meta, results) in loaded.items():
        per_ws[name] = warm_start_rows(meta, results, baseline)
        for arm, runs in results.items():
            for seed, r in sorted(runs.items()):
                ev = {e["milestone"]: e for e in r["evals"]}
                csv_rows.append({"task": meta.get("task", "addition"), "warm_start": name, "warm_start_sha256": meta["warm_start_sha256"],
                                 "warm_start_accuracy": warm_start_accuracy(meta), "eval_split": eval_split(meta),
                                 "arm": arm, "seed": seed,
                                 "steps": len(r["steps"]), "updates": sum(s["updates"] for s in r["steps"]),
                                 "flops": r["steps"][-1]["flops"] if r["steps"] else 0.0,
                                 "accuracy_at_0.5": ev.get(0.5, {}).get("accuracy"),
                                 "accuracy_at_1": (final_eval(r) or {}).get("accuracy"),
                                 "collapse_alarm": int(alarm_fired(r)),
                                 **{k: _num(run_mean(r, f"mechanism/{k}"), "{:.4f}") for k in MECHANISM_KEYS}})
    splits = {eval_split(meta) for meta in metas.values()}
    split = SPLIT_NAMES[splits.pop()]  # one split: load_checked compared them
    if csv_rows:
        with open(out / "runs.csv", "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(csv_rows[0]))
            writer.writeheader()
            writer.writerows(csv_rows)
    budget_arms = sorted({m.get("budget_arm", "the first listed arm") for m in metas.values()})
    lines = [f"Command: `python -m lab.analysis.ablation {' '.join(argv)}`", "",
             f"Budget: `--budget-steps` × the cost of one step of {' / '.join(budget_arms)} on each warm start "
             "(a 3-step probe).", "",
             f"| warm start | arm | seeds | updates | {split} accuracy [95% CI] | Δ vs " + baseline + " [95% CI] | p | "
             "change from warm start [95% CI] | alarm | +adv mass on wrong | shaped all-wrong groups/step | "
             "wrong tokens shared with a right sibling |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in per_ws.items():
        meta = metas[name]
        for r in rows:
            is_base = r["arm"] == baseline
            lines.append(
                f"| {name} ({warm_start_accuracy(meta):.3f}, `{meta['warm_start_sha256'][:8]}`) | {r['arm']} | "
                f"{r['seeds']} | {r['updates']:.1f} | {format_interval(r['accuracy'], '{:.3f}')} | "
                + ("—" if is_base else format_interval(r["diff"]))
                + f" | {'—' if is_base else p_value_text(r['diff']['p_value'])} | "
                f"{format_interval(r['change'])} | {r['alarm_share']:.2f} | {_num(r['positive_adv_mass_on_wrong'])} | "
                f"{_num(r['shaped_all_wrong_groups'])} | {_num(r['wrong_tokens_shared_with_right_sibling'])} |")
    arms = list(dict.fromkeys(r["arm"] for rows in per_ws.values() for r in rows))
    lines += ["", f"**Pooled over warm starts** (seeds nested in warm starts: the mean of the per-warm-start paired Δ, "
              "each warm start weighted equally, stratified t with Welch-Satterthwaite df):", "",
              f"| arm | warm starts | Δ vs {baseline} [95% CI] | p | warm starts with p < 0.05 and Δ > 0 | "
              "warm starts ending below their start (mean) |", "|---|---:|---:|---:|---:|---:|"]
    for arm in arms:
        if arm == baseline:
            continue
        strata = [next(r for r in rows if r["arm"] == arm) for rows in per_ws.values() if any(r["arm"] == arm for r in rows)]
        pooled = stratified_difference([(r["diff"]["diff"], r["sd_diff"], r["seeds"]) for r in strata])
        # a warm start whose paired differences are all equal (SD 0) has no t test (p NaN): never a win
        wins = sum(1 for r in strata if r["diff"]["diff"] > 0 and r["diff"]["p_value"] < 0.05)
        below = sum(1 for r in strata if r["change"]["mean"] < 0)
        lines.append(f"| {arm} | {pooled['strata']} | {format_interval(pooled)} | {p_value_text(pooled['p_value'])} | "
                     f"{wins}/{len(strata)} | {below}/{len(strata)} |")
    text = "\n".join(lines)
    (out / "report.md").write_text(text + "\n", encoding="utf-8")
    return text


if __name__ == "__main__":
    sys.exit("lab.analysis.ablation_report is the ablation's table module, not a command: run "
             "`python -m lab.analysis.ablation --out OUT --warm-start NAME=MODEL_DIR ... --arms ... --report-only`")
