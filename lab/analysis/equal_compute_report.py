"""The equal-compute comparison's tables and figure from ``lab.analysis.toy_loop`` results (one JSON per arm and
seed): paired differences to the baseline with Student-t intervals over seeds, compute to a training-reward
threshold, optimizer updates, seconds per phase, a collapse check and the credit-localisation table.

Statistics (``evaluation.stats``): a seed is the unit; arm A and the baseline B of seed s share the
warm start, data order and sampling streams, so the comparison is the paired t over A_s − B_s. The "95% CI"
labels are on t-intervals only (their coverage is checked by simulation in the tests).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from lab.analysis.credit_localisation import Localisation, summarise
from evaluation.stats import (
    interval_text,
    p_value_text,
    paired_difference,
    seeds_for_power,
    student_t_cdf,
    student_t_quantile,
    t_interval,
)

PHASES = ("main_gen", "score", "correction_gen", "ibpo_host", "update", "eval")


def read_json_object(path: Path) -> dict:
    """The JSON object in ``path``; a file that is not readable JSON (a run killed mid-write) or not an object is
    a ``ValueError`` naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not readable JSON ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                         "a run stopped while writing it?") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def load_results(out: str | Path) -> tuple[dict, dict[str, dict[int, dict]]]:
    """``meta.json`` and ``{arm: {seed: result}}`` under ``out``; a folder without ``meta.json`` is a
    ``FileNotFoundError``, a result that is not readable JSON or lacks its ``arm`` / ``seed`` a ``ValueError``,
    each naming the file."""
    out = Path(out)
    if not (out / "meta.json").is_file():
        raise FileNotFoundError(f"{out / 'meta.json'}: no such file; {out} is not an lab.analysis.toy_loop output folder "
                                "(or no run has started there)")
    meta = read_json_object(out / "meta.json")
    results: dict[str, dict[int, dict]] = {}
    for path in sorted(out.glob("*_s*.json")):
        r = read_json_object(path)
        try:
            seed = int(r["seed"])
        except (KeyError, TypeError, ValueError):
            seed = None
        if not isinstance(r.get("arm"), str) or seed is None:
            raise ValueError(f"{path}: not an lab.analysis.toy_loop result (expected a string 'arm' and an integer "
                             f"'seed', got arm={r.get('arm')!r:.60}, seed={r.get('seed')!r:.60})")
        check_accuracies(r, path)
        results.setdefault(r["arm"], {})[seed] = r
    return meta, results


def check_accuracies(result: dict, path: Path) -> None:
    """Every evaluation of a result has an accuracy in [0, 1]; a NaN, missing or out-of-range one (JSON allows
    ``NaN``) is a ``ValueError`` naming the file and the milestone, not a NaN that a mean or a line carries silently
    into a table, or an error in a t-test that names no run."""
    for e in result.get("evals", []):
        acc = e.get("accuracy") if isinstance(e, dict) else None
        ok = isinstance(acc, (int, float)) and not isinstance(acc, bool) and 0.0 <= acc <= 1.0
        if not ok:
            milestone = e.get("milestone") if isinstance(e, dict) else None
            raise ValueError(f"{path}: the evaluation at milestone {milestone!r} has accuracy {acc!r:.60}; "
                             "expected a number in [0, 1]")


