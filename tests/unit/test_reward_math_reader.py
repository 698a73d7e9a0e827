"""Round four of the math verifier (issue 36): hedges after a box in every wrapper, ONE normalisation of what
the reader sees, and linear-time transforms (deep grouping braces). Every widened rule is tested against the
hedge it must not admit, every stricter rule against the legal twin it must still admit (README "Math")."""

import pytest

from reward_fns import compute_score
from reward_fns.extract import (INVISIBLE_CHARS, answer_for_parsing, extract_math_answer, line_after_box_hedged,
                                normalise_answer, reader_text, strip_grouping_braces)


def verdict(response: str, gold: str = "70", source: str = "math_dapo") -> str:
    return compute_score(source, response, gold)["verdict"]


WRAPPERS = [("", ""), ("$", "$"), ("$$", "$$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**"),
            ("\\begin{equation}", "\\end{equation}")]
HEDGES_AFTER = [" (or 71)", " or 71", " (maybe 71)", " (approximately)", ". Or 71.", " OR 71", " Or 71", " — or 71",
                " - or 71", " \\quad \\text{or} \\quad 71", " [or 71]", " (maybe)", " (roughly)", "  71",
                " (71 also works)", " (seventy-one also works)", " — wait, no, 71.", " Actually it is 71.",
                " Wait, that's wrong.", " (not sure)", "?", " (or so)", " \\approx 71", " oder 71", " ou 71",
                " 或 71", " (约)", " (ungefähr)", " \\qquad (\\text{or } 71)", " , alternatively 71",
                " ｏｒ ７１", " \u200bor 71", " \x1b[1mor 71\x1b[0m"]
ADMITTED_AFTER = ["", ".", " (in dollars)", " is the final answer.", " \\text{ cm}^2", " apples.",
                  " (the total number of apples)", "\nor 71 would need another carry, which we ruled out.",
                  "\n\nOr 71? No: see above.", "<!-- or 71 -->", " \\qquad \\blacksquare"]


@pytest.mark.parametrize("left, right", WRAPPERS, ids=[w[0] or "plain" for w in WRAPPERS])
def test_a_hedge_after_the_box_voids_it_in_every_wrapper(left, right):
    admitted_hedges = [h for h in HEDGES_AFTER if verdict(f"{left}\\boxed{{70}}{right}{h}") == "correct"]
    assert not admitted_hedges, (left, admitted_hedges)


@pytest.mark.parametrize("left, right", WRAPPERS, ids=[w[0] or "plain" for w in WRAPPERS])
def test_explanations_and_the_next_line_are_not_hedges(left, right):
    refused = [(a, v) for a in ADMITTED_AFTER if (v := verdict(f"{left}\\boxed{{70}}{right}{a}")) != "correct"]
    assert not refused, (left, refused)


def test_display_math_closing_on_the_next_line_is_part_of_the_box_line():
    assert verdict("\\[\n\\boxed{70}\n\\] (or 71)") == "wrong_answer"
    assert verdict("\\[\n\\boxed{70}\n\\]\nor 71 would need a carry.") == "correct"
    assert line_after_box_hedged("\\boxed{70} or 71", len("\\boxed{70}"))
    assert not line_after_box_hedged("\\boxed{70}\nor 71", len("\\boxed{70}"))


@pytest.mark.parametrize("response, expected", [
    (r"\boxed{70 \text{ or seventy-one}}", "wrong_answer"),   # a hedge inside the box, in words
    (r"\boxed{70 \text{ (maybe)}}", "wrong_answer"),
    (r"\boxed{70 \text{ (the count)}}", "correct"),            # its explanatory twin
    ("Answer: 70 (seventy-one also works)", "wrong_answer"),
    ("Answer: 70 (the total number of apples)", "correct"),
    ("Answer: 70 OR 71", "wrong_answer"), ("Answer: 70 [or 71]", "wrong_answer"),
    ("Answer: 70 — or 71", "wrong_answer"), ("Answer: 70 (vielleicht 71)", "wrong_answer"),
    ("Answer: 70", "correct"), ("Answer: 70 marbles", "correct"),
])
def test_hedges_in_words_inside_the_answer(response, expected):
    assert verdict(response) == expected


def test_a_box_in_an_html_comment_is_not_seen():
    assert verdict("<!-- \\boxed{70} -->") == "no_answer"
    assert verdict("The answer is in the box. <!-- \\boxed{70}") == "no_answer"  # unclosed: hides the rest
    assert verdict("\\boxed{70} <!-- \\boxed{71} -->") == "correct"
    assert verdict("\\boxed{71} <!-- \\boxed{70} -->") == "wrong_answer"
    assert verdict("<!-- draft: \\boxed{71} -->\nAnswer: 70") == "correct"


