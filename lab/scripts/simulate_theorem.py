#!/usr/bin/env python
"""Controlled check of Theorem A.2 and the λ optimum in a world with a known ground truth (issue 7, part 4).

    python lab/scripts/simulate_theorem.py                 # full run, ~15 s on one CPU core
    python lab/scripts/simulate_theorem.py --quick         # small setting (the test runs this)

The world, the correction operator and the measurements are in :mod:`lab.analysis.simulation`; every IBPO number
comes from the functions the trainer uses (``ibpo.pipeline``, ``ibpo.advantages``, ``ibpo.diagnostics``).

Table 1 (fixed policies, every step right with probability p): Cov(Y, φ), V_φ, the predicted
λ_max = 2C/V_φ, and the λ at which each measured variance climbs back to its GSPO level (λ = 0 on the
same samples): the unnormalised advantage of the theorem (Eq. 10-11), the per-sample policy gradient with
unnormalised advantages (the theorem's second claim), and the per-sample gradient / per-prompt estimator
with the group-normalised advantages the trainer actually uses (Eq. 9/23).
Table 2: variance ratios IBPO/GSPO at the configured λ, the estimator's signal-to-noise ratio and its
cosine with the exact ∇J, and the share of groups with a non-zero advantage.
Table 3: training to an exact expected-reward threshold, GSPO G=64 vs GSPO G=8 vs IBPO G=8, steps and
generated samples (corrections included, weighted by ``--correction-cost``), normalised to GSPO G=64.
The closing lines say, from the numbers just computed, where the simulation agrees with the paper and
where it does not.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the clone's root: lab/ is not installed
from ibpo.options import IBPOConfig  # noqa: E402
from lab.analysis.simulation import RegimeResult, TrainingResult, World, measure_regime, train  # noqa: E402
from option_types.cli import (  # noqa: E402
    int_at_least, nonnegative_float, nonnegative_int, positive_float, positive_int, probability)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small, fast setting (tests)")
    p.add_argument("--regimes", type=probability, nargs="+", default=[0.5, 0.65, 0.8, 0.9],
                   help="per-step accuracies p of the fixed policies of tables 1-2")
    p.add_argument("--problems", type=positive_int, default=16)
    p.add_argument("--groups-per-problem", type=positive_int, default=48)
    p.add_argument("--group-size", type=int_at_least(2), default=8, help="G for the variance tables and IBPO training")
    p.add_argument("--baseline-group-size", type=int_at_least(2), default=64, help="G of the GSPO baseline in training")
    p.add_argument("--lam", type=nonnegative_float, default=0.6)
    p.add_argument("--beta", type=positive_float, default=0.5)
    p.add_argument("--lam-step", type=positive_float, default=0.05, help="grid step of the λ sweep over [0, 1/β)")
    p.add_argument("--steps", type=positive_int, default=6, help="reasoning steps L")
    p.add_argument("--choices", type=int_at_least(2), default=4, help="choices per step M")
    p.add_argument("--repair-correct-ref", type=probability, default=0.7)
    p.add_argument("--repair-wrong-ref", type=probability, default=0.35)
    p.add_argument("--rewrite-prob", type=probability, default=0.1)
    p.add_argument("--train-settings", nargs="+", default=["0.55:0.8", "0.35:0.6"],
                   help="initial per-step accuracy ranges lo:hi (spread over the problems) for table 3")
    p.add_argument("--seeds", type=positive_int, default=5)
    p.add_argument("--lr", type=positive_float, default=4.0)
    p.add_argument("--prompts-per-step", type=positive_int, default=4)
    p.add_argument("--threshold", type=probability, default=0.75, help="exact expected reward to reach (paper: 0.75)")
    p.add_argument("--max-steps", type=positive_int, default=2000)
    p.add_argument("--correction-cost", type=nonnegative_float, default=1.0,
                   help="samples charged per correction (corrections have longer prompts; App. B)")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--json", help="also write all results to this JSON file")
    args = p.parse_args(argv)
    if args.quick:
        args.regimes, args.problems, args.groups_per_problem = [0.6, 0.85], 8, 16
        args.train_settings, args.seeds, args.max_steps, args.lam_step = ["0.55:0.8"], 2, 400, 0.1
    return args


def fmt(x: float, digits: int = 2) -> str:
    if isinstance(x, float) and math.isinf(x):
        return "none"
    return f"{x:.{digits}f}"


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def theorem_table(results: list[RegimeResult], grid_max: float) -> str:
    rows = [[fmt(r.step_accuracy), fmt(r.mean_reward, 3), fmt(r.correction_success), fmt(r.stats.cov_y_phi, 4),
             fmt(r.stats.v_phi, 4), fmt(r.lam_max), fmt(r.cross_adv), fmt(r.cross_grad), fmt(r.cross_grad_norm),
             fmt(r.cross_est_norm)] for r in results]
    header = ["p(step)", "E[Y]", "corr. success", "Cov(Y,φ)", "V_φ", "λ_max=2C/V_φ (pred.)",
              "λ*: Var(A) unnorm.", "λ*: grad var unnorm.", "λ*: grad var norm.", "λ*: estimator var norm."]
    note = (f"λ* = λ where the measured variance climbs back to its GSPO (λ=0) value on the same samples; "
            f"'none' = still lower at the grid's end ({grid_max:.2f} < 1/β); 0.00 = higher from the first grid step.")
    return markdown(header, rows) + "\n" + note


def ratio_table(results: list[RegimeResult], lam: float) -> str:
    rows = [[fmt(r.step_accuracy), fmt(r.ratio_adv, 3), fmt(r.ratio_grad, 3), fmt(r.ratio_grad_norm, 3),
             fmt(r.ratio_est_norm, 3), f"{r.snr_gspo:.3f} → {r.snr_ibpo:.3f}", f"{r.cos_gspo:.3f} → {r.cos_ibpo:.3f}",
             f"{r.frac_informative_gspo:.2f} → {r.frac_informative_ibpo:.2f}"] for r in results]
    header = ["p(step)", f"Var(A) ratio λ={lam} unnorm.", "grad var ratio unnorm.", "grad var ratio norm.",
              "estimator var ratio norm.", "estimator SNR GSPO → IBPO", "cos(E ĝ, ∇J) GSPO → IBPO",
              "groups with signal GSPO → IBPO"]
    return markdown(header, rows)


def training_table(runs: list[TrainingResult], settings: list[str], labels: list[str]) -> str:
    rows = []
    for setting in settings:
        chosen = [r for r in runs if r.label.startswith(setting + " ")]
        base = [r.samples for r in chosen if r.label.endswith(labels[0]) and r.reached]
        base_mean = float(np.mean(base)) if base else float("nan")
        for label in labels:
            mine = [r for r in chosen if r.label.endswith(label)]
            ok = [r for r in mine if r.reached]
            steps = [r.steps for r in ok]
            samples = [r.samples for r in ok]
            rows.append([
                setting, label, f"{len(ok)}/{len(mine)}",
                f"{np.mean(steps):.0f} ± {np.std(steps):.0f}" if ok else "-",
                f"{np.mean(samples):.0f} ± {np.std(samples):.0f}" if ok else "-",
                f"{np.mean(samples) / base_mean:.2f}" if ok and base else "-",
            ])
    header = ["initial p(step)", "method", "reached", "steps (mean ± sd)", "samples (mean ± sd)",
              "samples / GSPO G=64"]
    return markdown(header, rows)


def verdicts(results: list[RegimeResult], runs: list[TrainingResult], labels: list[str], settings: list[str],
             lam: float, lam_step: float, grid_max: float) -> list[str]:
    """Plain statements, each decided from the numbers above."""
    out = []
    covs = [r.stats.cov_y_phi for r in results]
    out.append(("AGREES" if max(covs) <= 0 else "DISAGREES") +
               f" - Assumption A.1: Cov(Y, φ) <= 0 in every regime (max {max(covs):.4f}); it holds by construction "
               "(φ = 0 on right answers).")
    checkable = [r for r in results if r.lam_max < grid_max - lam_step]
    adv_ok = all(abs(r.cross_adv - r.lam_max) <= lam_step for r in checkable) and all(
        math.isinf(r.cross_adv) for r in results if r.lam_max >= grid_max)
    out.append(("AGREES" if adv_ok else "DISAGREES") +
               " - Theorem A.2, advantage variance (unnormalised, Eq. 10-12): Var(A^IBPO) < Var(A^GSPO) exactly for "
               "λ < 2C/V_φ; the measured crossing matches λ_max within the grid step in every regime. With pooled "
               "within-group moments Eq. 12 is an identity, so this part is algebra, not an approximation.")
    above = [r for r in results if r.ratio_adv > 1.0]
    if above:
        out.append(f"NOTE - at λ = {lam} the advantage variance goes UP where λ_max < {lam}: p(step) = "
                   + ", ".join(f"{r.step_accuracy:g} (λ_max {r.lam_max:.2f}, ratio {r.ratio_adv:.2f})" for r in above)
                   + ". C = Ȳ·φ̄ vanishes in all-wrong groups while V_φ does not, so hard prompts have small λ_max; "
                     "λ = 0.6 is not inside the theorem's range there.")
    finite = [r for r in results if not math.isinf(r.cross_grad) and r.lam_max > 0]
    if finite:
        share = np.median([r.cross_grad / r.lam_max for r in finite])
        out.append(("DISAGREES" if share < 0.8 else "AGREES") +
                   f" - Theorem A.2, policy-gradient variance (unnormalised): the gradient variance stops falling at "
                   f"λ ≈ {share:.2f} × λ_max (median over regimes), not at λ_max. The premise that ‖∇log π(τ)‖ is "
                   "unrelated to the advantage fails: wrong traces contain low-probability steps, whose score "
                   "vectors are longer (mean ‖∇log π‖² right vs wrong: "
                   + ", ".join(f"p={r.step_accuracy:g}: {r.score_sq_right:.2f} vs {r.score_sq_wrong:.2f}" for r in results)
                   + "), so raising their advantage adds more gradient variance than the advantage variance "
                     "suggests.")
    norm = [r.ratio_grad_norm for r in results]
    out.append(("DISAGREES" if min(norm) >= 0.9 else "AGREES") +
               f" - paper's '≈30% lower policy-gradient variance' with the group-normalised advantages the trainer "
               f"uses: per-sample gradient variance ratio IBPO/GSPO at λ = {lam} is {min(norm):.2f}-{max(norm):.2f} "
               "here. Normalisation gives every non-constant group unit advantage variance, and shaping makes "
               "all-wrong groups non-constant (their GSPO advantages are 0), so there is more gradient, signal "
               "and noise alike.")
    snr_up = [r for r in results if r.snr_ibpo > r.snr_gspo]
    snr_word = "AGREES" if len(snr_up) == len(results) else ("DISAGREES" if not snr_up else "MIXED")
    out.append(f"{snr_word} - estimator signal-to-noise (‖E ĝ‖² / tr Var ĝ, per prompt) is higher with IBPO in "
               f"{len(snr_up)}/{len(results)} regimes ("
               + ", ".join(f"p={r.step_accuracy:g}: {r.snr_gspo:.2f}→{r.snr_ibpo:.2f}" for r in results)
               + "); cosine of E ĝ with the exact ∇J, GSPO → IBPO: "
               + ", ".join(f"{r.cos_gspo:.2f}→{r.cos_ibpo:.2f}" for r in results) + ".")
    for setting in settings:
        def mean_of(label: str, field: str) -> float:
            xs = [getattr(r, field) for r in runs if r.label == f"{setting} {label}" and r.reached]
            return float(np.mean(xs)) if xs else float("nan")
        g64, g8, ib8 = (mean_of(lbl, "samples") for lbl in labels)
        s_g8, s_ib8 = mean_of(labels[1], "steps"), mean_of(labels[2], "steps")
        out.append(
            ("AGREES" if ib8 < g64 else "DISAGREES") +
            f" - compute-matched claim, initial p(step) {setting}: IBPO G=8 needs {ib8 / g64:.2f}× the samples of "
            f"GSPO G=64 to reach the threshold. "
            + ("But GSPO G=8 without shaping needs " + f"{g8 / g64:.2f}×: most of the saving comes from the smaller "
               "group, not from the shaping. " if g8 <= ib8 else
               f"GSPO G=8 without shaping needs {g8 / g64:.2f}×, so the shaping itself saves samples here. ")
            + f"Per step, IBPO G=8 takes {s_ib8:.0f} steps vs {s_g8:.0f} for GSPO G=8.")
    out.append("NOT TESTED - positive backward transfer (§3.4, joint training on corrections): the simulated "
               "correction operator is fixed, not learned, so only the shaping path (Path One) is checked.")
    return out


def run(args: argparse.Namespace) -> dict:
    world = World(num_steps=args.steps, num_choices=args.choices, repair_correct_ref=args.repair_correct_ref,
                  repair_wrong_ref=args.repair_wrong_ref, rewrite_prob=args.rewrite_prob)
    config = IBPOConfig(variant="binary", lam=args.lam, beta=args.beta, seed=args.seed, shaping="reward",
                        correct_groups="all")  # Theorem A.2's setting: the paper's rule
    grid_max = (1.0 / args.beta) - 1e-9
    lam_grid = np.round(np.arange(0.0, grid_max, args.lam_step), 6)
    if not np.isclose(lam_grid, args.lam).any():
        lam_grid = np.unique(np.append(lam_grid, args.lam))
    grid_max = float(lam_grid[-1])
    t0 = time.perf_counter()
    results = [measure_regime(p, world, config, args.problems, args.groups_per_problem, lam_grid, args.seed + i,
                              group_size=args.group_size)
               for i, p in enumerate(args.regimes)]
    t1 = time.perf_counter()
    labels = [f"GSPO G={args.baseline_group_size}", f"GSPO G={args.group_size}", f"IBPO G={args.group_size}"]
    runs = []
    for setting in args.train_settings:
        lo, hi = (float(v) for v in setting.split(":"))
        initial = np.linspace(lo, hi, args.problems)
        for label, G, shaping in ((labels[0], args.baseline_group_size, False), (labels[1], args.group_size, False),
                                  (labels[2], args.group_size, True)):
            for s in range(args.seeds):
                runs.append(train(f"{setting} {label}", world, config, shaping, initial, args.prompts_per_step, args.lr,
                                  args.threshold, args.max_steps, args.correction_cost, args.seed + s, group_size=G))
    t2 = time.perf_counter()
    return {"results": results, "runs": runs, "labels": labels, "grid_max": grid_max,
            "seconds": {"variance": t1 - t0, "training": t2 - t1}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = run(args)
    results, runs, labels = out["results"], out["runs"], out["labels"]
    print(f"World: L={args.steps} steps x M={args.choices} choices, correction repairs each wrong step w.p. "
          f"{args.repair_correct_ref} (right ref) / {args.repair_wrong_ref} (wrong ref), copies the reference w.p. "
          f"{args.rewrite_prob}; IBPO binary, β={args.beta}, λ={args.lam}, α={IBPOConfig().alpha}, G={args.group_size}; "
          f"{args.problems} problems x {args.groups_per_problem} groups per regime.\n")
    print("Table 1 - Theorem A.2: predicted λ_max vs the λ where variance reduction actually stops\n")
    print(theorem_table(results, out["grid_max"]) + "\n")
    print(f"Table 2 - IBPO/GSPO at λ = {args.lam} on the same samples\n")
    print(ratio_table(results, args.lam) + "\n")
    print(f"Table 3 - steps and samples to exact E[reward] >= {args.threshold} (lr {args.lr}, "
          f"{args.prompts_per_step} prompts/step, {args.seeds} seeds, correction cost {args.correction_cost})\n")
    print(training_table(runs, args.train_settings, labels) + "\n")
    print("Where the simulation agrees with the paper and where not:")
    for line in verdicts(results, runs, labels, args.train_settings, args.lam, args.lam_step, out["grid_max"]):
        print("- " + line)
    print(f"\n(variance tables {out['seconds']['variance']:.1f} s, training {out['seconds']['training']:.1f} s)")
    if args.json:
        payload = {"args": vars(args), "regimes": [asdict(r) for r in results], "runs": [asdict(r) for r in runs],
                   "seconds": out["seconds"]}
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, default=lambda o: None if isinstance(o, float) and math.isinf(o) else str(o))
    return 0


if __name__ == "__main__":
    sys.exit(main())
