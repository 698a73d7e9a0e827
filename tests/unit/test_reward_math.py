"""Math verifier: extraction rules (pure functions) and gold/prediction pairs through the real math-verify workers."""

import time

import pytest

from reward_fns import EVAL_DATA_SOURCES, KNOWN_DATA_SOURCES, RESULT_KEYS, compute_score
from reward_fns.extract import extract_math_answer, last_boxed_content, normalise_answer, strip_thinking
from reward_fns.math_verifier import BadGroundTruth, compute_math_score, get_math_pool

HMMT_10 = r"\frac{-1+\sqrt{17}}{2}, \frac{-1-\sqrt{17}}{2}"


@pytest.mark.parametrize("text, expected", [
    (r"so \boxed{70}.", ("70", "boxed")),
    (r"\boxed{70} then \boxed{71}", ("71", "boxed")),
    (r"\boxed{\frac{1}{2}} and a cut-off \boxed{7", (r"\frac{1}{2}", "boxed")),
    (r"\fbox{3}", ("3", "boxed")),
    ("work...\nAnswer: 070", ("070", "answer_line")),
    ("**Answer:** $70$.", ("70", "answer_line")),
    ("Answer: 1\nmore\nanswer: 2", ("2", "answer_line")),
    ("The final answer is $70$.", (None, "none")),
    ("", (None, "none")),
])
def test_extract_math_answer(text, expected):
    assert extract_math_answer(text) == expected


def test_strip_thinking_and_helpers():
    assert strip_thinking("<think>\\boxed{1}</think>x</think> \\boxed{2}") == " \\boxed{2}"
    assert strip_thinking("<think>never closed \\boxed{1}") is None
    assert strip_thinking("plain") == "plain"
    assert last_boxed_content(r"\boxed{a\}b}") == r"a\}b"
    assert normalise_answer(" **$70$**. ") == "70"


# (response, ground truth, expected verdict) -- all through the worker pool and math-verify 0.9.0.
MATH_TABLE = [
    (r"\boxed{70}", "70", "correct"),
    (r"\boxed{070}", "70", "correct"),
    ("Answer: 70", "70", "correct"),
    ("Answer: 070", "70", "correct"),
    ("The answer is 70.\nAnswer: **70**", "70", "correct"),
    (r"\boxed{71}", "70", "wrong_answer"),
    (r"\boxed{984}", "-984", "wrong_answer"),
    (r"\boxed{70\%}", "70", "correct"),  # documented leniency of math-verify 0.9.0
    (r"\boxed{70.0}", "70", "correct"),
    (r"\boxed{\frac{9}{\sqrt{23}}}", r"\frac{9 \sqrt{23}}{23}", "correct"),
    (r"\boxed{\dfrac{9\sqrt{23}}{23}}", r"\frac{9 \sqrt{23}}{23}", "correct"),
    (r"\boxed{\sqrt{\frac{95}{24}}}", r"\frac{\sqrt{570}}{12}", "correct"),
    (r"\boxed{1-\frac{2}{\pi}}", r"\frac{\pi-2}{\pi}", "correct"),
    (r"\boxed{26! \cdot 2^{25}}", r"2^{25} \cdot 26!", "correct"),
    (r"\boxed{\frac{1}{576}}", r"\frac{1}{576}", "correct"),
    (r"\boxed{\frac{1}{577}}", r"\frac{1}{576}", "wrong_answer"),
    (r"\boxed{[1, 3)}", "[1,3)", "correct"),
    (r"\boxed{(1, 3]}", "[1,3)", "wrong_answer"),
    (r"\boxed{\frac{-1-\sqrt{17}}{2}, \frac{-1+\sqrt{17}}{2}}", HMMT_10, "correct"),  # reordered two-value answer
    (r"\boxed{\frac{-1+\sqrt{17}}{2}}", HMMT_10, "wrong_answer"),  # one value of two
    ("<think>\\boxed{71}</think>So \\boxed{70}", "70", "correct"),
    ("<think>\\boxed{70}</think>So \\boxed{71}", "70", "wrong_answer"),
    ("<think>\\boxed{70} ... ran out of tokens", "70", "no_answer"),
    ("I think it is seventy.", "70", "no_answer"),
    ("check: 21+49 = 70", "70", "no_answer"),  # training sets: no unanchored extraction
]


@pytest.mark.parametrize("response, gold, verdict", MATH_TABLE)
def test_math_table(response, gold, verdict):
    result = compute_score("math_dapo", response, gold)
    assert tuple(result) == RESULT_KEYS
    assert result["verdict"] == verdict, result
    assert result["score"] == (1.0 if verdict == "correct" else 0.0)
    assert result["acc"] == result["score"]


def test_eval_sets_fall_back_to_math_verify_extraction():
    assert "aime25" in EVAL_DATA_SOURCES and "math_dapo" not in EVAL_DATA_SOURCES
    assert compute_score("aime25", "The final answer is $70$.", "70")["verdict"] == "correct"
    assert compute_score("math_dapo", "The final answer is $70$.", "70")["verdict"] == "no_answer"
    assert compute_score("aime25", "The final answer is $71$.", "70")["verdict"] == "wrong_answer"


def test_synthetic_arith_and_gsm8k_use_math_verifier():
    for source in ("ibpo/synthetic_arith", "openai/gsm8k"):
        assert KNOWN_DATA_SOURCES[source] == "math"
        assert compute_score(source, "12*3 = 36\nAnswer: 36", "36")["score"] == 1.0
        assert compute_score(source, "Answer: 35", "36")["score"] == 0.0


@pytest.mark.parametrize("response", [
    r"\boxed{\dfrac{5^{(5^{(5^{(5^5)})} - 4)} - 5}{16}}",  # math-verify issue #65: hangs without a hard kill
    r"\boxed{2003^{2002^{2001}}}",
    r"\boxed{9^{9^{9^{9^{9}}}}!}",
])
def test_pathological_answers_return_within_bound(response):
    bound = 3.0
    get_math_pool().warm_up(1)
    start = time.monotonic()
    result = compute_math_score(response, "3", timeout_s=bound)
    elapsed = time.monotonic() - start
    assert result["score"] == 0.0
    assert result["verdict"] in ("timeout", "wrong_answer", "memory_limit")
    assert elapsed < bound + 2.5, elapsed  # kill + (possibly) a fresh worker's start
    assert compute_math_score(r"\boxed{3}", "3")["verdict"] == "correct"  # the pool recovered


def test_bad_gold_raises_with_row_and_field():
    with pytest.raises(BadGroundTruth, match=r"data_source='aime25' \(index=7\), field reward_model.ground_truth"):
        compute_score("aime25", r"\boxed{1}", "", extra_info={"index": 7})
