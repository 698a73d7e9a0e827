"""The reward tests of projects that are not ours, as cases of our math verifier (reward_fns/README.md, "External
suites").

``convert`` reads the ``pytest.mark.parametrize`` cases (gold, pred, expected) of a Math-Verify checkout's
``tests/*.py`` and adds the math cases of verl's and TRL's reward tests (transcribed below with their repository,
path and commit), and writes them as one fixture: each case holds the upstream expectation and the gold and
response our API is given. A case is converted the way a data set and a model would write it: the gold is the
string math-verify extracts from the upstream gold (what a data set stores); the response is the upstream
prediction when it holds a box, else the prediction boxed (``The answer is $\\boxed{pred}$.``), else -- for a long
prediction without a box -- the prediction itself, scored on an evaluation set (stated-answer fallback on).
``report`` scores every case with ``reward_fns.compute_score`` and prints the agreement with upstream and every
difference with the README rule that decides it (``DIFFERENCES``); ``--markdown`` writes that report.

    python scripts/external_math_suites.py convert PATH/TO/Math-Verify/tests
    python scripts/external_math_suites.py report --markdown reward_fns/external_suites.md
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "reward" / "external_math_suites.json"
MATH_VERIFY = {"repo": "huggingface/Math-Verify", "commit": "5d148cf"}
VERL = {"repo": "volcengine/verl", "path": "tests/utils/reward_score/test_numeric_canonicalization_on_cpu.py",
        "commit": "d69068d2a32b985e759049da6f801a039b94b31b"}
TRL = {"repo": "huggingface/trl", "path": "tests/test_rewards.py", "commit": "010eddf0110ae5461b2102eb0977f83106b4106d"}
# (test, gold as the data set stores it, completion, upstream reward: 1, 0, or None for "gold refused")
VERL_CASES = [("test_is_equiv_boxed", "033", "33", 1), ("test_is_equiv_boxed", "+033", "33", 1),
              ("test_is_equiv_boxed", "-0", "0", 1), ("test_is_equiv_boxed", "000", "0", 1)]
TRL_CASES = [
    ("TestAccuracyReward.test_accuracy_reward_correct_answer", r"\frac{63}{400}", r"\boxed{\frac{63}{400}}", 1),
    ("TestAccuracyReward.test_accuracy_reward_correct_answer", "63/400", r"\boxed{\frac{63}{400}}", 1),
    ("TestAccuracyReward.test_accuracy_reward_wrong_answer", r"\frac{63}{400}", r"\boxed{\frac{64}{400}}", 0),
    ("TestAccuracyReward.test_accuracy_reward_wrong_answer_no_latex", "6", r"\boxed{3}", 0),
    ("TestAccuracyReward.test_accuracy_reward_unparsable_gold", "Answer is forty two.", "Answer is forty two.", None),
    ("TestAccuracyReward.test_accuracy_reward_unparsable_gold", "Answer is forty three.",
     r"Some other content. \boxed{43}.", None),
    ("TestAccuracyReward.test_accuracy_reward_in_worker_thread", r"\frac{1}{3}", r"\boxed{\frac{1}{3}}", 1),
    ("TestReasoningAccuracyReward.test_correct_answer_yields_unit_reward", r"\frac{63}{400}",
     r"<think> Reasoning content </think> \boxed{\frac{63}{400}}", 1),
    ("TestReasoningAccuracyReward.test_correct_answer_yields_unit_reward", r"\frac{63}{400}",
     r"Reasoning content </think> \boxed{\frac{63}{400}}", 1),
    ("TestReasoningAccuracyReward.test_correct_answer_with_custom_tags_yields_unit_reward", r"\frac{63}{400}",
     r"<REASONING_START> Reasoning content </REASONING_END> \boxed{\frac{63}{400}}", 1),
    ("TestReasoningAccuracyReward.test_incorrect_answer_yields_zero_reward", r"\frac{63}{400}",
     r"<think> Reasoning content </think> \boxed{\frac{64}{400}}", 0),
    ("TestReasoningAccuracyReward.test_correct_answer_in_reasoning_yields_zero_reward", "42",
     r"<think> My answer is \boxed{42} </think> Some other text.", 0),
    ("TestReasoningAccuracyReward.test_correct_answer_in_reasoning_yields_zero_reward", "42",
     r"<think> The answer is \boxed{42} </think> Here's a wrong answer: \boxed{43}.", 0),
    ("TestReasoningAccuracyReward.test_incomplete_reasoning_yields_zero_reward", r"\frac{63}{400}",
     r"<think> Incomplete reasoning without closing tag", 0),
    ("TestReasoningAccuracyReward.test_incomplete_reasoning_yields_zero_reward", r"\frac{63}{400}",
     r"Correct answer \frac{63}{400} but completely missing reasoning content", 0),
    ("TestReasoningAccuracyReward.test_unparsable_gold_solution_yields_none_reward", "forty two",
     r"<think> Reasoning content </think> \boxed{42}", None),
    ("TestCosineScaledReward.test_correct_shorter_rewarded_more", r"\frac{1}{3}", r"\boxed{\frac{1}{3}}", 1),
    ("TestCosineScaledReward.test_wrong_longer_penalized_less", r"\frac{1}{3}", r"\boxed{\frac{1}{2}}", 0),
    ("TestCosineScaledReward.test_unparsable_gold_yields_none", "forty two", r"\boxed{42}", None),
]
SHORT_PRED_CHARS = 80
README = ROOT / "reward_fns" / "README.md"
# The README line that decides each difference: a rule name -> the text that opens its line in reward_fns/README.md.
RULES = {
    "final answer": "2. The one final answer (`extract.extract_math_answer`)",
    "several boxes": "   - **several boxes as one multi-valued answer**",
    "one value": "3. The answer must BE a value (`extract.answer_problem`)",
    "strict": "4. Parsed ONE way, as a whole",
    "reader": "The verifier reads what a reader sees.",
    "row break": "`GOLD_FORMS`). Two rewrites used to break such golds: a LaTeX row break",
    "refused golds": "\"Unusable\" means what math-verify cannot use",
    "hedge after the box": "| **hedge after the box**",
    "labelled statement": "| **labelled statement**",
    "thousands": "| **thousands**",
    "percent": "| **percent**",
    "answer line": "| **answer-line decorations**",
    "numbers": "| **numbers**",
}
# Every case where our verdict differs from the upstream expectation: id suffix -> (rule, why). The test
# (tests/unit/test_reward_math_external_suites.py) fails when a difference appears that is not listed here, and
# when a listed one no longer differs.
DIFFERENCES = {
    "tests/test_all.py:70": ("thousands", "`1000,99` (a decimal comma) is two values: a comma is a thousands mark only "
                                          "before three digits"),
    "tests/test_all.py:72": ("one value", "the prediction is prose (`Soucis : 2,74 $ a..`); boxed whole, not a value"),
    "tests/test_all.py:82": ("one value", "prose with two numbers boxed whole (`the number is not 10 which is ...`)"),
    "tests/test_all.py:83": ("one value", "prose with two numbers boxed whole"),
    "tests/test_all.py:85": ("one value", "prose with two numbers boxed whole"),
    "tests/test_all.py:86": ("one value", "prose with two numbers boxed whole"),
    "tests/test_all.py:132": ("final answer", "upstream 0 tests math-verify's parser (inline `$` math broken across lines "
                                              "is not read); the box holds 9 and the gold is 9"),
    "tests/test_all.py:133": ("final answer", "as above, `\\( \\n 9 \\n \\)`: the value is the gold"),
    "tests/test_all.py:138": ("final answer", "an escaped `\\$` inside the math leaves the box unbalanced: no answer"),
    "tests/test_all.py:168": ("percent", "`pct` is not a percent mark the rule admits"),
    "tests/test_all.py:172": ("percent", "`pct` outside the box"),
    "tests/test_all.py:173": ("percent", "`pct` is not a percent mark the rule admits"),
    "tests/test_all.py:175": ("percent", "`percentage` is not a percent mark the rule admits"),
    "tests/test_all.py:205": ("one value", "`\\boxed{12 $ and $13 }`: math delimiters inside the box, not a value"),
    "tests/test_all.py:211": ("row break", "the upstream raw string writes `\\\\boxed` (a row break, then the word)"),
    "tests/test_all.py:388": ("labelled statement", "a chain `x = 5+5+1 = 7 = 11` is refused"),
    "tests/test_all.py:399": ("labelled statement", "a chain `x = 5+5+1 = 7 = 11` is refused"),
    "tests/test_all.py:405": ("one value", "an approximation `\\approx 11` in the answer"),
    "tests/test_all.py:417": ("one value", "an approximation `x \\approx 11` is not the value"),
    "tests/test_all.py:423": ("one value", "an approximation `\\approx 1.3` in the answer"),
    "tests/test_all.py:500": ("final answer", "no box and no stated answer (`Matrix with fractions: $...$`)"),
    "tests/test_all.py:506": ("final answer", "no box and no stated answer"),
    "tests/test_all.py:512": ("final answer", "no box and no stated answer"),
    "tests/test_all.py:565": ("numbers", "`0.0833333333333333` approximates the exact gold 1/12"),
    "tests/test_all.py:571": ("reader", "upstream's non-raw `\\frac` holds a form feed; the reader drops it in the "
                                        "response, the gold keeps it"),
    "tests/test_all.py:586": ("numbers", "`0.33` approximates 1/3"),
    "tests/test_all.py:605": ("numbers", "`2.6667` approximates 8/3"),
    "tests/test_all.py:621": ("final answer", "no box and no stated answer (`... is 2/3.`)"),
    "tests/test_all.py:627": ("final answer", "no box and no stated answer"),
    "tests/test_all.py:633": ("final answer", "no box and no stated answer"),
    "tests/test_all.py:651": ("hedge after the box", "`at the end of the 5-year period` puts a digit in the box's sentence"),
    "tests/test_all.py:657": ("answer line", "`Final Answer: The volume of $ABCDEFGH$ is 120.` is prose, not a value"),
    "tests/test_all.py:695": ("hedge after the box", "`after 5 years` puts a digit in the box's sentence"),
    "tests/test_all.py:701": ("hedge after the box", "a later `Note: The solution provided assumes ...` claims about the "
                                                     "solution"),
    "tests/test_all.py:728": ("answer line", "`Final Answer: Jane started growing Sphere 3 hours ago.` is prose"),
    "tests/test_all.py:734": ("answer line", "`Final Answer: The maximum number of points ... is 19.` is prose"),
    "tests/test_all.py:746": ("one value", "the short prediction's last math span is `$n$`: the box holds `n`"),
    "tests/test_all.py:756": ("final answer", "no box and no stated answer (`... increases by 100%.`)"),
    "tests/test_all.py:762": ("hedge after the box", "`at the end of the 5 years` puts a digit in the box's sentence"),
    "tests/test_all.py:810": ("hedge after the box", "the final box is 255 and a different value (10,455) follows it"),
    "tests/test_all.py:901": ("row break", "the upstream raw string writes `\\\\le` (a row break, then `le`)"),
    "tests/test_numina_cases.py:121": ("refused golds", "the gold math-verify extracts is a fragment `{W(n) = 1 \\,`"),
    "tests/test_open_thoughts.py:44": ("refused golds", "math-verify extracts no gold from the upstream gold"),
    "tests/test_open_thoughts.py:79": ("several boxes", "`\\text{ for part (a) and }` between the boxes is not "
                                                        "connective text: the answer is the last box"),
    "tests/test_strict.py:8": ("strict", "upstream compares with strict=False (`f(y)` for `f(x)`); ours is strict"),
    "tests/test_yujianll.py:27": ("refused golds", "the gold math-verify extracts is a fragment `1 - \\frac{1}{`"),
    "tests/test_yujianll.py:28": ("refused golds", "the same fragment; upstream also asserts 1 + 1/e = 1 - 1/e"),
}


def parametrized_cases(tests_dir: Path) -> list[dict]:
    """Every ``parametrize`` case of ``tests_dir/test_*.py`` whose fields include gold, pred and expected (or
    result), as ``{"path", "test", "line", "gold_raw", "pred_raw", "upstream"}``."""
    cases = []
    for path in sorted(tests_dir.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for deco in func.decorator_list:
                cases += _decorator_cases(path, func.name, deco)
    return cases


def _decorator_cases(path: Path, test: str, deco: ast.expr) -> list[dict]:
    if not (isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "parametrize" and len(deco.args) >= 2):
        return []
    fields = [f.strip() for f in ast.literal_eval(deco.args[0]).split(",")]
    outcome = "expected" if "expected" in fields else "result" if "result" in fields else None
    if not {"gold", "pred"} <= set(fields) or outcome is None or not isinstance(deco.args[1], (ast.List, ast.Tuple)):
        return []
    cases = []
    for node in deco.args[1].elts:
        try:
            values = dict(zip(fields, ast.literal_eval(node)))
        except ValueError:  # a computed case (an f-string): not a literal pair of texts
            continue
        cases.append({"path": f"tests/{path.name}", "test": test, "line": node.lineno, "gold_raw": values["gold"],
                      "pred_raw": values["pred"], "upstream": int(values[outcome])})
    return cases


def stored_gold(gold_raw: str) -> str | None:
    """The gold a data set would store: the string math-verify extracts from the upstream gold (``None`` if it
    extracts nothing)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    try:
        parsed = parse(gold_raw, [LatexExtractionConfig(), ExprExtractionConfig()])
    except Exception:  # noqa: BLE001 - math-verify refuses it: no data set could store it
        return None
    return parsed[1].strip() if len(parsed) >= 2 and isinstance(parsed[1], str) and parsed[1].strip() else None


