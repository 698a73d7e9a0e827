"""ibpo.rewrite_condition="closer_to_reference": Eq. 18's second condition alone, d(ŷ, y_ref) < d(y, ŷ).

On the toy task a wrong worked solution is a few tokens from the right one (d < α = 0.6), so Eq. 18 as
written never calls a copy of a right reference a rewrite; the option does. Checked on toy solutions and
against a plain-Python edit distance on random sequences.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from ibpo.alignment import align
from ibpo.options import IBPOConfig, IBPOConfigError
from ibpo.shaping import shape_targets
from lab.toy_tasks.addition import AdditionProblem, render_solution


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def lev(a: list[int], b: list[int]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def shape_one(y, y_hat, refs, config):
    results, _, _ = shape_targets([align(y, y_hat)], [True], [len(y)], [y_hat], [refs], config)
    return results[0]


def test_copy_of_a_right_reference_is_caught_only_by_the_option():
    problem = AdditionProblem(4572, 3851)
    wrong = chars(render_solution(problem.a, problem.b, {1: 1}))
    right = chars(problem.solution)
    assert align(wrong, right).d_original < 0.6  # Eq. 18's first condition cannot fire
    eq18 = IBPOConfig()
    option = eq18.replace(rewrite_condition="closer_to_reference")
    copied = shape_one(wrong, right, [right], eq18)
    assert not copied.rewrite and copied.delta == 0.5
    copied = shape_one(wrong, right, [right], option)
    assert copied.rewrite and copied.delta == 0.0 and copied.d_reference == 0.0
    # a genuine local repair shown a *wrong* reference (another slip) stays shaped under the option
    other_wrong = chars(render_solution(problem.a, problem.b, {0: 2, 3: -1}))  # two slips
    repair = shape_one(wrong, right, [other_wrong], option)
    assert align(right, other_wrong).d_original > align(wrong, right).d_original
    assert not repair.rewrite and repair.delta == 0.5
    # without a reference only α applies, as in Eq. 18
    assert not shape_one(wrong, right, [], option).rewrite


@pytest.mark.parametrize("seed", range(5))
def test_option_equals_the_plain_distance_rule(seed):
    rng = random.Random(seed)
    option = IBPOConfig(rewrite_condition="closer_to_reference")
    for _ in range(40):
        y = [rng.randrange(4) for _ in range(rng.randint(1, 12))]
        y_hat = [rng.randrange(4) for _ in range(rng.randint(1, 12))]
        ref = [rng.randrange(4) for _ in range(rng.randint(1, 12))]
        d_orig = lev(y, y_hat) / max(len(y), len(y_hat))
        d_ref = lev(y_hat, ref) / max(len(y_hat), len(ref))
        result = shape_one(y, y_hat, [ref], option)
        assert result.rewrite == (d_ref < d_orig), (y, y_hat, ref)
        assert result.delta == (0.0 if d_ref < d_orig else 0.5)


def test_bad_value_is_named():
    with pytest.raises(IBPOConfigError, match="rewrite_condition"):
        IBPOConfig(rewrite_condition="copy")
    assert IBPOConfig.from_mapping({"rewrite_condition": "closer_to_reference"}).rewrite_condition == "closer_to_reference"
