"""evaluation/plot_curves.py on synthetic logs written by verl's own loggers (file logger and tensorboard
adapter), with the threshold numbers worked out by hand."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "evaluation" / "plot_curves.py"
FLOPS = "ibpo/compute/total_flops"


def load_script():
    spec = importlib.util.spec_from_file_location("ibpo_plot_curves_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def log_run(logger, slope: float, steps: int = 12, flops_per_step: float = 100.0) -> None:
    """verl's order: initial validation alone at step 0, then one record per step with the cumulative counter;
    validation every 4 steps."""
    logger.log(data={"val-core/aime25/acc/mean@4": 0.1}, step=0)
    for step in range(1, steps + 1):
        data = {"critic/score/mean": min(1.0, slope * step), "ibpo/raw_score_mean": min(1.0, slope * step),
                FLOPS: flops_per_step * step,
                "ibpo/compute/total_tokens": 10.0 * step}
        if step % 4 == 0:
            data["val-core/aime25/acc/mean@4"] = 0.1 + slope * step / 2
        logger.log(data=data, step=step)


@pytest.fixture
def file_logs(tmp_path, monkeypatch):
    from verl.utils.tracking import FileLogger

    paths = {}
    for label, slope in (("GSPO", 0.1), ("IBPO", 0.15)):
        path = tmp_path / f"{label}.jsonl"
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
        logger = FileLogger("proj", label)
        log_run(logger, slope)
        logger.finish()
        paths[label] = path
    return paths


def test_series_carries_the_compute_counter_forward(file_logs):
    mod = load_script()
    records = mod.read_log(file_logs["GSPO"])
    assert records[0].step == 0 and FLOPS not in records[0].data
    x, y = mod.series(records, "val-core/aime25/acc/mean@4", FLOPS)
    np.testing.assert_allclose(x, [0.0, 400.0, 800.0, 1200.0])  # initial validation at compute 0
    np.testing.assert_allclose(y, [0.1, 0.3, 0.5, 0.7])
    xs, _ = mod.series(records, "critic/score/mean", "step")
    np.testing.assert_allclose(xs, np.arange(1, 13))


def test_compute_to_threshold_by_hand():
    mod = load_script()
    steps = np.arange(1, 13, dtype=float)
    flops = 100.0 * steps
    # reward 0.1·s reaches 0.75 at s = 7.5 -> 750 FLOPs; with a trailing mean of 3, 0.1·(s−1) -> s = 8.5 -> 850
    assert mod.compute_to_threshold(flops, 0.1 * steps, 0.75, 1) == pytest.approx(750.0)
    assert mod.compute_to_threshold(flops, 0.1 * steps, 0.75, 3) == pytest.approx(850.0)
    assert np.isnan(mod.compute_to_threshold(flops, 0.01 * steps, 0.75, 1))
    np.testing.assert_allclose(mod.trailing_mean(np.array([1.0, 2.0, 3.0, 4.0]), 2), [np.nan, 1.5, 2.5, 3.5])
    # one lucky first batch: a partial window would "reach" 0.75 at the first point; a full window of 3 never does
    lucky = np.array([0.9, 0.1, 0.1, 0.2, 0.2, 0.3])
    assert np.isnan(mod.compute_to_threshold(flops[:6], lucky, 0.75, 3))
    # already above at the first full window: its x, no interpolation into the undefined part
    assert mod.compute_to_threshold(flops[:4], np.array([0.8, 0.9, 0.9, 0.9]), 0.75, 3) == pytest.approx(300.0)


def test_seed_mean_band_and_threshold_on_the_seed_mean():
    mod = load_script()
    x = np.arange(1.0, 11.0)
    curves = [(x, 0.1 * x), (x, 0.1 * x + 0.1), (x + 0.5, 0.1 * x - 0.1)]  # offsets average to 0 where all overlap
    grid, values = mod.on_common_grid(curves, num=19)
    assert grid[0] == pytest.approx(1.5) and grid[-1] == pytest.approx(10.0) and values.shape == (3, 19)
    mean, low, high = mod.seed_mean_band(values)
    # the third curve shifted right by 0.5: on the grid its value is 0.1(g-0.5)-0.1 = 0.1g - 0.15
    np.testing.assert_allclose(mean, 0.1 * grid - 0.05 / 3, atol=1e-12)
    # Student-t band: mean ± t_{0.975, 2} · sd / √3 at every point (computed here from the definition)
    half = 4.302652729911275 * values.std(axis=0, ddof=1) / np.sqrt(3)
    np.testing.assert_allclose(low, mean - half, atol=1e-9)
    np.testing.assert_allclose(high, mean + half, atol=1e-9)
    same = mod.seed_mean_band(np.tile(0.1 * grid, (4, 1)))
    np.testing.assert_allclose(same[1], same[2])  # identical seeds: a zero-width band
    result = mod.mean_compute_to_threshold(curves, 0.5)
    assert result["compute"] == pytest.approx(5.0 + 0.05 / 3 / 0.1)
    # the CI is the t-interval over the seeds' own crossings (on the common grid from 1.5: 5.0, 4.0, 6.5)
    own = np.array([5.0, 4.0, 6.5])
    half = 4.302652729911275 * own.std(ddof=1) / np.sqrt(3)
    assert result["low"] == pytest.approx(own.mean() - half) and result["high"] == pytest.approx(own.mean() + half)
    assert result["reached_share"] == 1.0
    partly = mod.mean_compute_to_threshold(curves, 1.05)  # the second seed alone reaches 1.05 (at x = 9.5)
    assert partly["reached_share"] == pytest.approx(1 / 3) and np.isnan(partly["low"]) and np.isnan(partly["compute"])
    assert np.isnan(mod.mean_compute_to_threshold(curves, 2.0)["compute"])


def test_cli_writes_png_and_table(file_logs, tmp_path):
    out = tmp_path / "fig2.png"
    table = tmp_path / "table2.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--run", f"GSPO={file_logs['GSPO']}",
                           "--run", f"IBPO={file_logs['IBPO']}", "--threshold", "0.75", "--smooth", "1",
                           "--out", str(out), "--table", str(table)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    numbers = json.loads(table.with_suffix(".json").read_text())
    assert numbers["GSPO"]["compute"] == pytest.approx(750.0)
    assert numbers["IBPO"]["compute"] == pytest.approx(500.0)  # 0.15·s = 0.75 at s = 5
    assert numbers["IBPO"]["relative"] == pytest.approx(500.0 / 750.0)
    assert "| IBPO | 1 | 500 | n = 1: no interval | 0.67 |" in proc.stdout
    import matplotlib.image as mpimg

    image = mpimg.imread(out)
    assert image.shape[0] > 300 and image.shape[1] > 2 * image.shape[0]  # two panels side by side
    assert image[..., :3].std() > 0.05  # not a blank canvas


def test_tensorboard_logs_and_errors(tmp_path, monkeypatch, file_logs):
    from verl.utils.tracking import _TensorboardAdapter

    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    writer = _TensorboardAdapter("proj", "tb")
    log_run(writer, 0.15)
    writer.finish()
    mod = load_script()
    x, y = mod.series(mod.read_log(tmp_path / "tb"), "critic/score/mean", FLOPS)
    np.testing.assert_allclose(x, 100.0 * np.arange(1, 13))
    assert mod.compute_to_threshold(x, y, 0.75, 1) == pytest.approx(500.0, rel=1e-5)

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "data": {}}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 2"):
        mod.read_file_log(bad)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--run", f"A={file_logs['GSPO']}", "--x", "nope/flops",
                           "--out", str(tmp_path / "x.png")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "nope/flops" in proc.stderr
    proc = subprocess.run([sys.executable, str(SCRIPT), "--run", f"A={file_logs['GSPO']}", "--table", "t.md",
                           "--out", str(tmp_path / "x.png")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--table needs --threshold" in proc.stderr


def test_cli_groups_seeds_of_a_method(file_logs, tmp_path):
    out = tmp_path / "seeds.png"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--run", f"GSPO={file_logs['GSPO']}",
                           "--run", f"GSPO={file_logs['IBPO']}", "--threshold", "0.75", "--smooth", "1",
                           "--x", "step", "--out", str(out), "--table", str(tmp_path / "t.md")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    numbers = json.loads((tmp_path / "t.json").read_text())
    # seed mean 0.125·s reaches 0.75 at s = 6
    assert numbers["GSPO"]["seeds"] == 2 and numbers["GSPO"]["compute"] == pytest.approx(6.0, abs=0.05)


def short_log(tmp_path, points: int) -> Path:
    path = tmp_path / f"short{points}.jsonl"
    path.write_text("".join(json.dumps({"step": s, "data": {"ibpo/raw_score_mean": 0.1 * s, FLOPS: 10.0 * s}}) + "\n"
                            for s in range(1, points + 1)))
    return path


def error_of(mod, capsys, *argv: str) -> str:
    """The one stderr line of a refused plot_curves run (exit status 2, no PNG written)."""
    assert mod.main(list(argv)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_no_plot_of_nothing(file_logs, tmp_path, capsys):
    mod = load_script()
    out = tmp_path / "never.png"
    # the default --smooth 5 on a 3-point log: the reward panel would be blank
    assert error_of(mod, capsys, "--run", f"A={short_log(tmp_path, 3)}", "--out", str(out)) == (
        "error: run 'A': 3 logged points of 'ibpo/raw_score_mean', but --smooth 5 needs 5 for its first smoothed "
        "point: the reward panel would be empty; pass --smooth 3 or fewer")
    # a seed of a method that is too short is named with its seed number
    message = error_of(mod, capsys, "--run", f"A={file_logs['GSPO']}", "--run", f"A={short_log(tmp_path, 2)}",
                       "--out", str(out))
    assert message.startswith("error: run 'A' (seed 2 of 2): 2 logged points")
    # an unknown --eval-key: the keys the logs hold are listed
    assert error_of(mod, capsys, "--run", f"A={file_logs['GSPO']}", "--eval-key", "val-core/aime/acc/mean@4",
                    "--smooth", "1", "--out", str(out)) == (
        "error: --eval-key 'val-core/aime/acc/mean@4': no run logs it; the logs hold the evaluation keys "
        "['val-core/aime25/acc/mean@4'] (closest keys: ['val-core/aime25/acc/mean@4'])")
    with pytest.raises(SystemExit) as info:
        mod.main(["--run", f"A={file_logs['GSPO']}", "--smooth", "0", "--out", str(out)])
    assert info.value.code == 2 and "argument --smooth: 0 must be >= 1" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_threshold_that_is_not_finite_is_refused(file_logs, tmp_path, capsys, value):
    # before: --threshold nan was never reached by any run and the table said so, silently
    mod = load_script()
    assert error_of(mod, capsys, "--run", f"A={file_logs['GSPO']}", "--threshold", value, "--smooth", "1",
                    "--out", str(tmp_path / "x.png")) == f"error: --threshold {value}: must be a finite reward level"
    assert not (tmp_path / "x.png").exists()


def test_a_panel_with_no_finite_point_is_refused(tmp_path, capsys):
    mod = load_script()
    path = tmp_path / "nan_eval.jsonl"
    path.write_text("".join(json.dumps({"step": s, "data": {"ibpo/raw_score_mean": 0.5, FLOPS: 1.0 * s,
                                                            "val-core/x/acc/mean@1": float("nan")}}) + "\n"
                            for s in range(1, 4)))
    assert error_of(mod, capsys, "--run", f"A={path}", "--smooth", "1", "--out", str(tmp_path / "n.png")) == (
        "error: panel 'val-core/x/acc/mean@1': no run has a finite value of it; the panel would be empty")


def test_a_run_missing_from_a_panel_is_warned_about(file_logs, tmp_path, capsys):
    mod = load_script()
    out = tmp_path / "w.png"
    assert mod.main(["--run", f"A={file_logs['GSPO']}", "--run", f"B={short_log(tmp_path, 6)}", "--out", str(out)]) == 0
    assert "warning: run 'B' has no 'val-core/aime25/acc/mean@4': it is missing from that panel" in capsys.readouterr().err
    assert out.exists()


def test_every_option_shows_its_default_in_help(capsys):
    mod = load_script()
    with pytest.raises(SystemExit):
        mod.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 5)" in text and "(default: auto)" in text and "(default: ibpo/raw_score_mean)" in text


def _records(mod, keys_per_step: dict) -> list:
    return [mod.Record(step, dict(keys_per_step, **{"ibpo/raw_score_mean": 0.1 * step})) for step in range(1, 4)]


def test_auto_x_is_the_axis_the_runs_were_matched_on():
    mod = load_script()
    flops_budget = {"compute_budget/flops": 1.0, "compute_budget/gpu_seconds": 2.0, "compute_budget/limit_flops": 9.0}
    seconds_budget = {"compute_budget/flops": 1.0, "compute_budget/gpu_seconds": 2.0,
                      "compute_budget/limit_gpu_seconds": 9.0}
    unbudgeted = {"compute_budget/flops": 1.0, "compute_budget/gpu_seconds": 2.0, FLOPS: 1.0}
    assert mod.matched_x_axis({"A": [_records(mod, flops_budget)], "B": [_records(mod, flops_budget)]}) == \
        "compute_budget/flops"
    assert mod.matched_x_axis({"A": [_records(mod, seconds_budget)]}) == "compute_budget/gpu_seconds"
    # no budget: the FLOP counter every trainer logs; runs matched in steps can ask for their own axis
    assert mod.matched_x_axis({"A": [_records(mod, unbudgeted)]}) == "compute_budget/flops"
    assert mod.matched_x_axis({"A": [_records(mod, unbudgeted)]}, fallback="step") == "step"
    assert mod.matched_x_axis({"A": [_records(mod, {FLOPS: 1.0})]}) == FLOPS  # logs from before the ledger
    with pytest.raises(ValueError, match="not matched on one compute budget"):
        mod.matched_x_axis({"A": [_records(mod, flops_budget)], "B": [_records(mod, seconds_budget)]})
    with pytest.raises(ValueError, match="not matched on one compute budget"):
        mod.matched_x_axis({"A": [_records(mod, flops_budget)], "B": [_records(mod, unbudgeted)]})