_MATH_SPAN_RE = re.compile(r"(?P<left>\$\$|\$|\\\[|\\\()(?P<inner>.+?)(?P<right>\$\$|\$|\\\]|\\\))",
                           re.DOTALL)


def as_response(pred_raw: str) -> tuple[str, str]:
    """``(data_source, response)`` as a model prompted to box its answer writes it: a prediction with a box as it
    is (a training set); a short one with its last math span boxed (``We find that $\\boxed{x \\lt 3}$.``), or boxed
    whole when it has no math delimiters (``7,425,000``); a long one without a box as it is, on an evaluation set
    (the stated-answer fallback reads it)."""
    if "\\boxed" in pred_raw or "\\fbox" in pred_raw:
        return "math_dapo", pred_raw
    if len(pred_raw) > SHORT_PRED_CHARS:
        return "aime25", pred_raw
    spans = list(_MATH_SPAN_RE.finditer(pred_raw))
    if not spans:
        return "math_dapo", f"The answer is $\\boxed{{{pred_raw.strip()}}}$."
    last = spans[-1]
    left, inner, right = last.group("left"), last.group("inner"), last.group("right")
    return "math_dapo", f"{pred_raw[:last.start()]}{left}\\boxed{{{inner.strip()}}}{right}{pred_raw[last.end():]}"