def paired_power(sd_diff: float, effect: float, seeds: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test for a true difference ``effect`` (t approximation of the
    noncentral t: P(T_{n−1} > t_crit − effect·√n/sd))."""
    if seeds < 2 or not sd_diff > 0:
        return float("nan")
    crit = student_t_quantile(1 - alpha / 2, seeds - 1)
    return float(1.0 - student_t_cdf(crit - effect * math.sqrt(seeds) / sd_diff, seeds - 1))


def seeds_needed(sd_diff: float, effect: float, max_seeds: int = 100_000) -> int | str | None:
    """The seeds for 80% power at ``effect`` given the observed SD of Δ (``seeds_for_power``); ``"> max_seeds"``
    when more are needed than it searches; ``None`` (printed ``-``) without a positive observed SD (one seed, or
    every seed's Δ the same: an SD of 0 promises nothing, as ``paired_power`` says too)."""
    if not sd_diff > 0:
        return None
    n = seeds_for_power(sd_diff, effect, max_seeds=max_seeds)
    return f"> {max_seeds}" if n is None else n


def compute_to_threshold(steps: list[dict], threshold: float, window: int) -> float:
    """FLOPs at the first step whose trailing mean (``window`` steps, full windows) of the training reward
    reaches ``threshold``; inf when never."""
    rewards = np.array([s["reward"] for s in steps])
    for i in range(window - 1, len(steps)):
        if rewards[i - window + 1:i + 1].mean() >= threshold:
            return float(steps[i]["flops"])
    return float("inf")


def _k(result: dict, window: int) -> int:
    return max(1, min(window, len(result["steps"]) // 2))


def _eval_at(result: dict, milestone: float) -> dict | None:
    return next((e for e in result["evals"] if abs(e["milestone"] - milestone) < 1e-9), None)


def summarise_runs(meta: dict, results: dict[str, dict[int, dict]], baseline: str, effect: float = 0.05,
                   threshold: float = 0.5, window: int = 5) -> dict:
    """Everything the tables print, as a dict (also written to ``summary.json``)."""
    base = results[baseline]
    milestones = sorted({e["milestone"] for r in base.values() for e in r["evals"]})
    summary: dict = {"baseline": baseline, "budget_flops": meta["budget_flops"], "effect": effect,
                     "warm_start_sha256": meta["warm_start_sha256"], "command": meta["command"],
                     "warm_start_test_accuracy": meta["warm_start_test_accuracy"], "arms": {}}
    for arm, runs in results.items():
        seeds = sorted(s for s in runs if s in base)
        entry: dict = {"seeds": len(seeds), "milestones": {}}
        for m in milestones:
            pairs = [(_eval_at(runs[s], m), _eval_at(base[s], m)) for s in seeds]
            pairs = [(a, b) for a, b in pairs if a and b]
            if not pairs:
                continue
            acc = [a["accuracy"] for a, _ in pairs]
            d = paired_difference(acc, [b["accuracy"] for _, b in pairs])
            entry["milestones"][m] = {
                "accuracy": t_interval(acc).as_dict(), "diff": d.as_dict(),
                "flops": float(np.mean([a["flops"] for a, _ in pairs])),
                "steps": float(np.mean([a["step"] for a, _ in pairs])),
                "power_for_effect": paired_power(d.sd_diff, effect, d.seeds),
                "seeds_for_80pct_power": seeds_needed(d.sd_diff, effect),
            }
        final = [runs[s] for s in seeds]
        reach = [compute_to_threshold(r["steps"], threshold, window) for r in final]
        reached = [x for x in reach if math.isfinite(x)]
        entry["compute_to_threshold"] = {"threshold": threshold, "reached": len(reached), "of": len(reach),
                                         **(t_interval(reached).as_dict() if reached else {})}
        entry["optimizer_updates"] = float(np.mean([sum(s["updates"] for s in r["steps"]) for r in final]))
        entry["steps"] = float(np.mean([len(r["steps"]) for r in final]))
        entry["seconds_per_step"] = {p: float(np.mean([np.mean([s["time"].get(p, 0.0) for s in r["steps"]])
                                                      for r in final])) for p in PHASES}
        entry["wall_s"] = float(np.mean([r.get("wall_s", float("nan")) for r in final]))
        # collapse: training reward rises (last window vs first window) while test accuracy falls below the warm start
        # (k = min(window, steps // 2) so the two windows never overlap: an arm with 3 steps compares step 1 with 3)
        rises = [np.mean([s["reward"] for s in r["steps"][-_k(r, window):]])
                 - np.mean([s["reward"] for s in r["steps"][:_k(r, window)]]) for r in final]
        falls = [r["evals"][-1]["accuracy"] - meta["warm_start_test_accuracy"] for r in final]
        entry["collapse"] = {"train_reward_change": t_interval(rises).as_dict(), "test_change": t_interval(falls).as_dict(),
                             "seeds_reward_up_test_down": int(sum(1 for a, b in zip(rises, falls) if a > 0 and b < 0))}
        locs = [(x["step"], Localisation(**{k: x[k] for k in ("modified", "wrong", "overlap", "covers_first_error",
                                                              "copy_of_reference", "reference_right")}), x["shaped"])
                for r in final for x in r.get("localisation", [])]
        if locs:
            entry["localisation"] = {
                "reference right": summarise([l for _, l, _ in locs if l.reference_right]),
                "reference wrong (control)": summarise([l for _, l, _ in locs if not l.reference_right]),
                "not a copy of the reference": summarise([l for _, l, _ in locs if not l.copy_of_reference]),
                "shaped only": summarise([l for _, l, sh in locs if sh]),
                "by_step": {str(lo): summarise([l for st, l, _ in locs if lo <= st < lo + 5])
                            for lo in range(1, max(st for st, _, _ in locs) + 1, 5)},
                "shaped_share": float(np.mean([sh for _, _, sh in locs])),
            }
        summary["arms"][arm] = entry
    return summary


def per_run_rows(results: dict[str, dict[int, dict]]) -> list[dict]:
    """One row per (arm, seed): steps, FLOPs and test accuracy at every milestone, wall seconds; enough to
    recompute the paired differences without the per-run JSONs (``runs.csv``, kept with the published table)."""
    milestones = sorted({e["milestone"] for runs in results.values() for r in runs.values() for e in r["evals"]
                         if e["milestone"] is not None})
    rows = []
    for arm, runs in results.items():
        for seed, r in sorted(runs.items()):
            row = {"arm": arm, "seed": seed, "steps": len(r["steps"]), "flops": r["steps"][-1]["flops"] if r["steps"] else 0.0,
                   "wall_s": round(float(r.get("wall_s", float("nan"))), 1)}
            for m in milestones:
                e = _eval_at(r, m)
                row[f"accuracy_at_{m:g}"] = e["accuracy"] if e else None
                row[f"step_at_{m:g}"] = e["step"] if e else None
            rows.append(row)
    return rows


def write_runs_csv(results: dict[str, dict[int, dict]], path: str | Path) -> Path:
    """``per_run_rows`` as CSV."""
    import csv

    rows = per_run_rows(results)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["arm", "seed"])
        writer.writeheader()
        writer.writerows(rows)
    return Path(path)


def _f(x: float, fmt: str = "{:.3f}") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def _accuracy_text(acc: dict) -> str:
    """A test accuracy over seeds (``t_interval``) with its interval, or why there is none."""
    return interval_text(acc["mean"], acc["low"], acc["high"], acc["seeds"], bounds=(0.0, 1.0))


def _diff_text(d: dict) -> str:
    """A paired Δ over seeds (``paired_difference``) with its interval, or why there is none."""
    return interval_text(d["diff"], d["low"], d["high"], d["seeds"], "{:+.3f}", bounds=(-1.0, 1.0))


def _change_text(c: dict) -> str:
    """A change over seeds (``t_interval``) with its interval, or why there is none."""
    return interval_text(c["mean"], c["low"], c["high"], c["seeds"], "{:+.3f}")


def _equal_compute_table(summary: dict) -> list[str]:
    """The header and the table at the full budget."""
    base = summary["baseline"]
    budget = summary["budget_flops"]
    last = max(max(e["milestones"], key=float) for e in summary["arms"].values() if e["milestones"])
    lines = [f"Warm start sha256 `{summary['warm_start_sha256']}`; test accuracy of the warm start "
             f"{summary['warm_start_test_accuracy']:.3f}; FLOP budget {budget:.3g}.",
             f"Runs: `{summary['command']}`" + (f"; table: `{summary['report_command']}`" if summary.get("report_command") else ""), "",
             f"**At equal compute (the full budget, {budget:.3g} FLOPs).** Test accuracy: greedy, on the held-out "
             f"test problems; Δ: paired difference to {base} over seeds (same seed = same warm start, data order "
             f"and sampling streams), 95% Student-t CI; power: of the paired t-test for a true Δ of "
             f"{summary['effect']:.2f} with this many seeds and the observed SD of Δ.", "",
             "| arm | seeds | steps | optimizer updates | FLOPs at eval (× budget) | test accuracy [95% CI] | "
             f"Δ vs {base} [95% CI] | p (paired t) | SD of Δ | corr. with {base} | power for Δ = "
             f"{summary['effect']:.2f} | seeds for 80% | FLOPs to train reward ≥ thr. (seeds reached) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, e in summary["arms"].items():
        m = e["milestones"].get(last)
        if not m:
            continue
        acc, d = m["accuracy"], m["diff"]
        ct = e["compute_to_threshold"]
        reach = (f"{interval_text(ct['mean'], ct['low'], ct['high'], ct['reached'], '{:.3g}')} "
                 f"({ct['reached']}/{ct['of']})") if ct["reached"] else f"not reached (0/{ct['of']})"
        is_base = arm == base
        lines.append(
            f"| {arm} | {e['seeds']} | {e['steps']:.1f} | {e['optimizer_updates']:.1f} | {m['flops']:.3g} "
            f"({m['flops'] / budget:.2f}) | {_accuracy_text(acc)} | "
            + ("—" if is_base else _diff_text(d))
            + f" | {'—' if is_base else p_value_text(d['p_value'])} | {'—' if is_base else _f(d['sd_diff'])} | "
            f"{'—' if is_base else _f(d['correlation'], '{:.2f}')} | {'—' if is_base else _f(m['power_for_effect'], '{:.2f}')} | "
            f"{'—' if is_base else (m['seeds_for_80pct_power'] or '-')} | {reach} |")
    return lines


def _milestone_table(summary: dict) -> list[str]:
    """Paired Δ vs the baseline at every compute milestone."""
    base = summary["baseline"]
    lines: list[str] = []
    lines += ["", f"**Paired Δ vs {base} at every compute milestone** (test accuracy, 95% Student-t CI over seeds):", "",
              "| arm | " + " | ".join(f"{float(k):.2f} × budget" for k in sorted(summary["arms"][base]["milestones"], key=float)) + " |",
              "|---|" + "---:|" * len(summary["arms"][base]["milestones"])]
    for arm, e in summary["arms"].items():
        cells = []
        for k in sorted(summary["arms"][base]["milestones"], key=float):
            m = e["milestones"].get(k)
            if not m:
                cells.append("-")
            elif arm == base:
                cells.append(f"{m['accuracy']['mean']:.3f} (acc.)")
            else:
                cells.append(_diff_text(m["diff"]))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines


def _phase_table(summary: dict) -> list[str]:
    """Seconds per step by phase, and wall time per run."""
    lines: list[str] = []
    lines += ["", "**Seconds per step by phase** (mean over steps and seeds, one CPU thread; eval: the milestone "
              "evaluations, averaged over all steps), and wall time per run:", "",
              "| arm | " + " | ".join(PHASES) + " | step total | run wall s |", "|---|" + "---:|" * (len(PHASES) + 2)]
    for arm, e in summary["arms"].items():
        sp = e["seconds_per_step"]
        lines.append(f"| {arm} | " + " | ".join(f"{sp[p]:.2f}" for p in PHASES)
                     + f" | {sum(sp.values()):.2f} | {e['wall_s']:.0f} |")
    return lines


def _collapse_table(summary: dict) -> list[str]:
    """Training reward and test accuracy changes per arm."""
    lines: list[str] = []
    lines += ["", "**Collapse check** (training reward: mean of the last k steps minus the first k, k = min(5, steps/2); test: final minus "
              "the warm start; mean [95% t CI]; seeds whose training reward rose while test accuracy fell below the "
              "warm start):", "", "| arm | training reward change | test accuracy change | seeds reward ↑ test ↓ |",
              "|---|---:|---:|---:|"]
    for arm, e in summary["arms"].items():
        c = e["collapse"]
        r, t = c["train_reward_change"], c["test_change"]
        lines.append(f"| {arm} | {_change_text(r)} | {_change_text(t)} | "
                     f"{c['seeds_reward_up_test_down']}/{e['seeds']} |")
    return lines


def _localisation_tables(summary: dict) -> list[str]:
    """Credit localisation of the arms that measured it (none: no lines)."""
    lines: list[str] = []
    loc_arms = [(a, e) for a, e in summary["arms"].items() if "localisation" in e]
    if loc_arms:
        lines += ["", "**Credit localisation** (every right correction of a wrong response, all seeds and steps; M = tokens "
                  "the alignment marks modified, what IBPO-mask trains; W = tokens a minimal edit into the right worked "
                  "solution changes; precision |M∩W|/|M|, recall |M∩W|/|W|; first error covered: every wrong token of "
                  "the first wrong line is in M; copy: the correction is token for token the reference it was shown):", "",
                  "| arm | corrections of | count | precision | recall | first error covered | copy of reference |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for arm, e in loc_arms:
            for kind in ("reference right", "reference wrong (control)", "not a copy of the reference", "shaped only"):
                s = e["localisation"][kind]
                lines.append(f"| {arm} | {kind} | {s['count']} | {_f(s['precision'])} | {_f(s['recall'])} | "
                             f"{_f(s['covers_first_error'])} | {_f(s['copy_of_reference'])} |")
        lines += ["", "Per step (steps k..k+4, all right corrections):", "",
                  "| arm | steps from | count | precision | recall | first error covered | copy of reference |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for arm, e in loc_arms:
            for lo, s in e["localisation"]["by_step"].items():
                lines.append(f"| {arm} | {lo} | {s['count']} | {_f(s['precision'])} | {_f(s['recall'])} | "
                             f"{_f(s['covers_first_error'])} | {_f(s['copy_of_reference'])} |")
    return lines


def format_report(summary: dict) -> str:
    """Markdown: the equal-compute table, differences at every milestone, phases, collapse, localisation."""
    return "\n".join(_equal_compute_table(summary) + _milestone_table(summary) + _phase_table(summary)
                     + _collapse_table(summary) + _localisation_tables(summary))


def plot(summary: dict, results: dict[str, dict[int, dict]], path: str | Path) -> None:
    """Test accuracy at the compute milestones (seed mean, band = 95% Student-t CI over seeds) and the training
    reward against FLOPs (per step index, the seed mean of the reward at the seed-mean FLOPs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    budget = summary["budget_flops"]
    for arm, e in summary["arms"].items():
        ks = sorted(e["milestones"], key=float)
        x = [0.0] + [e["milestones"][k]["flops"] / budget for k in ks]
        y = [summary["warm_start_test_accuracy"]] + [e["milestones"][k]["accuracy"]["mean"] for k in ks]
        lo = [y[0]] + [e["milestones"][k]["accuracy"]["low"] for k in ks]
        hi = [y[0]] + [e["milestones"][k]["accuracy"]["high"] for k in ks]
        line, = ax1.plot(x, y, marker="o", label=f"{arm} ({e['seeds']} seeds)")
        ax1.fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
        # per step index k: mean over the seeds that ran step k of its FLOPs and of its training reward
        runs = list(results[arm].values())
        longest = max(len(r["steps"]) for r in runs)
        xs, ys = [], []
        for k in range(longest):
            at = [r["steps"][k] for r in runs if len(r["steps"]) > k]
            xs.append(float(np.mean([s["flops"] for s in at])) / budget)
            ys.append(float(np.mean([s["reward"] for s in at])))
        ax2.plot(xs, ys, marker=".", color=line.get_color(), label=arm)
    ax1.set_xlabel("training compute (× budget)")
    ax1.set_ylabel("greedy test accuracy")
    ax1.set_title("test accuracy; band: 95% Student-t CI over seeds")
    ax2.set_xlabel("training compute (× budget)")
    ax2.set_ylabel("training reward (sampled)")
    ax2.set_title("training reward (sampled), seed mean per step")
    ax1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit("lab.analysis.equal_compute_report is the equal-compute tables' module, not a command: "
             'run `python lab/scripts/compare_methods.py --report-only --out OUT ...` (it prints these tables)')
