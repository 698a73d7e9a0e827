#!/usr/bin/env python
"""Training reward and evaluation accuracy against training compute for several runs (the paper's Figure 2),
and the compute each run needs to reach a training-reward threshold, normalised to a baseline run (Table 2).

    python scripts/plot_curves.py --run GSPO=logs/gspo.jsonl --run IBPO=logs/ibpo.jsonl \
        --baseline GSPO --threshold 0.75 --out figures/fig2.png --table figures/table2.md

Logs: verl's ``file`` logger (``trainer.logger=['console','file']``; one JSON object per line,
``{"step": int, "data": {metric: value}}``, at ``$VERL_FILE_LOGGER_PATH`` or
``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``), or a ``tensorboard`` log directory
(``$TENSORBOARD_DIR`` or ``tensorboard_log/<project>/<experiment>``; read with tensorboard's
``EventAccumulator``).

x axis (``--x``, default ``ibpo/compute/total_flops``): a cumulative compute counter. A record without it
(verl logs the validation before the first step on its own line) takes the last value logged before it,
0 before any. ``--x step`` plots against the step. y: ``--reward-key`` (default ``ibpo/raw_score_mean``: the verifier
reward of the main responses only; verl's ``critic/score/mean`` also averages joint-training correction
rows, so it is not comparable between IBPO and the baseline) and
every ``--eval-key`` (default: all ``val-core/<data source>/acc/mean@N`` keys found in the logs).

Threshold (**Decision**): the training reward is smoothed by a trailing moving average of ``--smooth``
logged points (a single lucky batch should not count), and the compute at which the smoothed curve first
reaches the threshold is interpolated linearly between the two logged points around the crossing.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

DEFAULT_X = "ibpo/compute/total_flops"
DEFAULT_REWARD = "ibpo/raw_score_mean"
EVAL_KEY_PATTERN = re.compile(r"^val-core/(?P<source>.+)/acc/mean@(?P<n>\d+)$")


@dataclass(frozen=True)
class Record:
    step: int
    data: dict[str, float]


def read_file_log(path: str | Path) -> list[Record]:
    """Records of a verl file-logger JSONL; a bad line is a ``ValueError`` naming the file and line."""
    path = Path(path)
    records = []
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {line_no}: not JSON ({exc})") from exc
            if not isinstance(obj, dict) or "step" not in obj or not isinstance(obj.get("data"), dict):
                raise ValueError(f"{path}, line {line_no}: expected {{'step': int, 'data': {{...}}}} (verl file logger)")
            values = {k: float(v) for k, v in obj["data"].items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)}
            records.append(Record(int(obj["step"]), values))
    if not records:
        raise ValueError(f"{path}: no records")
    return records


def read_tensorboard_log(directory: str | Path) -> list[Record]:
    """Scalars of a tensorboard log directory, one record per step."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as exc:
        raise ImportError(f"{directory}: reading tensorboard logs needs the 'tensorboard' package") from exc
    acc = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    acc.Reload()
    by_step: dict[int, dict[str, float]] = {}
    for tag in acc.Tags().get("scalars", []):
        for event in acc.Scalars(tag):
            by_step.setdefault(int(event.step), {})[tag] = float(event.value)
    if not by_step:
        raise ValueError(f"{directory}: no tensorboard scalars found")
    return [Record(step, by_step[step]) for step in sorted(by_step)]