def convert(tests_dir: Path) -> list[dict]:
    """All three suites as fixture cases (``id`` = suite:path:line or suite:test:n)."""
    cases = []
    for case in parametrized_cases(tests_dir):
        source, response = as_response(case["pred_raw"])
        cases.append({"id": f"math-verify:{case['path']}:{case['line']}", "suite": "math-verify", **MATH_VERIFY,
                      **case, "gold": stored_gold(case["gold_raw"]), "data_source": source, "response": response})
    for suite, meta, rows in (("verl", VERL, VERL_CASES), ("trl", TRL, TRL_CASES)):
        for n, (test, gold, completion, upstream) in enumerate(rows):
            source, response = as_response(completion) if suite == "verl" else ("math_dapo", completion)
            cases.append({"id": f"{suite}:{test}:{n}", "suite": suite, **meta, "test": test, "gold_raw": gold,
                          "pred_raw": completion, "upstream": upstream, "gold": gold, "data_source": source,
                          "response": response})
    return cases


def score(case: dict) -> str:
    """Our verdict for a fixture case; ``bad_gold`` when the gold is refused (or math-verify extracts none)."""
    from reward_fns import BadGroundTruth, compute_score

    if case["gold"] is None:
        return "bad_gold"
    try:
        return compute_score(case["data_source"], case["response"], case["gold"])["verdict"]
    except BadGroundTruth:
        return "bad_gold"


