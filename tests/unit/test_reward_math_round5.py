"""Round five of the math verifier (issue 51): a numeral's base is part of its value (the false positive), and the
forms models and data sets write that were scored 0 -- each rule of reward_fns/README.md ("Leniency rules") tested
both ways: the right answer in the new form scores 1, and the hedge, the different value or the wrong relation in
the same form still scores 0."""

import pytest

from reward_fns import BadGroundTruth, check_ground_truth, compute_score
from reward_fns.extract import _bare_values, extract_math_answer, join_thousands, numeral_bases, percent_value


def verdict(response: str, gold: str) -> str:
    return compute_score("math_dapo", response, gold)["verdict"]


# (rule, gold, right answers in the admitted forms, hedges / different values / wrong relations in the same forms)
RULES = [
    # before: math-verify drops the subscript on both sides and the bases were never compared
    ("bases: same base", "101_2", [r"\boxed{101_2}", r"\boxed{101_{2}}", r"\boxed{101_{(2)}}", r"\boxed{101}"],  # a bare numeral: the asked base
     [r"\boxed{101_3}", r"\boxed{101_{3}}", r"\boxed{101_{10}}", r"\boxed{5_{10}}", r"\boxed{5}", r"\boxed{102_2}",
      r"\boxed{101_{\text{three}}}"]),
    ("bases: the other direction", "77_8", [r"\boxed{77_8}", r"\boxed{77_{8}}"],
     [r"\boxed{77_9}", r"\boxed{77_7}", r"\boxed{63_{10}}", r"\boxed{63}"]),
    ("bases: a base-10 gold", "101_3", [r"\boxed{101_3}"], [r"\boxed{101_2}", r"\boxed{101_{10}}"]),
    ("bases: a plain gold admits only _{10}", "77", [r"\boxed{77_{10}}", r"\boxed{77}"],
     [r"\boxed{77_8}", r"\boxed{77_{9}}", r"\boxed{77_2}"]),
    ("bases: a later sentence of the solution", "204_5",
     [r"for a quotient of $\boxed{204_5}$. Note that in the above calculation we have used that $13_5$ divided by "
      r"$2_5$ is $4_5$, which follows from $4_5\times2_5=8_{10}=13_5$.", r"$\boxed{204_5}$. So $204_5$."],
     [r"$\boxed{204_6}$. Note that $13_5$ is smaller.", r"$\boxed{204_5}$. Note that the answer is $13_5$.",
      r"$\boxed{204_5}$. So $13_5$.", r"$\boxed{204_5}$. Or $13_5$.", r"$\boxed{204_5}$. Note that $13_5$ is it.",
      r"$\boxed{204_5}$. Note that $x = 13_5$.", r"$\boxed{204_5}$. Here we used $13_5$, the correct answer."]),
    # before: any digit later on the box's line refused it
    ("restatement after the box", "14400",
     [r"So $\boxed{14400}$. Final Answer: The final answer is 14400. I hope it is correct.",
      r"So $\boxed{14400}$. Final Answer: The final answer is $14400$.", r"So $\boxed{14400}$. So 14,400 ways.",
      r"$\boxed{14400}$. The answer is $14{,}400$."],
     [r"So $\boxed{14400}$. Final Answer: The final answer is 14401. I hope it is correct.",
      r"So $\boxed{14400}$. Final Answer: The final answer is 14400 or 14401.", r"$\boxed{14400}$. So 14401 ways.",
      r"$\boxed{14400}$. Or 14401.", r"$\boxed{14400}$. Actually it is 14401.", r"$\boxed{14400}$. 14401.",
      r"$\boxed{14400}$. Is it 14400?", r"$\boxed{14400}$. So $x \approx 14400$.", r"$\boxed{14400}$. Or more.",
      r"$\boxed{14400}$. Note that 14401 also works.", r"$\boxed{14400}$. Note that 14401 is the answer.",
      r"$\boxed{14400}$. So fourteen thousand.", r"$\boxed{14400}$ or 14401. So 14400."]),
    # before: a different value STATED as the answer on a later line was outside the answer (RULE "next line")
    ("answer stated on a later line", "14400",
     ["So $\\boxed{14400}$.\n\nFinal Answer: The final answer is $14400$. I hope it is correct.",
      "So $\\boxed{14400}$.\n\nThe answer is 14400.", "So $\\boxed{14400}$.\n\nFinal answer: 14,400",
      "So $\\boxed{14400}$.\n\n**Final Answer:** $14400$", "So $\\boxed{14400}$.\n\nTherefore, the answer is $120^2$.",
      "So $\\boxed{14400}$.\n\nThe final answer is:\n\\[\n14400\n\\]",
      "So $\\boxed{14400}$.\nWe check: $120^2 = 14400$, and 14401 is prime.",  # not a statement of the answer
      "So $\\boxed{14400}$.\nIf the answer were 14401, the sum would be odd.",
      "So $\\boxed{14400}$.\nThe answer is reasonable."],
     ["So $\\boxed{14400}$.\n\nFinal Answer: The final answer is $14401$. I hope it is correct.",
      "So $\\boxed{14400}$.\n\nThe answer is 14401.", "So $\\boxed{14400}$.\n\nFinal answer: 14401",
      "So $\\boxed{14400}$.\n\n**Final Answer:** 14401", "So $\\boxed{14400}$.\n\n**The final answer is 14401.**",
      "So $\\boxed{14400}$.\n\nTherefore the answer is $14401$.", "So $\\boxed{14400}$.\n\nTHE ANSWER IS 14401",
      "So $\\boxed{14400}$.\n\nThe final answer is:\n\\[\n14401\n\\]", "So $\\boxed{14400}$.\n\nFinal answer:\n\n14401",
      "So $\\boxed{14400}$.\n\nThe final answer is $$14401$$",
      "So $\\boxed{14400}$.\nSome check.\nThe answer is 14401.",
      "So $\\boxed{14400}$.\n\nThe answer is 14400 or 14401.",
      "So $\\boxed{14400}$.\n\nThe answer is 14400. Actually, 14401.",
      "So $\\boxed{14400}$.\n\nThe answer is 14400?", "So $\\boxed{14400}$.\n\nThe answer is $x \\approx 14400$.",
      "So $\\boxed{14400}$.\n\nThe answer is $14400.5$.", "So $\\boxed{14400}$.\n\nThe answer is -14400."]),
    ("answer stated on a later line, other forms", r"\frac{1}{2}",
     ["$\\boxed{\\frac{1}{2}}$\n\nThe answer is 1/2.", "$\\boxed{\\frac{1}{2}}$\n\nThe answer is $0.5$.",
      "$\\boxed{\\frac{1}{2}}$\nFinal Answer: The final answer is $\\dfrac{1}{2}$."],
     ["$\\boxed{\\frac{1}{2}}$\n\nThe answer is 1/3.", "$\\boxed{\\frac{1}{2}}$\n\nThe answer is $0.499$.",
      "$\\boxed{\\frac{1}{2}}$\n\nThe answer is $\\frac{1}{2} < 1$.",
      "$\\boxed{\\frac{1}{2}}$\n\nThe answer is about 1/2."]),
    ("answer stated on a later line, a base", "101_2",
     ["$\\boxed{101_2}$\n\nThe answer is $101_2$."], ["$\\boxed{101_2}$\n\nThe answer is $101_3$."]),
    ("answer stated on a later line after a modulus", "9",
     ["$x \\equiv \\boxed{9} \\pmod{11}$\n\nThe answer is 9."],
     ["$x \\equiv \\boxed{9} \\pmod{11}$\n\nThe answer is 10."]),
    ("answer stated on a later line after several boxes", "3, 5",
     ["$x=\\boxed{3}$ and $x=\\boxed{5}$\n\nThe answer is 3 and 5."],
     ["$x=\\boxed{3}$ and $x=\\boxed{5}$\n\nThe answer is 3 and 6.",
      "$x=\\boxed{3}$ and $x=\\boxed{5}$\n\nThe answer is 3."]),
    # before: a restated expression or fraction was compared as text (x^2 read as x: a unit's exponent), so the
    # same value in another spelling was a second value
    ("a restatement compared by value", "x^2+1",
     ["So $\\boxed{x^2+1}$. Final Answer: The final answer is $x^2+1$.",
      "So $\\boxed{x^2+1}$. Final Answer: The final answer is $1+x^2$.",
      "So $\\boxed{x^2+1}$.\nFinal Answer: The final answer is $x^2+1$. I hope it is correct."],
     ["So $\\boxed{x^2+1}$. Final Answer: The final answer is $x^2+2$.",
      "So $\\boxed{x^2+1}$.\nFinal Answer: The final answer is $x^2+2$.", "So $\\boxed{x^2+1}$. So x^2+2.",
      "So $\\boxed{x^2+1}$. So $x^2+1 \\ge 1$.", "So $\\boxed{x^2+1}$. So $x^2+1$ or $x^2$.",
      "So $\\boxed{x^2+1}$. So $(x+1)^2$."]),
    ("a restated fraction compared by value", r"\frac12",
     [r"$\boxed{\frac12}$. That is 1/2.", r"$\boxed{\frac12}$. That is $0.5$.", r"$\boxed{\frac12}$. So $\frac{2}{4}$."],
     [r"$\boxed{\frac12}$. That is 1/3.", r"$\boxed{\frac12}$. That is 1/2 or 1/3.", r"$\boxed{\frac12}$. That is 0.51.",
      r"$\boxed{\frac12}$. That is about 0.5.", r"$\boxed{\frac12}$. That is 1/2 < 1."]),
    ("a restated product compared by value", "2x",
     [r"So $\boxed{2x}$. So 2x apples.", r"So $\boxed{2x}$. So $x \cdot 2$ apples."],
     [r"So $\boxed{2x}$. So 3x apples.", r"So $\boxed{2x}$. So 2x^2 apples.", r"So $\boxed{2x}$. So 2x or 3x apples.",
      r"So $\boxed{2x}$. So 2 apples."]),
    ("restatement after display math", r"20\%",
     [r"$$\frac{1}{5} \times 100\% = \boxed{20\%}$$ Final Answer: The final answer is $20\%$. I hope it is correct.",
      r"$$\boxed{20\%}.$$ Final Answer: The final answer is $20\%$."],
     [r"$$\boxed{20\%}$$ Final Answer: The final answer is $21\%$.", r"$$\boxed{20\%}$$ 21", r"$$\boxed{20\%}$$ or 21\%",
      r"\[\boxed{20\%}\] Or $21\%$."]),
    ("restatement in words", "70", [r"$\boxed{70}$. So 70 apples.", r"$\boxed{70}$. So $x = 70$."],
     [r"$\boxed{70}$. So 71 apples.", r"$\boxed{70}$. So $x = 71$.", r"$\boxed{70}$. So -70 apples.",
      r"$\boxed{70}$. So 7.0 apples.", r"$\boxed{70}$. It is 71.", r"$\boxed{70}$. So 70 apples. Wait, 71.",
      r"$\boxed{70}$. So 70 squared.", r"$\boxed{70}$. So 70 thousand.", r"$\boxed{70}$. So 70k.",
      r"$\boxed{70}$. So 70 + 1 = 71.", r"$\boxed{70}$. So $70^2$.", r"$\boxed{70}$. Check: 71 = 70 + 1."]),
    ("modulus after the box", "9",
     [r"$129^{34}+96^{38} \equiv \boxed{9} \pmod{11}.$", r"$x \equiv \boxed{9} \pmod{11}$",
      r"$x \equiv \boxed{9} \pmod {11}$. So 9."],
     [r"$x \equiv \boxed{8} \pmod{11}$", r"$\boxed{9} \pmod{11}$",  # without \equiv, "9 mod 11" is an expression
      r"$x \equiv \boxed{9} \pmod{11} + 1$", r"$x \equiv \boxed{9} \pmod{11}$ or 10"]),
    ("modulus the gold shares", r"9 \pmod{11}", [r"$x \equiv \boxed{9} \pmod{11}$", r"$\boxed{9} \pmod{11}$"],
     [r"$x \equiv \boxed{9} \pmod{13}$", r"$\boxed{8} \pmod{11}$"]),
    # before: 32,\!349 was two values and a gold 10,\!000 raised BadGroundTruth
    ("MATH thousands separator", "32349", [r"\boxed{32,\!349}", r"\boxed{32, \! 349}"],
     [r"\boxed{32,\!348}", r"\boxed{32,\!3490}", r"\boxed{3,\!2349}"]),
    ("MATH thousands separator in the gold", r"10,\!000", [r"\boxed{10,\!000}", r"\boxed{10000}", r"\boxed{10{,}000}",
                                                           r"\boxed{10,000}"],
     [r"\boxed{10,\!001}", r"\boxed{1000}", r"\boxed{10, 000}"]),
    # before: "(3,100)" was read as (3100) when the gold wrote "(3, 100)"
    ("a comma in a tuple separates", "(3, 100)", [r"\boxed{(3,100)}", r"\boxed{(3, 100)}"],
     [r"\boxed{(3100)}", r"\boxed{(3,101)}", r"\boxed{(100,3)}", r"\boxed{3100}"]),
    ("a comma in an interval separates", "[1, 100]", [r"\boxed{[1,100]}"], [r"\boxed{[1,101]}", r"\boxed{(1,100)}"]),
    ("an open interval", "(0, 125)", [r"\boxed{(0,125)}"], [r"\boxed{(0,126)}", r"\boxed{[0,125)}"]),
    ("a union of intervals", r"(2, 12) \cup (12, 102)", [r"\boxed{(2,12) \cup (12,102)}"],
     [r"\boxed{(2,12) \cup (12,103)}", r"\boxed{(2,12102)}"]),
    # before: a % gold was compared as text
    ("percent", r"28\%", [r"\boxed{28\%}", r"\boxed{28 \%}", r"\boxed{28%}", r"\boxed{28 percent}",
                          r"\boxed{28 \text{ percent}}", r"\boxed{28\text{\%}}", r"$\boxed{28}\%$", r"$\boxed{28}$ percent",
                          r"the loss is $\boxed{28}\%$. So $28\%$."],
     [r"\boxed{29\%}", r"\boxed{28\% \text{ or } 29\%}", r"\boxed{\approx 28\%}", r"\boxed{0.28\%}",
      r"\boxed{28}",  # a % gold still wants the percent (unchanged)
      r"$\boxed{28\%}$ or 29\%", r"$\boxed{29}\%$", r"$\boxed{28}\% + 1$", r"$\boxed{28}\%$ or 29",
      r"$\boxed{28}$ percentage points"]),
    ("a percent mark after the box, plain gold", "28", [r"$\boxed{28}\%$", r"$\boxed{28}$ percent"],
     [r"$\boxed{27}\%$", r"$\boxed{28}\%$ or 29"]),
    ("percent, spaced gold", r"28 \%", [r"\boxed{28\%}", r"\boxed{28 percent}"], [r"\boxed{27 \%}"]),
    ("percent, plain sign gold", "28%", [r"\boxed{28\%}", r"\boxed{28 \text{ percent}}"], [r"\boxed{28.5\%}"]),
    # before: each spelling of one relation was refused against the others
    ("greater or equal", r"x \ge 3", [r"\boxed{x \geq 3}", r"\boxed{x >= 3}", r"\boxed{x \ge 3}", r"\boxed{x ≥ 3}",
                                      r"\boxed{x \geqslant 3}"],
     [r"\boxed{x > 3}", r"\boxed{x \gt 3}", r"\boxed{x \le 3}", r"\boxed{x \geq 4}", r"\boxed{x = 3}"]),
    ("a flipped inequality", r"x \le 5", [r"\boxed{5 \geq x}", r"\boxed{5 \ge x}", r"\boxed{-x \ge -5}"],
     [r"\boxed{5 > x}", r"\boxed{x \ge 5}", r"\boxed{5 \le x}", r"\boxed{x \le 5 \approx 6}", r"\boxed{x < 5}"]),
    ("less or equal", r"x \leq 3", [r"\boxed{x \le 3}", r"\boxed{x <= 3}"], [r"\boxed{x < 3}", r"\boxed{x \ge 3}"]),
    ("less than", r"x \lt 3", [r"\boxed{x < 3}", r"\boxed{x \lt 3}"], [r"\boxed{x \le 3}", r"\boxed{x <= 3}"]),
    ("greater than", "x > 3", [r"\boxed{x \gt 3}"], [r"\boxed{x \ge 3}", r"\boxed{x >= 3}"]),
    ("not equal", r"x \neq 3", [r"\boxed{x \ne 3}", r"\boxed{x != 3}", r"\boxed{x ≠ 3}"],
     [r"\boxed{x = 3}", r"\boxed{x \ne 4}", r"\boxed{x > 3}"]),
    # before: "(y)" after "^2" was stripped as an explanatory remark
    ("a trailing argument", r"\tan^2(y)+1", [r"\boxed{\sec^2(y)}", r"\boxed{1+\tan^2(y)}", r"\boxed{\tan^2(y)+1}"],
     [r"\boxed{\sec^2(x)}", r"\boxed{\sec^2}", r"\boxed{\tan^2(y)}"]),
    ("a trailing argument in the gold", r"\cos^2(x)", [r"\boxed{\cos^2(x)}", r"\boxed{1-\sin^2(x)}"],
     [r"\boxed{\cos^2}", r"\boxed{\cos^2(y)}"]),
    ("a trailing factor in the gold", "x^2(x-y)", [r"\boxed{x^2(x-y)}", r"\boxed{x^3-x^2y}"],
     [r"\boxed{x^2}", r"\boxed{x^2(x+y)}"]),
    ("a trailing factor after a power", "(x+y)^2(x-y)", [r"\boxed{(x+y)^2(x-y)}"], [r"\boxed{(x+y)^2}"]),
    # before: a tag beside the box read as a relation ("<", ">")
    ("markup beside the box", r"\frac{63}{400}",
     [r"<answer>\boxed{\frac{63}{400}}</answer>", r"</REASONING_END> \boxed{\frac{63}{400}}",
      "$\\boxed{\\frac{63}{400}}$<|im_end|>\n<|im_start|>user", r"\boxed{\frac{63}{400}}<|im_start|>user",
      r"<solution>\boxed{\frac{63}{400}}</solution>", r"\boxed{\frac{63}{400}}<|endoftext|>"],
     [r"<answer>\boxed{\frac{63}{401}}</answer>", r"<answer>\boxed{\frac{63}{400}}</answer> or 1",
      r"\boxed{\frac{63}{400}} <or 1>", r"\boxed{\frac{63}{400}} <maybe>", r"\boxed{\frac{63}{400}} <x71>",
      r"\boxed{\frac{63}{400}}</answer>71", r"\boxed{\frac{63}{400}}<br>1", r"\boxed{\frac{63}{400}} < 1",
      r"1 < \boxed{\frac{63}{400}}"]),
]


