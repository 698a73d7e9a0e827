"""The one IBPO step (``ibpo.pipeline.correction_step``, ``joint_rewards``, ``joint_row_uids``) that both the verl
trainer (``recipe.ibpo.correction.step``) and the toy loop (``analysis.toy_loop.correction_pass``) run: it equals
its parts called by hand, generates only when something is wrong, refuses a generation of the wrong size, times its
phases, and the joint rows' rewards and groups are App. C.3 / E.2 (C)'s."""

from __future__ import annotations

import numpy as np
import pytest

from ibpo.options import IBPOConfig
from ibpo.pipeline import (CORRECTION_UID_SUFFIX, Generated, correction_step, joint_rewards, joint_row_uids,
                           plan_corrections, shape_batch)

CFG = IBPOConfig(variant="mask", lam=0.6, beta=0.5, num_references=1, corrections_per_target=2, seed=3)
GROUPS = ["a", "a", "b", "b"]
MESSAGES = [[{"role": "user", "content": "P"}]] * 4
RESPONSES = [[1, 2, 3, 4], [1, 2, 9, 4], [5, 6, 7, 8], [5, 6, 0, 8]]
SCORES = np.array([1.0, 0.0, 1.0, 0.0])


def fixed_generation(requests):
    """Per request: the target fixed at its one wrong token (right) or left as it was (wrong), alternately."""
    fixed = {1: [1, 2, 3, 4], 3: [5, 6, 7, 8]}
    ids = [fixed[r.target_row] if k % 2 == 0 else RESPONSES[r.target_row] for k, r in enumerate(requests)]
    return Generated(np.array([1.0 - k % 2 for k in range(len(requests))]), ids, "runner's own record")


def test_the_step_is_its_parts_called_by_hand():
    step = correction_step(GROUPS, MESSAGES, RESPONSES, SCORES, CFG, 7, fixed_generation, decode=str)
    is_correct = [True, False, True, False]
    requests = plan_corrections(GROUPS, is_correct, MESSAGES, RESPONSES, str, CFG, 7)
    generated = fixed_generation(requests)
    want = shape_batch(requests, generated.ids, [True, False] * 2, RESPONSES, is_correct, CFG)
    assert step.requests == requests and [r.target_row for r in requests] == [1, 1, 3, 3]
    assert step.is_correct == is_correct and step.correction_right == [True, False, True, False]
    assert step.generated.output == "runner's own record"
    assert step.outcome.delta.tolist() == want.delta.tolist() and want.delta[1] > 0 and want.delta[3] > 0
    assert [m.tolist() for m in step.outcome.token_masks] == [m.tolist() for m in want.token_masks]
    assert step.outcome.token_masks[1].tolist() == [0.0, 0.0, 1.0, 0.0]  # the mask variant keeps the changed token


def test_nothing_is_generated_when_every_response_is_right():
    def never(requests):
        raise AssertionError("generate called without a request")

    step = correction_step(GROUPS, MESSAGES, RESPONSES, np.ones(4), CFG, 0, never, decode=str)
    assert step.requests == [] and step.generated is None and step.outcome.delta.tolist() == [0.0] * 4


def test_a_generation_of_the_wrong_size_is_refused():
    def short(requests):
        return Generated(np.ones(1), [[1]])

    with pytest.raises(RuntimeError, match="returned 1 rows for 4 requests"):
        correction_step(GROUPS, MESSAGES, RESPONSES, SCORES, CFG, 0, short, decode=str)


def test_the_phases_are_timed_in_order():
    seen = []

    class Phase:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            seen.append(self.name)

        def __exit__(self, *exc):
            seen.append("/" + self.name)

    correction_step(GROUPS, MESSAGES, RESPONSES, SCORES, CFG, 0, fixed_generation, decode=str, phase=Phase)
    assert seen == ["plan", "/plan", "gen", "/gen", "shape", "/shape"]
    seen.clear()
    correction_step(GROUPS, MESSAGES, RESPONSES, np.ones(4), CFG, 0, fixed_generation, decode=str, phase=Phase)
    assert seen == ["plan", "/plan", "shape", "/shape"]  # no request: no generation phase


def test_joint_rows_rewards_and_groups():
    cfg = CFG.replace(joint_training=True, rewrite_penalty=0.25)
    rewards = joint_rewards([1.0, 1.0, 0.0], np.array([True, False, True]), cfg)
    assert rewards.tolist() == [0.75, 1.0, -0.25]
    step = correction_step(GROUPS, MESSAGES, RESPONSES, SCORES, CFG, 7, fixed_generation, decode=str)
    per_prompt = joint_row_uids(step.requests, "per_prompt").tolist()
    assert per_prompt == [f"a{CORRECTION_UID_SUFFIX}"] * 2 + [f"b{CORRECTION_UID_SUFFIX}"] * 2
    assert joint_row_uids(step.requests, "per_correction_prompt").tolist() == [
        f"a{CORRECTION_UID_SUFFIX}:1"] * 2 + [f"b{CORRECTION_UID_SUFFIX}:3"] * 2
    assert not set(per_prompt) & set(GROUPS)  # never normalised against the original responses
    with pytest.raises(ValueError, match="unknown ibpo.joint_grouping 'per_row'"):
        joint_row_uids(step.requests, "per_row")
