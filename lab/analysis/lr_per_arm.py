"""Each arm's own learning rate, chosen on validation problems over several warm starts (``docs/evidence.md``,
section 2c, B). ``lab.analysis.lr_selection`` tries rates for one arm on one warm start; this runs every listed rate
through ``lab.analysis.ablation`` (its protocol options pass through) with ``--eval-split val`` and one evaluation at
the full budget, then chooses a rate for each arm separately:

    python -m lab.analysis.lr_per_arm --out outputs/lr_per_arm --lrs 3e-4 1e-4 --seeds 100-103 --jobs 2 \\
        --warm-start weak=lab/toy_tasks/warm_starts/addition_seed3 --warm-start medium=lab/toy_tasks/warm_starts/addition_seed0 \\
        --warm-start strong=lab/toy_tasks/warm_starts/addition_seed2 --arms 'GSPO G=n' 'greedy disagreements' \\
        -- --budget-steps 48 --budget-unit modelled_gpu_seconds

The rule, fixed before any run: for each arm, the rate with the highest mean final validation accuracy, the mean
taken over warm starts of the per-warm-start means (each warm start counts once, as in the pooled tables); a tie
goes to the rate listed first. The seeds must not be the reported runs'. The table gives every (arm, rate) its
per-warm-start means and the pooled one with its stratified interval (seeds nested in warm starts), so a reader sees
how clear each choice was. Writes ``OUT/selection.md``, ``OUT/selection.json`` ({arm: rate}) and ``OUT/runs.csv``.

Checks before choosing (:func:`load_rates`, ``lab.analysis.run_protocol``): a warm-start name or model given twice; every
folder evaluated on the validation split; the folders differ in their learning rate and warm start only (every other
run-defining option the same); each ``ws_NAME`` folder's runs started from its ``NAME=MODEL_DIR`` and different names
hold different warm starts; every arm has runs at every rate. The budget is in GSPO G=n steps unless
``-- --budget-arm ARM`` names another arm (``lab.analysis.toy_loop.budget_arm_name``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np

from lab.analysis.ablation_report import final_eval, format_interval
from lab.analysis.ablation_stats import stratified_difference
from lab.analysis.equal_compute_report import load_results
from lab.analysis.lr_selection import check_rate_options, lr_folder
from lab.analysis.run_protocol import (
    check_arm_names,
    check_comparable,
    check_distinct,
    check_models,
    eval_split,
    recorded_options,
)
from option_types.cli import refuse_unused


def load_rates(out: Path, lrs: list[float], warm_starts: list[str], arms: list[str],
               models: dict[str, str] | None = None) -> dict[tuple[float, str], tuple[dict, dict]]:
    """``{(lr, warm start): (meta, results)}``, after the checks (``lab.analysis.run_protocol``): no warm-start name given
    twice; every folder evaluated on the validation split; the folders differ in their learning rate and warm start
    only (every other run-defining option the same), a warm start's folders hold the same warm start at every rate
    (``models[name]``'s when given) and different warm starts' different ones; every arm has runs at every rate."""
    check_distinct("--warm-start", warm_starts)
    loaded = {(lr, ws): load_results(lr_folder(out, lr) / f"ws_{ws}") for lr in lrs for ws in warm_starts}
    for (lr, ws), (meta, _) in loaded.items():
        if eval_split(meta) != "val":
            raise ValueError(f"{lr_folder(out, lr) / f'ws_{ws}'}: its runs were not evaluated on the validation split")
    check_comparable([(ws, lr_folder(out, lr) / f"ws_{ws}", meta) for (lr, ws), (meta, _) in loaded.items()],
                     varies={"lr"}, reader="lr_per_arm")
    if models:
        check_models((lr_folder(out, lr) / f"ws_{ws}", meta, models[ws]) for (lr, ws), (meta, _) in loaded.items())
    for lr in lrs:
        by_ws = {ws: loaded[(lr, ws)] for ws in warm_starts}
        try:
            check_arm_names(by_ws, arms[0], arms[1:], baseline_option="--arms")
        except ValueError as exc:
            raise ValueError(f"{lr_folder(out, lr)}: {exc}") from None
    return loaded


def per_arm_rows(out: Path, lrs: list[float], warm_starts: list[str], arms: list[str],
                 models: dict[str, str] | None = None) -> list[dict]:
    """One row per (arm, lr): the final validation accuracies per warm start and their pooled mean with its
    stratified 95% interval (the mean of the per-warm-start means; variance Σ s_w²/n_w / W²); the folders checked
    first (:func:`load_rates`)."""
    rows = []
    loaded = load_rates(out, lrs, warm_starts, arms, models)
    for arm in arms:
        for lr in lrs:
            per_ws, per_seed = {}, {}
            for ws in warm_starts:
                folder = lr_folder(out, lr) / f"ws_{ws}"
                meta, results = loaded[(lr, ws)]
                acc = {seed: final_eval(r)["accuracy"] for seed, r in sorted(results.get(arm, {}).items())
                       if final_eval(r)}
                if not acc:
                    raise ValueError(f"{folder}: no finished {arm!r} run")
                per_seed[ws] = acc
                values = np.array(list(acc.values()))
                per_ws[ws] = (float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else math.nan,
                              len(values))
            mean = float(np.mean([m for m, _, _ in per_ws.values()]))
            pooled = stratified_difference(list(per_ws.values()))
            if pooled["strata"] < len(per_ws):  # a warm start with one seed has no SD: no interval over all of them
                pooled = {"diff": mean, "low": math.nan, "high": math.nan}
            task = recorded_options(loaded[(lr, warm_starts[0])][0])["task"]
            rows.append({"arm": arm, "lr": lr, "task": task, "mean": mean,
                         "pooled": {"mean": pooled["diff"], "low": pooled["low"], "high": pooled["high"],
                                    "seeds": sum(n for _, _, n in per_ws.values())},
                         "per_warm_start": {ws: {"mean": m, "seeds": n} for ws, (m, _, n) in per_ws.items()},
                         "per_seed": per_seed})
    return rows


def chosen_lrs(rows: list[dict]) -> dict[str, float]:
    """The rule: per arm, the highest mean over warm starts of the per-warm-start mean; the first listed rate on a
    tie (``max`` keeps the first maximum)."""
    out: dict[str, float] = {}
    for arm in dict.fromkeys(r["arm"] for r in rows):
        out[arm] = max((r for r in rows if r["arm"] == arm), key=lambda r: r["mean"])["lr"]
    return out


def format_table(rows: list[dict], warm_starts: list[str]) -> str:
    chosen = chosen_lrs(rows)
    head = " | ".join(f"{ws} (seeds)" for ws in warm_starts)
    lines = ["Final validation accuracy per warm start (mean over seeds) and pooled (mean of the warm starts' means, "
             "stratified 95% interval); the chosen rate is each arm's highest pooled mean.", "",
             f"| arm | lr | {head} | pooled [95% CI] | chosen |",
             "|---|---:|" + "---:|" * len(warm_starts) + "---:|:---:|"]
    for r in rows:
        cells = " | ".join(f"{r['per_warm_start'][ws]['mean']:.3f} ({r['per_warm_start'][ws]['seeds']})"
                           for ws in warm_starts)
        lines.append(f"| {r['arm']} | {r['lr']:g} | {cells} | {format_interval(r['pooled'], '{:.3f}')} | "
                     f"{'yes' if chosen[r['arm']] == r['lr'] else ''} |")
    return "\n".join(lines)


def write_runs_csv(rows: list[dict], path: Path, task: str) -> None:
    """One line per (arm, lr, warm start, seed): the final validation accuracy."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task", "arm", "lr", "warm_start", "seed", "val_accuracy"])
        for r in rows:
            for ws, accs in r["per_seed"].items():
                for seed, acc in accs.items():
                    w.writerow([task, r["arm"], f"{r['lr']:g}", ws, seed, f"{acc:.6f}"])


