"""The README's main job: a few IBPO + GSPO steps through verl's real trainer on CPU with a tiny local model.

    python -m recipe.ibpo.quickstart                       # IBPO binary + joint training, 3 steps
    python -m recipe.ibpo.quickstart --variant mask --steps 2
    python -m recipe.ibpo.quickstart --baseline            # the GSPO baseline through the same loop

It builds (once, cached in ``--out``) a tiny Qwen2-style model and tokenizer, warm-starts it on the
synthetic arithmetic task (``recipe/ibpo/synthetic_task.py``) so it answers some problems right and
some wrong, then runs ``python -m recipe.ibpo.main_ibpo`` with the CPU platform and ``hf`` rollout, bounded
by ``--timeout`` (the whole process tree is killed on expiry), and prints the IBPO metrics of every step.
Extra Hydra overrides can follow ``--``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ibpo.variants import variant_names
from verl_cpu.launch import cpu_env, cpu_overrides, process_env, read_metrics_jsonl, run_with_timeout

# (metric key, column title, format)
TABLE = [
    ("ibpo/raw_score_mean", "score", "{:.3f}"),  # main responses only (critic/score/mean includes joint rows)
    ("ibpo/num_wrong", "wrong", "{:.0f}"),
    ("ibpo/num_corrections", "corr", "{:.0f}"),
    ("ibpo/correction_success_rate", "succ", "{:.2f}"),
    ("ibpo/rewrite_rate", "rewr", "{:.2f}"),
    ("ibpo/shaped_fraction", "shaped", "{:.3f}"),
    ("ibpo/mean_delta", "meanΔ", "{:.2f}"),
    ("ibpo/cov_y_phi", "Cov(Y,φ)", "{:+.4f}"),
    ("ibpo/lambda_max", "λmax", "{:.2f}"),
    ("ibpo/num_joint_rows", "joint", "{:.0f}"),
    ("actor/grad_norm", "grad norm", "{:.3f}"),
    ("actor/num_optimizer_updates", "updates", "{:.0f}"),
    ("ibpo/time/correction_gen_s", "corr s", "{:.2f}"),
    ("timing_s/step", "step s", "{:.1f}"),
]


def ibpo_overrides(variant: str, joint_training: bool, baseline: bool) -> list[str]:
    """The IBPO (or baseline) part of the command line; the CPU part comes from ``cpu_overrides``."""
    out = [
        "actor_rollout_ref.actor.optim.lr=1e-4",
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
        "actor_rollout_ref.rollout.temperature=1.0",
    ]
    if baseline:
        return out + ["ibpo.enable=False", "trainer.experiment_name=gspo_cpu"]
    return out + [f"ibpo.variant={variant}", f"ibpo.joint_training={joint_training}",
                  f"trainer.experiment_name=ibpo_{variant}_cpu"]


def run_cpu_training(assets: dict, out_dir: Path, name: str, overrides: list[str], steps: int,
                     timeout_s: float, extra_env: dict | None = None, config_name: str | None = None):
    """Run ``recipe.ibpo.main_ibpo`` on CPU with the demo assets; returns (RunResult, metrics by step or None).

    The run is bounded by ``timeout_s`` (whole process tree killed), logs to ``out_dir/<name>.log`` and
    writes verl's file-logger metrics to ``out_dir/<name>_metrics.jsonl``.
    """
    import os

    out_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = out_dir / f"{name}_metrics.jsonl"
    metrics_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "recipe.ibpo.main_ibpo"]
    if config_name:
        cmd.append(f"--config-name={config_name}")
    cmd += [*cpu_overrides(assets["model"], assets["train"], assets["val"], total_training_steps=steps),
            f"trainer.default_local_dir={out_dir / 'checkpoints'}", *overrides]
    env = process_env(os.environ, {**cpu_env(metrics_path=metrics_path), **(extra_env or {})})
    result = run_with_timeout(cmd, env, timeout_s=timeout_s, log_path=out_dir / f"{name}.log", cwd=out_dir)
    metrics = read_metrics_jsonl(metrics_path) if result.returncode == 0 and metrics_path.exists() else None
    return result, metrics


def format_table(metrics_by_step: dict[int, dict[str, float]]) -> str:
    """The per-step IBPO metrics as a Markdown table."""
    head = "| step | " + " | ".join(title for _, title, _ in TABLE) + " |"
    rule = "|---:|" + "---:|" * len(TABLE)
    rows = []
    for step in sorted(s for s in metrics_by_step if s > 0):
        m = metrics_by_step[step]
        cells = [fmt.format(m[key]) if key in m else "-" for key, _, fmt in TABLE]
        rows.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join([head, rule, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="outputs/quickstart", help="work directory (assets are cached here)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--variant", choices=variant_names(), default="binary")
    parser.add_argument("--no-joint-training", action="store_true", help="shaping only (Table 3 ablation)")
    parser.add_argument("--baseline", action="store_true", help="GSPO without IBPO (ibpo.enable=False)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the run is killed")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the tiny model and data")
    args, extra = parser.parse_known_args(argv)
    extra = [x for x in extra if x != "--"]

    from recipe.ibpo.synthetic_task import build_cpu_demo_assets

    out = Path(args.out).resolve()
    stamp = out / "assets.json"
    if args.rebuild or not stamp.exists():
        print(f"[quickstart] building the tiny model, tokenizer and synthetic task in {out} ...", flush=True)
        assets = build_cpu_demo_assets(out / "assets")
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(assets))
    assets = json.loads(stamp.read_text())

    name = "gspo" if args.baseline else f"ibpo_{args.variant}"
    print(f"[quickstart] running python -m recipe.ibpo.main_ibpo on CPU ({args.steps} steps, log: {out / (name + '.log')})",
          flush=True)
    result, metrics = run_cpu_training(assets, out, name,
                                       [*ibpo_overrides(args.variant, not args.no_joint_training, args.baseline), *extra],
                                       args.steps, args.timeout)
    if result.returncode != 0:
        print(result.log_tail(6000), file=sys.stderr)
        reason = "timed out" if result.timed_out else f"exited with {result.returncode}"
        print(f"[quickstart] FAILED: the run {reason} after {result.wall_s:.0f} s (log: {result.log_path})",
              file=sys.stderr)
        return 1
    print(format_table(metrics))
    print(f"[quickstart] done in {result.wall_s:.0f} s; peak memory of the run {result.peak_sys_used_delta_bytes / 2**30:.1f} GiB; "
          f"metrics: {out / (name + '_metrics.jsonl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
