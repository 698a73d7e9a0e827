"""The ablation's small pieces that both its runner (:mod:`lab.analysis.ablation`) and its tables
(:mod:`lab.analysis.ablation_report`) use: the command line's seed and warm-start lists, and the stratified paired
difference over warm starts (the pooled statistic of ``docs/evidence.md``, "When does IBPO pay?"). Neither of
those two modules imports the other's internals: both import this one."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from evaluation.stats import student_t_quantile, t_test_p_value


def parse_seeds(spec: list[str]) -> list[int]:
    """``['0-29']`` or ``['0', '1', '5-7']`` → the seeds, in order. A malformed item (not ``N`` or ``LO-HI`` with
    0 <= LO <= HI), a seed given twice or an empty list stops here, naming ``--seeds`` and the item."""
    seeds: list[int] = []
    for item in spec:
        lo, sep, hi = item.strip().partition("-")
        if not (lo.isdigit() and (hi.isdigit() if sep else True)):
            raise SystemExit(f"--seeds {item!r}: expected a seed N or a range LO-HI of non-negative integers")
        if sep and int(hi) < int(lo):
            raise SystemExit(f"--seeds {item!r}: the range is empty ({hi} < {lo}); write LO-HI with LO <= HI")
        new = list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
        twice = sorted(set(new) & set(seeds))
        if twice:
            raise SystemExit(f"--seeds {item!r}: seed {twice[0]} is given twice")
        seeds += new
    if not seeds:
        raise SystemExit("--seeds: no seed given")
    return seeds


def parse_warm_starts(items: list[str]) -> dict[str, str]:
    """``NAME=MODEL_DIR`` pairs, in the order given; a malformed pair, a missing directory, or a name or model
    directory given twice (its seeds would count as two warm starts') stops here."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--warm-start {item!r}: expected NAME=MODEL_DIR")
        if not (Path(path) / "config.json").is_file():
            raise SystemExit(f"--warm-start {item!r}: {path} holds no model (no config.json)")
        if name in out:
            raise SystemExit(f"--warm-start {item!r}: the name {name!r} is given twice")
        same = [n for n, other in out.items() if Path(other).resolve() == Path(path).resolve()]
        if same:
            raise SystemExit(f"--warm-start {item!r}: {path} is already given as {same[0]!r} (one warm start, two names)")
        out[name] = path
    return out


def stratified_difference(per_stratum: list[tuple[float, float, int]], alpha: float = 0.05) -> dict[str, float]:
    """Pooled paired difference over strata given (mean difference, SD of the differences, seeds) per stratum.

    Estimate: the unweighted mean of the stratum means (each warm start counts once); variance Σ s_w²/n_w / W²;
    degrees of freedom by Welch-Satterthwaite; two-sided t test and (1 − alpha) interval. ``seeds``: the seeds of
    the strata used (strata with fewer than two seeds, or no SD, are left out). Every stratum with SD 0: the
    interval has width 0 and p is undefined (NaN, ``evaluation.stats.t_test_p_value``)."""
    strata = [(d, sd, n) for d, sd, n in per_stratum if n >= 2 and math.isfinite(sd)]
    if not strata:
        return {"diff": float("nan"), "low": float("nan"), "high": float("nan"), "p_value": float("nan"),
                "df": float("nan"), "strata": 0, "seeds": 0}
    w = len(strata)
    seeds = int(sum(n for _, _, n in strata))
    diff = float(np.mean([d for d, _, _ in strata]))
    var_terms = [sd * sd / n / (w * w) for _, sd, n in strata]
    var = float(sum(var_terms))
    denominator = sum(v * v / (n - 1) for v, (_, _, n) in zip(var_terms, strata))
    # Welch-Satterthwaite, rounded down (conservative; evaluation_stats' t distribution takes integer df)
    df = max(1, math.floor(var * var / denominator)) if denominator > 0 else sum(n - 1 for _, _, n in strata)
    se = math.sqrt(var)
    p = t_test_p_value(diff, se, df)
    if se == 0:
        return {"diff": diff, "low": diff, "high": diff, "p_value": p, "df": df, "strata": w, "seeds": seeds}
    crit = student_t_quantile(1 - alpha / 2, df)
    return {"diff": diff, "low": diff - crit * se, "high": diff + crit * se, "p_value": p, "df": df,
            "strata": w, "seeds": seeds}
