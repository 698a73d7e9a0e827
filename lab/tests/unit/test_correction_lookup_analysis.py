"""The CPU proxy's data path: the trainer's correction dump and lookup metrics (recipe/ibpo/correction/batch.py),
the edit profile, synthetic corrections and the bound's cut table (lab/analysis/correction_lookup.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from verl import DataProto

from lab.analysis.correction_lookup import EditProfile, bound_cuts, edit_like, edit_profile, load_dump
from ibpo.lookup_decoding import NgramParams, simulate_lookup
from ibpo.pipeline import CorrectionRequest
from recipe.ibpo.correction import batch as corr


def generation_output(prompts: list[list[int]], responses: list[list[int]]) -> DataProto:
    """verl's layout: left-padded prompts, right-padded responses, attention mask over both."""
    n, pw, rw = len(prompts), max(map(len, prompts)), max(map(len, responses))
    p = torch.zeros(n, pw, dtype=torch.long)
    r = torch.zeros(n, rw, dtype=torch.long)
    pm = torch.zeros(n, pw, dtype=torch.long)
    rm = torch.zeros(n, rw, dtype=torch.long)
    for i, (a, b) in enumerate(zip(prompts, responses)):
        p[i, pw - len(a):] = torch.tensor(a)
        pm[i, pw - len(a):] = 1
        r[i, : len(b)] = torch.tensor(b)
        rm[i, : len(b)] = 1
    return DataProto.from_dict(tensors={"prompts": p, "responses": r, "response_mask": rm,
                                        "attention_mask": torch.cat([pm, rm], 1)})


def test_lookup_metrics_replay_the_real_prompt_and_response_tokens():
    prompts = [[5, 6, 7, 8, 9, 10, 11], [3, 4]]
    responses = [[5, 6, 7, 8, 9, 10, 11, 2], [1, 1, 1, 1, 1, 1]]
    params = NgramParams(1, 3, 4)
    m = corr.lookup_metrics(generation_output(prompts, responses), params)
    a, b = (simulate_lookup(p, r, params) for p, r in zip(prompts, responses))
    total = a + b
    assert m["ibpo/correction/lookup_decode_step_reduction"] == pytest.approx(total.decode_step_reduction)
    assert m["ibpo/correction/lookup_batch_decode_step_reduction"] == pytest.approx(
        1 - max(a.decode_steps, b.decode_steps) / 7)
    assert corr.lookup_metrics(None, params) == {}


def test_lookup_metrics_leave_out_a_rate_over_an_empty_set():
    """One-token corrections have no decode step (the prefill emits the token): every rate is over nothing and is
    left out, not logged as 0 ("nothing saved"); with decode steps but no draft proposed, the two draft rates are
    left out and the step rates are real (nothing saved, one token per pass)."""
    params = NgramParams(1, 3, 4)
    assert corr.lookup_metrics(generation_output([[1, 2, 3]], [[4]]), params) == {}
    assert corr.lookup_metrics(generation_output([[1, 2, 3]], [[7, 8, 9]]), params) == {
        "ibpo/correction/lookup_decode_step_reduction": 0.0, "ibpo/correction/lookup_tokens_per_decode_step": 1.0,
        "ibpo/correction/lookup_batch_decode_step_reduction": 0.0}


