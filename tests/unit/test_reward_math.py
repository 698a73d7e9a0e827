"""Math verifier: extraction rules (pure functions) and gold/prediction pairs through the real math-verify workers."""

import time

import pytest

from reward_fns import EVAL_DATA_SOURCES, KNOWN_DATA_SOURCES, RESULT_KEYS, check_ground_truth, compute_score
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


# --- hardening against a policy gaming the reward ------------------------------------------------------------
# Rule (README "Math"): ONE final answer is extracted and must BE the gold, parsed as a whole.
GOLDS = ["70", r"\frac{1}{576}", r"\sqrt{2}", r"2\pi", r"\frac{9\sqrt{23}}{23}", "-984", r"2^{25} \cdot 26!",
         "(1, 2)", "3, 5", HMMT_10]
WRONG_AROUND_GOLD = [
    "{G}+1", "2({G})", "({G})-1", "({G})^2", "({G})+1", r"\frac{{1}}{{{G}}}", "-({G})", "({G})+0.5",
    r"{G} \text{{ or }} ({G})+1", r"{G} \approx ({G})+1", r"({G})+1 \approx {G}", "x = ({G})+1 = {G}",
    "x = {G} = ({G})+1", "({G})+1 = {G}", r"a = b \approx {G}", "{G} < ({G})+1", r"{G} \le ({G})+1",
    r"{G} \neq ({G})+1", r"{G} \sim ({G})+1", r"{G} \pm 1", "{G}, ({G})+1", "{G}; ({G})+1", r"{G} ≈ ({G})+1",
    r"\cancel{{({G})+1}} {G}", r"{G} \text{{ (approx. }} 71)", r"{G} \to ({G})+1", r"\boxed{{{G}}}+1",
    r"{G} \text{{, not }} ({G})+1", r"x=({G})+1 \text{{ or }} x={G}", r"{G} \pmod{{7}}",
]
RIGHT_AROUND_GOLD = ["{G}", "({G})", "x = {G}", "x={G}", "{{{G}}}"]


@pytest.mark.parametrize("gold", GOLDS)
def test_expressions_built_around_the_gold_are_wrong(gold):
    failures = []
    for template in WRONG_AROUND_GOLD:
        answer = template.format(G=gold)
        for response in (rf"\boxed{{{answer}}}", f"Answer: {answer}", f"The final answer is ${answer}$.",
                         rf"Answer: \boxed{{{gold}}}+1", rf"So $x = \boxed{{{gold}}} \approx 71$."):
            result = compute_score("hmmt_feb_2025", response, gold)
            if result["score"] != 0.0:
                failures.append(response)
    for template in RIGHT_AROUND_GOLD:
        response = rf"\boxed{{{template.format(G=gold)}}}"
        if compute_score("hmmt_feb_2025", response, gold)["verdict"] != "correct":
            failures.append(("should be correct", response))
    assert not failures, failures


@pytest.mark.parametrize("response, gold, verdict", [
    (r"\boxed{70 \approx 71}", "70", "wrong_answer"),
    (r"\boxed{70 \approx 71}", "71", "wrong_answer"),
    (r"\boxed{a = 70 \approx 71}", "71", "wrong_answer"),
    (r"Answer: 70 \approx 71", "71", "wrong_answer"),
    (r"\boxed{(\frac{1}{576})+1}", r"\frac{1}{576}", "wrong_answer"),
    (r"\boxed{\boxed{70}+1}", "70", "wrong_answer"),
    (r"\boxed{70}+1", "70", "wrong_answer"),
    (r"\boxed{71} or \boxed{70}", "70", "wrong_answer"),  # two final answers for one value: a hedge
    (r"\boxed{\dfrac{1}{576}}", r"\frac{1}{576}", "correct"),
    (r"\boxed{x = 70}", "70", "correct"),  # documented leniency: name = value
    (r"\boxed{\text{70}}", "70", "correct"),
    (r"\boxed{30^\circ}", "30", "correct"),
    (r"\boxed{70 \text{ cm}}", "70", "correct"),
    (r"\boxed{1 \le x \le 3}", r"1 \le x \le 3", "correct"),  # a relation the gold itself uses
])
def test_one_final_answer_rule(response, gold, verdict):
    assert compute_score("math_dapo", response, gold)["verdict"] == verdict


