"""Round two of the math verifier (issue 20, issue 17 item 5): every leniency rule of reward_fns/README.md
("Leniency rules") with the forms it admits AND the hedges it must not admit; numbers compared without
fixed-decimal rounding; doubt after a stated answer; unusable golds raise."""

import pytest

import reward_fns
from reward_fns import BadGroundTruth, check_ground_truth, compute_score
from reward_fns.extract import colon_form, gold_problem, math_final_text, rewrite_admitted_forms


def verdict(response: str, gold: str, source: str = "math_dapo") -> str:
    return compute_score(source, response, gold)["verdict"]


# (rule, gold, admitted responses, hedged responses that must stay wrong)
RULES = [
    ("box syntax and decorations", "70",
     [r"\boxed {70}", r"\boxed{70}^\circ", r"$\boxed{70}^{\circ}$", r"\boxed{70} \blacksquare", r"\boxed{70}\qed",
      r"\textbf{\boxed{70}}", r"{\boxed{70}}", "<b>\\boxed{70}</b>", "<strong>$\\boxed{70}$</strong>",
      r"$\Rightarrow \boxed{70}$", r"so => \boxed{70}", r"\implies \boxed{70}", r"\boxed{70}\,\mathrm{cm}",
      r"**\boxed{70}**", r"\fbox {70}"],
     [r"\boxed{70}^2", r"\boxed{70} + 1", r"{\boxed{70}}^2", r"\frac{1}{\boxed{70}}", r"2\boxed{70}",
      r"\boxed{70} \text{ (or 71)}", r"\boxed{70} (maybe 71)", r"\boxed{70} or 71", r"\boxed{70}\approx 71",
      r"\boxed{70} or \boxed{71}", r"^{\boxed{70}}", r"**\boxed{71}** or **\boxed{70}**",
      r"\textbf{\boxed{71}} or \textbf{\boxed{70}}", "<b>\\boxed{71}</b> or <b>\\boxed{70}</b>",
      r"{\boxed{71}} or {\boxed{70}}"]),
    ("labelled statement", "70",
     [r"\boxed{m+n=70}", r"\boxed{70 = x}", r"\boxed{|AB| = 70}", r"\boxed{\angle ABC = 70^\circ}",
      r"\boxed{[ABC]=70}", r"\boxed{a_1 + a_2 = 70}", r"\boxed{f(3) = 70}", r"\boxed{\overline{AB} = 70}",
      r"\boxed{N = 70}"],
     [r"\boxed{x + 1 = 70}", r"\boxed{2x = 70}", r"\boxed{m+n = 71}", r"\boxed{x = 70 = y + 1}",
      r"\boxed{70 = 71}", r"\boxed{x = 70, y = 71}", r"\boxed{m + n \approx 70}", r"\boxed{x \ge 70}",
      r"\boxed{70 = 2 \cdot 35 = x}"]),
    ("congruence", "3",
     [r"\boxed{x \equiv 3 \pmod{7}}", r"\boxed{N \equiv 3 \pmod 7}",
      r"\boxed{\equiv 3 \ (\mathrm{mod}\ 7)}", r"\boxed{x \equiv 3 \bmod 7}"],
     [r"\boxed{x \equiv 4 \pmod{7}}", r"\boxed{x \equiv 3, 4 \pmod 7}", r"\boxed{x+1 \equiv 3 \pmod 7}",
      r"\boxed{3 \equiv 10 \pmod 7}", r"\boxed{3 \pmod 7}"]),  # "3 mod 7" alone is an expression
    ("several named values", "(1, 2)",
     [r"\boxed{x = 1,\ y = 2}", r"\boxed{x=1, y=2}", r"$x = \boxed{1}$ and $y = \boxed{2}$"],
     [r"\boxed{x = 1, y = 3}", r"\boxed{x = 1}", r"\boxed{x = 1, y = 2, z = 3}"]),
    ("plus-minus for two roots", r"-1+\sqrt{3}, -1-\sqrt{3}",
     [r"\boxed{-1 \pm \sqrt{3}}", r"\boxed{x = -1 \pm \sqrt{3}}", r"\boxed{-1 ± \sqrt{3}}"],
     [r"\boxed{-1 + \sqrt{3}}", r"\boxed{1 \pm \sqrt{3}}", r"\boxed{-1 \pm \sqrt{2}}"]),
    ("plus-minus is a hedge for one value", "70", [], [r"\boxed{70 \pm 1}", r"\boxed{\pm 70}", r"\boxed{70 ± 0}"]),
    ("Unicode math", r"\frac{1}{2}", [r"\boxed{½}", "Answer: ½", r"\boxed{1/2}"], [r"\boxed{⅓}", r"\boxed{2½}"]),
    ("Unicode roots and powers", r"4\sqrt{2}", [r"\boxed{4√2}", r"\boxed{2²√2}"], [r"\boxed{4√3}", r"\boxed{2³√2}"]),
    ("Unicode degrees", "70", [r"\boxed{70°}", "Answer: 70°"], [r"\boxed{71°}", r"\boxed{70°±1°}"]),
    ("repeating decimal", r"\frac{1}{3}", [r"\boxed{0.\overline{3}}", r"\boxed{0.(3)}", r"\boxed{0.\dot{3}}"],
     [r"\boxed{0.3}", r"\boxed{0.33}", r"\boxed{0.\overline{33}4}"]),
    ("repeating decimal with a fixed part", r"\frac{1}{6}", [r"\boxed{0.1\overline{6}}", r"\boxed{0.1(6)}"],
     [r"\boxed{0.\overline{16}}", r"\boxed{0.16}"]),
    ("thousands", "1000000", [r"\boxed{1 000 000}", r"\boxed{1\,000\,000}", r"\boxed{1{,}000{,}000}",
                              r"\boxed{1,000,000}", "Answer: 1\u202f000\u202f000"],
     [r"\boxed{1 000 001}", r"\boxed{10 000 00}", r"\boxed{1 0 0 0 0 0 0}", r"\boxed{1000 000 0}"]),
    ("colon gold", "12:00", [r"\boxed{12:00}", r"\boxed{12 : 00}", r"\boxed{\text{12:00}}", "Answer: 12:00",
                             r"\boxed{12\colon 00}"],
     [r"\boxed{12:01}", r"\boxed{12}", r"\boxed{12:00 \text{ or } 1:00}", r"\boxed{1:00}"]),
    ("answer-line decorations", "70",
     ["Answer: `70`", "Answer: 70[^1]\n\n[^1]: computed above", "Answer：70", "Answer: 70 marbles",
      "Answer: 70\n\nWhy this answer: it satisfies every condition we found", "**Answer:** 70 square units",
      "Answer: 70\n\nThe last line of your response should be of the form Answer: $Answer",
      "Final Answer: The final answer is $70$. I hope it is correct.", "Answer: 70 (units)", "Answer: 70 cm^2",
      "Answer: $70$ dollars.", "Answer:\n70", "Answer:\n\n$70$\n", "**Final Answer:** 70", "ANSWER: 70",
      "So the answer: 70", "Therefore, the final answer: $70$", "1. Answer: 70"],
     ["Answer: `71`", "Answer: 70 or 71", "Answer: 70?", "Answer: 70 (or 71)", "Answer: 70 or more",
      "Answer:\n70 or 71", "Answer: 70 (approximately)", "Answer: 71 dollars", "Answer: 70 thousand",
      "Answer: 70 squared", "Answer: 70 pi", "Answer: 70 percent of 71", "Answer: approximately 70", "Answer: 70 not 71",
      "Final Answer: The final answer is $71$. I hope it is correct.", "Answer: 71\n\nWhy this answer: 70 fits"]),
    ("compound units", "70",
     ["Answer: 70 km/h", "Answer: 70 m/s^2", "Answer: 70 m/s²", "Answer: $70$ miles per hour", "Answer: 70 km / h",
      r"\boxed{70}\,\mathrm{km}/\mathrm{h}", r"\boxed{70} \text{ km/h}", r"\boxed{70 \text{ km}/\text{h}}",
      r"\boxed{70\text{ m/s}^2}", r"\boxed{70 \, \mathrm{m}/\mathrm{s}}", r"Answer: $70\ \mathrm{km/h}$",
      r"Answer: 70 \text{ km}/\text{h}", "Answer: 70 N/m"],
     ["Answer: 70 km/2", r"\boxed{70 \text{ km}/2}", "Answer: 70 km/h or 71", "Answer: 70 km/h (maybe 71)",
      r"\boxed{70\text{ km}/\text{h} \text{ or } 71}", r"\boxed{70 \text{ km/h}}^2", r"\boxed{70}/h", "Answer: 70 / 2",
      r"\boxed{70 \text{ km/h (approx.)}}", "Answer: 70 miles per 2 hours", "Answer: 71 km/h",
      "Answer: 70 thousand km/h", "Answer: 70 km/h approximately"]),
    ("explanatory parenthesis", "70",
     ["Answer: 70 (the total number of apples)", r"\boxed{70} (the number of marbles)", r"\boxed{70} (in dollars)",
      r"$\boxed{70}$ (this is the final count).", r"\boxed{70 \text{ (the number of apples)}}",
      r"\boxed{70} \text{ (the count)}", "Answer: 70 (students in all)"],
     [r"\boxed{70} (or 71)", "Answer: 70 (rounded)", r"\boxed{70} (rounded to the nearest integer)",
      "Answer: 70 (estimated)", r"\boxed{70} (approx.)", "Answer: 70 (if x>0)", r"\boxed{70} (not 71)",
      r"\boxed{70} (give or take)", "Answer: 70 (at least)", "Answer: 70 (or so)", "Answer: 70 (in thousands)",
      r"\boxed{70\text{ (or 71)}}", "Answer: 70 (71 with the teacher)", "Answer: 71 (the total number of apples)"]),
    # before: math-verify drops \text{} inside a box, so a word or bracket there that changes the value scored right
    ("value-changing text beside the answer", "70",
     [r"\boxed{70 \text{ ways}}", r"\boxed{70\text{ km}}", r"\boxed{70 \text{ percent}}", r"\boxed{70\text{ K}}",
      r"$\boxed{70}$ is the remainder.", r"\boxed{70} is the larger root", r"\boxed{70 \text{ (the count)}}"],
     [r"\boxed{70 \text{ squared}}", r"\boxed{70 \text{ pi}}", r"\boxed{70\text{k}}", r"\boxed{70\mathrm{k}}",
      r"\boxed{70\text{ bn}}", r"\boxed{70 \text{ lakh}}", r"\boxed{70\text{ish}}", r"\boxed{70\text{?}}",
      r"\boxed{70\text{+}}", r"\boxed{70 \text{ (}71\text{)}}", r"\boxed{70 \text{ [} 71 \text{]}}",
      r"\boxed{70 \text{ halved}}", r"\boxed{70}\text{ squared}", r"\boxed{70} cubed", r"\boxed{70} k",
      r"\boxed{70}\text{k}", r"\boxed{70}ish", r"\boxed{70} factorial", r"\boxed{70} pi"]),
    ("stray </think>", "70",
     ["<think>so 70</think>The answer is \\boxed{70}</think>", "<think>x</think>\\boxed{70}\n</think>\nDone.",
      "reasoning</think>Final: \\boxed{70}</think>"],
     ["<think>\\boxed{70}</think>", "<think>x</think>\\boxed{71}</think>", "<think>\\boxed{70} unfinished"]),
]


