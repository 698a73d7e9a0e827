#!/usr/bin/env python
"""Training reward and evaluation accuracy against training compute for several runs (the paper's Figure 2),
and the compute each run needs to reach a training-reward threshold, normalised to a baseline run (Table 2).

    python -m evaluation.plot_curves --run GSPO=logs/gspo.jsonl --run IBPO=logs/ibpo.jsonl \
        --baseline GSPO --threshold 0.75 --out figures/fig2.png --table figures/table2.md
    python -m evaluation.plot_curves --run GSPO=s0/gspo.jsonl --run GSPO=s1/gspo.jsonl \
        --run IBPO=s0/ibpo.jsonl --run IBPO=s1/ibpo.jsonl --x step --out fig.png   # seeds of one method

A label given several times names the seeds of one method: the method gets one colour, its seeds thin
lines, their mean a thick line and a band of the 95% Student-t CI of the mean over seeds (mean ± t·sd/√n at
every point; curves first interpolated onto a common x grid).

Logs: verl's ``file`` logger (``trainer.logger=['console','file']``; one JSON object per line,
``{"step": int, "data": {metric: value}}``, at ``$VERL_FILE_LOGGER_PATH`` or
``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``), or a ``tensorboard`` log directory
(``$TENSORBOARD_DIR`` or ``tensorboard_log/<project>/<experiment>``; read with tensorboard's
``EventAccumulator``). A file log whose steps go back (two logs in one file, a run resumed into it) or that logs a
metric twice at one step is an error naming the file and line; a truncated last line is one too.

x axis (``--x``, default ``auto``): a cumulative compute counter. ``auto`` is the axis the runs were matched on:
``compute_budget/<unit>`` when every run was stopped by one compute budget in that unit (the trainer logs
``compute_budget/limit_<unit>``; runs budgeted in different units are an error), otherwise the FLOP counter
(``compute_budget/flops``, which every method's trainer logs, or ``ibpo/compute/total_flops`` in older logs).
A record without it
(verl logs the validation before the first step on its own line) takes the last value logged before it,
0 before any. ``--x step`` plots against the step. y: ``--reward-key`` (default ``ibpo/raw_score_mean``: the verifier
reward of the main responses only; verl's ``critic/score/mean`` also averages joint-training correction
rows, so it is not comparable between IBPO and the baseline) and
every ``--eval-key`` (default: all ``val-core/<data source>/acc/mean@N`` keys found in the logs).

Threshold (**Decision**): the training reward is smoothed by a trailing moving average of ``--smooth``
logged points, defined only once a full window exists (a single lucky first batch must not count as
reaching it), and the compute at which the smoothed curve first reaches the threshold is interpolated
linearly between the two logged points around the crossing. With several seeds the crossing is taken on
the mean of the seeds' smoothed curves (on the common grid); its CI is the Student-t interval over the seeds'
own crossings (shown only when every seed reaches the threshold). Without
``--threshold`` no threshold line is drawn and no table is written.

Nothing is drawn of nothing (**Decision**: errors, exit status 2 with one line, rather than a clamped window
and a warning, because a silently different smoothing changes the threshold numbers): a ``--smooth`` window
longer than a run's logged rewards (the message gives the largest window that works), a ``--eval-key`` no run
logs (the message lists the evaluation keys the logs hold), a panel without one finite point. A run missing
from a panel that others fill is a warning on stderr.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from evaluation.stats import no_interval_reason, student_t_quantile, t_interval

DEFAULT_X = "auto"
FLOP_AXES = ("compute_budget/flops", "ibpo/compute/total_flops")  # unbudgeted runs: the FLOP counter, newest first
DEFAULT_REWARD = "ibpo/raw_score_mean"
EVAL_KEY_PATTERN = re.compile(r"^val-core/(?P<source>.+)/acc/mean@(?P<n>\d+)$")


@dataclass(frozen=True)
class Record:
    step: int
    data: dict[str, float]
    # where it was read ("file, line n"), and the values of the line that are not finite numbers (a string, NaN,
    # a list...): kept out of ``data`` but not forgotten, so a metric the tool uses is refused at them
    # (:func:`check_values`) instead of silently dropped
    where: str = ""
    bad: tuple[tuple[str, str], ...] = field(default=())


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_values(runs: dict[str, list[list[Record]]], keys: Iterable[str], nan_ok: Iterable[str] = ()) -> None:
    """Every logged value of the metrics the tool uses (``keys``) is a finite number: a string or a NaN at some
    step is a ``ValueError`` naming the file, the line and the metric, not a point left out of the curve and the
    table as if that log were complete. ``nan_ok``: metrics where a NaN is only a missing point (evaluation
    panels: a panel or run without a finite point is refused or warned about by :func:`check_panels`), but a
    string or other non-number is still an error."""
    wanted, lenient = set(keys), set(nan_ok)
    for seeds in runs.values():
        for recs in seeds:
            for rec in recs:
                for key, shown in rec.bad:
                    if key in wanted or (key in lenient and shown != "nan"):
                        raise ValueError(f"{rec.where or f'step {rec.step}'}, field {key!r}: {shown} is not a finite "
                                         "number")


def read_file_log(path: str | Path) -> list[Record]:
    """Records of a verl file-logger JSONL; a bad line is a ``ValueError`` naming the file and line, and so are
    steps that go back (two logs in one file, a run resumed into it) and a metric logged twice at one step: the
    curves, their interpolation onto a common grid and the threshold crossing read the records in step order.
    Records of one step with different metrics (verl logs the validation before the first step on its own line)
    are fine."""
    path = Path(path)
    records = []
    last_step, last_line = None, 0
    seen_at_step: dict[str, int] = {}  # metric -> line, at the current step
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
            values = {k: float(v) for k, v in obj["data"].items() if _is_number(v) and math.isfinite(v)}
            bad = tuple((k, repr(v)[:60]) for k, v in obj["data"].items() if k not in values)
            try:
                step = int(obj["step"])
            except (TypeError, ValueError):
                raise ValueError(f"{path}, line {line_no}, field 'step': {obj['step']!r:.60} is not an integer") \
                    from None
            if last_step is not None and step < last_step:
                raise ValueError(f"{path}, line {line_no}: step {step} after step {last_step} (line {last_line}): the "
                                 "steps go back (two logs in one file, or a run resumed into it?)")
            if step != last_step:
                seen_at_step = {}
            again = next((k for k in obj["data"] if k in seen_at_step), None)
            if again is not None:
                raise ValueError(f"{path}, line {line_no}, field {again!r}: logged again at step {step} (line "
                                 f"{seen_at_step[again]}): a step logged twice")
            seen_at_step.update({k: line_no for k in obj["data"]})
            last_step, last_line = step, line_no
            records.append(Record(step, values, f"{path}, line {line_no}", bad))
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
    bad: dict[int, list[tuple[str, str]]] = {}
    for tag in acc.Tags().get("scalars", []):
        for event in acc.Scalars(tag):
            value = float(event.value)
            if math.isfinite(value):
                by_step.setdefault(int(event.step), {})[tag] = value
            else:
                by_step.setdefault(int(event.step), {})
                bad.setdefault(int(event.step), []).append((tag, repr(value)))
    if not by_step:
        raise ValueError(f"{directory}: no tensorboard scalars found")
    return [Record(step, by_step[step], f"{directory}, step {step}", tuple(bad.get(step, ())))
            for step in sorted(by_step)]


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
    """Mean of the last ``window`` values at every position; ``nan`` before the first full window."""
    if window < 1:
        raise ValueError(f"--smooth={window} must be >= 1")
    values = np.asarray(values, dtype=np.float64)
    out = np.full(values.shape, np.nan)
    if values.size >= window:
        csum = np.concatenate([[0.0], np.cumsum(values)])
        out[window - 1:] = (csum[window:] - csum[:-window]) / window
    return out


def compute_to_threshold(x: np.ndarray, y: np.ndarray, threshold: float, window: int) -> float:
    """Compute at which the trailing-mean reward first reaches ``threshold`` (linear interpolation between the
    logged points around the crossing; at the first full window when it is already above); ``nan`` if it
    never does."""
    if x.size == 0:
        return float("nan")
    smooth = trailing_mean(y, window)
    with np.errstate(invalid="ignore"):
        hits = np.nonzero(smooth >= threshold)[0]
    if hits.size == 0:
        return float("nan")
    j = int(hits[0])
    if j == 0 or not np.isfinite(smooth[j - 1]) or smooth[j] == smooth[j - 1]:
        return float(x[j])
    frac = (threshold - smooth[j - 1]) / (smooth[j] - smooth[j - 1])
    return float(x[j - 1] + frac * (x[j] - x[j - 1]))


def discover_eval_keys(runs: dict[str, list[list[Record]]]) -> list[str]:
    keys = {k for seeds in runs.values() for recs in seeds for r in recs
            for k in [*r.data, *(key for key, _ in r.bad)] if EVAL_KEY_PATTERN.match(k)}
    return sorted(keys)


# ----------------------------------------------------------------------------------------------------------
# Several seeds of one method


def seed_curves(seeds: list[list[Record]], key: str, x_key: str, window: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every seed's (x, trailing mean of ``key``), the points before a full window dropped."""
    curves = []
    for recs in seeds:
        x, y = series(recs, key, x_key)
        smooth = trailing_mean(y, window)
        keep = np.isfinite(smooth)
        if keep.any():
            curves.append((x[keep], smooth[keep]))
    return curves


