"""A rate or mean over an empty set is left out of a step's metrics, not logged as 0 or NaN (docs/metrics.md;
docs/method_counterfactual.md, "Metrics"): a logged 0 reads as a measurement (a mean token weight of 0, no
distractor, every correction wrong) and pulls down any average over steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto

from counterfactual.importance import CounterfactualConfig, ResponseSegmentation, Span
from ibpo.options import IBPOConfig
from ibpo.pipeline import ShapingOutcome
from recipe.counterfactual.batch import CounterfactualPlan, counterfactual_token_weights
from recipe.ibpo.correction.batch import CorrectionPass
from recipe.ibpo.step_metrics import correction_metrics, localised_metrics

RATES = ("no_answer_share", "spans_per_response", "distractor_share", "drop_mean", "weight_arithmetic_mean",
         "weight_sentence_mean", "unmasked_abs_shift_mean")


def cf_metrics(segmentations, copy_rows=()) -> dict[str, float]:
    bs, length = len(segmentations), 6
    batch = DataProto.from_dict(tensors={"responses": torch.zeros(bs, length, dtype=torch.long),
                                         "response_mask": torch.ones(bs, length, dtype=torch.long)})
    rows = np.asarray(copy_rows, dtype=np.int64)
    plan = CounterfactualPlan(tuple(segmentations), rows, np.arange(len(rows), dtype=np.int64))
    _, metrics = counterfactual_token_weights(batch, plan, CounterfactualConfig(), torch.zeros(bs, length),
                                              torch.zeros(plan.num_forward_rows, length))
    return metrics


def test_counterfactual_rates_over_nothing_are_left_out():
    nothing = cf_metrics([None, None])  # no group with signal: nothing segmented, nothing measured
    assert nothing["counterfactual/segmented_responses"] == 0 and nothing["counterfactual/masked_copies"] == 0
    assert not [k for k in RATES if f"counterfactual/{k}" in nothing]
    no_answer = ResponseSegmentation(6, 6, False, (Span(0, 3, "sentence"),), (False,) * 6)
    unmeasured = cf_metrics([no_answer])  # segmented, but no answer to score: no drop, no weighted span
    assert unmeasured["counterfactual/no_answer_share"] == 1.0
    assert unmeasured["counterfactual/spans_per_response"] == 1.0
    assert not [k for k in RATES[2:] if f"counterfactual/{k}" in unmeasured]


def test_counterfactual_rates_are_logged_when_measured():
    seg = ResponseSegmentation(6, 4, True, (Span(0, 2, "sentence"),), (False,) * 6)
    metrics = cf_metrics([seg], copy_rows=[0])
    assert metrics["counterfactual/distractor_share"] == 0.0 and metrics["counterfactual/drop_mean"] == 0.0
    assert metrics["counterfactual/unmasked_abs_shift_mean"] == 0.0
    assert (metrics["counterfactual/masked_copies"], metrics["counterfactual/unmasked_rows"]) == (1.0, 1.0)
    assert metrics["counterfactual/weight_sentence_mean"] == pytest.approx(1.25 / (1.25 * 4 + 3) * 6)
    assert "counterfactual/weight_arithmetic_mean" not in metrics  # no arithmetic span this step


def test_correction_reward_mean_over_no_correction_is_left_out():
    outcome = ShapingOutcome(delta=np.zeros(2), phi=np.zeros(2), token_masks=[], correction_rewrite=np.zeros(0),
                             alpha=0.5, alpha_adaptive=False)
    result = CorrectionPass(requests=[], outcome=outcome, correction_output=None,
                            correction_scores=torch.zeros(0), main_scores=torch.ones(2))
    metrics = correction_metrics(result, IBPOConfig(), None, [], 8)
    assert metrics["ibpo/no_wrong_responses"] == 1.0
    assert "ibpo/correction_reward_mean" not in metrics


def test_localised_coverage_without_wrong_responses_is_left_out():
    assert localised_metrics(np.array([True, True]), np.array([False, False])) == {
        "ibpo/localised/wrong_rows": 0.0, "ibpo/localised/masked_rows": 0.0}
    assert localised_metrics(np.array([True, False]), np.array([False, True]))["ibpo/localised/coverage"] == 1.0