@pytest.mark.parametrize("rule, gold, admitted, hedges", RULES, ids=[r[0] for r in RULES])
def test_leniency_rule_admits_its_forms_and_not_its_hedges(rule, gold, admitted, hedges):
    wrong_admitted = [(r, v) for r in admitted if (v := verdict(r, gold)) != "correct"]
    admitted_hedges = [r for r in hedges if verdict(r, gold) == "correct"]
    assert not wrong_admitted, (rule, wrong_admitted)
    assert not admitted_hedges, (rule, admitted_hedges)


def test_rewrites_are_rule_by_rule():
    assert rewrite_admitted_forms(r"m+n=70", "70") == "70"
    assert rewrite_admitted_forms(r"x + 1 = 70", "70") == "x + 1 = 70"        # an equation, not a name
    assert rewrite_admitted_forms(r"x = 1,\ y = 2", "(1, 2)") == "1, 2"
    assert rewrite_admitted_forms(r"x = 3", "x = 3") == "x = 3"                # a gold with "=" keeps it
    assert rewrite_admitted_forms(r"1 \pm \sqrt{2}", "3") == r"1 \pm \sqrt{2}"  # one-value gold: stays a hedge
    assert rewrite_admitted_forms(r"0.1\overline{6}", "1/6") == r"\frac{15}{90}"
    assert rewrite_admitted_forms("1 000", "1000") == "1000"
    assert rewrite_admitted_forms("1 000", "1, 000") == "1 000"                # a two-value gold: not thousands
    assert colon_form(r"\text{12 : 00}") == "12:00" and colon_form("12") is None


