"""What cutting the correction candidates costs (docs/correction_pass.md, "Whole candidates or cut ones"): on the
toy task, the same wrong responses, the same references and the same correction sampling streams, with every
candidate of x~ keeping 100 / 50 / 25 % of its tokens (middle truncation with the marker, as the trainer cuts:
``ibpo.prompts.render_candidate`` through ``ibpo.pipeline.plan_corrections(candidate_budget=...)``).

Per share of tokens kept: correction success (right corrections / corrections), the shaped share (wrong
responses with Δ > 0 / wrong responses), mean Δ over wrong responses, the rewrite rate among right corrections,
and the paired difference of each to the whole candidates over batches (Student-t 95%). The responses come from
the warm start (no training), sampled at temperature 1 with per-request seeds (``request_seed``), so every share
sees the same wrong answers and the same sampling stream for each correction. One thread.

    python -m lab.analysis.truncation_cost --model lab/toy_tasks/warm_starts/addition_seed0 --batches 24 --out outputs/trunc.json
    python -m lab.analysis.truncation_cost --task three_sum --assets <three_sum warm start> --out outputs/trunc3.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from evaluation.stats import interval_text, paired_difference
from lab.analysis.toy_loop import Toy, generate, sha256_of_dir
from ibpo.options import IBPOConfig
from ibpo.pipeline import plan_corrections, shape_batch

FRACTIONS = (1.0, 0.5, 0.25)
METRICS = ("success", "shaped_share", "mean_delta", "rewrite_rate")


def keep_share(fraction: float):
    """The candidate budget that keeps ``fraction`` of a candidate's shown tokens (0 = whole: nothing cut)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction {fraction} must lie in (0, 1]")
    return lambda shown: 0 if fraction >= 1.0 else max(1, int(round(fraction * shown)))


def measure_batch(toy: Toy, generator, problems, group: int, seed: int, step: int, cfg: IBPOConfig,
                  fractions=FRACTIONS) -> dict[float, dict[str, float]]:
    """One batch: G sampled responses per problem, then the correction pass once per kept share (the same
    references and correction seeds). Returns counts per share."""
    from verl_cpu.hf_rollout import request_seed

    rows_problem = [p for p in problems for _ in range(group)]
    prompts = [toy.prompt_ids(p) for p in rows_problem]
    seeds = [request_seed(seed, f"main|{k}|{j}", step) for k in range(len(problems)) for j in range(group)]
    responses = generate(generator, prompts, seeds, max_tokens=toy.max_tokens)
    rewards = np.array([toy.score(r, p) for r, p in zip(responses, rows_problem)])
    is_correct = [bool(r >= cfg.correct_threshold) for r in rewards]
    group_ids = [k for k in range(len(problems)) for _ in range(group)]
    messages = [toy.messages(p) for p in rows_problem]
    wrong = int(len(is_correct) - sum(is_correct))
    out = {}
    for fraction in fractions:
        requests = plan_corrections(group_ids, is_correct, messages, responses, toy.decode, cfg, step, toy.encode,
                                    candidate_budget=keep_share(fraction))
        counts = {"wrong": wrong, "corrections": len(requests), "right": 0, "shaped": 0, "delta_sum": 0.0,
                  "rewrites": 0, "prompt_tokens": 0}
        if requests:
            corr_prompts = [toy.encode_chat(r.messages) for r in requests]
            corr_seeds = [request_seed(seed, f"corr|{r.target_row}|{k}", step) for k, r in enumerate(requests)]
            corrections = generate(generator, corr_prompts, corr_seeds, chunk=64, max_tokens=toy.max_tokens)
            right = [toy.score(c, rows_problem[r.target_row]) >= cfg.correct_threshold
                     for c, r in zip(corrections, requests)]
            outcome = shape_batch(requests, corrections, right, responses, is_correct, cfg)
            counts.update(right=int(sum(right)), shaped=int((outcome.delta > 0).sum()),
                          delta_sum=float(outcome.delta.sum()),
                          rewrites=int(sum(bool(w) for w, ok in zip(outcome.correction_rewrite, right) if ok)),
                          prompt_tokens=int(sum(len(p) for p in corr_prompts)))
        out[fraction] = counts
    return out


def rates(counts: dict) -> dict[str, float]:
    nan = float("nan")
    return {"success": counts["right"] / counts["corrections"] if counts["corrections"] else nan,
            "shaped_share": counts["shaped"] / counts["wrong"] if counts["wrong"] else nan,
            "mean_delta": counts["delta_sum"] / counts["wrong"] if counts["wrong"] else nan,
            "rewrite_rate": counts["rewrites"] / counts["right"] if counts["right"] else nan}


