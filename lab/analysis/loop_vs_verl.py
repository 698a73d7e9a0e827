"""Does the plain PyTorch loop (``lab.analysis.toy_loop``) train like verl's trainer (``python -m recipe.main method=ibpo``)?

The published equal-compute table comes from the loop; this checks it against the verl path on a few seeds at
**equal steps**, the same warm start, n, batch, learning rate (constant: ``--warmup-steps 0`` in both, because
verl's constant-with-warmup schedule gives the first update lr 0 and the loop's FLOP warmup does not), and the
same held-out test problems (the loop's ``TEST_SEED`` set, written as verl's val parquet)::

    python -m lab.analysis.loop_vs_verl prepare --assets outputs/toy_assets --out outputs/loop_vs_verl/assets
    python -m lab.analysis.toy_loop --assets outputs/toy_assets --out outputs/loop_vs_verl/loop \\
        --arms "GSPO G=n" "IBPO G=n" --seeds 0 1 --max-steps 8 --warmup-steps 0 --test-size 512
    python lab/scripts/compare_methods.py --engine verl --assets outputs/loop_vs_verl/assets \\
        --out outputs/loop_vs_verl/verl --methods "GSPO G=n" "IBPO G=n" --seeds 0 1 --steps 8 \\
        --warmup-steps 0 --test-freq 8
    python -m lab.analysis.loop_vs_verl report --loop outputs/loop_vs_verl/loop --verl outputs/loop_vs_verl/verl

What cannot match run for run: the two engines draw different prompts per step (the loop permutes the train
set with numpy, verl shuffles it with its sampler) and different sampling streams, so a seed's two runs are
two independent draws of the same training process; the check is whether their curves agree within the
between-run noise, not token for token.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

REWARD_KEY = "ibpo/raw_score_mean"  # verl: verifier reward of the main responses (lab/scripts/compare_methods.py)


def prepare(assets_dir: str | Path, out_dir: str | Path, test_size: int) -> Path:
    """An assets directory for ``compare_methods.py --engine verl`` whose val parquet is the loop's test set
    (``sample_problems(test_size, TEST_SEED)``); model, tokenizer and train parquet are the original ones
    (``model_sft`` linked, so the verl table prints the same warm-start hash). Returns its ``assets.json``."""
    from lab.analysis.toy_loop import TEST_SEED
    from lab.toy_tasks.addition import sample_problems
    from lab.toy_tasks.rows import problem_row, write_rows

    assets_dir, out = Path(assets_dir).resolve(), Path(out_dir).resolve()
    assets = json.loads((assets_dir / "assets.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    test = write_rows([problem_row(p, "test", i) for i, p in enumerate(sample_problems(test_size, TEST_SEED))],
                      out / "test.parquet")
    link = out / "model_sft"
    if not link.exists():
        link.symlink_to(Path(assets["model"]).resolve(), target_is_directory=True)
    assets = {**assets, "val": str(test)}
    (out / "assets.json").write_text(json.dumps(assets, indent=1))
    return out / "assets.json"


def loop_runs(loop_dir: str | Path) -> dict[str, dict[int, dict]]:
    """``{arm: {seed: {"rewards": [per step], "test": final accuracy, "steps": n}}}`` of equal-steps loop runs
    (``--max-steps``; their one evaluation has ``milestone`` null)."""
    runs: dict[str, dict[int, dict]] = {}
    for path in sorted(Path(loop_dir).glob("*_s*.json")):
        r = json.loads(path.read_text())
        final = [e for e in r["evals"] if e["milestone"] is None]
        if not final:
            raise ValueError(f"{path}: not an equal-steps run (--max-steps): no evaluation with milestone null")
        runs.setdefault(r["arm"], {})[int(r["seed"])] = {
            "rewards": [s["reward"] for s in r["steps"]], "test": final[-1]["accuracy"], "steps": len(r["steps"])}
    return runs


def verl_run(metrics_path: str | Path) -> dict:
    """The same fields from one verl run's file-logger JSONL: per-step ``ibpo/raw_score_mean`` and the
    validation accuracy (``val-core/<source>/acc/mean@1``) logged at the last step."""
    from evaluation import plot_curves

    records = plot_curves.read_file_log(metrics_path)
    rewards = {r.step: r.data[REWARD_KEY] for r in records if REWARD_KEY in r.data}
    evals = {r.step: v for r in records for k, v in r.data.items() if plot_curves.EVAL_KEY_PATTERN.match(k)}
    if not rewards:
        raise ValueError(f"{metrics_path}: no {REWARD_KEY} records")
    last = max(rewards)
    if last not in evals:
        raise ValueError(f"{metrics_path}: no validation accuracy at the last step {last} (use --test-freq)")
    return {"rewards": [rewards[s] for s in sorted(rewards)], "test": evals[last], "steps": len(rewards)}


def compare(loop: dict[str, dict[int, dict]], verl_dir: str | Path) -> list[dict]:
    """One row per (arm, seed) present in both engines: mean training reward over the steps and the final
    test accuracy, loop and verl, and verl − loop."""
    from lab.analysis.toy_loop import default_arms

    slugs = {name: arm.slug for name, arm in default_arms().items()}
    rows = []
    for arm, seeds in loop.items():
        for seed, lr in sorted(seeds.items()):
            path = Path(verl_dir) / f"{slugs[arm]}_s{seed}_metrics.jsonl"
            if not path.exists():
                continue
            vr = verl_run(path)
            if vr["steps"] != lr["steps"]:
                raise ValueError(f"{arm} seed {seed}: loop made {lr['steps']} steps, verl {vr['steps']} ({path})")
            rows.append({"arm": arm, "seed": seed, "steps": lr["steps"],
                         "reward_loop": float(np.mean(lr["rewards"])), "reward_verl": float(np.mean(vr["rewards"])),
                         "test_loop": lr["test"], "test_verl": vr["test"],
                         "rewards_loop": lr["rewards"], "rewards_verl": vr["rewards"]})
    return rows


def format_rows(rows: list[dict]) -> str:
    """The markdown table: per arm and seed, then per arm the mean over seeds."""
    lines = ["| arm | seed | steps | train reward, loop | train reward, verl | verl − loop | test acc., loop | "
             "test acc., verl | verl − loop |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['seed']} | {r['steps']} | {r['reward_loop']:.3f} | {r['reward_verl']:.3f} | "
                     f"{r['reward_verl'] - r['reward_loop']:+.3f} | {r['test_loop']:.3f} | {r['test_verl']:.3f} | "
                     f"{r['test_verl'] - r['test_loop']:+.3f} |")
    for arm in dict.fromkeys(r["arm"] for r in rows):
        sel = [r for r in rows if r["arm"] == arm]
        m = {k: float(np.mean([r[k] for r in sel])) for k in ("reward_loop", "reward_verl", "test_loop", "test_verl")}
        lines.append(f"| {arm} | mean of {len(sel)} | {sel[0]['steps']} | {m['reward_loop']:.3f} | {m['reward_verl']:.3f} | "
                     f"{m['reward_verl'] - m['reward_loop']:+.3f} | {m['test_loop']:.3f} | {m['test_verl']:.3f} | "
                     f"{m['test_verl'] - m['test_loop']:+.3f} |")
    return "\n".join(lines)


def binomial_sd_of_difference(p: float, n: int) -> float:
    """SD of the difference of two independent accuracies, each the mean of ``n`` Bernoulli(p) outcomes: the
    smallest noise two runs' test accuracies on ``n`` problems can differ by, before any training noise."""
    return math.sqrt(2 * p * (1 - p) / n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare", help="assets for --engine verl whose val set is the loop's test set")
    pp.add_argument("--assets", required=True)
    pp.add_argument("--out", required=True)
    pp.add_argument("--test-size", type=int, default=512)
    pr = sub.add_parser("report", help="the loop-vs-verl table")
    pr.add_argument("--loop", required=True, help="lab.analysis.toy_loop --max-steps output")
    pr.add_argument("--verl", required=True, help="compare_methods.py --engine verl output")
    pr.add_argument("--test-size", type=int, default=512, help="test problems of both engines' evaluation")
    args = p.parse_args(argv)
    if args.cmd == "prepare":
        print(prepare(args.assets, args.out, args.test_size))
        return 0
    rows = compare(loop_runs(args.loop), args.verl)
    if not rows:
        print(f"error: no (arm, seed) run in both {args.loop} and {args.verl}", file=sys.stderr)
        return 2
    print(format_rows(rows))
    print("\nPer-step training reward (mean over seeds), loop / verl:")
    for arm in dict.fromkeys(r["arm"] for r in rows):
        sel = [r for r in rows if r["arm"] == arm]
        lo, ve = np.mean([r["rewards_loop"] for r in sel], 0), np.mean([r["rewards_verl"] for r in sel], 0)
        print(f"{arm}: " + " ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(lo, ve)))
    mean_test = float(np.mean([r["test_loop"] for r in rows] + [r["test_verl"] for r in rows]))
    print(f"\nSD of a difference of two independent test accuracies from measurement alone (p = {mean_test:.2f}, "
          f"{args.test_size} problems): {binomial_sd_of_difference(mean_test, args.test_size):.3f}")
    (Path(args.verl) / "loop_vs_verl.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