def test_math_final_text():
    assert math_final_text("<think>a</think>\\boxed{1}</think>") == "\\boxed{1}\n"
    assert math_final_text("<think>a</think>x</think> \\boxed{2}") == " \\boxed{2}"   # an answer after the last
    assert math_final_text("<think>never closed") is None
    assert math_final_text("<think>a</think>b</think><think>c</think>") == ""         # reopened: after the last


# --------------------------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("gold, response, expected", [
    ("2^{-30}", r"\boxed{0.0}", "wrong_answer"),
    ("2^{-30}", r"\boxed{0}", "wrong_answer"),
    (r"\frac{1}{2006!}", r"\boxed{0.000000}", "wrong_answer"),
    ("2^{-30}", r"\boxed{9.3132257e-10}", "wrong_answer"),       # an approximation of an exact gold
    ("2^{-30}", r"\boxed{9.31322574615478515625e-10}", "correct"),  # the exact value, written as a decimal
    ("2^{-30}", r"\boxed{8.3132257e-10}", "wrong_answer"),
    ("100000000000000000001", r"\boxed{1e20}", "wrong_answer"),
    ("100000000000000000001", r"\boxed{1.0 \times 10^{20}}", "wrong_answer"),
    (r"10^{20}+1", r"\boxed{1.0 \times 10^{20}}", "wrong_answer"),
    (r"10^{20}+1", r"\boxed{1.00000000000000000001 \times 10^{20}}", "correct"),
    ("100000000000000000001", r"\boxed{100000000000000000000}", "wrong_answer"),
    ("100000000000000000001", r"\boxed{100000000000000000001}", "correct"),
    ("100000000000000000001", r"\boxed{10^{20}+1}", "correct"),
    (r"2^{25} \cdot 26!", r"\boxed{2^{25} \cdot 26! + 1}", "wrong_answer"),
    ("70", r"\boxed{70.0}", "correct"),
    ("2500", r"\boxed{2.5 \times 10^{3}}", "correct"),
    ("70", r"\boxed{70.0000001}", "wrong_answer"),
    (r"\pi", r"\boxed{3.14159}", "wrong_answer"),                # symbolic gold: no decimal is it
    (r"\pi", r"\boxed{3.14159265358979}", "wrong_answer"),
    (r"\pi", r"\boxed{3.14}", "wrong_answer"),
    (r"2\pi", r"\boxed{6.283185}", "wrong_answer"),
    ("e", r"\boxed{2.718281828}", "wrong_answer"),
    (r"\sqrt{2}", r"\boxed{1.41421356}", "wrong_answer"),
    (r"\frac{\sqrt{3}}{2}", r"\boxed{0.8660254}", "wrong_answer"),
    (r"\frac{1}{3}", r"\boxed{0.333333}", "wrong_answer"),
    (r"\frac{1}{3}", r"\boxed{0.3333333333333}", "wrong_answer"),
    (r"\frac{1}{4}", r"\boxed{0.25}", "correct"),                 # a decimal that IS the gold
    (r"\frac{7}{8}", r"\boxed{0.875}", "correct"),
    (r"\pi", r"\boxed{\pi}", "correct"),
    (r"\sqrt{2}", r"\boxed{\frac{2}{\sqrt{2}}}", "correct"),
    ("0.5", r"\boxed{\frac{1}{2}}", "correct"),                   # a decimal gold: the problem asked for one
    ("0.5", r"\boxed{0.50}", "correct"),
    ("0.5", r"\boxed{0.46}", "wrong_answer"),
    ("0.125", r"\boxed{\frac{1}{8}}", "correct"),
    ("3.14", r"\boxed{3.14}", "correct"),
    ("3.14", r"\boxed{3.14159}", "wrong_answer"),                 # not the stated decimal
    ("3.14", r"\boxed{\pi}", "wrong_answer"),
    ("1.5", r"\boxed{1.5000001}", "correct"),                     # relative 7e-8: representation noise
    ("0.0015", r"\boxed{1.5 \times 10^{-3}}", "correct"),
    ("0.0015", r"\boxed{0.0016}", "wrong_answer"),
    (r"\frac{\pi}{10^{20}}", r"\boxed{\frac{3}{10^{20}}}", "wrong_answer"),
])
def test_a_decimal_matches_only_a_decimal_gold_or_the_exact_value(gold, response, expected):
    assert verdict(response, gold) == expected