def agrees(case: dict, verdict: str) -> bool:
    """Upstream 1 ↔ ``correct``; upstream 0 ↔ any other verdict; upstream None (gold refused) ↔ ``bad_gold``."""
    if case["upstream"] is None:
        return verdict == "bad_gold"
    return (verdict == "correct") == bool(case["upstream"])


def readme_line(rule: str) -> int:
    """The line number of a rule in reward_fns/README.md (raises KeyError naming it when the README lost it)."""
    for number, line in enumerate(README.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith(RULES[rule]):
            return number
    raise KeyError(f"reward_fns/README.md has no line opening with {RULES[rule]!r} (rule {rule!r})")


def report(cases: list[dict], verdicts: dict[str, str]) -> str:
    """The markdown report: agreement per suite, the upstream NOT-equal pairs scored correct, every difference
    with the README line that decides it."""
    lines = ["# External math suites: our verifier against the reward tests of math-verify, verl and TRL", "",
             "Generated by `python scripts/external_math_suites.py report --markdown reward_fns/external_suites.md` "
             "from `tests/fixtures/reward/external_math_suites.json` (`convert` records each case's repository, "
             "path and commit); `tests/unit/test_reward_math_external_suites.py` checks it in CI.", "",
             "| suite | cases | agree | differ | upstream NOT equal | of those scored correct |",
             "|---|---|---|---|---|---|"]
    for suite in dict.fromkeys(c["suite"] for c in cases):
        rows = [c for c in cases if c["suite"] == suite]
        agree = sum(agrees(c, verdicts[c["id"]]) for c in rows)
        negative = [c for c in rows if c["upstream"] == 0]
        paid = sum(verdicts[c["id"]] == "correct" for c in negative)
        lines.append(f"| {suite} ({rows[0]['repo']}) | {len(rows)} | {agree} | {len(rows) - agree} | "
                     f"{len(negative)} | {paid} |")
    lines += ["", "Every difference, with the line of `reward_fns/README.md` that decides it:", "",
              "| case | upstream | ours | README line | why |", "|---|---|---|---|---|"]
    for case in cases:
        verdict = verdicts[case["id"]]
        if agrees(case, verdict):
            continue
        rule, why = DIFFERENCES.get(case["id"].split(":", 1)[1], ("UNDOCUMENTED", "not in DIFFERENCES"))
        where = f"{readme_line(rule)} ({rule})" if rule in RULES else rule
        lines.append(f"| `{case['id']}` | {case['upstream']} | {verdict} | {where} | {why} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    conv = sub.add_parser("convert", help="write the fixture from a Math-Verify tests/ directory")
    conv.add_argument("tests_dir", type=Path)
    rep = sub.add_parser("report", help="score the fixture, print agreement and differences")
    rep.add_argument("--markdown", type=Path, help="also write the report as markdown here")
    args = parser.parse_args(argv)
    if args.command == "convert":
        cases = convert(args.tests_dir)
        FIXTURE.write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{len(cases)} cases -> {FIXTURE.relative_to(ROOT)}")
        return 0
    cases = json.loads(FIXTURE.read_text(encoding="utf-8"))
    text = report(cases, {c["id"]: score(c) for c in cases})
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