def test_dump_writes_one_record_per_correction(tmp_path):
    out = generation_output([[1, 2, 3], [4, 5]], [[7, 8], [9]])
    requests = [CorrectionRequest(0, (2,), [], "g"), CorrectionRequest(1, (2,), [], "g")]
    path = corr.dump_corrections(str(tmp_path), 4, requests, out, [[7, 9], [9, 9, 9], [7, 8]], [True, False],
                                 np.array([False, False]))
    rows = [json.loads(line) for line in open(path)]
    assert rows[0] == {"step": 4, "prompt_ids": [1, 2, 3], "correction_ids": [7, 8], "target_ids": [7, 9],
                       "reference_ids": [[7, 8]], "correct": True, "rewrite": False, "shaped": True}
    assert rows[1]["shaped"] is False and rows[1]["prompt_ids"] == [4, 5]
    records = load_dump(tmp_path)
    assert [r.step for r in records] == [4, 4] and records[0].shaped and not records[1].correct
    (tmp_path / "ibpo_corrections" / "step_5.jsonl").write_text('{"step": 5}\n')
    with pytest.raises(ValueError, match="step_5.jsonl:1"):
        load_dump(tmp_path)
    with pytest.raises(FileNotFoundError, match="rollout_data_dir"):
        load_dump(tmp_path / "nothing")


def test_edit_profile_counts_kept_tokens_and_edit_runs():
    target = list(range(10))
    correction = [0, 1, 99, 3, 4, 5, 98, 97, 8, 9]  # two edited runs: {2} and {6, 7}
    profile = edit_profile([(target, correction), (target, target)])
    assert profile.kept_fraction == pytest.approx(17 / 20)
    assert profile.mean_edit_run == pytest.approx(3 / 2) and profile.insert_per_edited == pytest.approx(1.0)


def test_synthetic_edits_reproduce_the_profile():
    rng = np.random.default_rng(0)
    target = rng.integers(0, 1000, size=20000).tolist()
    fresh = rng.integers(1000, 2000, size=40000).tolist()
    want = EditProfile(kept_fraction=0.8, mean_edit_run=3.0, insert_per_edited=1.0, corrections=0)
    got = edit_profile([(target, edit_like(target, want, fresh, rng))])
    assert abs(got.kept_fraction - 0.8) < 0.02 and abs(got.mean_edit_run - 3.0) < 0.3
    assert edit_like(target[:5], EditProfile(1.0, 1.0, 1.0, 0), fresh, rng) == target[:5]


def test_bound_cut_table():
    class R:
        def __init__(self, t, c, right, shaped):
            self.target_ids, self.correction_ids, self.correct, self.shaped = [0] * t, [0] * c, right, shaped

    records = [R(10, 10, True, True), R(10, 15, True, False), R(10, 30, False, False)]
    rows = bound_cuts(records, [1.0, 2.0], closing_tokens=2, response_length=25)
    assert rows[0]["corrections_cut"] == 2 and rows[0]["right_cut"] == 1 and rows[0]["shaped_cut"] == 0
    assert rows[0]["tokens_cut_frac"] == pytest.approx((3 + 18) / 55)
    assert rows[1]["corrections_cut"] == 1 and rows[1]["tokens_cut_frac"] == pytest.approx(8 / 55)  # bound 22


def test_bench_script_reports_a_dump(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("bench_correction_lookup", root / "lab" / "scripts" / "bench_correction_lookup.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = generation_output([[1, 2, 3, 4, 5, 6], [4, 5]], [[1, 2, 3, 4, 5, 6, 0], [9, 9, 9]])
    requests = [CorrectionRequest(0, (), [], "g"), CorrectionRequest(1, (), [], "g")]
    corr.dump_corrections(str(tmp_path), 1, requests, out, [[1, 2, 3, 4, 5, 6], [9, 9]], [True, False],
                          np.array([False, False]))
    assert bench.main(["--dump", str(tmp_path), "--settings", "1:2:3", "--factors", "1", "--closing", "0",
                       "--json", str(tmp_path / "r.json")]) == 0
    text = capsys.readouterr().out
    assert "| toy, all | 1:2:3 | 2 |" in text and "| toy, right | 1:2:3 | 1 |" in text
    # c = 1, no closing tokens: 7 > 6 and 3 > 2, one token over each: 2 of the 10 correction tokens
    assert "| 1 | 0 | 20.00% | 2 / 2 | 1 / 1 | 1 / 1 |" in text
    with pytest.raises(SystemExit):
        bench.parse_args(["--settings", "2:5"])