# --------------------------------------------------------------------------------------- stated answers
@pytest.mark.parametrize("response, expected", [
    ("The answer is 70? Not sure.", "no_answer"),
    ("So the answer is 70. Not sure though.", "no_answer"),
    ("The answer is $70$. Maybe.", "no_answer"),
    ("The final answer is $70$. Let me double-check this.", "no_answer"),
    ("The final answer is $70$. I hope it is correct.", "correct"),
    ("So the answer is 70.", "correct"),
    ("Is the answer 70? Let us see.", "no_answer"),
])
def test_doubt_withdraws_a_stated_answer(response, expected):
    assert verdict(response, "70", source="aime25") == expected


# ---------------------------------------------------------------------------------------------- contract
@pytest.mark.parametrize("gold", [r"\frac{1}{", "{70", "70}", "some words", "the answer is seventy", "",
                                  "   ", r"\sqrt", r"x^", r"\left( 1, 2", "$70"])
def test_unusable_gold_raises_and_never_scores_zero(gold):
    for response in (r"\boxed{70}", "no answer at all", ""):
        with pytest.raises(BadGroundTruth) as info:
            compute_score("math_dapo", response, gold, {"index": 7})
        assert "index=7" in str(info.value) and "reward_model.ground_truth" in str(info.value)
    with pytest.raises(BadGroundTruth):
        check_ground_truth("math_dapo", gold, {"index": 7})


