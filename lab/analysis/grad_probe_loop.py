"""The gradient-variance probe (``ibpo.grad_probe``) on the toy loop's IBPO G=n trajectories, with an interval
over seeds.

At every step of an IBPO G=n run of ``lab.analysis.toy_loop`` (the same seeds, budget and settings as the
equal-compute comparison, so the first steps are that comparison's own runs: the hook changes nothing the run
does), before the update, the per-sample policy gradients of the step's samples, projected on a fixed random
subset of weights, are computed under the advantages the step trains on (IBPO: r' = r + λΔ, group-normalised)
and under GSPO's advantages of the *same* samples (r, group-normalised); the probe's ratio is
tr Cov(g_IBPO) / tr Cov(g_GSPO) (``ibpo.grad_probe.probe_gradient_variance``, ``token_mean`` as GSPO's
``seq-mean-token-mean``). The paper (App. A) reports IBPO ≈ 30% lower (ratio ≈ 0.7).

Per seed the ratio is pooled over its steps (Σ_steps var_IBPO / Σ_steps var_GSPO); the table gives the mean of
the per-seed ratios with a 95% Student-t interval over seeds, the geometric mean with the t-interval of the
mean log ratio, and the median of the per-step ratios (the statistic quoted before, without an interval).
Steps where GSPO's advantages are all 0 (no group mixes right and wrong) have no ratio and are counted apart::

    python -m lab.analysis.grad_probe_loop --assets outputs/toy_assets --meta outputs/toy_loop/meta.json \\
        --out outputs/grad_probe --seeds $(seq 0 9) --steps 7
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch


def verl_layout(prompts: list[list[int]], responses: list[list[int]], pad_id: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, response_mask)`` in verl's layout (prompts left-padded to the longest,
    then responses right-padded to the longest: the response is the last R positions), as the probe reads."""
    width_p = max(len(p) for p in prompts)
    width_r = max(max(len(r) for r in responses), 1)
    ids = torch.full((len(prompts), width_p + width_r), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    resp = torch.zeros((len(prompts), width_r), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, width_p - len(p):width_p] = torch.tensor(p, dtype=torch.long)
        attn[i, width_p - len(p):width_p] = 1
        if r:
            ids[i, width_p:width_p + len(r)] = torch.tensor(r, dtype=torch.long)
            attn[i, width_p:width_p + len(r)] = 1
            resp[i, :len(r)] = 1
    return ids, attn, resp


def padded_token_advantages(token_advantages: list[np.ndarray], width: int) -> torch.Tensor:
    """(B, width) token advantages, 0 past each response."""
    out = torch.zeros((len(token_advantages), width), dtype=torch.float64)
    for i, a in enumerate(token_advantages):
        out[i, :len(a)] = torch.as_tensor(a, dtype=torch.float64)
    return out


class ProbeHook:
    """``lab.analysis.toy_loop.run``'s ``step_hook``: the probe's variances under GSPO and IBPO advantages.

    Beside the trained (group-normalised) advantages it probes Theorem A.2's own quantity: the un-normalised
    advantages Y − Ȳ (GSPO) and r' − mean r' with r' = r + λΔ (IBPO), from the same per-sample gradients; and
    both variances per group kind (rows of mixed groups, rows of all-wrong groups; ``ibpo.mechanism``), since
    shaping acts differently in each. ``lam`` is the arm's λ (the un-normalised IBPO advantage needs it)."""

    def __init__(self, num_coordinates: int, subset_seed: int = 0, lam: float = 0.6):
        self.num_coordinates = num_coordinates
        self.subset_seed = subset_seed
        self.lam = lam
        self.subset = None

    def __call__(self, *, model, prompts, responses, rewards, group_ids, token_advantages, delta, pad_id, **_) -> dict:
        from ibpo.advantages import group_normalized_advantages
        from ibpo.diagnostics import unnormalised_advantages
        from ibpo.grad_probe import projected_per_sample_gradients, select_parameter_subset, total_variance
        from ibpo.mechanism import group_kinds

        if self.subset is None:
            self.subset = select_parameter_subset(model, self.num_coordinates, seed=self.subset_seed)
        ids, attn, resp = verl_layout(prompts, responses, pad_id)
        rewards = np.asarray(rewards, dtype=np.float64)
        gspo = group_normalized_advantages(torch.as_tensor(rewards), group_ids)
        ibpo = padded_token_advantages(token_advantages, resp.shape[1])
        gspo_u = torch.as_tensor(unnormalised_advantages(rewards, group_ids))
        ibpo_u = torch.as_tensor(unnormalised_advantages(rewards + self.lam * np.asarray(delta, dtype=np.float64),
                                                         group_ids))
        was_training = model.training
        model.eval()
        try:
            grads = projected_per_sample_gradients(model, ids, attn, resp, [gspo, ibpo, gspo_u, ibpo_u], self.subset,
                                                   aggregation="token_mean")
        finally:
            model.train(was_training)
        kinds = np.array(group_kinds(rewards >= 0.5, group_ids), dtype=object)
        out = {"shaped": int((np.asarray(delta) > 0).sum())}
        for label, rows in (("", np.ones(len(rewards), dtype=bool)), ("mixed_", kinds == "mixed"),
                            ("all_wrong_", kinds == "all_wrong")):
            for norm, (g_base, g_cand) in (("", grads[:2]), ("unnorm_", grads[2:])):
                if rows.sum() < 2:
                    continue
                vb, vc = total_variance(g_base[rows]), total_variance(g_cand[rows])
                out[f"{label}{norm}var_gspo"], out[f"{label}{norm}var_ibpo"] = vb, vc
                out[f"{label}{norm}ratio"] = vc / vb if vb > 0 else None
        out.setdefault("ratio", None)
        return out


def summarise(per_seed_steps: dict[int, list[dict]]) -> dict:
    """Per-seed pooled ratios and their mean / geometric mean with 95% t-intervals over seeds, and the median
    of the per-step ratios."""
    from evaluation.stats import t_interval

    pooled, step_ratios, no_ratio, shaped_steps, total = {}, [], 0, 0, 0
    for seed, steps in sorted(per_seed_steps.items()):
        with_ratio = [s for s in steps if s["ratio"] is not None]
        no_ratio += len(steps) - len(with_ratio)
        total += len(steps)
        shaped_steps += sum(1 for s in steps if s["shaped"] > 0)
        step_ratios += [s["ratio"] for s in with_ratio]
        if with_ratio:
            pooled[seed] = sum(s["var_ibpo"] for s in with_ratio) / sum(s["var_gspo"] for s in with_ratio)
    values = np.array(list(pooled.values()))
    mean = t_interval(values)
    logs = t_interval(np.log(values))
    return {"seeds": len(values), "steps": total, "steps_without_ratio": no_ratio, "steps_with_shaping": shaped_steps,
            "per_seed_pooled_ratio": pooled,
            "mean_ratio": [mean.mean, mean.low, mean.high],
            "geometric_mean_ratio": [math.exp(logs.mean), math.exp(logs.low), math.exp(logs.high)],
            "median_step_ratio": float(np.median(step_ratios)) if step_ratios else float("nan"),
            "seeds_below_1": int((values < 1).sum())}


def summarise_key(per_seed_steps: dict[int, list[dict]], prefix: str) -> dict:
    """:func:`summarise` of the variances stored under ``prefix`` (``unnorm_``, ``mixed_``, ``all_wrong_unnorm_``,
    ...): per-seed pooled ratios with the same intervals."""
    renamed = {seed: [{"var_gspo": s.get(f"{prefix}var_gspo"), "var_ibpo": s.get(f"{prefix}var_ibpo"),
                       "ratio": s.get(f"{prefix}ratio"), "shaped": s["shaped"]} for s in steps]
               for seed, steps in per_seed_steps.items()}
    return summarise(renamed) if any(s["ratio"] is not None for st in renamed.values() for s in st) else {"seeds": 0}


def summary_lines(summary: dict, steps: int) -> list[str]:
    """The printed summary: each ratio with its t interval over seeds, or the ratio and why there is none
    (``evaluation.stats.interval_text``: one seed, or every seed the same ratio)."""
    from evaluation.stats import interval_text

    def ratio(values: list[float], n: int) -> str:
        return interval_text(values[0], values[1], values[2], n)

    n = summary["seeds"]
    lines = [f"var(IBPO)/var(GSPO), same samples, {n} seeds × {steps} steps: per-seed pooled ratio "
             f"mean {ratio(summary['mean_ratio'], n)} (95% t CI), geometric mean "
             f"{ratio(summary['geometric_mean_ratio'], n)}, median per-step ratio {summary['median_step_ratio']:.3f}; "
             f"seeds below 1: {summary['seeds_below_1']}; steps with a shaped sample "
             f"{summary['steps_with_shaping']}/{summary['steps']}, without a GSPO ratio "
             f"{summary['steps_without_ratio']}"]
    for variant, sub in summary.get("by_kind", {}).items():
        if sub.get("seeds"):
            lines.append(f"  {variant.rstrip('_') or 'all'}: geometric mean ratio "
                         f"{ratio(sub['geometric_mean_ratio'], sub['seeds'])} over {sub['seeds']} seeds")
    return lines


def main(argv: list[str] | None = None) -> int:
    from lab.analysis import toy_loop

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--assets", help="`python -m lab.toy_tasks.warm_start --out DIR` output (its model_sft)")
    source.add_argument("--model", help="a warm-start model directory (e.g. lab/toy_tasks/warm_starts/addition_seed3)")
    p.add_argument("--meta", required=True, help="the equal-compute comparison's meta.json (baseline step FLOPs, hash)")
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    p.add_argument("--steps", type=int, default=7, help="IBPO steps per seed (the comparison's IBPO made ~7.5)")
    p.add_argument("--coordinates", type=int, default=4096, help="weight entries the gradients are projected on")
    p.add_argument("--deadline", type=float, default=None, help="unix time after which no new seed is started")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    meta = json.loads(Path(args.meta).read_text())
    model_dir = args.model or json.loads((Path(args.assets) / "assets.json").read_text())["model"]
    if toy_loop.sha256_of_dir(model_dir) != meta["warm_start_sha256"]:
        print(f"error: the warm start {model_dir} is not the one of {args.meta}", file=sys.stderr)
        return 2
    margs = meta["args"]
    toy = toy_loop.Toy(model_dir, margs["train_size"], margs["test_size"], task=margs.get("task", "addition"))
    arm = toy_loop.default_arms()["IBPO G=n"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    per_seed: dict[int, list[dict]] = {}
    for seed in args.seeds:
        path = out / f"probe_s{seed}.json"
        if not path.exists():
            if args.deadline and time.time() > args.deadline:
                print(f"[grad_probe] deadline reached before seed {seed}", flush=True)
                break
            # budget inf with one milestone: exactly --steps steps, no test evaluation
            result = toy_loop.run(toy, arm, seed, float("inf"), margs["n"], margs["batch_size"], margs["lr"],
                                  margs["warmup_steps"] * meta["baseline_step_flops"], max_steps=args.steps,
                                  milestones=(1.0,), step_hook=ProbeHook(args.coordinates, lam=arm.ibpo.lam))
            path.write_text(json.dumps([{"step": s["step"], "reward": s["reward"], **s["hook"]}
                                        for s in result["steps"]]))
        per_seed[seed] = json.loads(path.read_text())
        print(f"[grad_probe] seed {seed}: ratios " + " ".join(
            "n/a" if s["ratio"] is None else f"{s['ratio']:.2f}" for s in per_seed[seed]), flush=True)
    summary = summarise(per_seed)
    summary["by_kind"] = {variant: summarise_key(per_seed, variant) for variant in
                          ("unnorm_", "mixed_", "mixed_unnorm_", "all_wrong_", "all_wrong_unnorm_")}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(summary_lines(summary, args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