def read_log(path: str | Path) -> list[Record]:
    """A file-logger JSONL (a file) or a tensorboard directory."""
    path = Path(path)
    if path.is_dir():
        return read_tensorboard_log(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such log file or directory")
    return read_file_log(path)


def series(records: Iterable[Record], y_key: str, x_key: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of every record holding ``y_key``, in log order. x is the step for ``x_key == 'step'``, else the
    cumulative counter carried forward from the last record that had it (0 before the first)."""
    xs, ys = [], []
    last_x = 0.0
    for rec in records:
        if x_key != "step" and x_key in rec.data:
            last_x = rec.data[x_key]
        if y_key in rec.data and math.isfinite(rec.data[y_key]):
            xs.append(float(rec.step) if x_key == "step" else last_x)
            ys.append(rec.data[y_key])
    return np.asarray(xs), np.asarray(ys)


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at every position (fewer at the start)."""
    if window < 1:
        raise ValueError(f"--smooth={window} must be >= 1")
    csum = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - window)
    return (csum[idx] - csum[lo]) / (idx - lo)


def compute_to_threshold(x: np.ndarray, y: np.ndarray, threshold: float, window: int) -> float:
    """Compute at which the trailing-mean reward first reaches ``threshold`` (linear interpolation between the
    logged points around the crossing); ``nan`` if it never does."""
    if x.size == 0:
        return float("nan")
    smooth = trailing_mean(y, window)
    hits = np.nonzero(smooth >= threshold)[0]
    if hits.size == 0:
        return float("nan")
    j = int(hits[0])
    if j == 0 or smooth[j] == smooth[j - 1]:
        return float(x[j])
    frac = (threshold - smooth[j - 1]) / (smooth[j] - smooth[j - 1])
    return float(x[j - 1] + frac * (x[j] - x[j - 1]))


def discover_eval_keys(runs: dict[str, list[Record]]) -> list[str]:
    keys = {k for recs in runs.values() for r in recs for k in r.data if EVAL_KEY_PATTERN.match(k)}
    return sorted(keys)


def threshold_table(runs: dict[str, list[Record]], baseline: str, reward_key: str, x_key: str, threshold: float,
                    window: int) -> tuple[str, dict[str, dict]]:
    """Markdown table (Table 2) and the numbers: compute to the threshold, and its ratio to the baseline's."""
    numbers = {}
    for label, recs in runs.items():
        x, y = series(recs, reward_key, x_key)
        numbers[label] = {"compute": compute_to_threshold(x, y, threshold, window),
                          "final_reward": float(y[-1]) if y.size else float("nan"), "points": int(y.size)}
    base = numbers[baseline]["compute"]
    lines = [f"| run | {x_key} to reach {reward_key} >= {threshold} (trailing mean of {window}) | relative to {baseline} |",
             "|---|---:|---:|"]
    for label, n in numbers.items():
        n["relative"] = n["compute"] / base if math.isfinite(base) and base > 0 and math.isfinite(n["compute"]) else float("nan")
        reached = f"{n['compute']:.4g}" if math.isfinite(n["compute"]) else f"not reached (final {n['final_reward']:.3f})"
        rel = f"{n['relative']:.2f}" if math.isfinite(n["relative"]) else "-"
        lines.append(f"| {label} | {reached} | {rel} |")
    return "\n".join(lines), numbers


def plot(runs: dict[str, list[Record]], reward_key: str, eval_keys: list[str], x_key: str, threshold: float | None,
         window: int, out: Path) -> None:
    """One PNG: the training-reward panel, then one panel per evaluation key; every run on every panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [reward_key] + eval_keys
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.0), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key in zip(axes[0], panels):
        for i, (label, recs) in enumerate(runs.items()):
            x, y = series(recs, key, x_key)
            if not x.size:
                continue
            color = colors[i % len(colors)]
            if key == reward_key and window > 1:
                ax.plot(x, y, color=color, alpha=0.25, linewidth=1)
                ax.plot(x, trailing_mean(y, window), color=color, label=label, linewidth=2)
            else:
                ax.plot(x, y, color=color, label=label, linewidth=2, marker="o" if x.size < 30 else None)
        if key == reward_key and threshold is not None:
            ax.axhline(threshold, color="grey", linestyle="--", linewidth=1, label=f"threshold {threshold}")
        match = EVAL_KEY_PATTERN.match(key)
        title = f"eval: {match['source']} (mean@{match['n']})" if match else f"training reward ({key})"
        ax.set_title(title)
        ax.set_xlabel("training compute" + (f" ({x_key})" if x_key != "step" else " (step)"))
        ax.set_ylabel("accuracy" if match else "reward")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def parse_runs(specs: list[str]) -> dict[str, list[Record]]:
    runs: dict[str, list[Record]] = {}
    for spec in specs:
        # labels may contain '=' ("GSPO G=64"): split at the first '=' after which an existing path follows
        cuts = [i for i, ch in enumerate(spec) if ch == "="]
        cut = next((i for i in cuts if Path(spec[i + 1:]).exists()), cuts[0] if cuts else -1)
        label, path = (spec[:cut], spec[cut + 1:]) if cut >= 0 else ("", "")
        if not label or not path:
            raise ValueError(f"--run {spec!r}: expected LABEL=PATH")
        if label in runs:
            raise ValueError(f"--run label {label!r} given twice")
        runs[label] = read_log(path)
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", action="append", required=True, help="LABEL=PATH (file-logger .jsonl or tensorboard dir)")
    p.add_argument("--baseline", help="label of the baseline run (default: the first --run)")
    p.add_argument("--x", default=DEFAULT_X, help=f"compute counter (default {DEFAULT_X}; 'step' for steps)")
    p.add_argument("--reward-key", default=DEFAULT_REWARD)
    p.add_argument("--eval-key", action="append", help="evaluation metric(s) (default: all val-core/*/acc/mean@N)")
    p.add_argument("--threshold", type=float, default=0.75, help="training-reward threshold (paper: e.g. 0.75)")
    p.add_argument("--smooth", type=int, default=5, help="trailing-mean window for the reward (points)")
    p.add_argument("--out", required=True, help="PNG path")
    p.add_argument("--table", help="also write the threshold table (Markdown) here, and its numbers as .json")
    args = p.parse_args(argv)
    try:
        runs = parse_runs(args.run)
        baseline = args.baseline or next(iter(runs))
        if baseline not in runs:
            raise ValueError(f"--baseline {baseline!r} is not one of the runs {list(runs)}")
        for label, recs in runs.items():
            if not series(recs, args.reward_key, args.x)[0].size:
                raise ValueError(f"run {label!r}: no record has {args.reward_key!r}")
            if args.x != "step" and not any(args.x in r.data for r in recs):
                raise ValueError(f"run {label!r}: no record has the compute counter {args.x!r} (use --x step?)")
        eval_keys = args.eval_key or discover_eval_keys(runs)
        plot(runs, args.reward_key, eval_keys, args.x, args.threshold, args.smooth, Path(args.out))
        table, numbers = threshold_table(runs, baseline, args.reward_key, args.x, args.threshold, args.smooth)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table)
    print(f"\nwrote {args.out} (panels: {[args.reward_key] + eval_keys})")
    if args.table:
        Path(args.table).write_text(table + "\n", encoding="utf-8")
        Path(args.table).with_suffix(".json").write_text(json.dumps(numbers, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