def summarise(batches: list[dict[float, dict]], fractions=FRACTIONS) -> dict:
    """Pooled rates per share, and per-batch paired differences to the whole candidates (batches where both
    rates are defined)."""
    summary = {}
    for fraction in fractions:
        pooled = {k: sum(b[fraction][k] for b in batches) for k in batches[0][fraction]}
        entry = {"pooled": rates(pooled), "counts": pooled,
                 "prompt_tokens_per_correction": pooled["prompt_tokens"] / max(pooled["corrections"], 1)}
        if fraction != fractions[0]:
            diffs = {}
            for metric in METRICS:
                pairs = [(rates(b[fraction])[metric], rates(b[fractions[0]])[metric]) for b in batches]
                pairs = [(a, w) for a, w in pairs if math.isfinite(a) and math.isfinite(w)]
                if len(pairs) >= 2:
                    d = paired_difference([a for a, _ in pairs], [w for _, w in pairs])
                    diffs[metric] = {"diff": d.diff, "low": d.low, "high": d.high, "batches": len(pairs)}
            entry["vs_whole"] = diffs
        summary[str(fraction)] = entry
    return summary


def format_table(summary: dict, meta: dict) -> str:
    head = (f"Toy task `{meta.get('task', 'addition')}`, warm start sha256 `{meta['model_sha256'][:16]}` (no training), {meta['batches']} batches x {meta['batch_size']} "
            f"problems x G = {meta['group']}, seed {meta['seed']}; IBPO defaults ({meta['variant']}, K = 2). "
            "Differences to whole candidates: paired over batches, Student-t 95%.")
    lines = [head, "", "| candidate tokens kept | corrections | correction success | shaped share of wrong | "
             "mean Δ over wrong | rewrite rate of right | x~ tokens per correction |", "|---|---:|---:|---:|---:|---:|---:|"]

    def cell(entry: dict, metric: str) -> str:
        value = entry["pooled"][metric]
        text = f"{value:.3f}" if math.isfinite(value) else "-"
        d = entry.get("vs_whole", {}).get(metric)
        if d is not None:
            text += f" ({interval_text(d['diff'], d['low'], d['high'], d['batches'], '{:+.3f}', 'batches')})"
        return text

    for fraction, entry in summary.items():
        lines.append(f"| {float(fraction):.0%} | {entry['counts']['corrections']} | {cell(entry, 'success')} | "
                     f"{cell(entry, 'shaped_share')} | {cell(entry, 'mean_delta')} | {cell(entry, 'rewrite_rate')} | "
                     f"{entry['prompt_tokens_per_correction']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--assets", help="`python -m lab.toy_tasks.warm_start --out DIR` output (its assets.json)")
    source.add_argument("--model", help="a warm-start model directory (e.g. lab/toy_tasks/warm_starts/addition_seed0)")
    p.add_argument("--task", default="addition", help="a task of lab.toy_tasks.tasks (the warm start must be one of it)")
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8, help="problems per batch")
    p.add_argument("--group", type=int, default=8, help="G responses per problem")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variant", default="binary", help="ibpo.variant (binary | ratio | mask)")
    p.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS),
                   help="shares of each candidate's tokens to keep, the first the reference (default 1 0.5 0.25)")
    p.add_argument("--out", required=True, help="JSON with per-batch counts, the summary and the table")
    args = p.parse_args(argv)
    import torch

    from verl_cpu.hf_rollout import HFGenerator

    torch.set_num_threads(1)
    model_dir = args.model or json.loads((Path(args.assets) / "assets.json").read_text())["model"]
    toy = Toy(model_dir, train_size=args.batches * args.batch_size, test_size=1, train_seed=args.seed, task=args.task)
    generator = HFGenerator.from_pretrained(model_dir)
    generator.model.eval()
    cfg = IBPOConfig(variant=args.variant, seed=args.seed, correct_groups="all")  # every wrong response corrected
    batches, t0 = [], time.perf_counter()
    for b in range(args.batches):
        problems = toy.train[b * args.batch_size:(b + 1) * args.batch_size]
        with torch.no_grad():
            batches.append(measure_batch(toy, generator, problems, args.group, args.seed, b + 1, cfg,
                                         tuple(args.fractions)))
        whole = batches[-1][args.fractions[0]]
        print(f"[truncation] batch {b + 1}/{args.batches}: {whole['wrong']} wrong, {whole['corrections']} corrections, "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    summary = summarise(batches, tuple(args.fractions))
    meta = {"task": args.task, "model_sha256": sha256_of_dir(model_dir), "batches": args.batches, "batch_size": args.batch_size, "group": args.group,
            "seed": args.seed, "variant": args.variant, "fractions": list(args.fractions), "seconds": time.perf_counter() - t0}
    table = format_table(summary, meta)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "summary": summary, "table": table,
                                          "batches": [{str(k): v for k, v in b.items()} for b in batches]}, indent=1))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
