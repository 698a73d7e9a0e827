#!/usr/bin/env python
"""GSPO vs IBPO on the toy addition task: a baseline and candidates over S seeds, compared at equal compute
(``--engine loop``, the published table) or at equal steps through verl's real trainer on CPU (``--engine verl``).

    python -m lab.toy_tasks.warm_start --out outputs/toy_assets        # once: tiny model, SFT warm start, data
    python lab/scripts/compare_methods.py --assets outputs/toy_assets --out outputs/toy_loop \
        --engine loop --seeds $(seq 0 29) --budget-steps 12 --test-size 512 --threshold 0.4 --jobs 2
        # equal compute: the published table (docs/evidence.md), one command; --jobs N runs N (arm, seed) runs side by side
    python lab/scripts/compare_methods.py --assets outputs/toy_assets --out outputs/compare --engine verl \
        --seeds 0 1 --steps 30 --n 4 --batch-size 8 --lr 3e-4 --warmup-steps 5   # equal steps, verl trainer

``--engine loop`` runs ``lab.analysis.toy_loop`` (a plain PyTorch loop over the project's ``ibpo/`` functions,
the same generator, scorer, shaping and FLOP counter as the trainer): every arm runs to the same FLOP budget
and is evaluated on a held-out test set at common compute milestones; the table (``lab.analysis.equal_compute_report``)
gives paired differences to the baseline with Student-t 95% intervals over seeds, power, compute to a
training-reward threshold, optimizer updates, seconds per phase, a collapse check and credit localisation.

``--engine verl`` runs ``python -m recipe.main method=ibpo`` per arm and seed for ``--steps`` steps: the arms
are matched in **steps, not compute** (the table says so and prints each arm's FLOPs), unless
``--budget-flops B`` gives every arm the trainer's compute budget (``compute_budget.limit=B``: each run stops
at B FLOPs, ``--steps`` is then a cap, validation at the budget's fractions). The curves are drawn on the
axis the runs were matched on (steps, or the budget's counter). Methods: ``GSPO G=n``
(the baseline, ``ibpo.enable=False``), ``IBPO G=n`` (binary) and ``GSPO G=4n``. For seed s every method reads the
training prompts in the same order (``data.seed=s``), samples with the same seeded rollout
(``actor_rollout_ref.rollout.seed=s``), starts from the same warm start; runs go seed by seed so an interrupted
comparison stays balanced. Intervals are Student-t over seeds (the final evaluation only: no best-of-several
evaluations on the same problems), differences paired by seed.

Outputs under ``--out``: per run logs/metrics and the options it was made with (verl: ``<run>_run.json``; a
complete run is reused only with the same options, and the report refuses one recorded with another ``--n`` or
``--batch-size``; its optimizer updates are those its trainer logged) or JSON (loop), ``table.md`` (with the warm
start's sha256 and the exact command), ``summary.json`` and ``curves.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import shlex

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evaluation import plot_curves  # noqa: E402  (evaluation/plot_curves.py: log reading, smoothing, seed bands, threshold)

from evaluation.stats import interval_text, paired_difference, t_interval  # noqa: E402
from option_types.cli import (  # noqa: E402
    finite_float,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    refuse_unused,
)

REWARD_KEY = "ibpo/raw_score_mean"  # verifier reward of the main responses only (not joint-training rows)
COMPUTE_KEY = "ibpo/compute/total_flops"
# (column title, metric key) of the per-step wall time of each phase, summed over the run
PHASES = [
    ("main gen", "ibpo/time/main_gen_s"),
    ("correction gen", "ibpo/time/correction_gen_s"),
    ("IBPO host", "ibpo/time/host_s"),
    ("reward", "timing_s/reward"),
    ("log-probs", "timing_s/old_log_prob"),
    ("update", "timing_s/update_actor"),
    ("step", "timing_s/step"),
]


@dataclass(frozen=True)
class Method:
    """One arm of the comparison."""

    name: str
    baseline: bool  # GSPO through the same loop (ibpo.enable=False)
    group_multiplier: int  # G = multiplier · n
    variant: str = "binary"

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "_", self.name.lower()).strip("_")


METHODS = [Method("GSPO G=n", True, 1), Method("IBPO G=n", False, 1), Method("GSPO G=4n", True, 4)]


def run_overrides(method: Method, seed: int, n: int, lr: float, warmup_steps: int = 0) -> list[str]:
    """The method's part of the command line (quickstart's override builder) plus the seeds and the learning
    rate; the CPU part comes from ``verl_cpu.launch.cpu_overrides``."""
    from recipe.ibpo.quickstart import ibpo_overrides

    return [
        *ibpo_overrides(method.variant, joint_training=False, baseline=method.baseline),
        f"actor_rollout_ref.actor.optim.lr={lr}",
        # linear warmup: Adam's first steps are sign-like (every weight moves by ~lr), which a noisy policy
        # gradient at lr 1e-3 turned into a collapse of the tiny policy within 3 steps
        f"actor_rollout_ref.actor.optim.lr_warmup_steps={warmup_steps}",
        f"data.seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed}",
        f"ibpo.seed={seed}",
        f"trainer.experiment_name={method.slug}_s{seed}",
    ]


MICRO_BATCH_KEYS = ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=",
                    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=",
                    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=")


def cap_micro_batches(overrides: list[str], micro_batch: int) -> list[str]:
    """``overrides`` with every micro-batch size capped at ``micro_batch`` rows. ``cpu_overrides`` puts the whole
    batch in one micro-batch (128 rows for GSPO G=4n: 36-44 s per step on CPU); gradient accumulation over
    micro-batches gives the same gradient (verl scales each micro-batch's loss by its share)."""
    out = []
    for item in overrides:
        key = next((k for k in MICRO_BATCH_KEYS if item.startswith(k)), None)
        out.append(f"{key}{min(int(item[len(key):]), micro_batch)}" if key and micro_batch > 0 else item)
    return out


# the options that shape a verl run (its ``<run>_run.json`` record): ``--n`` and ``--batch-size`` also count its
# optimizer updates and its G in the report
RUN_OPTIONS = {"n": "--n", "batch_size": "--batch-size", "steps": "--steps", "lr": "--lr",
               "warmup_steps": "--warmup-steps", "max_response_length": "--max-response-length",
               "test_freq": "--test-freq", "budget_flops": "--budget-flops", "micro_batch": "--micro-batch"}


def run_record_path(out: Path, method: Method, seed: int) -> Path:
    """Where a verl run's options are recorded (beside its metrics), written when it starts."""
    return out / f"{method.slug}_s{seed}_run.json"


def read_run_record(path: Path) -> dict | None:
    """A run's recorded options, ``None`` for a run made before records were written; a record that is not a
    JSON object of the :data:`RUN_OPTIONS` is a ``ValueError`` naming the file."""
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable run record ({type(exc).__name__}: {exc})") from None
    if not isinstance(record, dict) or not set(RUN_OPTIONS) <= set(record):
        raise ValueError(f"{path}: not a run record (expected a JSON object with {sorted(RUN_OPTIONS)})")
    return record


def check_run_record(path: Path, record: dict, args: argparse.Namespace, keys: list[str]) -> None:
    """The run recorded at ``path`` was made with this command's ``keys`` options, or a ``ValueError`` names the run,
    the option and both values (a run of another ``--n`` reused, or reported with this one's ``--n``, would count
    its G and optimizer updates, or its place in the comparison, wrong)."""
    for key in keys:
        if record[key] != getattr(args, key):
            raise ValueError(f"{path}: the run was made with {RUN_OPTIONS[key]} {record[key]!r}, this command gives "
                             f"{RUN_OPTIONS[key]} {getattr(args, key)!r}; give {RUN_OPTIONS[key]} {record[key]!r}, "
                             "or another --out")


def run_one(assets: dict, out: Path, method: Method, seed: int, args: argparse.Namespace) -> Path:
    """One training run through ``python -m recipe.main method=ibpo`` (hang-proof runner); returns its metrics file.
    Complete metrics of an earlier run are reused only when its record gives the same :data:`RUN_OPTIONS`."""
    from verl_cpu.launch import cpu_env, cpu_overrides, process_env, read_metrics_jsonl, run_with_timeout

    name = f"{method.slug}_s{seed}"
    metrics_path = out / f"{name}_metrics.jsonl"
    record_path = run_record_path(out, method, seed)
    done = read_metrics_jsonl(metrics_path) if metrics_path.exists() else {}
    stopped_by_budget = bool(done) and "compute_budget/overshoot" in done[max(done)]
    if done and (max(done) >= args.steps or stopped_by_budget):
        record = read_run_record(record_path)
        if record is not None:
            check_run_record(record_path, record, args, list(RUN_OPTIONS))
        print(f"[compare] {name}: complete metrics found, not run again", flush=True)
        return metrics_path
    metrics_path.unlink(missing_ok=True)
    record_path.write_text(json.dumps({"method": method.name, "seed": seed,
                                       **{key: getattr(args, key) for key in RUN_OPTIONS}}, indent=1) + "\n",
                           encoding="utf-8")
    group = method.group_multiplier * args.n
    cmd = [sys.executable, "-m", "recipe.main", "method=ibpo",
           *cap_micro_batches(cpu_overrides(assets["model"], assets["train"], assets["val"],
                                            total_training_steps=args.steps, train_batch_size=args.batch_size,
                                            rollout_n=group, max_prompt_length=64,
                                            max_response_length=args.max_response_length), args.micro_batch),
           f"trainer.default_local_dir={out / 'checkpoints' / name}",
           "trainer.val_before_train=True",
           *([f"trainer.test_freq={args.test_freq}"] if not args.budget_flops else
             ["trainer.test_freq=-1", f"compute_budget.limit={float(args.budget_flops)!r}", "compute_budget.unit=flops"]),
           # fp32 actor compute: FSDP's default bf16 parameters run the update ~10x slower on CPUs without
           # bf16 matrix instructions, and the hf rollout samples in fp32 anyway
           "++actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
           *run_overrides(method, seed, args.n, args.lr, args.warmup_steps)]
    # One torch/OpenMP thread per process: on a small shared machine extra threads mostly wait for a core.
    threads = str(args.threads)
    env = process_env(os.environ, {**cpu_env(metrics_path=metrics_path), "OMP_NUM_THREADS": threads,
                                   "MKL_NUM_THREADS": threads})
    print(f"[compare] {name}: G={group}, {args.steps} steps ...", flush=True)
    result = run_with_timeout(cmd, env, timeout_s=args.timeout, log_path=out / f"{name}.log", cwd=out)
    status = "ok" if result.returncode == 0 else ("timed out" if result.timed_out else f"exit {result.returncode}")
    print(f"[compare] {name}: {status} in {result.wall_s:.0f} s (log {result.log_path})", flush=True)
    if result.returncode != 0:
        print(result.log_tail(3000), file=sys.stderr)
    return metrics_path


# ---------------------------------------------------------------------------------------------------------
# Summary


def eval_key(records: list[plot_curves.Record]) -> str | None:
    """The run's core evaluation metric (``val-core/<source>/acc/mean@N``), if it logged one."""
    keys = sorted({k for r in records for k in r.data if plot_curves.EVAL_KEY_PATTERN.match(k)})
    return keys[0] if keys else None


def ci_over_seeds(values: list[float]) -> dict:
    """Mean over seeds with the Student-t 95% interval (``evaluation.stats.t_interval``; a percentile
    bootstrap over 2-3 seeds is the seeds' range, a ~50-75% interval)."""
    ci = t_interval(values)
    return {"mean": ci.mean, "low": ci.low, "high": ci.high, "seeds": ci.seeds}


UPDATES_KEY = "actor/num_optimizer_updates"  # the recipe's trainer logs the updates the actor made, every step


def optimizer_updates(records: list[plot_curves.Record], batch_size: int, group: int, mini_batch: int,
                      epochs: int = 1) -> int:
    """Optimizer steps the actor took: the sum of what the run logged (:data:`UPDATES_KEY`, counted by the trainer
    from the actor's own output, whatever the mini-batch plan). A log from before that metric: per step
    ``epochs · ceil(rows / (mini_batch · G))`` where rows are the logged main, joint-training and padding rows
    (verl splits the batch into mini-batches of ``ppo_mini_batch_size · rollout.n`` rows), from the options. A
    step of an update with no count in a log that has it elsewhere is a ``ValueError`` naming the file and line."""
    updated = [rec for rec in records if "actor/grad_norm" in rec.data or UPDATES_KEY in rec.data]
    if any(UPDATES_KEY in rec.data for rec in updated):
        missing = next((rec for rec in updated if UPDATES_KEY not in rec.data), None)
        if missing is not None:
            raise ValueError(f"{missing.where or f'step {missing.step}'}: an actor update without {UPDATES_KEY!r}, "
                             "which the log's other steps hold; its optimizer updates cannot be counted")
        return int(sum(rec.data[UPDATES_KEY] for rec in updated))
    total = 0
    for rec in updated:
        rows = batch_size * group + rec.data.get("ibpo/num_joint_rows", 0.0) + rec.data.get("ibpo/num_padding_rows", 0.0)
        total += epochs * math.ceil(rows / (mini_batch * group))
    return total


def summarize(runs: dict[str, list[list[plot_curves.Record]]], methods: list[Method], args: argparse.Namespace
              ) -> dict:
    """Per method: eval at step 0, final and best eval (CI over seeds), compute to the threshold on the seed
    mean (CI), optimizer updates, summed wall time per phase (mean over seeds)."""
    out = {}
    _, thresholds = plot_curves.threshold_table(runs, methods[0].name, REWARD_KEY, COMPUTE_KEY, args.threshold,
                                                args.smooth)
    for method in methods:
        seeds = runs.get(method.name, [])
        if not seeds:
            continue
        initial, final = [], []
        for recs in seeds:
            key = eval_key(recs)
            if key is None:
                continue
            steps_vals = [(r.step, r.data[key]) for r in recs if key in r.data]
            initial += [v for s, v in steps_vals if s == 0]
            trained = [v for s, v in steps_vals if s > 0]
            # the last evaluation only: the best of several evaluations on the same problems is selection on them
            final.append(trained[-1] if trained else float("nan"))
        group = method.group_multiplier * args.n
        phases = {title: float(np.mean([sum(r.data.get(key, 0.0) for r in recs) for recs in seeds]))
                  for title, key in PHASES}
        out[method.name] = {
            "seeds": len(seeds), "G": group,
            "steps": [max((r.step for r in recs if REWARD_KEY in r.data), default=0) for recs in seeds],
            "eval_step0": ci_over_seeds(initial), "final_eval": ci_over_seeds([v for v in final if v == v]),
            "final_eval_per_seed": final,
            "final_train_reward": ci_over_seeds([float(plot_curves.series(r, REWARD_KEY, "step")[1][-args.smooth:].mean())
                                                 for r in seeds]),
            "threshold": thresholds[method.name],
            "optimizer_updates": [optimizer_updates(r, args.batch_size, group, args.batch_size) for r in seeds],
            "total_flops": float(np.mean([max(r.data.get(COMPUTE_KEY, 0.0) for r in recs) for recs in seeds])),
            "wall_s_by_phase": phases,
        }
    base = out[methods[0].name]["final_eval_per_seed"]
    for name, entry in out.items():
        pairs = [(a, b) for a, b in zip(entry["final_eval_per_seed"], base) if a == a and b == b]
        entry["final_eval_diff"] = (paired_difference([a for a, _ in pairs], [b for _, b in pairs]).as_dict()
                                    if pairs else None)
    return out


def _ci(c: dict, fmt: str = "{:.3f}") -> str:
    """Mean [95% CI] of an accuracy or reward (in [0, 1]: a t interval reaching outside is clipped, and says
    so); one seed or no spread: the mean and why there is no interval."""
    if not c["seeds"]:
        return "-"
    return interval_text(c["mean"], c["low"], c["high"], c["seeds"], fmt, bounds=(0.0, 1.0))


def _diff(d: dict | None) -> str:
    if not d:
        return "-"
    return interval_text(d["diff"], d["low"], d["high"], d["seeds"], "{:+.3f}", bounds=(-1.0, 1.0))


def format_tables(summary: dict, args: argparse.Namespace) -> str:
    """Two Markdown tables: accuracy and compute at equal steps (or at the compute budget, ``--budget-flops``),
    then wall time per phase."""
    base = next(iter(summary))
    steps_run = '/'.join(sorted({str(x) for s in summary.values() for x in s['steps']}))
    matched = (f"**Equal compute**: every arm stopped at the trainer's budget of {args.budget_flops:.3g} FLOPs "
               f"(overshoot < one step; {steps_run} steps per arm)" if getattr(args, "budget_flops", 0.0) else
               f"**Equal steps, not equal compute** ({steps_run} steps per arm; each arm's FLOPs in the table)")
    lines = [f"{matched}. Intervals: Student-t 95% over seeds; Δ: paired by seed.", "",
             f"| method | seeds | steps | eval at step 0 | final eval [95% CI] | Δ final eval vs {base} [95% CI] | "
             f"final train reward (last {args.smooth}) | FLOPs to train reward ≥ {args.threshold} (seed mean) "
             f"[95% Student-t CI over the seeds' own crossings] "
             f"| vs {base} | total FLOPs | optimizer updates |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in summary.items():
        t = s["threshold"]
        reach = "not reached"
        if math.isfinite(t["compute"]):
            ci = plot_curves.crossing_interval_text(t, "{:.3g}")
            reach = f"{t['compute']:.3g} " + (ci if ci.startswith("[") else f"({ci})")
        rel = f"{t['relative']:.2f}" if math.isfinite(t.get("relative", float("nan"))) else "-"
        updates = sorted(set(s["optimizer_updates"]))
        steps = "/".join(map(str, sorted(set(s["steps"]))))
        lines.append(f"| {name} | {s['seeds']} | {steps} | {_ci(s['eval_step0'])} | {_ci(s['final_eval'])} | "
                     f"{'—' if name == base else _diff(s['final_eval_diff'])} | {_ci(s['final_train_reward'])} | {reach} | {rel} | "
                     f"{s['total_flops']:.3g} | {'/'.join(map(str, updates))} |")
    lines += ["", "| method | " + " | ".join(f"{title} s" for title, _ in PHASES) + " |",
              "|---|" + "---:|" * len(PHASES)]
    for name, s in summary.items():
        lines.append(f"| {name} | " + " | ".join(f"{s['wall_s_by_phase'][t]:.0f}" for t, _ in PHASES) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--assets", required=True, help="directory of `python -m lab.toy_tasks.warm_start --out DIR` (built if missing)")
    p.add_argument("--out", required=True, help="output directory (runs, table.md, summary.json, curves.png)")
    p.add_argument("--methods", nargs="+", default=None,
                   help=f"verl: subset of {[m.name for m in METHODS]}; loop: of lab.analysis.toy_loop.default_arms() "
                        "(the first is the baseline of the table; default all)")
    p.add_argument("--seeds", type=nonnegative_int, nargs="+", default=None,
                   help="seeds to run, and with --report-only the seeds to report (default 0-29)")
    p.add_argument("--steps", type=positive_int, default=40)
    p.add_argument("--n", type=positive_int, default=4, help="group size n of GSPO G=n and IBPO G=n (GSPO G=4n: 4n)")
    p.add_argument("--batch-size", type=positive_int, default=8, help="prompts per step (one optimizer update per step)")
    p.add_argument("--lr", type=positive_float, default=3e-4)
    p.add_argument("--warmup-steps", type=nonnegative_int, default=5, help="linear learning-rate warmup (steps)")
    p.add_argument("--max-response-length", type=positive_int, default=96)
    p.add_argument("--test-freq", type=positive_int, default=10,
                   help="greedy eval on the val set every N steps (and at 0)")
    p.add_argument("--threshold", type=float, default=0.4, help="training-reward threshold for compute-to-threshold")
    p.add_argument("--smooth", type=int, default=5, help="trailing window (steps) of the training reward")
    p.add_argument("--threads", type=positive_int, default=1, help="OMP_NUM_THREADS of every process of a run")
    p.add_argument("--timeout", type=positive_float, default=3600.0, help="seconds before one run is killed")
    p.add_argument("--report-only", action="store_true", help="only summarise the runs already under --out")
    p.add_argument("--engine", choices=("loop", "verl"), default="loop",
                   help="loop: equal compute, lab.analysis.toy_loop (the published table); verl: equal steps, verl trainer")
    p.add_argument("--budget-steps", type=positive_float, default=12,
                   help="loop: FLOP budget of every arm, in baseline steps' worth of FLOPs (measured on the warm start)")
    p.add_argument("--budget-flops", type=nonnegative_float, default=0.0,
                   help="verl: every arm stops at this many FLOPs (the trainer's compute_budget; --steps is a cap); "
                        "0 = equal steps")
    p.add_argument("--test-size", type=positive_int, default=512, help="loop: held-out test problems (greedy)")
    p.add_argument("--effect", type=float, default=0.05, help="loop: effect size the power is computed for")
    p.add_argument("--micro-batch", type=nonnegative_int, default=32,
                   help="verl: rows per actor/log-prob micro-batch (same gradients; 0 = the whole batch)")
    p.add_argument("--jobs", type=int, default=1,
                   help="loop: (arm, seed) runs side by side in this many processes (results do not depend on it)")
    p.add_argument("--deadline", type=finite_float, default=None,
                   help="loop: unix time after which no new seed is started (started seeds finish every arm)")
    return p


def report_option_errors(args: argparse.Namespace) -> list[str]:
    """What is wrong with the report's own options (checked before any run starts, not after hours of runs):
    ``--smooth`` a window of at least one step, ``--threshold`` finite, ``--effect`` finite and > 0 (a NaN
    effect made the power search run for minutes, a negative one raised after every run had finished)."""
    errors = []
    if args.smooth < 1:
        errors.append(f"--smooth must be >= 1 (a trailing window of steps), got {args.smooth}")
    if not math.isfinite(args.threshold):
        errors.append(f"--threshold must be a finite training reward, got {args.threshold}")
    if not (math.isfinite(args.effect) and args.effect > 0):
        errors.append(f"--effect must be a finite difference > 0, got {args.effect}")
    return errors


# options one engine (or --report-only) does not use: given there, they are refused, not ignored
VERL_ONLY = {"steps": "--steps", "test_freq": "--test-freq", "threads": "--threads", "timeout": "--timeout",
             "micro_batch": "--micro-batch", "budget_flops": "--budget-flops",
             "max_response_length": "--max-response-length"}
LOOP_ONLY = {"budget_steps": "--budget-steps", "test_size": "--test-size", "effect": "--effect", "jobs": "--jobs",
             "deadline": "--deadline"}
LOOP_RUN_ONLY = {"budget_steps": "--budget-steps", "n": "--n", "batch_size": "--batch-size", "lr": "--lr",
                 "warmup_steps": "--warmup-steps", "test_size": "--test-size", "jobs": "--jobs",
                 "deadline": "--deadline"}
VERL_RUN_ONLY = {"steps": "--steps", "lr": "--lr", "warmup_steps": "--warmup-steps", "test_freq": "--test-freq",
                 "threads": "--threads", "timeout": "--timeout", "micro_batch": "--micro-batch",
                 "max_response_length": "--max-response-length"}


def refuse_unused_options(p: argparse.ArgumentParser, argv: list[str] | None, args: argparse.Namespace) -> None:
    """Stop on an option the chosen engine, or ``--report-only``, does not use (``--steps`` with the loop, ``--effect``
    with verl, ``--lr`` with a report of runs on disk...): accepted and ignored, it would look like a setting of
    the table. (The verl report reads ``--n`` and ``--batch-size``: they count its G and optimizer updates, and a run
    whose record gives others is refused, :func:`finished_runs`.)"""
    refuse_unused(p, argv, VERL_ONLY if args.engine == "loop" else LOOP_ONLY, f"--engine {args.engine}",
                  "the other engine's option")
    if args.report_only:
        refuse_unused(p, argv, LOOP_RUN_ONLY if args.engine == "loop" else VERL_RUN_ONLY, "--report-only",
                      "it shapes new runs")


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    refuse_unused_options(p, argv, args)
    args.seeds_given = args.seeds is not None
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.seeds is None:
        args.seeds = list(range(30))
    elif len(set(args.seeds)) != len(args.seeds):
        dup = sorted({s for s in args.seeds if args.seeds.count(s) > 1})
        p.error(f"--seeds: seed(s) {dup} given twice (a seed counted twice narrows every interval)")
    errors = report_option_errors(args)
    if errors:
        p.error("; ".join(errors))
    command = "python lab/scripts/compare_methods.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if args.engine == "loop":
        return run_loop(args, command)
    args.methods = args.methods or [m.name for m in METHODS]
    by_name = {m.name: m for m in METHODS}
    unknown = [m for m in args.methods if m not in by_name]
    if unknown:
        p.error(f"--methods: unknown {unknown}; choose from {list(by_name)}")
    return run_verl(args, [by_name[m] for m in args.methods], command)


def run_verl(args: argparse.Namespace, methods: list[Method], command: str) -> int:
    """Equal steps: one verl training run per method and seed (skipped with ``--report-only``), then the report."""
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    assets_dir = Path(args.assets).resolve()

    if not args.report_only:
        stamp = assets_dir / "assets.json"
        if not stamp.exists():
            from lab.toy_tasks.warm_start import build_toy_assets

            print(f"[compare] building the toy assets in {assets_dir} ...", flush=True)
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps(build_toy_assets(assets_dir), indent=1))
        # paths relative to the directory the assets were built from (runs start in --out)
        assets = {k: str(Path(v).resolve()) if isinstance(v, str) else v for k, v in json.loads(stamp.read_text()).items()}
        start = time.monotonic()
        try:
            for seed in args.seeds:
                for method in methods:
                    run_one(assets, out, method, seed, args)
        except ValueError as exc:  # a complete run of other options found: named, not reused
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"[compare] all runs done in {time.monotonic() - start:.0f} s", flush=True)

    try:
        runs = finished_runs(out, methods, args.seeds, args)
        plot_curves.check_values(runs, [REWARD_KEY])  # a string / NaN reward: file, line and field, not a gap
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if methods[0].name not in runs:
        print(f"error: no finished run of the baseline {methods[0].name!r} under {out}", file=sys.stderr)
        return 2
    try:
        summary = summarize(runs, [m for m in methods if m.name in runs], args)
    except ValueError as exc:  # a log that cannot be counted: file and line
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from lab.analysis.toy_loop import sha256_of_dir

    model_dir = assets_dir / "model_sft"
    tables = (f"Warm start sha256 `{sha256_of_dir(model_dir) if model_dir.is_dir() else 'n/a (not found)'}`. "
              f"Command: `{command}`\n\n" + format_tables(summary, args))
    (out / "table.md").write_text(tables + "\n", encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    eval_keys = sorted({k for seeds in runs.values() for recs in seeds for k in [eval_key(recs)] if k})
    x_key = plot_curves.matched_x_axis(runs, fallback="step")  # the axis the runs were matched on
    plot_curves.plot(runs, REWARD_KEY, eval_keys, x_key, None, args.smooth, out / "curves.png",
                     x_label="training step" if x_key == "step" else f"training compute ({x_key})")
    print(tables)
    print(f"\nwrote {out / 'table.md'}, {out / 'summary.json'}, {out / 'curves.png'}")
    return 0


def finished_runs(out: Path, methods: list[Method], seeds: list[int], args: argparse.Namespace | None = None
                  ) -> dict[str, list[list[plot_curves.Record]]]:
    """The metrics of every finished verl run under ``out`` (those that logged the training reward), by method.
    With ``args``, a run whose record (:func:`run_record_path`) gives another ``--n`` or ``--batch-size`` than
    ``args`` is a ``ValueError`` naming the run and the option: the report counts G and optimizer updates from them."""
    runs: dict[str, list[list[plot_curves.Record]]] = {}
    for method in methods:
        for seed in seeds:
            path = out / f"{method.slug}_s{seed}_metrics.jsonl"
            if path.exists() and path.stat().st_size:
                records = plot_curves.read_file_log(path)
                if any(REWARD_KEY in r.data for r in records):
                    record_path = run_record_path(out, method, seed)
                    record = read_run_record(record_path)
                    if record is not None and args is not None:
                        check_run_record(record_path, record, args, ["n", "batch_size"])
                    runs.setdefault(method.name, []).append(records)
    return runs


def check_loop_folder(out: Path, meta: dict) -> None:
    """The equal-compute report reads test-split runs evaluated at compute milestones; a folder of
    validation-split runs (``--eval-split val``, learning-rate selection) or of equal-steps runs (``--max-steps``)
    is a ``ValueError`` naming the folder and what its runs are, not a ``KeyError`` / ``TypeError`` from inside
    the report."""
    split = meta.get("eval_split", "test")
    if split != "test":
        raise ValueError(f"{out}: its runs were evaluated on the {split!r} split (meta.json eval_split; e.g. a "
                         "learning-rate selection folder); this table reports test-split runs")
    if meta.get("max_steps") is not None:
        raise ValueError(f"{out}: its runs are equal-steps runs (meta.json max_steps={meta['max_steps']}, evaluated "
                         "once after the last step, not at compute milestones); this table compares runs at equal "
                         "compute")
    if "warm_start_test_accuracy" not in meta:
        raise ValueError(f"{out}/meta.json: no 'warm_start_test_accuracy' field; not the meta.json of a test-split "
                         "lab.analysis.toy_loop folder")


def run_loop(args: argparse.Namespace, command: str) -> int:
    """Equal compute: ``lab.analysis.toy_loop`` runs (skipped when their JSON exists), then the report."""
    from lab.analysis import equal_compute_report as report
    from lab.analysis.toy_loop import default_arms
    from lab.analysis.toy_loop import main as loop_main

    arms = default_arms()
    names = args.methods or list(arms)
    unknown = [m for m in names if m not in arms]
    if unknown:
        print(f"error: --methods: unknown {unknown}; the loop's arms are {list(arms)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if not args.report_only:
        loop_main(["--assets", args.assets, "--out", str(out), "--arms", *names, "--seeds", *map(str, args.seeds),
                   "--budget-steps", str(args.budget_steps), "--n", str(args.n), "--batch-size", str(args.batch_size),
                   "--lr", str(args.lr), "--warmup-steps", str(args.warmup_steps), "--test-size", str(args.test_size),
                   "--jobs", str(args.jobs), *(["--deadline", str(args.deadline)] if args.deadline else [])])
    try:
        meta, results = report.load_results(out)
        check_loop_folder(out, meta)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # --seeds limits the report too: the table's command line says which seeds it is over
    wanted = set(args.seeds)
    results = {k: {s: r for s, r in v.items() if s in wanted} for k, v in results.items() if k in names}
    results = {k: v for k, v in results.items() if v}
    for name in names:
        missing = sorted(wanted - set(results.get(name, {})))
        if missing and args.seeds_given:
            print(f"note: --seeds: no finished run of {name!r} for seed(s) {missing} under {out}", file=sys.stderr)
    if names[0] not in results:
        print(f"error: no finished run of the baseline {names[0]!r} under {out}", file=sys.stderr)
        return 2
    summary = report.summarise_runs(meta, {k: results[k] for k in names if k in results}, names[0], effect=args.effect,
                                    threshold=args.threshold, window=args.smooth)
    summary["report_command"] = command
    text = report.format_report(summary)
    (out / "table.md").write_text(text + "\n", encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    report.plot(summary, results, out / "curves.png")
    report.write_runs_csv({k: results[k] for k in names if k in results}, out / "runs.csv")
    print(text)
    print(f"\nwrote {out / 'table.md'}, {out / 'summary.json'}, {out / 'curves.png'}, {out / 'runs.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
