"""The truncation measurement (lab/analysis/truncation_cost.py): each candidate keeps the asked share of its tokens
through the real plan_corrections, and the summary pairs every share with the whole candidates."""

from __future__ import annotations

import math

import pytest

from lab.analysis.truncation_cost import format_table, keep_share, rates, summarise
from ibpo.options import IBPOConfig
from ibpo.pipeline import plan_corrections
from ibpo.prompts import TRUNCATION_MARKER


def decode(ids):
    return " ".join(f"t{i}" for i in ids)


def encode(text):
    return [int(w[1:]) for w in text.split()]


def test_each_candidate_keeps_its_own_share():
    # group 0: row 0 wrong (40 tokens), row 1 right (20 tokens) -> x~ shows both, each cut to half of itself
    responses = [list(range(100, 140)), list(range(200, 220))]
    msgs = [[{"role": "user", "content": "q"}]] * 2
    cfg = IBPOConfig(seed=0)
    (whole,) = plan_corrections([0, 0], [False, True], msgs, responses, decode, cfg, 1, encode,
                                candidate_budget=keep_share(1.0))
    (half,) = plan_corrections([0, 0], [False, True], msgs, responses, decode, cfg, 1, encode,
                               candidate_budget=keep_share(0.5))
    text_whole, text_half = whole.messages[-1]["content"], half.messages[-1]["content"]
    assert "t139" in text_whole and "omitted" not in text_whole
    # 40 -> 20 kept (10 head + 10 tail, 20 omitted); 20 -> 10 kept (5 + 5, 10 omitted)
    assert TRUNCATION_MARKER.format(n=20).strip() in text_half and TRUNCATION_MARKER.format(n=10).strip() in text_half
    assert "t109" in text_half and "t110" not in text_half and "t130" in text_half
    assert "t204" in text_half and "t205" not in text_half and "t215" in text_half
    assert whole.reference_rows == half.reference_rows == (1,)
    assert keep_share(0.25)(3) == 1 and keep_share(1.0)(1000) == 0
    with pytest.raises(ValueError):
        keep_share(0.0)


def test_summary_pools_counts_and_pairs_batches():
    def counts(wrong, corrections, right, shaped, rewrites=0):
        return {"wrong": wrong, "corrections": corrections, "right": right, "shaped": shaped,
                "delta_sum": 0.5 * shaped, "rewrites": rewrites, "prompt_tokens": 10 * corrections}

    batches = [{1.0: counts(10, 10, 4, 4), 0.5: counts(10, 10, 2, 2)},
               {1.0: counts(10, 10, 6, 5, 1), 0.5: counts(10, 10, 3, 3)}]
    s = summarise(batches, fractions=(1.0, 0.5))
    assert s["1.0"]["pooled"]["success"] == pytest.approx(0.5) and s["0.5"]["pooled"]["success"] == pytest.approx(0.25)
    assert s["1.0"]["pooled"]["shaped_share"] == pytest.approx(0.45)
    assert s["1.0"]["pooled"]["rewrite_rate"] == pytest.approx(0.1)
    d = s["0.5"]["vs_whole"]["success"]
    assert d["diff"] == pytest.approx(-0.25) and d["batches"] == 2  # per batch -0.2 and -0.3
    assert math.isnan(rates({"wrong": 0, "corrections": 0, "right": 0, "shaped": 0, "delta_sum": 0.0,
                             "rewrites": 0})["success"])


def test_a_difference_without_spread_over_batches_prints_no_interval():
    # before: "(-0.200 [-0.200, -0.200])", a t interval of width 0 read as certainty
    def counts(right):
        return {"wrong": 10, "corrections": 10, "right": right, "shaped": 0, "delta_sum": 0.0, "rewrites": 0,
                "prompt_tokens": 100}

    s = summarise([{1.0: counts(4), 0.5: counts(2)}, {1.0: counts(6), 0.5: counts(4)}], fractions=(1.0, 0.5))
    meta = {"model_sha256": "0" * 64, "batches": 2, "batch_size": 5, "group": 2, "seed": 0, "variant": "binary"}
    row = format_table(s, meta).splitlines()[-1]
    assert row.startswith("| 50% | 20 | 0.300 (-0.200 (zero spread over 2 batches: no interval)) |")


def test_the_start_check_line_says_how_much_of_a_candidate_is_kept():
    from recipe.ibpo.start_checks import candidate_share_line

    # the 32B script's cut: 3,952 of a 30,720-token answer
    line = candidate_share_line(IBPOConfig(max_candidate_tokens=3952), 30720)
    assert "an answer of the full response length 30720 keeps 13%" in line and "one of 15360 keeps 26%" in line
    assert "one of 7680 keeps 51%" in line
    assert "shown whole" in candidate_share_line(IBPOConfig(max_candidate_tokens=30720), 30720)
    assert "without its thinking block" in candidate_share_line(
        IBPOConfig(max_candidate_tokens=2928, candidate_view="strip_thinking"), 253952)
