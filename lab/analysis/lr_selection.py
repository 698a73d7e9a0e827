"""Choose the learning rate of a toy task on its validation problems, never on its test set
(``docs/evidence.md``, section 2, "The second task").

    python -m lab.analysis.lr_selection --task three_sum_named --model lab/toy_tasks/warm_starts/three_sum_named_seed0 \
        --out outputs/lr_three_sum_named --lrs 3e-4 1e-4 3e-5 --seeds 100-109 --jobs 2

Every learning rate runs the baseline arm (``--arm``, GSPO G=n by default) at the ablation's compute budget
through ``lab.analysis.toy_loop --eval-split val``: its one evaluation, at the full budget, scores ``--val-size``
validation problems drawn apart from the train and test sets. The seeds are not the reported runs' (0-29).
The rule, fixed before any run: the learning rate with the highest mean final validation accuracy is chosen; the
table gives every rate's mean with its Student-t interval and its change from the warm start's own validation
accuracy, so a reader sees how clear the choice was. The baseline alone chooses: every arm then runs at the
baseline's best rate, which favours the baseline, not the method.

Checks before choosing (:func:`load_rates`, ``lab.analysis.run_protocol``): every rate's folder was evaluated on the
validation split, the folders differ in their learning rate only (budget, sizes, split, cost model... the same), their
runs started from ``--model`` (its sha256), and ``--arm`` has runs in each.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

from lab.analysis.ablation_stats import parse_seeds
from lab.analysis.ablation_report import final_eval, format_interval
from lab.analysis.equal_compute_report import load_results
from evaluation.stats import t_interval
from lab.analysis.run_protocol import check_arm_names, check_comparable, check_models, eval_split, recorded_options
from option_types.cli import refuse_unused


def lr_folder(out: Path, lr: float) -> Path:
    return out / f"lr_{lr:g}"


def load_rates(out: Path, lrs: list[float], arm: str, model: str | Path | None = None) -> dict[float, tuple]:
    """``{lr: (meta, results)}`` of the rates' folders, after the checks (``lab.analysis.run_protocol``): every folder's
    runs were evaluated on the validation split, the folders differ in their learning rate only (every other
    run-defining option the same) and hold the same warm start, ``model``'s when given, and ``arm`` has runs."""
    loaded = {lr: load_results(lr_folder(out, lr)) for lr in lrs}
    for lr, (meta, _) in loaded.items():
        if eval_split(meta) != "val":
            raise ValueError(f"{lr_folder(out, lr)}: its runs were not evaluated on the validation split")
    check_comparable([("the warm start", lr_folder(out, lr), meta) for lr, (meta, _) in loaded.items()],
                     varies={"lr"}, reader="lr_selection")
    if model is not None:
        check_models(((lr_folder(out, lr), meta, model) for lr, (meta, _) in loaded.items()), option="--model")
    for lr, (meta, results) in loaded.items():
        check_arm_names({f"lr_{lr:g}": (meta, results)}, arm, None, baseline_option="--arm")
    return loaded


def selection_rows(out: Path, lrs: list[float], arm: str, model: str | Path | None = None) -> list[dict]:
    """Per learning rate: the seeds with a final validation evaluation, their mean accuracy with its interval,
    and the change from the warm start's validation accuracy (the folders checked first: :func:`load_rates`)."""
    rows = []
    loaded = load_rates(out, lrs, arm, model)
    for lr in lrs:
        meta, results = loaded[lr]
        runs = results.get(arm, {})
        acc = [final_eval(r)["accuracy"] for _, r in sorted(runs.items()) if final_eval(r)]
        if not acc:
            raise ValueError(f"{lr_folder(out, lr)}: no finished {arm!r} run")
        warm = meta["warm_start_val_accuracy"]
        rows.append({"lr": lr, "task": recorded_options(meta)["task"], "seeds": len(acc),
                     "val_accuracy": t_interval(acc).as_dict(),
                     "change": t_interval(np.asarray(acc) - warm).as_dict(), "warm_start_val_accuracy": warm,
                     "warm_start_sha256": meta.get("warm_start_sha256", ""),
                     "per_seed": {seed: final_eval(r)["accuracy"] for seed, r in sorted(runs.items()) if final_eval(r)}})
    return rows