def test_two_final_boxes_joined_by_a_hedge_stay_two_values():
    for joiner in (" OR ", " Or ", " or ", " — or ", " \\quad\\text{or}\\quad "):
        assert verdict(f"$\\boxed{{70}}${joiner}$\\boxed{{71}}$") == "wrong_answer", joiner


# ----------------------------------------------------------------------------------- one normalisation
@pytest.mark.parametrize("raw, seen", [
    ("1\u2007000", "1 000"), ("1\u00a0000", "1 000"), ("1\u202f000", "1 000"), ("1\u2009000", "1 000"),
    ("7\u200b0", "70"), ("7\u00ad0", "70"), ("7\u2060\ufeff0", "70"), ("\u200e70\u200f", "70"),
    ("𝟕𝟎", "70"), ("٧٠", "70"), ("۷۰", "70"), ("७०", "70"), ("７０", "70"), ("\uff0d70", "-70"),
    ("7\x1b[31m0\x1b[0m", "70"), ("\x1b]0;title\x077\x1b[1;4m0", "70"), ("Ａｎｓｗｅｒ：７０", "Answer:70"),
    ("2½", "2½"), ("x²", "x²"), ("x₁", "x₁"), ("−70", "−70"), ("a<!-- b -->c", "ac"), ("a<!-- b", "a"),
])
def test_reader_text_is_what_the_reader_sees(raw, seen):
    assert reader_text(raw) == seen


def test_every_named_invisible_character_is_removed():
    assert reader_text("7" + INVISIBLE_CHARS + "0") == "70"


@pytest.mark.parametrize("response, gold, expected", [
    ("\\boxed{1\u2007000}", "1000", "correct"), ("\\boxed{1\u00a0000}", "1000", "correct"),
    ("\\boxed{1\u20070\u20070\u20070}", "1000", "wrong_answer"),   # groups of one digit: not thousands
    ("\\boxed{7\u200b0}", "70", "correct"), ("\\boxed{7\u00ad0}", "70", "correct"),
    ("\\boxed{7\u200b1}", "70", "wrong_answer"),
    ("\\boxed{𝟕𝟎}", "70", "correct"), ("\\boxed{٧٠}", "70", "correct"), ("\\boxed{٧١}", "70", "wrong_answer"),
    ("\\boxed{\uff0d70}", "-70", "correct"), ("\\boxed{\uff0d70}", "70", "wrong_answer"),
    ("\\boxed{7\x1b[31m0\x1b[0m}", "70", "correct"), ("\\boxed{7\x1b[31m1\x1b[0m}", "70", "wrong_answer"),
    ("\\boxed{2½}", "5/2", "correct"), ("\\boxed{x²}", "x^2", "correct"), ("\\boxed{x²}", "2x", "wrong_answer"),
    ("\\boxed{７０} ｏｒ ７１", "70", "wrong_answer"), ("Ａｎｓｗｅｒ：７０", "70", "correct"),
])
def test_the_verifier_reads_what_the_reader_sees(response, gold, expected):
    assert verdict(response, gold) == expected


# ------------------------------------------------------------------------------------- linear transforms
@pytest.mark.parametrize("levels", [30, 31, 200, 20000])
def test_a_right_answer_inside_deep_grouping_braces_scores(levels):
    assert verdict("\\boxed{" + "{" * levels + "70" + "}" * levels + "}") == "correct"
    assert verdict("\\boxed{" + "{ " * levels + "71" + " }" * levels + "}") == "wrong_answer"


def test_grouping_braces_are_stripped_in_one_pass_whatever_the_depth():
    # the string math-verify parses holds no brace at all, so its parser never recurses on them
    assert answer_for_parsing("{" * 100000 + "(1, 2)" + "}" * 100000) == "(1, 2)"
    assert strip_grouping_braces("{{1}{2}}") == "{1}{2}"       # braces that do not wrap the whole stay
    assert strip_grouping_braces("{1}+{2}") == "{1}+{2}"
    assert strip_grouping_braces("{\\{1\\}}") == "\\{1\\}"      # an escaped brace is a set, not grouping
    assert normalise_answer("**" * 50000 + "$70$" + "**" * 50000 + ".") == "70"
    assert extract_math_answer("\\boxed{" + "\\(" * 3000 + "70" + "\\)" * 3000 + "}") == ("70", "boxed")