@pytest.mark.parametrize("rule, gold, admitted, refused", RULES, ids=[r[0] for r in RULES])
def test_round_five_rule_admits_its_forms_and_not_its_hedges(rule, gold, admitted, refused):
    wrong_admitted = [(r, v) for r in admitted if (v := verdict(r, gold)) != "correct"]
    admitted_hedges = [r for r in refused if verdict(r, gold) == "correct"]
    assert not wrong_admitted, (rule, wrong_admitted)
    assert not admitted_hedges, (rule, admitted_hedges)


@pytest.mark.parametrize("gold", [r"10,\!000", r"32,\!349", r"\cos^2(x)", "x^2(x-y)", "(x+y)^2(x-y)", "204_5",
                                  r"28 \%", "28%", r"9 \pmod{11}", "(3, 100)", r"x \geq 3"])
def test_the_golds_of_issue_51_are_usable(gold):
    check_ground_truth("math_dapo", gold, thorough=True)  # raised BadGroundTruth for the first five
    assert verdict(rf"\boxed{{{gold}}}", gold) == "correct"


def test_rule_helpers():
    assert numeral_bases(r"101_2 + {7}_{(8)} + 1_{\text{ten}} + x_1 + \log_2 8") == ["2", "8", "ten"]
    assert join_thousands(r"(3,100) \cup 1,000 + 10,\!000 + 1 000") == r"(3,100) \cup 1000 + 10000 + 1000"
    assert join_thousands(r"\{3,100\}") == r"\{3,100\}"
    assert percent_value(r"28 \text{ percent}") == "28" and percent_value("28 percent", spelled=False) is None
    assert percent_value("28") is None
    assert _bare_values("That is 1/2. So 2x^2 apples (14,400 ways), 70 cm^2 or 70 m^{2}; -70.") == \
        ["1/2", "2x^2", "14,400", "70", "70", "-70"]


def test_a_bad_gold_still_raises():
    with pytest.raises(BadGroundTruth):
        compute_score("math_dapo", r"\boxed{1}", r"10,\!000}")


def test_a_restatement_is_compared_by_the_comparison_the_worker_passes():
    text = "$\\boxed{\\frac12}$. That is 1/2.\n\nCheck: 2 halves make 1.\nThe answer is $0.5$."
    assert extract_math_answer(text) == ("\\frac12", "boxed_embedded")  # the text alone: 1/2 is not \frac12
    asked = []
    same_value = lambda restated, box: asked.append((restated, box)) or True  # noqa: E731
    assert extract_math_answer(text, same_value) == ("\\frac12", "boxed")
    assert asked == [("1/2", "\\frac12"), ("0.5", "\\frac12")]  # the later sentence, the later statement; not the check