@pytest.mark.parametrize("gold", ["70", r"\frac{1}{576}", r"2^{25} \cdot 26!", r"\sqrt{23}-2 \sqrt{3}", "12:00",
                                  r"\frac{1+\sqrt{5}}{2}, \frac{1-\sqrt{5}}{2}", r"\left(-\infty, 2\right]",
                                  r"\text{odd}", "0.5", r"50\%", r"x \le 3", "(1, 2)", "Alice"])
def test_usable_golds_pass_both_checks(gold):
    assert gold_problem(gold) is None
    check_ground_truth("hmmt_feb_2025", gold, thorough=True)
    assert verdict(rf"\boxed{{{gold}}}", gold) == "correct"


def test_check_ground_truth_contract():
    with pytest.raises(reward_fns.UnknownDataSource):
        check_ground_truth("nope", "70")
    with pytest.raises(reward_fns.BadCodeGroundTruth) as info:
        check_ground_truth("livecodebench_v6", "not tests", {"question_id": "q1"})
    assert "question_id='q1'" in str(info.value)
    check_ground_truth("livecodebench_v6", reward_fns.encode_tests({"inputs": ["1"], "outputs": ["1"]}))
    with pytest.raises(BadGroundTruth):
        check_ground_truth("aime25", 70)  # not a string (the pre-flight converts ints when it means to)