def main(argv: list[str] | None = None) -> int:
    from lab.analysis import ablation, toy_loop
    from lab.analysis.ablation_stats import parse_seeds, parse_warm_starts

    argv = list(sys.argv[1:] if argv is None else argv)
    protocol = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--warm-start", action="append", required=True, metavar="NAME=MODEL_DIR")
    p.add_argument("--arms", nargs="+", required=True,
                   help="arms of lab.analysis.toy_loop.default_arms(); the first is the ablation report's baseline; the "
                        "budget is in GSPO G=n steps unless `-- --budget-arm ARM` names another arm")
    p.add_argument("--lrs", type=float, nargs="+", required=True, help="the first listed wins a tie")
    p.add_argument("--seeds", nargs="+", default=["100-103"])
    p.add_argument("--task", default="addition")
    p.add_argument("--val-size", type=int, default=512)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--chunk", type=int, default=2)
    p.add_argument("--report-only", action="store_true",
                   help="choose from the runs on disk (every finished seed); the options that only shape new runs, "
                        "and protocol options after --, are refused with it")
    args = p.parse_args(own)
    if args.report_only:
        refuse_unused(p, own, {"seeds": "--seeds", "task": "--task", "val_size": "--val-size", "jobs": "--jobs",
                               "chunk": "--chunk"}, "--report-only",
                      "it shapes new runs; each folder's meta.json records what its runs used")
        if protocol:
            p.error(f"after --: {protocol} not used with --report-only (protocol options shape new runs; each "
                    "folder's meta.json records what its runs used); drop them")
    check_rate_options(p, args.lrs, args.val_size)
    unknown = [a for a in args.arms if a not in toy_loop.default_arms()]
    if unknown:
        p.error(f"--arms: unknown {unknown}; the arms are {list(toy_loop.default_arms())}")
    owned = {"--out", "--warm-start", "--arms", "--seeds", "--lr", "--task", "--eval-split", "--test-size",
             "--milestones", "--jobs", "--chunk", "--report-only"}
    clash = [a for a in protocol if a.split("=")[0] in owned]
    if clash:
        p.error(f"after --: {clash} are set by lr_per_arm itself; pass only protocol options "
                "(--budget-steps, --budget-unit, --warmup-unit, --correction-cost-share, --cost-model, --max-steps)")
    warm = parse_warm_starts(args.warm_start)
    parse_seeds(args.seeds)  # a malformed seed list stops here, before any run
    out = Path(args.out)
    if not args.report_only:
        for lr in args.lrs:
            ablation.main(["--out", str(lr_folder(out, lr)), *[f"--warm-start={w}" for w in args.warm_start],
                           "--arms", *args.arms, "--seeds", *args.seeds, "--lr", repr(lr), "--task", args.task,
                           "--eval-split", "val", "--test-size", str(args.val_size), "--milestones", "1.0",
                           "--jobs", str(args.jobs), "--chunk", str(args.chunk), *protocol])
    try:
        rows = per_arm_rows(out, args.lrs, list(warm), args.arms, warm)
    except (FileNotFoundError, ValueError) as exc:
        p.error(str(exc))
    table = format_table(rows, list(warm))
    out.mkdir(parents=True, exist_ok=True)
    (out / "selection.md").write_text(table + "\n")
    (out / "selection.json").write_text(json.dumps({"chosen": chosen_lrs(rows), "rows": rows}, indent=1))
    write_runs_csv(rows, out / "runs.csv", rows[0]["task"])  # the task the runs recorded
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