def on_common_grid(curves: list[tuple[np.ndarray, np.ndarray]], num: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """``(grid, values)``: every curve linearly interpolated onto ``num`` points spanning the x range all curves
    cover (from the largest first x to the smallest last x); ``values`` is ``(num_seeds, num)``."""
    if not curves:
        raise ValueError("no curve to put on a grid")
    lo, hi = max(float(x[0]) for x, _ in curves), min(float(x[-1]) for x, _ in curves)
    if hi < lo:
        raise ValueError(f"the seeds' x ranges do not overlap (largest start {lo:.4g} > smallest end {hi:.4g})")
    grid = np.linspace(lo, hi, num) if hi > lo else np.array([lo])
    return grid, np.stack([np.interp(grid, x, y) for x, y in curves])


def seed_mean_band(values: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds (rows) at every grid point and the Student-t interval of that mean, mean ± t·sd/√n
    (``evaluation.stats``; a percentile bootstrap over 2-5 seeds covers far less than its nominal
    level: with 2 seeds its "95%" band is the seeds' range, a 50% interval). One seed: the band is the curve."""
    values = np.asarray(values, dtype=np.float64)
    mean = values.mean(axis=0)
    n = values.shape[0]
    if n < 2:
        return mean, mean.copy(), mean.copy()
    half = student_t_quantile((1 + confidence) / 2, n - 1) * values.std(axis=0, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


def mean_compute_to_threshold(curves: list[tuple[np.ndarray, np.ndarray]], threshold: float,
                              confidence: float = 0.95) -> dict:
    """Compute at which the mean over seeds of the (already smoothed) curves first reaches ``threshold``
    (``compute``), and the Student-t interval over seeds of each seed's own crossing (``low``/``high``; NaN
    unless every seed's curve reaches it: an unreached seed has no crossing to average). ``reached_share``:
    the share of seeds whose own curve reaches it."""
    grid, values = on_common_grid(curves)
    point = compute_to_threshold(grid, values.mean(axis=0), threshold, 1)
    own = np.array([compute_to_threshold(grid, row, threshold, 1) for row in values])
    reached = np.isfinite(own)
    low = high = float("nan")
    if values.shape[0] >= 2 and reached.all():
        interval = t_interval(own, confidence)
        low, high = interval.low, interval.high
    return {"compute": point, "low": low, "high": high, "reached_share": float(reached.mean())}


def crossing_interval_text(n: dict, fmt: str = "{:.4g}") -> str:
    """The interval of a compute to the threshold (:func:`threshold_table`'s numbers): ``[low, high]``, or why there
    is none (``evaluation.stats.no_interval_reason``: one seed, every seed crossing at the same compute,
    or too few seeds crossing)."""
    reason = no_interval_reason(n["compute"], n["low"], n["high"], n["seeds"])
    if reason is None:
        return f"[{fmt.format(n['low'])}, {fmt.format(n['high'])}]"
    if reason == "no interval":  # several seeds, but too few of them crossed
        return f"not estimable (reached by {n['reached_share']:.0%} of seeds)"
    return reason


def threshold_table(runs: dict[str, list[list[Record]]], baseline: str, reward_key: str, x_key: str,
                    threshold: float, window: int) -> tuple[str, dict[str, dict]]:
    """Markdown table (Table 2) and the numbers: compute to the threshold (on the seed mean, with a Student-t CI
    over the seeds' own crossings when there are several), and its ratio to the baseline's."""
    numbers = {}
    for label, seeds in runs.items():
        finals = [series(recs, reward_key, x_key)[1] for recs in seeds]
        curves = seed_curves(seeds, reward_key, x_key, window)
        crossing = (mean_compute_to_threshold(curves, threshold) if curves else
                    {"compute": float("nan"), "low": float("nan"), "high": float("nan"), "reached_share": 0.0})
        numbers[label] = {**crossing,
                          "final_reward": float(np.mean([y[-1] for y in finals if y.size])) if finals else float("nan"),
                          "points": int(sum(y.size for y in finals)), "seeds": len(seeds)}
    base = numbers[baseline]["compute"]
    lines = [f"| run | seeds | {x_key} to reach {reward_key} >= {threshold} (trailing mean of {window}; seed mean) "
             f"| 95% CI (t, seeds' own crossings) | relative to {baseline} |", "|---|---:|---:|---|---:|"]
    for label, n in numbers.items():
        n["relative"] = n["compute"] / base if math.isfinite(base) and base > 0 and math.isfinite(n["compute"]) else float("nan")
        reached = f"{n['compute']:.4g}" if math.isfinite(n["compute"]) else f"not reached (final {n['final_reward']:.3f})"
        ci = crossing_interval_text(n)
        rel = f"{n['relative']:.2f}" if math.isfinite(n["relative"]) else "-"
        lines.append(f"| {label} | {n['seeds']} | {reached} | {ci} | {rel} |")
    return "\n".join(lines), numbers


def plot(runs: dict[str, list[list[Record]]], reward_key: str, eval_keys: list[str], x_key: str,
         threshold: float | None, window: int, out: Path, x_label: str | None = None) -> None:
    """One PNG: the training-reward panel, then one panel per evaluation key. One colour per method; a method's
    seeds are thin lines, their mean a thick line with the 95% Student-t CI band over seeds. The threshold
    line is drawn only when ``threshold`` is given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [reward_key] + eval_keys
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.0), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key in zip(axes[0], panels):
        for i, (label, seeds) in enumerate(runs.items()):
            color = colors[i % len(colors)]
            curves = seed_curves(seeds, key, x_key, window if key == reward_key else 1)
            if not curves:
                continue
            many = len(curves) > 1
            for x, y in curves:
                ax.plot(x, y, color=color, alpha=0.25 if many else 1.0, linewidth=1 if many else 2,
                        label=None if many else label, marker="o" if x.size < 30 and not many else None)
            if many:
                grid, values = on_common_grid(curves)
                mean, low, high = seed_mean_band(values)
                ax.plot(grid, mean, color=color, linewidth=2, label=f"{label} (mean of {len(curves)} seeds)")
                ax.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0)
        if key == reward_key and threshold is not None:
            ax.axhline(threshold, color="grey", linestyle="--", linewidth=1, label=f"threshold {threshold}")
        match = EVAL_KEY_PATTERN.match(key)
        title = f"eval: {match['source']} (mean@{match['n']})" if match else f"training reward ({key})"
        if key == reward_key and window > 1:
            title += f", trailing mean of {window}"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(x_label or ("training compute" + (f" ({x_key})" if x_key != "step" else " (step)")))
        ax.set_ylabel("accuracy" if match else "reward")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def check_panels(runs: dict[str, list[list[Record]]], reward_key: str, eval_keys: list[str], x_key: str,
                 window: int) -> list[str]:
    """Refuse to draw nothing (**Decision**: errors, not a clamped window): a ``--eval-key`` no run logs (the
    message lists the evaluation keys the logs hold), a reward curve whose ``--smooth`` window never fills
    (naming the run, its points and the largest window that works), a panel no run has a point in. Returns
    warnings for a run missing from a panel others fill."""
    known = sorted({k for seeds in runs.values() for recs in seeds for r in recs
                    for k in [*r.data, *(key for key, _ in r.bad)]})
    for key in eval_keys:
        if key not in known:
            evals = [k for k in known if EVAL_KEY_PATTERN.match(k)] or [k for k in known if k.startswith("val")]
            close = difflib.get_close_matches(key, known, n=3)
            raise ValueError(f"--eval-key {key!r}: no run logs it; the logs hold the evaluation keys {evals}"
                             + (f" (closest keys: {close})" if close else ""))
    for label, seeds in runs.items():
        for i, recs in enumerate(seeds):
            points = series(recs, reward_key, x_key)[1].size
            if points < window:
                seed = f" (seed {i + 1} of {len(seeds)})" if len(seeds) > 1 else ""
                raise ValueError(f"run {label!r}{seed}: {points} logged points of {reward_key!r}, but --smooth {window} "
                                 f"needs {window} for its first smoothed point: the reward panel would be empty; "
                                 f"pass --smooth {max(points, 1)} or fewer")
    warnings = []
    for key in eval_keys:
        have = [label for label, seeds in runs.items() if seed_curves(seeds, key, x_key)]
        if not have:
            raise ValueError(f"panel {key!r}: no run has a finite value of it; the panel would be empty")
        for label in runs:
            if label not in have:
                warnings.append(f"warning: run {label!r} has no {key!r}: it is missing from that panel")
    return warnings


def log_identity(path: Path) -> tuple[str, str]:
    """(resolved path, content digest) of a log: a file's sha256, a tensorboard directory's over its files."""
    resolved = path.resolve()
    digest = hashlib.sha256()
    files = [resolved] if resolved.is_file() else sorted(f for f in resolved.rglob("*") if f.is_file())
    for f in files:
        digest.update(str(f.relative_to(resolved)).encode() if f != resolved else b"")
        digest.update(f.read_bytes())
    return str(resolved), digest.hexdigest()


def parse_runs(specs: list[str]) -> dict[str, list[list[Record]]]:
    """``LABEL=PATH`` specs -> label -> one record list per seed (a label repeated = several seeds). A log given
    twice (the same path, or a copy with the same content), under one label or two, is a ``ValueError`` naming
    both ``--run``s: counted as two seeds it narrows the interval to zero width."""
    runs: dict[str, list[list[Record]]] = {}
    seen: dict[str, str] = {}
    for spec in specs:
        # labels may contain '=' ("GSPO G=64"): split at the first '=' after which an existing path follows
        cuts = [i for i, ch in enumerate(spec) if ch == "="]
        cut = next((i for i in cuts if Path(spec[i + 1:]).exists()), cuts[0] if cuts else -1)
        label, path = (spec[:cut], spec[cut + 1:]) if cut >= 0 else ("", "")
        if not label or not path:
            raise ValueError(f"--run {spec!r}: expected LABEL=PATH")
        records = read_log(path)
        for identity in log_identity(Path(path)):
            if identity in seen:
                raise ValueError(f"--run {spec!r}: the same log as --run {seen[identity]!r} (duplicate input); each "
                                 "seed's log must be given once, or it counts as two seeds with no spread")
            seen[identity] = spec
        runs.setdefault(label, []).append(records)
    return runs


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and every option's default in its help."""


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def matched_x_axis(runs: dict[str, list[list[Record]]], fallback: str | None = None) -> str:
    """The x axis the runs were matched on (module docstring, ``--x auto``); ``fallback`` replaces the FLOP
    counter for runs without a budget (e.g. ``step`` for runs matched in steps)."""
    from compute_accounting.budget import matched_axis

    axes = {label: {matched_axis({k for r in recs for k in r.data}) for recs in seeds} for label, seeds in runs.items()}
    found = {axis for per_run in axes.values() for axis in per_run}
    if found - {None}:
        if len(found) > 1:
            raise ValueError(f"the runs were not matched on one compute budget: {axes} (None: no budget); pass --x")
        return found.pop()
    if fallback is not None:
        return fallback
    for key in FLOP_AXES:
        if all(any(key in r.data for r in recs) for seeds in runs.values() for recs in seeds):
            return key
    return FLOP_AXES[-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--run", action="append", required=True,
                   help="LABEL=PATH (file-logger .jsonl or tensorboard dir); repeat a LABEL for several seeds")
    p.add_argument("--baseline", help="label of the baseline run (None: the first --run)")
    p.add_argument("--x", default=DEFAULT_X, help="compute counter on the x axis ('step' for steps; 'auto': the "
                                                  "budget the runs were matched on, else the FLOP counter)")
    p.add_argument("--reward-key", default=DEFAULT_REWARD, help="training-reward metric of the first panel")
    p.add_argument("--eval-key", action="append",
                   help="evaluation metric(s), one panel each; a key no run logs is an error (None: every "
                        "val-core/*/acc/mean@N key in the logs)")
    p.add_argument("--threshold", type=float, help="training-reward threshold (paper: e.g. 0.75); none: no line, no table")
    p.add_argument("--smooth", type=positive_int, default=5,
                   help="trailing-mean window for the reward (logged points); a run with fewer points is an error")
    p.add_argument("--out", required=True, help="PNG path")
    p.add_argument("--table", help="also write the threshold table (Markdown) here, and its numbers as .json")
    args = p.parse_args(argv)
    try:
        if args.table and args.threshold is None:
            raise ValueError("--table needs --threshold (the table is the compute to reach it)")
        if args.threshold is not None and not math.isfinite(args.threshold):  # NaN: never reached, silently
            raise ValueError(f"--threshold {args.threshold}: must be a finite reward level")
        runs = parse_runs(args.run)
        if args.x == "auto":
            args.x = matched_x_axis(runs)
            print(f"x axis: {args.x} (the axis the runs were matched on; --x to choose another)")
        eval_keys = args.eval_key or discover_eval_keys(runs)
        check_values(runs, [args.reward_key, *([args.x] if args.x != "step" else [])], nan_ok=eval_keys)
        baseline = args.baseline or next(iter(runs))
        if baseline not in runs:
            raise ValueError(f"--baseline {baseline!r} is not one of the runs {list(runs)}")
        for label, seeds in runs.items():
            for recs in seeds:
                if not series(recs, args.reward_key, args.x)[0].size:
                    raise ValueError(f"run {label!r}: no record has {args.reward_key!r}")
                if args.x != "step" and not any(args.x in r.data for r in recs):
                    raise ValueError(f"run {label!r}: no record has the compute counter {args.x!r} (use --x step?)")
        for warning in check_panels(runs, args.reward_key, eval_keys, args.x, args.smooth):
            print(warning, file=sys.stderr)
        plot(runs, args.reward_key, eval_keys, args.x, args.threshold, args.smooth, Path(args.out))
        table, numbers = (threshold_table(runs, baseline, args.reward_key, args.x, args.threshold, args.smooth)
                          if args.threshold is not None else ("", {}))
    except (ValueError, FileNotFoundError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if table:
        print(table)
    print(f"\nwrote {args.out} (panels: {[args.reward_key] + eval_keys})")
    if args.table and table:
        Path(args.table).write_text(table + "\n", encoding="utf-8")
        Path(args.table).with_suffix(".json").write_text(json.dumps(numbers, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
