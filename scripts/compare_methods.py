#!/usr/bin/env python
"""A baseline and candidates over S seeds through verl's real trainer on CPU, on the toy addition task, with a
table (final/best eval with 95% CI over seeds, compute to a reward threshold on the seed mean with CI,
optimizer updates, wall time per phase) and a figure (one colour per method, seed mean and CI band).

    python -m toy_task.warm_start --out outputs/toy_assets        # once: tiny model, SFT warm start, data
    python scripts/compare_methods.py --assets outputs/toy_assets --out outputs/compare \\
        --seeds 0 1 2 --steps 40 --n 4 --batch-size 8 --threshold 0.5
    python scripts/compare_methods.py --assets outputs/toy_assets --out outputs/compare --report-only ...

Methods (``--methods``, default all): ``GSPO G=n`` (the baseline, ``ibpo.enable=False``), ``IBPO G=n``
(binary variant, the config's defaults otherwise) and ``GSPO G=4n`` (the compute-matched baseline).
Fairness: for seed s every method reads the training prompts in the same order (``data.seed=s``), samples
with the same seeded rollout (``actor_rollout_ref.rollout.seed=s``, per-request generators in the ``hf``
rollout), starts from the same warm-started model and uses the same optimiser settings and number of steps;
only the method differs. Runs go seed by seed (every method of seed 0, then seed 1, ...) so an interrupted
comparison stays balanced; a run whose metrics file already has every step is not run again.

Outputs under ``--out``: ``<method>_s<seed>.log`` / ``_metrics.jsonl`` per run, ``table.md``,
``summary.json`` and ``curves.png``.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import plot_curves  # noqa: E402  (scripts/plot_curves.py: log reading, smoothing, seed bands, threshold)

from analysis.evaluation_stats import bootstrap_ci  # noqa: E402

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


def run_one(assets: dict, out: Path, method: Method, seed: int, args: argparse.Namespace) -> Path:
    """One training run through ``recipe.ibpo.main_ibpo`` (hang-proof runner); returns its metrics file."""
    from verl_cpu.launch import cpu_env, cpu_overrides, process_env, read_metrics_jsonl, run_with_timeout

    name = f"{method.slug}_s{seed}"
    metrics_path = out / f"{name}_metrics.jsonl"
    if metrics_path.exists() and max(read_metrics_jsonl(metrics_path), default=0) >= args.steps:
        print(f"[compare] {name}: complete metrics found, not run again", flush=True)
        return metrics_path
    metrics_path.unlink(missing_ok=True)
    group = method.group_multiplier * args.n
    cmd = [sys.executable, "-m", "recipe.ibpo.main_ibpo",
           *cpu_overrides(assets["model"], assets["train"], assets["val"], total_training_steps=args.steps,
                          train_batch_size=args.batch_size, rollout_n=group, max_prompt_length=64,
                          max_response_length=args.max_response_length),
           f"trainer.default_local_dir={out / 'checkpoints' / name}",
           "trainer.val_before_train=True", f"trainer.test_freq={args.test_freq}",
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
    """Mean over seeds with the percentile bootstrap 95% CI (analysis.evaluation_stats, seeds resampled)."""
    if not values:
        return {"mean": float("nan"), "low": float("nan"), "high": float("nan"), "seeds": 0}
    ci = bootstrap_ci(np.asarray(values, dtype=np.float64)[:, None])
    return {"mean": ci.mean, "low": ci.low, "high": ci.high, "seeds": len(values)}


def optimizer_updates(records: list[plot_curves.Record], batch_size: int, group: int, mini_batch: int,
                      epochs: int = 1) -> int:
    """Optimizer steps the actor took: per step ``epochs · ceil(rows / (mini_batch · G))`` where rows are the
    logged main, joint-training and padding rows (verl splits the batch into mini-batches of
    ``ppo_mini_batch_size · rollout.n`` rows)."""
    total = 0
    for rec in records:
        if "actor/grad_norm" not in rec.data:
            continue
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
        initial, final, best = [], [], []
        for recs in seeds:
            key = eval_key(recs)
            if key is None:
                continue
            steps_vals = [(r.step, r.data[key]) for r in recs if key in r.data]
            initial += [v for s, v in steps_vals if s == 0]
            trained = [v for s, v in steps_vals if s > 0]
            if trained:
                final.append(trained[-1])
                best.append(max(trained))
        group = method.group_multiplier * args.n
        phases = {title: float(np.mean([sum(r.data.get(key, 0.0) for r in recs) for recs in seeds]))
                  for title, key in PHASES}
        out[method.name] = {
            "seeds": len(seeds), "G": group,
            "steps": [max((r.step for r in recs if REWARD_KEY in r.data), default=0) for recs in seeds],
            "eval_step0": ci_over_seeds(initial), "final_eval": ci_over_seeds(final), "best_eval": ci_over_seeds(best),
            "final_train_reward": ci_over_seeds([float(plot_curves.series(r, REWARD_KEY, "step")[1][-args.smooth:].mean())
                                                 for r in seeds]),
            "threshold": thresholds[method.name],
            "optimizer_updates": [optimizer_updates(r, args.batch_size, group, args.batch_size) for r in seeds],
            "total_flops": float(np.mean([max(r.data.get(COMPUTE_KEY, 0.0) for r in recs) for recs in seeds])),
            "wall_s_by_phase": phases,
        }
    return out


def _ci(c: dict, fmt: str = "{:.3f}") -> str:
    if not c["seeds"]:
        return "-"
    if c["seeds"] < 2:
        return fmt.format(c["mean"])
    return f"{fmt.format(c['mean'])} [{fmt.format(c['low'])}, {fmt.format(c['high'])}]"


def format_tables(summary: dict, args: argparse.Namespace) -> str:
    """Two Markdown tables: accuracy and compute, then wall time per phase."""
    base = next(iter(summary))
    lines = [f"| method | seeds | steps | eval at step 0 | final eval [95% CI] | best eval [95% CI] | final train reward "
             f"(last {args.smooth}) | FLOPs to train reward ≥ {args.threshold} (seed mean) [95% CI] | vs {base} "
             f"| total FLOPs | optimizer updates |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in summary.items():
        t = s["threshold"]
        reach = f"{t['compute']:.3g}" if math.isfinite(t["compute"]) else "not reached"
        if math.isfinite(t["low"]) and math.isfinite(t["high"]):
            reach += f" [{t['low']:.3g}, {t['high']:.3g}]"
        elif s["seeds"] > 1 and math.isfinite(t["compute"]):
            reach += f" [CI n/a: reached in {t['reached_share']:.0%} of resamples]"
        rel = f"{t['relative']:.2f}" if math.isfinite(t.get("relative", float("nan"))) else "-"
        updates = sorted(set(s["optimizer_updates"]))
        steps = "/".join(map(str, sorted(set(s["steps"]))))
        lines.append(f"| {name} | {s['seeds']} | {steps} | {_ci(s['eval_step0'])} | {_ci(s['final_eval'])} | "
                     f"{_ci(s['best_eval'])} | {_ci(s['final_train_reward'])} | {reach} | {rel} | "
                     f"{s['total_flops']:.3g} | {'/'.join(map(str, updates))} |")
    lines += ["", "| method | " + " | ".join(f"{title} s" for title, _ in PHASES) + " |",
              "|---|" + "---:|" * len(PHASES)]
    for name, s in summary.items():
        lines.append(f"| {name} | " + " | ".join(f"{s['wall_s_by_phase'][t]:.0f}" for t, _ in PHASES) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--assets", required=True, help="directory of `python -m toy_task.warm_start --out DIR` (built if missing)")
    p.add_argument("--out", required=True, help="output directory (runs, table.md, summary.json, curves.png)")
    p.add_argument("--methods", nargs="+", default=[m.name for m in METHODS],
                   help=f"subset of {[m.name for m in METHODS]} (the first is the baseline of the table)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--n", type=int, default=4, help="group size n of GSPO G=n and IBPO G=n (GSPO G=4n: 4n)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per step (one optimizer update per step)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--warmup-steps", type=int, default=5, help="linear learning-rate warmup (steps)")
    p.add_argument("--max-response-length", type=int, default=96)
    p.add_argument("--test-freq", type=int, default=10, help="greedy eval on the val set every N steps (and at 0)")
    p.add_argument("--threshold", type=float, default=0.5, help="training-reward threshold for compute-to-threshold")
    p.add_argument("--smooth", type=int, default=5, help="trailing window (steps) of the training reward")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every process of a run")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before one run is killed")
    p.add_argument("--report-only", action="store_true", help="only summarise the runs already under --out")
    args = p.parse_args(argv)
    by_name = {m.name: m for m in METHODS}
    unknown = [m for m in args.methods if m not in by_name]
    if unknown:
        p.error(f"--methods: unknown {unknown}; choose from {list(by_name)}")
    methods = [by_name[m] for m in args.methods]
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    assets_dir = Path(args.assets).resolve()

    if not args.report_only:
        stamp = assets_dir / "assets.json"
        if not stamp.exists():
            from toy_task.warm_start import build_toy_assets

            print(f"[compare] building the toy assets in {assets_dir} ...", flush=True)
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps(build_toy_assets(assets_dir), indent=1))
        # paths relative to the directory the assets were built from (runs start in --out)
        assets = {k: str(Path(v).resolve()) if isinstance(v, str) else v for k, v in json.loads(stamp.read_text()).items()}
        start = time.monotonic()
        for seed in args.seeds:
            for method in methods:
                run_one(assets, out, method, seed, args)
        print(f"[compare] all runs done in {time.monotonic() - start:.0f} s", flush=True)

    runs: dict[str, list[list[plot_curves.Record]]] = {}
    for method in methods:
        for seed in args.seeds:
            path = out / f"{method.slug}_s{seed}_metrics.jsonl"
            if path.exists() and path.stat().st_size:
                records = plot_curves.read_file_log(path)
                if any(REWARD_KEY in r.data for r in records):
                    runs.setdefault(method.name, []).append(records)
    if methods[0].name not in runs:
        print(f"error: no finished run of the baseline {methods[0].name!r} under {out}", file=sys.stderr)
        return 2
    summary = summarize(runs, [m for m in methods if m.name in runs], args)
    tables = format_tables(summary, args)
    (out / "table.md").write_text(tables + "\n", encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    eval_keys = sorted({k for seeds in runs.values() for recs in seeds for k in [eval_key(recs)] if k})
    plot_curves.plot(runs, REWARD_KEY, eval_keys, COMPUTE_KEY, None, args.smooth, out / "curves.png",
                     x_label="training compute (FLOPs, ibpo/compute/total_flops)")
    print(tables)
    print(f"\nwrote {out / 'table.md'}, {out / 'summary.json'}, {out / 'curves.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
