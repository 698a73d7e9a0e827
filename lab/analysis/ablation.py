"""The ablation at equal compute over several warm starts, as one command (``docs/evidence.md``, "When does IBPO
pay?"): every arm × warm start × seed through ``lab.analysis.toy_loop``, seeds interleaved across warm starts so an
interrupted run stays balanced, then one table per warm start and a pooled one.

    python -m lab.analysis.ablation --out outputs/ablation --seeds 0-29 --jobs 2 \\
        --warm-start weak=lab/toy_tasks/warm_starts/addition_seed3 --warm-start medium=lab/toy_tasks/warm_starts/addition_seed0 \\
        --warm-start strong=lab/toy_tasks/warm_starts/addition_seed2 --arms 'GSPO G=n' 'IBPO G=n' 'oracle mask'
    python -m lab.analysis.ablation --out outputs/ablation --report-only ...   # tables from the runs on disk

Every run is evaluated once, at the full budget (the first comparison also evaluated at half of it; here that
evaluation would cost a fifth of the compute). Each warm start's runs live in ``OUT/ws_NAME`` with its own ``meta.json`` (FLOP budget measured on that warm start,
its sha256 and greedy test accuracy). Statistics: within a warm start, the paired t over seeds
(``lab.analysis.equal_compute_report``); pooled, the stratified paired difference (seeds nested in warm starts: the
mean of the per-warm-start mean differences, its variance the sum of their squared standard errors over W²,
Welch-Satterthwaite degrees of freedom rounded down), so a warm start with noisier seeds does not borrow precision from another.

The budget is ``--budget-steps`` steps of ``--budget-arm`` (default GSPO G=n whatever ``--arms`` lists:
``lab.analysis.toy_loop.budget_arm_name``). The report covers the arms of ``--arms`` (the first is the baseline) and,
when ``--seeds`` is given, those seeds only; with ``--report-only`` the options that only shape new runs are refused.

Checks (before any run, and before the report is written): a warm-start name or model given twice; the report
(``lab.analysis.ablation_report.write_report``) refuses warm-start folders of different run-defining options or splits,
a folder whose runs did not start from its ``NAME=MODEL_DIR``, one warm start under two names, and a baseline or arm
with no runs there (``lab.analysis.run_protocol``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.analysis.ablation_stats import parse_seeds, parse_warm_starts
from option_types.cli import refuse_unused

# options that only shape new runs: with --report-only they would be accepted and do nothing
RUN_ONLY = {"budget_arm": "--budget-arm", "chunk": "--chunk", "jobs": "--jobs", "budget_steps": "--budget-steps",
            "lr": "--lr", "test_size": "--test-size", "task": "--task", "max_steps": "--max-steps",
            "eval_split": "--eval-split", "budget_unit": "--budget-unit",
            "correction_cost_share": "--correction-cost-share", "cost_model": "--cost-model",
            "warmup_unit": "--warmup-unit", "milestones": "--milestones", "deadline": "--deadline"}


def main(argv: list[str] | None = None) -> int:
    from lab.analysis import toy_loop

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--warm-start", action="append", required=True, metavar="NAME=MODEL_DIR")
    p.add_argument("--arms", nargs="+", required=True, help="arms of lab.analysis.toy_loop.default_arms(); first = baseline")
    p.add_argument("--budget-arm", default=None,
                   help="the arm whose cost per step sets the budget and warm-up, run or not (lab.analysis.toy_loop "
                        "--budget-arm; default 'GSPO G=n', whatever --arms lists)")
    p.add_argument("--seeds", nargs="+", default=None,
                   help="seeds to run (default 0-29); given, the report is over these seeds only (default: every seed "
                        "of the listed arms on disk)")
    p.add_argument("--chunk", type=int, default=5, help="seeds per warm start before moving to the next one")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--budget-steps", type=float, default=12.0)
    p.add_argument("--lr", type=float, default=3e-4,
                   help="every arm's learning rate (the addition protocol's 3e-4; another task's is chosen on its "
                        "validation problems with lab.analysis.lr_selection)")
    p.add_argument("--test-size", type=int, default=512)
    p.add_argument("--task", default="addition", help="a task of lab.toy_tasks.tasks; every warm start must be one of it")
    p.add_argument("--max-steps", type=int, default=None,
                   help="the second axis: every run makes exactly this many optimizer updates (equal updates, not "
                        "equal compute) and is evaluated after the last; use its own --out")
    p.add_argument("--eval-split", choices=("test", "val"), default="test",
                   help="val: every evaluation scores --test-size validation problems (none a train or test problem), "
                        "to choose among options without looking at the test set; use its own --out")
    p.add_argument("--budget-unit", choices=("flops", "modelled_gpu_seconds"), default="flops",
                   help="what the budget counts (lab.analysis.toy_loop --budget-unit); use its own --out")
    p.add_argument("--correction-cost-share", type=float, default=1.0,
                   help="charge this share of the correction phase (lab.analysis.toy_loop); use its own --out")
    p.add_argument("--cost-model", default=toy_loop.DEFAULT_COST_MODEL,
                   help="what prices modelled GPU seconds (lab.analysis.toy_loop --cost-model); use its own --out")
    p.add_argument("--warmup-unit", choices=("budget", "updates"), default="budget",
                   help="warm-up counted in the budget's unit or in updates (lab.analysis.toy_loop); use its own --out")
    p.add_argument("--milestones", type=float, nargs="+", default=[1.0],
                   help="fractions of the budget at which every run is evaluated (learning curves: 0.25 0.5 0.75 1)")
    p.add_argument("--deadline", type=float, default=None, help="unix time after which no new seed chunk starts")
    p.add_argument("--report-only", action="store_true",
                   help="the report from the runs on disk, over --arms (and --seeds when given); the options that "
                        "only shape new runs are refused with it (the folders' meta.json record what their runs used)")
    args = p.parse_args(argv)
    if args.report_only:
        refuse_unused(p, argv, RUN_ONLY, "--report-only", "it shapes new runs; each ws_NAME/meta.json records what "
                      "its runs used")
    warm = parse_warm_starts(args.warm_start)
    arms = toy_loop.default_arms()
    unknown = [a for a in args.arms + ([args.budget_arm] if args.budget_arm is not None else []) if a not in arms]
    if unknown:
        p.error(f"--arms/--budget-arm: unknown {unknown}; the arms are {list(arms)}")
    seeds = parse_seeds(args.seeds or ["0-29"])
    if args.chunk < 1:
        p.error(f"--chunk must be >= 1, got {args.chunk}")
    if not args.report_only:
        import time

        for lo in range(0, len(seeds), args.chunk):
            chunk = [str(s) for s in seeds[lo:lo + args.chunk]]
            if args.deadline and time.time() > args.deadline:
                print(f"[ablation] deadline reached before seeds {chunk}", flush=True)
                break
            for name, model in warm.items():
                toy_loop.main(["--model", model, "--task", args.task, "--out", str(Path(args.out) / f"ws_{name}"), "--arms", *args.arms,
                               "--seeds", *chunk, "--budget-steps", str(args.budget_steps), "--lr", repr(args.lr),
                               "--test-size", str(args.test_size), "--jobs", str(args.jobs), "--milestones", *map(str, args.milestones),
                               "--budget-unit", args.budget_unit, "--correction-cost-share", repr(args.correction_cost_share),
                               "--warmup-unit", args.warmup_unit, "--cost-model", args.cost_model,
                               *(["--budget-arm", args.budget_arm] if args.budget_arm is not None else []),
                               "--eval-split", args.eval_split,
                               *(["--max-steps", str(args.max_steps)] if args.max_steps is not None else [])])
    from lab.analysis.ablation_report import write_report

    try:
        print(write_report(Path(args.out), list(warm), args.arms[0], argv if argv is not None else sys.argv[1:],
                           models=warm, arms=args.arms[1:], seeds=set(seeds) if args.seeds else None))
    except ValueError as exc:
        p.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
