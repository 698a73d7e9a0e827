"""lab.analysis.credit_localisation on toy-task solutions (characters as tokens) against hand-counted sets."""

from __future__ import annotations

import numpy as np
import pytest

from lab.analysis.credit_localisation import (
    first_error_mask,
    line_index,
    localise,
    modified_mask,
    summarise,
    wrong_mask,
)
from lab.toy_tasks.addition import AdditionProblem, render_solution

PROBLEM = AdditionProblem(4572, 3851)  # d2: 7+5+0=12 write 2 carry 1


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def lines_of(text: str) -> np.ndarray:
    return line_index(list(text))


def test_wrong_tokens_are_the_slip_and_what_it_propagates_to():
    wrong_text = render_solution(PROBLEM.a, PROBLEM.b, {1: 1})  # d2 sums to 13: writes 3, carry 1 (unchanged)
    truth = PROBLEM.solution
    w = wrong_mask(chars(wrong_text), chars(truth))
    diff = [i for i, (a, b) in enumerate(zip(wrong_text, truth)) if a != b]  # same length: substitutions only
    assert len(wrong_text) == len(truth)
    assert np.flatnonzero(w).tolist() == diff
    # the sum digit and the written digit on line d2, and the answer digit
    assert [wrong_text[i] for i in diff] == ["3", "3", "3"]
    first = first_error_mask(w, lines_of(wrong_text))
    assert np.flatnonzero(first).tolist() == diff[:2]


def test_local_repair_versus_copy():
    y = chars(render_solution(PROBLEM.a, PROBLEM.b, {1: 1}))
    truth = chars(PROBLEM.solution)
    lines = lines_of(render_solution(PROBLEM.a, PROBLEM.b, {1: 1}))
    repair = localise(y, truth, truth, chars(render_solution(PROBLEM.a, PROBLEM.b, {2: -1})), lines, False)
    assert (repair.modified, repair.wrong, repair.overlap) == (3, 3, 3)
    assert repair.precision == 1.0 and repair.recall == 1.0 and repair.covers_first_error
    assert not repair.copy_of_reference
    copy = localise(y, truth, truth, truth + [0], lines, True, eos_ids=[0])  # equal up to the trailing EOS
    assert copy.copy_of_reference and copy.reference_right
    # a "correction" that rewrites line d4 only: right nowhere near the slip
    elsewhere = chars(render_solution(PROBLEM.a, PROBLEM.b, {1: 1, 3: 1}))
    miss = localise(y, elsewhere, truth, truth, lines, True)
    assert miss.overlap == 0 and miss.precision == 0.0 and not miss.covers_first_error


def test_modified_mask_marks_the_edited_positions():
    assert modified_mask([1, 2, 3, 4], [1, 9, 3, 4]).tolist() == [False, True, False, False]
    assert modified_mask([1, 2, 3], [1, 2, 3]).sum() == 0


def test_summary_and_undefined_ratios():
    y = chars("ab\ncd")
    loc = localise(y, y, y, y, lines_of("ab\ncd"), True)
    assert np.isnan(loc.precision) and np.isnan(loc.recall) and not loc.covers_first_error
    s = summarise([loc])
    assert s["count"] == 1 and np.isnan(s["precision"]) and s["copy_of_reference"] == 1.0
    assert summarise([])["count"] == 0
    with pytest.raises(ValueError, match="same shape"):
        first_error_mask(np.ones(3, bool), np.zeros(2))