def write_runs_csv(rows: list[dict], path: Path, task: str, arm: str) -> None:
    """One line per (lr, seed): the final validation accuracy, small enough to keep in git beside the table."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task", "warm_start_sha256", "arm", "lr", "seed", "val_accuracy", "warm_start_val_accuracy"])
        for r in rows:
            for seed, acc in r["per_seed"].items():
                w.writerow([task, r["warm_start_sha256"], arm, f"{r['lr']:g}", seed, f"{acc:.6f}",
                            f"{r['warm_start_val_accuracy']:.6f}"])


def chosen_lr(rows: list[dict]) -> float:
    """The rule: the highest mean final validation accuracy (the first listed on a tie)."""
    return max(rows, key=lambda r: r["val_accuracy"]["mean"])["lr"]


def format_table(rows: list[dict], arm: str) -> str:
    best = chosen_lr(rows)

    lines = [f"Baseline arm {arm}; warm start's validation accuracy {rows[0]['warm_start_val_accuracy']:.3f}.", "",
             "| lr | seeds | final validation accuracy [95% CI] | change from warm start [95% CI] | chosen |",
             "|---:|---:|---:|---:|:---:|"]
    lines += [f"| {r['lr']:g} | {r['seeds']} | {format_interval(r['val_accuracy'], '{:.3f}')} | {format_interval(r['change'])} | "
              f"{'yes' if r['lr'] == best else ''} |" for r in rows]
    return "\n".join(lines)


def check_rate_options(p: argparse.ArgumentParser, lrs: list[float], val_size: int) -> None:
    """Stop before any run on rates that are not distinct and positive, or an empty validation set."""
    if len(set(lrs)) != len(lrs) or any(not lr > 0 for lr in lrs):
        p.error(f"--lrs must be distinct positive rates, got {lrs}")
    if val_size < 1:
        p.error(f"--val-size must be >= 1, got {val_size}")


def main(argv: list[str] | None = None) -> int:
    from lab.analysis import toy_loop

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the warm-start model directory the rates are tried on")
    p.add_argument("--task", default="addition", help="a task of lab.toy_tasks.tasks")
    p.add_argument("--out", required=True)
    p.add_argument("--lrs", type=float, nargs="+", required=True)
    p.add_argument("--arm", default="GSPO G=n", help="the arm whose validation accuracy chooses")
    p.add_argument("--seeds", nargs="+", default=["100-109"])
    p.add_argument("--budget-steps", type=float, default=12.0)
    p.add_argument("--val-size", type=int, default=512)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--report-only", action="store_true",
                   help="choose from the runs on disk (every finished seed); the options that only shape new runs "
                        "are refused with it")
    args = p.parse_args(argv)
    if args.report_only:
        refuse_unused(p, argv, {"seeds": "--seeds", "budget_steps": "--budget-steps", "val_size": "--val-size",
                                "jobs": "--jobs", "task": "--task"}, "--report-only",
                      "it shapes new runs; each rate's meta.json records what its runs used")
    check_rate_options(p, args.lrs, args.val_size)
    if args.arm not in toy_loop.default_arms():
        p.error(f"--arm: unknown {args.arm!r}; the arms are {list(toy_loop.default_arms())}")
    out = Path(args.out)
    if not args.report_only:
        for lr in args.lrs:
            toy_loop.main(["--model", args.model, "--task", args.task, "--out", str(lr_folder(out, lr)),
                           "--arms", args.arm, "--seeds", *map(str, parse_seeds(args.seeds)), "--lr", repr(lr),
                           "--budget-steps", str(args.budget_steps), "--milestones", "1.0", "--eval-split", "val",
                           "--test-size", str(args.val_size), "--jobs", str(args.jobs)])
    try:
        rows = selection_rows(out, args.lrs, args.arm, args.model)
    except (FileNotFoundError, ValueError) as exc:
        p.error(str(exc))
    table = format_table(rows, args.arm)
    (out / "selection.md").write_text(table + "\n")
    (out / "selection.json").write_text(json.dumps({"rows": rows, "chosen_lr": chosen_lr(rows)}, indent=1))
    write_runs_csv(rows, out / "runs.csv", rows[0]["task"], args.arm)  # the task the runs recorded
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