# ------------------------------------------------------------------------ every gold math-verify accepts
# "Unusable" means what math-verify cannot parse, not what a fast check does not know: each form below is a gold
# math-verify parses, and a right answer (the same form or an equivalent one) scores while a wrong one does not.
# lab/scripts/measure_gold_forms.py measures the same on math-verify's own test cases (README).
GOLD_FORMS = [
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}",
     [r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", r"\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}",
      r"\begin{pmatrix}1&2\\3&4\end{pmatrix}"],
     [r"\begin{pmatrix} 1 & 2 \\ 3 & 5 \end{pmatrix}", r"\begin{pmatrix} 1 & 3 \\ 2 & 4 \end{pmatrix}"]),
    (r"\begin{pmatrix} -1 \\ 2 \end{pmatrix}", [r"\begin{bmatrix} -1 \\ 2 \end{bmatrix}"],
     [r"\begin{pmatrix} 2 \\ -1 \end{pmatrix}", r"\begin{pmatrix} -1 & 2 \end{pmatrix}"]),
    (r"\begin{bmatrix} 0 & 3 \\ 0 & -1 \end{bmatrix}", [r"\begin{pmatrix} 0 & 3 \\ 0 & -1 \end{pmatrix}"],
     [r"\begin{pmatrix} 0 & 3 \\ 0 & 1 \end{pmatrix}"]),
    (r"\{1, 2, 3\}", [r"\{3, 2, 1\}", r"\{1,2,3\}"], [r"\{1, 2\}", r"\{1, 2, 4\}"]),
    ("(1, 2]", ["(1, 2]", "(1,2]"], ["[1, 2]", "(1, 2)"]),
    (r"[0, \infty)", [r"[0, \infty)"], [r"(0, \infty)"]),
    (r"(-\infty, 0) \cup (1, \infty)", [r"(-\infty, 0) \cup (1, \infty)"], [r"(-\infty, 0] \cup (1, \infty)"]),
    ("(3, 4)", ["(3, 4)", "(3,4)"], ["(4, 3)", "(3, 5)"]),
    ("y = 2x + 1", ["y = 2x + 1", "y = 1 + 2x"], ["y = 2x - 1"]),
    ("14,916", ["14,916", "14916", "14{,}916"], ["14,917"]),
    ("p=5,q=2;p=7,q=2", ["p=5,q=2;p=7,q=2"], ["p=5,q=2;p=7,q=3"]),
    (r"\frac{\sqrt{3}}{2}", [r"\frac{\sqrt{3}}{2}", r"\frac{\sqrt3}{2}"], [r"\frac{\sqrt{2}}{2}"]),
]


@pytest.mark.parametrize("gold, right, wrong", GOLD_FORMS, ids=[g for g, _, _ in GOLD_FORMS])
def test_every_gold_math_verify_accepts_scores_its_right_answers(gold, right, wrong):
    from reward_fns import check_ground_truth

    check_ground_truth("math_dapo", gold, thorough=True)  # never refused
    for answer in right:
        assert verdict(f"So \\boxed{{{answer}}}", gold) == "correct", answer
    for answer in wrong:
        assert verdict(f"So \\boxed{{{answer}}}", gold) == "wrong_answer", answer


def test_a_row_break_is_not_a_latex_space():
    from reward_fns.extract import rewrite_admitted_forms

    assert rewrite_admitted_forms(r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", "1") == r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}"
    assert rewrite_admitted_forms(r"1\ 000", "1000") == "1000"  # "\ " is still a space


def test_the_gold_form_measurement_reads_parametrized_golds(tmp_path):
    import importlib.util
    import sys
    from pathlib import Path

    (tmp_path / "test_x.py").write_text(
        'import pytest\n@pytest.mark.parametrize("gold,pred,expected", [("$1$", "1", 1), ("$[0,1)$", "x", 0)])\n'
        'def test_a(gold, pred, expected): pass\n'
        '@pytest.mark.parametrize("pred,gold", [("2", "$3$")])\ndef test_b(pred, gold): pass\n')
    path = Path(__file__).resolve().parents[2] / "lab" / "scripts" / "measure_gold_forms.py"
    spec = importlib.util.spec_from_file_location("ibpo_measure_gold_forms", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    assert mod.parametrized_golds(tmp_path) == ["$1$", "$[0,1)$", "$3$"]
