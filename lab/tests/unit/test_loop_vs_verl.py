"""lab.analysis.loop_vs_verl: reads equal-steps loop JSONs and verl file-logger JSONL into one table, and refuses
runs that cannot be compared (unequal steps, a loop run matched in compute, a verl run without a final eval)."""

from __future__ import annotations

import json

import pytest

from lab.analysis import loop_vs_verl


def _loop(path, arm, seed, rewards, test, milestone=None):
    steps = [{"step": i + 1, "reward": r} for i, r in enumerate(rewards)]
    path.mkdir(parents=True, exist_ok=True)
    slug = arm.lower().replace(" ", "_").replace("=", "_")
    (path / f"{slug}_s{seed}.json").write_text(json.dumps(
        {"arm": arm, "seed": seed, "steps": steps, "evals": [{"milestone": milestone, "accuracy": test}]}))


def _verl(path, slug, seed, rewards, test, eval_step=None):
    path.mkdir(parents=True, exist_ok=True)
    lines = [{"step": 0, "data": {"val-core/ibpo/toy_addition/acc/mean@1": 0.4}}]
    for i, r in enumerate(rewards):
        data = {loop_vs_verl.REWARD_KEY: r}
        if i + 1 == (eval_step or len(rewards)):
            data["val-core/ibpo/toy_addition/acc/mean@1"] = test
        lines.append({"step": i + 1, "data": data})
    (path / f"{slug}_s{seed}_metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines))


def test_table_pairs_arm_and_seed_and_reports_verl_minus_loop(tmp_path):
    _loop(tmp_path / "loop", "GSPO G=n", 0, [0.25, 0.5], 0.625)
    _loop(tmp_path / "loop", "IBPO G=n", 0, [0.5, 0.5], 0.5)
    _loop(tmp_path / "loop", "GSPO G=n", 1, [0.0, 0.0], 0.0)  # no verl twin: left out
    _verl(tmp_path / "verl", "gspo_g_n", 0, [0.5, 0.75], 0.5)
    _verl(tmp_path / "verl", "ibpo_g_n", 0, [0.25, 0.25], 0.75)
    rows = loop_vs_verl.compare(loop_vs_verl.loop_runs(tmp_path / "loop"), tmp_path / "verl")
    assert [(r["arm"], r["seed"]) for r in rows] == [("GSPO G=n", 0), ("IBPO G=n", 0)]
    gspo = rows[0]
    assert (gspo["reward_loop"], gspo["reward_verl"], gspo["test_loop"], gspo["test_verl"]) == (0.375, 0.625, 0.625, 0.5)
    table = loop_vs_verl.format_rows(rows)
    assert "| GSPO G=n | 0 | 2 | 0.375 | 0.625 | +0.250 | 0.625 | 0.500 | -0.125 |" in table
    assert "| IBPO G=n | mean of 1 | 2 | 0.500 | 0.250 | -0.250 | 0.500 | 0.750 | +0.250 |" in table


def test_unequal_steps_and_wrong_kinds_of_runs_are_refused(tmp_path):
    _loop(tmp_path / "loop", "GSPO G=n", 0, [0.25, 0.5], 0.625)
    _verl(tmp_path / "verl", "gspo_g_n", 0, [0.5, 0.75, 0.5], 0.5)
    with pytest.raises(ValueError, match="loop made 2 steps, verl 3"):
        loop_vs_verl.compare(loop_vs_verl.loop_runs(tmp_path / "loop"), tmp_path / "verl")
    _verl(tmp_path / "verl2", "gspo_g_n", 0, [0.5, 0.75], 0.5, eval_step=1)
    with pytest.raises(ValueError, match="no validation accuracy at the last step 2"):
        loop_vs_verl.compare(loop_vs_verl.loop_runs(tmp_path / "loop"), tmp_path / "verl2")
    _loop(tmp_path / "compute", "GSPO G=n", 0, [0.25], 0.5, milestone=1.0)
    with pytest.raises(ValueError, match="not an equal-steps run"):
        loop_vs_verl.loop_runs(tmp_path / "compute")


def test_binomial_sd_of_a_difference():
    assert loop_vs_verl.binomial_sd_of_difference(0.5, 512) == pytest.approx((2 * 0.25 / 512) ** 0.5)