@pytest.mark.parametrize("response, gold, verdict", [
    (r"$x=\boxed{3}$ and $x=\boxed{5}$", "3, 5", "correct"),
    (r"The roots are $\boxed{5}$, $\boxed{3}$.", "3, 5", "correct"),
    (r"$x = \boxed{\frac{-1-\sqrt{17}}{2}}$ or $x = \boxed{\frac{-1+\sqrt{17}}{2}}$", HMMT_10, "correct"),
    ("\\[\n\\boxed{3}\n\\]\nand\n\\[\n\\boxed{5}\n\\]", "3, 5", "correct"),
    (r"\boxed{x_1 = 3, x_2 = 5}", "3, 5", "correct"),
    (r"$\boxed{3}$, $\boxed{5}$, $\boxed{7}$", "3, 5", "wrong_answer"),  # a superset is wrong
    (r"\boxed{3} so the other root is \boxed{5}", "3, 5", "wrong_answer"),  # not one final answer: last box only
])
def test_multi_box_answers(response, gold, verdict):
    assert compute_score("hmmt_feb_2025", response, gold)["verdict"] == verdict


@pytest.mark.parametrize("response, verdict", [
    ("If the answer were $70$ then we would need", "no_answer"),
    ("We check whether the answer is $70$ and", "no_answer"),
    ("Suppose the answer is $70$. Then the sum", "no_answer"),
    ("So the answer is $70$ if the", "no_answer"),
    ("Trying 70: the answer could be $70$", "no_answer"),
    ("The final answer is $70$.", "correct"),
    ("So the answer is 70.", "correct"),
    ("Therefore, the final answer is: $\\frac{140}{2}$", "correct"),
    ("The final answer is $71$.", "wrong_answer"),
])
def test_fallback_accepts_only_a_stated_final_answer(response, verdict):
    assert compute_score("aime25", response, "70")["verdict"] == verdict


@pytest.mark.parametrize("text", [
    "\\boxed{" * 10_000,
    "\\boxed{" * 10_000 + "70}",
    "answer" + " " * 1_000_000,
    "answer" + " " * 1_000_000 + "x",
    ("answer" + " " * 1000) * 1000,
    "{" * 200_000 + "\\boxed{70}",
    "**" * 300_000,
])
def test_extraction_is_linear(text):
    from reward_fns.extract import answer_problem, extract_math_answer, stated_final_answer
    start = time.monotonic()
    answer, _how = extract_math_answer(text)
    stated_final_answer(text)
    answer_problem(answer or "", "70")
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize("text", ["\\boxed{" * 10_000, "answer" + " " * 1_000_000 + "x"])
def test_hostile_extraction_does_not_freeze_other_threads(text):
    import threading
    get_math_pool().warm_up(1)
    gaps, stop = [], threading.Event()

    def ticker():
        last = time.monotonic()
        while not stop.is_set():
            time.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    thread = threading.Thread(target=ticker)
    thread.start()
    start = time.monotonic()
    try:
        result = compute_score("aime25", text, "70")
    finally:
        stop.set()
        thread.join()
    assert time.monotonic() - start < 2.0
    assert result["verdict"] in ("no_answer", "wrong_answer")
    assert max(gaps) < 0.5, max(gaps)


def test_extraction_runs_under_the_deadline():
    # An 800 KB final text is scanned in the worker, never in the caller's thread, and quickly.
    start = time.monotonic()
    result = compute_math_score("Answer:" + " \t" * 400_000 + "70", "70", timeout_s=10)
    assert result["verdict"] == "correct" and time.monotonic() - start < 3.0


def _kill_busy_workers(times, delay=0.3):
    """Kill (SIGKILL) the math worker ``times`` times, each time ``delay`` s after a worker became busy."""
    import os
    import signal
    import threading

    def killer():
        seen = set()
        for _ in range(times):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                pids = set(get_math_pool().worker_pids()) - seen
                if pids:
                    break
                time.sleep(0.02)
            time.sleep(delay)
            for pid in pids:
                seen.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    thread = threading.Thread(target=killer)
    thread.start()
    return thread


@pytest.mark.parametrize("kills, verdict", [(1, "correct"), (2, "worker_died")])
def test_external_worker_kill_is_retried_once_and_labelled(kills, verdict):
    from reward_fns.math_verifier import ask_math_worker, reset_math_pool
    reset_math_pool()  # no idle worker: the killer sees exactly the one serving this request
    request = {"gold": "70", "text": r"\boxed{70}", "fallback": False, "parsing_timeout": 5, "verify_timeout": 5,
               "sleep_s": 1.0}
    thread = _kill_busy_workers(kills)
    try:
        reply = ask_math_worker(request, timeout_s=20)
    finally:
        thread.join()
    assert reply["status"] == ("ok" if verdict == "correct" else verdict), reply
    if verdict == "correct":
        assert reply["correct"] is True
    assert compute_math_score(r"\boxed{70}", "70")["verdict"] == "correct"  # the pool recovered


def test_worker_death_labels():
    from reward_fns import VERDICTS
    assert "worker_died" in VERDICTS


@pytest.mark.parametrize("text, how", [
    (r"1 + 1 = 2 \boxed{2}", "boxed"), (r"7 - 9 = -2 \boxed{-2}", "boxed"), (r"- \boxed{3}", "boxed"),
    (r"\boxed{70} + 1", "boxed_embedded"), (r"2\boxed{35}", "boxed_embedded"), (r"-\boxed{984}", "boxed_embedded"),
    (r"\frac{1}{\boxed{70}}", "boxed_embedded"), (r"\boxed{70} \cdot 2", "boxed_embedded"),
])
def test_box_as_operand_of_an_expression(text, how):
    assert extract_math_answer(text)[1] == how


@pytest.mark.parametrize("text", [
    "d4: 7+7+1=15 write 5 carry 1\n\\boxed{15201}",  # a line ending in a digit, the box on the next line
    "so the sum is 15201\n\n\\boxed{15201}", "x = 15201 -\n\\boxed{15201}",
    "$$\\boxed{15201}\\end{aligned}$$", "\\left(\\boxed{15201}\\right)",
])
def test_a_box_on_its_own_line_or_closing_an_environment_is_the_answer(text):
    # regression: "$" in the before-box pattern also matched before a final newline, so any line ending in a
    # digit or an operator made the next line's box an "operand" and the right answer scored 0
    assert compute_math_score(text, "15201")["verdict"] == "correct"


# --- infinite golds, numbers with a subscript, golds no response can meet (red team 3) --------------------
@pytest.mark.parametrize("response, gold, verdict", [
    # an infinity equals only itself: before, oo - 70 = oo passed the relative test oo <= tol * oo
    (r"\boxed{70}", r"\infty", "wrong_answer"),
    (r"\boxed{0}", r"-\infty", "wrong_answer"),
    (r"\boxed{0.5}", r"\infty", "wrong_answer"),
    (r"\boxed{-\infty}", r"\infty", "wrong_answer"),
    (r"\boxed{\infty}", r"-\infty", "wrong_answer"),
    (r"\boxed{\infty}", "70", "wrong_answer"),
    (r"\boxed{(0, 5)}", r"(0, \infty)", "wrong_answer"),
    (r"\boxed{(-\infty, 0)}", r"(0, \infty)", "wrong_answer"),
    (r"\boxed{\infty}", r"\infty", "correct"),
    (r"\boxed{+\infty}", r"\infty", "correct"),
    (r"\boxed{-\infty}", r"-\infty", "correct"),
    (r"\boxed{(0,\infty)}", r"(0, \infty)", "correct"),
    # a number with a subscript is a base or an index, not the number: 70_{8} is 56
    (r"\boxed{70_{8}}", "70", "wrong_answer"),
    (r"\boxed{70_8}", "70", "wrong_answer"),
    (r"\boxed{{70}_{10}}", "70", "wrong_answer"),
    (r"\boxed{1010_2}", "1010", "wrong_answer"),
    (r"\boxed{1010_2}", "1010_2", "correct"),
    (r"\boxed{x_1 = 70}", "70", "correct"),
    (r"\boxed{a_{12} = 70}", "70", "correct"),
])
def test_infinities_and_subscripted_numbers(response, gold, verdict):
    assert compute_math_score(response, gold)["verdict"] == verdict


@pytest.mark.parametrize("gold, message", [
    ("#### 70", "holds '#'"),  # a raw GSM8K answer line: \boxed{70} never matched it
    ("\u200b70", "holds characters a reader does not see as written"),  # responses are read without it
    ("\u0667\u0660", "responses are read as '70'"),  # Arabic-Indic digits
    ("\uff17\uff10", "responses are read as '70'"),  # full-width digits
    ("70\x00", "holds characters a reader does not see as written"),
])
def test_a_gold_no_response_can_meet_as_written_raises(gold, message):
    with pytest.raises(BadGroundTruth, match=message):
        compute_score("math_dapo", r"\boxed{70}", gold)
    with pytest.raises(BadGroundTruth, match=message):
        check_ground_truth("math_dapo", gold)


def test_a_gold_whose_comparisons_time_out_raises_instead_of_scoring_every_response_timeout():
    with pytest.raises(BadGroundTruth, match=r"comparing the answer 1 with this ground truth takes longer than"):
        compute_score("math_dapo", r"\boxed{70}", r"10^{10^{10}}")
