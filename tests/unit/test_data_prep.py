"""data_prep: every command on fixture files that reproduce the raw hub schemas (tests/fixtures/data_prep).

The LiveCodeBench ground truth is checked against a reference written the way LiveCodeBench itself decodes
(``lcb_reference_input_output`` below: plain ``pickle.loads``, safe here because the fixtures are ours).
"""

from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep import aime25, dapo_math, gsm8k, hmmt25, livecodebench
from data_prep.all import build_all
from data_prep.common import (
    CODE_EXTRA_INFO,
    MATH_EXTRA_INFO,
    PrepError,
    RawRow,
    RowRef,
    integer_text,
    read_verl_parquet,
    run_cli,
    verl_schema,
    write_verl_parquet,
)
from data_prep.templates import BOXED_INSTRUCTION, DAPO_PREFIX, DAPO_SUFFIX, LCB_SYSTEM_MESSAGE_GENERIC
from reward_fns.code_tests import decode_tests

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data_prep"
RAW = FIXTURES / "raw"
LCB_RAW = RAW / "livecodebench" / "code_generation_lite"
MALFORMED = FIXTURES / "malformed"
REPO = Path(__file__).resolve().parents[2]


def by_id(rows: list[dict]) -> dict[str, dict]:
    return {r["extra_info"]["problem_id"]: r for r in rows}


def raw_lcb_rows() -> dict[str, dict]:
    """Raw LCB fixture rows by question_id (first occurrence, file order test5 -> test6)."""
    rows: dict[str, dict] = {}
    for name in ("test5.jsonl", "test6.jsonl"):
        for line in (LCB_RAW / name).read_text().splitlines():
            row = json.loads(line)
            rows.setdefault(row["question_id"], row)
    return rows


def lcb_reference_input_output(row: dict) -> dict:
    """LiveCodeBench's CodeGenerationProblem + get_evaluation_sample, restated (unrestricted pickle: our data)."""
    public = json.loads(row["public_test_cases"])
    try:
        private = json.loads(row["private_test_cases"])
    except json.JSONDecodeError:
        private = json.loads(pickle.loads(zlib.decompress(base64.b64decode(row["private_test_cases"].encode()))))
    tests = public + private
    return {
        "inputs": [t["input"] for t in tests],
        "outputs": [t["output"] for t in tests],
        "fn_name": json.loads(row["metadata"]).get("func_name", None),
    }


@pytest.fixture(scope="module")
def lcb_eval(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("lcb") / "lcb_v6.parquet"
    livecodebench.prepare_livecodebench([LCB_RAW], out)
    return read_verl_parquet(out)


@pytest.fixture(scope="module")
def lcb_train(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("lcb") / "lcb_train.parquet"
    livecodebench.prepare_livecodebench([LCB_RAW], out, split="train")
    return read_verl_parquet(out)


# ----------------------------------------------------------------------------------------------------------
# AIME 2025


def test_aime_math_ai_layout_rows_and_exact_prompt():
    rows, summary = aime25.prepare_aime25(RAW / "math-ai/aime25", allow_partial=True)
    assert [r["extra_info"]["problem_id"] for r in rows] == [
        "AIME2025-I-01", "AIME2025-I-02", "AIME2025-I-03", "AIME2025-II-15",
    ]  # fmt: skip
    first = rows[0]
    problem = "Find the sum of all integer bases $b>9$ for which $17_b$ is a divisor of $97_b.$"
    assert first["data_source"] == "aime25" and first["ability"] == "math"
    assert first["prompt"] == [
        {"role": "user", "content": problem + "\n\nPlease reason step by step, and put your final answer within \\boxed{}."}
    ]
    assert first["reward_model"] == {"style": "rule", "ground_truth": "70"}
    assert first["extra_info"] == {
        "split": "test", "index": 0, "problem_id": "AIME2025-I-01", "source": "math-ai/aime25:test.jsonl",
        "template": "boxed", "question": problem, "answer": "70",
    }  # fmt: skip
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["70", "588", "16", "240"]
    assert summary.rows_read == 4 and summary.rows_written == 4


def test_aime_layouts_agree_on_ids_and_answers():
    answers = {}
    for folder in ("math-ai/aime25", "opencompass/AIME2025", "MathArena/aime_2025", "yentinglin/aime_2025"):
        rows, _ = aime25.prepare_aime25(RAW / folder, allow_partial=True)
        for row in rows:
            pid, gt = row["extra_info"]["problem_id"], row["reward_model"]["ground_truth"]
            assert answers.setdefault(pid, gt) == gt, (folder, pid)
            assert row["extra_info"]["source"].startswith(folder)
    assert answers == {
        "AIME2025-I-01": "70", "AIME2025-I-02": "588", "AIME2025-I-03": "16", "AIME2025-II-01": "468",
        "AIME2025-II-15": "240",
    }  # fmt: skip


def test_aime_matharena_int64_answers_are_stringified():
    table = pq.read_table(RAW / "MathArena/aime_2025/data/train-00000-of-00001.parquet")
    assert str(table.schema.field("answer").type) == "int64"  # the fixture keeps the real dtype
    rows, _ = aime25.prepare_aime25(RAW / "MathArena/aime_2025", allow_partial=True)
    assert [(r["extra_info"]["problem_id"], r["reward_model"]["ground_truth"]) for r in rows] == [
        ("AIME2025-I-01", "70"), ("AIME2025-I-02", "588"), ("AIME2025-II-15", "240"),
    ]  # fmt: skip


def test_aime_opencompass_keeps_its_own_text_and_dapo_template():
    rows, _ = aime25.prepare_aime25(RAW / "opencompass/AIME2025", template="dapo", allow_partial=True)
    first = rows[0]
    question = "Find the sum of all integer bases $b>9$ for which $17_{b}$ is a divisor of $97_{b}$."
    assert first["prompt"][0]["content"] == DAPO_PREFIX + question + DAPO_SUFFIX
    assert first["extra_info"]["template"] == "dapo"
    assert rows[-1]["extra_info"]["problem_id"] == "AIME2025-II-01"


def test_aime_yentinglin_question_and_problem_columns_are_aliases():
    with_question, _ = aime25.prepare_aime25(RAW / "yentinglin/aime_2025", allow_partial=True)
    with_problem, _ = aime25.prepare_aime25(FIXTURES / "variants/yentinglin_problem", allow_partial=True)
    strip = lambda rows: [(r["prompt"], r["reward_model"], r["extra_info"]["problem_id"]) for r in rows]  # noqa: E731
    assert strip(with_question) == strip(with_problem)
    assert len(with_question) == 3


def test_aime_requires_thirty_rows_unless_partial_allowed():
    with pytest.raises(PrepError, match=r"prepared 4 rows but aime25 has 30 problems.*--allow-partial"):
        aime25.prepare_aime25(RAW / "math-ai/aime25")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(70, "70"), ("70", "70"), ("070", "70"), (70.0, "70"), (" 5 ", "5"), ("5/2", None), (70.5, None), (True, None)],
)
def test_integer_text(value, expected):
    assert integer_text(value) == expected


# ----------------------------------------------------------------------------------------------------------
# HMMT February 2025


def test_hmmt_latex_answers_kept_verbatim():
    rows, summary = hmmt25.prepare_hmmt25(RAW / "MathArena/hmmt_feb_2025", allow_partial=True)
    assert {r["extra_info"]["problem_id"]: r["reward_model"]["ground_truth"] for r in rows} == {
        "HMMT2025-FEB-01": "103",
        "HMMT2025-FEB-10": "\\frac{-1+\\sqrt{17}}{2}, \\frac{-1-\\sqrt{17}}{2}",
        "HMMT2025-FEB-17": "2^{25} \\cdot 26!",
        "HMMT2025-FEB-30": "\\sqrt{\\frac{95}{24}}",
    }
    assert rows[0]["data_source"] == "hmmt_feb_2025"
    assert [r["extra_info"]["index"] for r in rows] == [0, 9, 16, 29]
    assert summary.facts["non-integer answers"] == "3"
    with pytest.raises(PrepError, match="hmmt_feb_2025 has 30 problems"):
        hmmt25.prepare_hmmt25(RAW / "MathArena/hmmt_feb_2025")


# ----------------------------------------------------------------------------------------------------------
# LiveCodeBench


def test_lcb_eval_window_dedupe_and_order(lcb_eval):
    ids = [r["extra_info"]["problem_id"] for r in lcb_eval]
    # abc902_b: first seen in test5 at exactly the window start (kept once); abc903_a: at the end (excluded);
    # abc901_a, 3901, abc343_a, 3708: before the window
    assert ids == ["abc902_b", "1873_A", "3902", "abc904_b"]
    assert by_id(lcb_eval)["abc902_b"]["extra_info"]["source"] == "livecodebench/code_generation_lite:test5.jsonl"
    assert {r["data_source"] for r in lcb_eval} == {"livecodebench_v6"}
    assert [r["extra_info"]["index"] for r in lcb_eval] == [0, 1, 2, 3]


def test_lcb_ground_truth_equals_lcb_evaluation_sample(lcb_eval, lcb_train):
    raw = raw_lcb_rows()
    for row in lcb_eval + lcb_train:
        decoded = decode_tests(row["reward_model"]["ground_truth"])
        assert decoded == lcb_reference_input_output(raw[row["extra_info"]["problem_id"]])
        assert row["extra_info"]["num_tests"] == len(decoded["inputs"])


def test_lcb_real_row_1873a_prompt_and_private_tests(lcb_eval):
    row = by_id(lcb_eval)["1873_A"]
    raw = raw_lcb_rows()["1873_A"]
    assert row["prompt"] == [
        {"role": "system", "content": LCB_SYSTEM_MESSAGE_GENERIC},
        {
            "role": "user",
            "content": "### Question:\n" + raw["question_content"] + "\n\n### Format: Read the inputs from stdin solve the "
            "problem and write the answer to stdout (do not directly test on the sample inputs). Enclose your code "
            "within delimiters as follows. Ensure that when the python program runs, it reads the inputs, runs the "
            "algorithm and writes output to STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n"
            "### Answer: (use the provided format with backticks)\n\n",
        },
    ]
    decoded = decode_tests(row["reward_model"]["ground_truth"])
    assert decoded["fn_name"] is None
    assert decoded["inputs"][0] == "6\nabc\nacb\nbac\nbca\ncab\ncba\n"  # public first
    assert decoded["inputs"][1:] == ["1\nabc\n", "3\nabc\nabc\nabc\n", "5\ncab\nacb\ncba\nbac\nbca\n",
                                     "6\nabc\nabc\nabc\nabc\nabc\nabc\n"]  # fmt: skip
    # the real private tests of 1873_A, as published decoded beside the sample row
    assert decoded["outputs"][1:] == ["YES\n", "YES\nYES\nYES\n", "NO\nYES\nYES\nYES\nNO\n", "YES\n" * 6]
    info = row["extra_info"]
    assert (info["platform"], info["test_type"], info["fn_name"], info["num_public_tests"]) == ("codeforces", "stdin", "", 1)


def test_lcb_leetcode_functional_row_multi_argument(lcb_eval):
    row = by_id(lcb_eval)["3902"]
    decoded = decode_tests(row["reward_model"]["ground_truth"])
    assert decoded["fn_name"] == "countPairs"
    assert decoded["inputs"][0] == "[1, 2, 3, 4]\n5"  # one JSON value per line, one line per argument
    assert [json.loads(line) for line in decoded["inputs"][1].split("\n")] == [[1, 1, 1], 2]
    starter = "class Solution:\n    def countPairs(self, nums: List[int], target: int) -> int:\n        "
    assert f"### Format: You will use the following starter code to write the solution to the problem and enclose " \
           f"your code within delimiters.\n```python\n{starter}\n```\n\n" in row["prompt"][1]["content"]
    info = row["extra_info"]
    assert (info["test_type"], info["fn_name"], info["starter_code"], info["contest_date"]) == (
        "functional", "countPairs", starter, "2025-03-22T19:30:00",
    )  # fmt: skip


def test_lcb_train_is_before_window_drops_errata_and_is_disjoint(lcb_train, lcb_eval):
    ids = [r["extra_info"]["problem_id"] for r in lcb_train]
    assert ids == ["abc901_a", "3901", "3708"]  # abc343_a is in ERRATA.md
    assert {r["data_source"] for r in lcb_train} == {"livecodebench_train"}
    assert {r["extra_info"]["split"] for r in lcb_train} == {"train"}
    assert not set(ids) & {r["extra_info"]["problem_id"] for r in lcb_eval}


def test_lcb_train_errata_keep_and_check_disjoint_failure(tmp_path):
    out = tmp_path / "train.parquet"
    summary = livecodebench.prepare_livecodebench([LCB_RAW], out, split="train", errata="keep")
    assert "abc343_a" in by_id(read_verl_parquet(out))
    assert summary.facts["question_ids shared with this input's eval window"] == "0"
    # An eval file whose window starts earlier contains 3708, which the default training set also holds.
    early_eval = tmp_path / "early_eval.parquet"
    livecodebench.prepare_livecodebench([LCB_RAW], early_eval, start="2025-01-01")
    assert "3708" in by_id(read_verl_parquet(early_eval))
    with pytest.raises(PrepError, match=r"shares 1 question_ids with .*early_eval.parquet: \['3708'\]"):
        livecodebench.prepare_livecodebench([LCB_RAW], tmp_path / "t2.parquet", split="train", check_disjoint=[early_eval])
    assert not (tmp_path / "t2.parquet").exists()


def test_lcb_custom_window_end_is_exclusive(tmp_path):
    out = tmp_path / "jan.parquet"
    livecodebench.prepare_livecodebench([LCB_RAW], out, start="2025-01-01", end="2025-02-01")
    assert [r["extra_info"]["problem_id"] for r in read_verl_parquet(out)] == ["3708"]


def test_lcb_parquet_layout_matches_jsonl_layout(tmp_path, lcb_eval):
    out = tmp_path / "from_parquet.parquet"
    livecodebench.prepare_livecodebench([FIXTURES / "raw_parquet/livecodebench/code_generation_lite"], out)
    from_parquet = read_verl_parquet(out)
    for a, b in zip(from_parquet, lcb_eval, strict=True):
        a_info, b_info = dict(a["extra_info"]), dict(b["extra_info"])
        assert a_info.pop("source").endswith("test-00000-of-00001.parquet")
        b_info.pop("source")
        assert (a["prompt"], a["reward_model"], a_info) == (b["prompt"], b["reward_model"], b_info)


def test_lcb_big_integer_tests_and_digit_limit_restored(lcb_train):
    limit = sys.get_int_max_str_digits()
    decoded = decode_tests(by_id(lcb_train)["3901"]["reward_model"]["ground_truth"])
    assert decoded["inputs"][-1] == "[" + "9" * 5000 + "]\n1"
    assert sys.get_int_max_str_digits() == limit


def test_lcb_single_turn_prompt_style(tmp_path):
    out = tmp_path / "single.parquet"
    livecodebench.prepare_livecodebench([LCB_RAW], out, prompt_style="single_turn")
    row = by_id(read_verl_parquet(out))["abc904_b"]
    assert len(row["prompt"]) == 1 and row["prompt"][0]["role"] == "user"
    assert row["prompt"][0]["content"].startswith(LCB_SYSTEM_MESSAGE_GENERIC + "\n\n### Question:\n")


def test_restricted_unpickler_refuses_globals_without_running_them(capsys):
    payload = (MALFORMED / "lcb/private_pickle_global.jsonl").read_text().splitlines()[1]
    text = json.loads(payload)["private_test_cases"]
    with pytest.raises(livecodebench.TestPayloadError, match="refusing pickle global builtins.print"):
        livecodebench.decode_private_tests(text)
    assert "UNPICKLED-CODE-RAN" not in capsys.readouterr().out


def test_decode_private_tests_accepts_plain_json_and_lcb_compression():
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    compressed = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests), protocol=4))).decode()
    assert livecodebench.decode_private_tests(json.dumps(tests)) == tests
    assert livecodebench.decode_private_tests(compressed) == tests


# ----------------------------------------------------------------------------------------------------------
# Training math sets


def test_dapo_dedupes_and_retemplates():
    rows, summary = dapo_math.prepare_dapo_math(RAW / "BytedTsinghua-SIA/DAPO-Math-17k")
    assert summary.rows_read == 9 and len(rows) == 3 and summary.skipped == {"duplicate problem text": 6}
    raw = pq.read_table(RAW / "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet").to_pylist()[:3]
    for row, original in zip(rows, raw, strict=True):
        problem = original["prompt"][0]["content"][len(DAPO_PREFIX) : -len(DAPO_SUFFIX)]
        assert row["prompt"][0]["content"] == f"{problem}\n\n{BOXED_INSTRUCTION}"
        assert row["reward_model"] == {"style": "rule", "ground_truth": original["reward_model"]["ground_truth"]}
        assert row["extra_info"]["problem_id"] == original["extra_info"]["index"]
        assert (row["data_source"], row["ability"], row["extra_info"]["split"]) == ("math_dapo", "math", "train")
    dapo_rows, _ = dapo_math.prepare_dapo_math(RAW / "BytedTsinghua-SIA/DAPO-Math-17k", template="dapo")
    assert [r["prompt"] for r in dapo_rows] == [o["prompt"] for o in raw]  # the original text, exactly


def test_gsm8k_final_answers_and_split_inference():
    train, _ = gsm8k.prepare_gsm8k(RAW / "openai/gsm8k")
    assert [r["reward_model"]["ground_truth"] for r in train] == ["72", "10", "1200"]
    assert {r["data_source"] for r in train} == {"openai/gsm8k"}
    assert train[0]["extra_info"]["problem_id"] == "gsm8k-train-00000"
    test, _ = gsm8k.prepare_gsm8k(RAW / "openai/gsm8k/main/test-00000-of-00001.parquet")
    assert [(r["extra_info"]["split"], r["reward_model"]["ground_truth"]) for r in test] == [("test", "18")]


def test_hmmt_problem_types_are_counted_as_topics(tmp_path):
    raw = pq.read_table(RAW / "MathArena/hmmt_feb_2025/data/train-00000-of-00001.parquet").to_pylist()
    assert isinstance(raw[0]["problem_type"], list)
    one_string = [{**r, "problem_type": "Geometry"} for r in raw]  # one topic written as a plain string
    folder = tmp_path / "hmmt"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(one_string), folder / "train.parquet")
    _, summary = hmmt25.prepare_hmmt25(folder, allow_partial=True)
    assert summary.facts["problem types"] == f"Geometry={len(raw)}"  # not G=…, e=…, one per character
    pq.write_table(pa.Table.from_pylist([{**raw[0], "problem_type": 7}]), folder / "train.parquet")
    with pytest.raises(PrepError, match="field 'problem_type': expected a list of topics, got int"):
        hmmt25.prepare_hmmt25(folder, allow_partial=True)


# ----------------------------------------------------------------------------------------------------------
# Errors: every malformed fixture names file, row and field


def _lcb(path, out_dir):
    return livecodebench.prepare_livecodebench([path], out_dir / "lcb.parquet")


def _math(prepare, **kwargs):
    return lambda path, _out_dir: prepare(path, **kwargs)


MALFORMED_CASES = [
    (_lcb, "lcb/private_not_base64.jsonl", "private_test_cases", "neither JSON nor base64"),
    (_lcb, "lcb/private_pickle_global.jsonl", "private_test_cases", "refusing pickle global builtins.print"),
    (_lcb, "lcb/private_pickle_not_str.jsonl", "private_test_cases", "pickle payload is a list"),
    (_lcb, "lcb/public_not_json.jsonl", "public_test_cases", "not JSON"),
    (_lcb, "lcb/functional_input_not_json.jsonl", "public_test_cases", "test 0: input line is not JSON"),
    (_lcb, "lcb/testtype_mismatch.jsonl", "public_test_cases", "testtype 'functional' but the problem is stdin"),
    (_lcb, "lcb/bad_contest_date.jsonl", "contest_date", "not an ISO datetime"),
    (_lcb, "lcb/bad_platform.jsonl", "platform", "'hackerrank' is not one of"),
    (_lcb, "lcb/missing_question_content.jsonl", "question_content", "missing"),
    (_lcb, "lcb/metadata_not_json.jsonl", "metadata", "not JSON"),
    (_lcb, "lcb/starter_without_function.jsonl", "starter_code", "no 'def countPairs('"),
    (_lcb, "lcb/no_tests.jsonl", "private_test_cases", "no tests at all"),
    (_lcb, "lcb/line_not_json.jsonl", None, "line is not valid JSON"),
    (_math(aime25.prepare_aime25, allow_partial=True), "aime/answer_not_integer.jsonl", "answer", "integers 0..999"),
    (_math(aime25.prepare_aime25, allow_partial=True), "aime/answer_too_large.jsonl", "answer", "integers 0..999"),
    (_math(aime25.prepare_aime25, allow_partial=True), "aime/no_statement.jsonl", "problem", "missing"),
    (_math(hmmt25.prepare_hmmt25, allow_partial=True), "hmmt/answer_missing.parquet", "answer", "missing"),
    (_math(hmmt25.prepare_hmmt25, allow_partial=True), "hmmt/answer_int64.parquet", "answer", "LaTeX strings; got int"),
    (_math(hmmt25.prepare_hmmt25, allow_partial=True), "hmmt/answer_unparsable.parquet", "answer",
     "gold answer '}{' is unusable: math ground truth '}{' has an unmatched '}'"),
    (_math(gsm8k.prepare_gsm8k), "gsm8k/no_final_answer.parquet", "answer", "no '#### <number>'"),
    (_math(dapo_math.prepare_dapo_math), "dapo/not_dapo_template.parquet", "prompt", "not in the DAPO 'Answer:' template"),
]


# The bad row is row 2 of each file (row 1 is good), except where the whole column has the wrong type.
BAD_ROW = {"hmmt/answer_int64.parquet": 1}


@pytest.mark.parametrize(("prepare", "name", "field", "message"), MALFORMED_CASES, ids=[c[1] for c in MALFORMED_CASES])
def test_malformed_row_error_names_file_row_and_field(prepare, name, field, message, tmp_path):
    path = MALFORMED / name
    with pytest.raises(PrepError) as info:
        prepare(path, tmp_path)
    where = f"{path}, row {BAD_ROW.get(name, 2)}" + (f", field '{field}'" if field else "")
    assert str(info.value).startswith(where + ": "), str(info.value)
    assert message in str(info.value)


@pytest.mark.parametrize("suffix, where", [(".jsonl", ", row 2: line is not valid UTF-8"),
                                           (".json", ": not valid UTF-8")])
def test_a_file_that_is_not_utf8_names_the_file_and_line(suffix, where, tmp_path):
    # before: a bare UnicodeDecodeError traceback naming neither the file nor the line
    path = tmp_path / f"train{suffix}"
    path.write_bytes(b'{"question": "What is 1+1?", "answer": "#### 2"}\n{"question": "x\xff", "answer": "#### 3"}\n')
    with pytest.raises(PrepError) as info:
        gsm8k.prepare_gsm8k(path)
    assert str(info.value).startswith(f"{path}{where}"), str(info.value)


@pytest.mark.parametrize("line, field, message", [
    ('{"question": "What is 1+1?\\u0000", "answer": "#### 2"}', "question", "holds a NUL character at character 12"),
    ('{"question": "What is \\ud800 1+1?", "answer": "#### 2"}', "question", "holds a lone surrogate U+D800 at "
                                                                             "character 8"),
    ('{"question": "What is 1+1?", "answer": "\\udfff#### 2"}', "answer", "holds a lone surrogate U+DFFF"),
])
def test_a_text_field_holding_a_nul_or_a_lone_surrogate_is_named(line, field, message, tmp_path):
    # before: converted (a lone surrogate then failed the parquet write naming no row; a NUL reached the prompt)
    path = tmp_path / "train.jsonl"
    path.write_text('{"question": "What is 2+2?", "answer": "#### 4"}\n' + line + "\n")
    with pytest.raises(PrepError) as info:
        gsm8k.prepare_gsm8k(path)
    assert str(info.value).startswith(f"{path}, row 2, field '{field}': {message}"), str(info.value)


def _dapo_variants() -> list[tuple[str, dict, str, str]]:
    raw = pq.read_table(RAW / "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet").to_pylist()[0]
    content = raw["prompt"][0]["content"]
    templated = {"prompt": content.replace("In triangle", "In \x00triangle"), "solution": "34"}  # open-r1's copy
    return [
        ("chat prompt", {**raw, "prompt": [{**raw["prompt"][0], "content": content.replace("In triangle",
                                                                                          "In \ud800triangle")}]},
         "prompt", f"user message holds a lone surrogate U+D800 at character {content.index('In triangle') + 3}"),
        ("string prompt", templated, "prompt",
         f"holds a NUL character at character {content.index('In triangle') + 3}"),
        ("ground truth", {**raw, "reward_model": {**raw["reward_model"], "ground_truth": "3\x004"}},
         "reward_model.ground_truth", "holds a NUL character at character 1"),
        ("solution", {"prompt": content, "solution": "\udfff34"}, "solution",
         "holds a lone surrogate U+DFFF at character 0"),
        ("source index", {**raw, "extra_info": {"index": "9a9b\x00"}}, "extra_info.index",
         "holds a NUL character at character 4"),
    ]


@pytest.mark.parametrize("row, field, message", [v[1:] for v in _dapo_variants()], ids=[v[0] for v in _dapo_variants()])
def test_a_dapo_text_holding_a_nul_or_a_lone_surrogate_is_named(row, field, message, tmp_path):
    # before: DAPO's text did not go through the check (a NUL reached the prompt or the gold, a lone surrogate
    # failed the parquet write naming no row)
    path = tmp_path / "dapo.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(PrepError) as info:
        dapo_math.prepare_dapo_math(path)
    assert str(info.value) == f"{path}, row 1, field '{field}': {message}: not text"


@pytest.mark.parametrize("field, key, text, message", [
    ("public_test_cases", "input", "6\nab\x00c\n", "test 0: 'input' holds a NUL character at character 4"),
    ("public_test_cases", "output", "YES\ud800\n", "test 0: 'output' holds a lone surrogate U+D800 at character 3"),
    ("private_test_cases", "input", "\x00", "test 0: 'input' holds a NUL character at character 0"),
])
def test_an_lcb_test_case_holding_a_nul_or_a_lone_surrogate_is_named(field, key, text, message, tmp_path):
    # before: the raw field is JSON text ("\\u0000" is six characters), so require_str passed it: the decoded NUL
    # reached the ground truth, a lone surrogate failed encode_tests with a bare UnicodeEncodeError naming no row
    row = raw_lcb_rows()["1873_A"]
    tests = json.loads(row[field]) if field == "public_test_cases" else [{"input": "1\n", "output": "1\n",
                                                                           "testtype": "stdin"}]
    tests[0][key] = text
    path = tmp_path / "test6.jsonl"
    path.write_text(json.dumps({**row, field: json.dumps(tests)}) + "\n")
    with pytest.raises(PrepError) as info:
        _lcb(path, tmp_path)
    assert str(info.value) == f"{path}, row 1, field '{field}': {message}: not text"


@pytest.mark.parametrize("answer, message", [
    ("\\frac{1}{", "gold answer '\\\\frac{1}{' is unusable: math ground truth '\\\\frac{1}{' has an unclosed '{'"),
    ("some words", "gold answer 'some words' is unusable: math ground truth 'some words' is prose, not a math answer"),
    ("the answer is 5", "reads as prose"),
    ("\\sqrt{", "gold answer '\\\\sqrt{'"),
])
def test_an_unusable_hmmt_gold_never_reaches_a_parquet(answer, message, tmp_path):
    """The HMMT gold must be one the verifier scores as right when stated as \\boxed{gold} (the pre-flight's
    check, data_prep.row_checks): a truncated expression or prose stops the run naming file, row and field."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = next((RAW / "MathArena").rglob("*.parquet"))
    table = pq.read_table(source)
    rows = table.to_pylist()[:2]
    rows[1]["answer"] = answer
    path = tmp_path / "hmmt_bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    with pytest.raises(PrepError) as info:
        hmmt25.prepare_hmmt25(path, allow_partial=True)
    assert str(info.value).startswith(f"{path}, row 2, field 'answer': "), str(info.value)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("date", ["2025-03-15T00:00:00+00:00", "2025-03-15T00:00:00Z"])
def test_an_lcb_date_with_a_utc_offset_is_named(date, tmp_path):
    # before: TypeError "can't compare offset-naive and offset-aware datetimes", a traceback naming no row
    rows = [json.loads(line) for line in (LCB_RAW / "test6.jsonl").read_text().splitlines()][:2]
    rows[1]["contest_date"] = date
    path = tmp_path / "test6.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(PrepError) as info:
        livecodebench.prepare_livecodebench([path], tmp_path / "lcb.parquet")
    message = str(info.value)
    assert message.startswith(f"{path}, row 2, field 'contest_date': {date!r} has a UTC offset"), message
    assert not (tmp_path / "lcb.parquet").exists()


@pytest.mark.parametrize("field, edit, message", [
    ("metadata", lambda r: '{"fn_name": "countPairs"}',
     "unknown key(s) ['fn_name']; LiveCodeBench's metadata is {} (stdin) or {\"func_name\": <method>}"),
    ("metadata", lambda r: '{"func_name": "f", "note": 1}', "unknown key(s) ['note']"),
    ("public_test_cases", lambda r: json.dumps([{**t, "outputs": t["output"]} for t in json.loads(r)]),
     "test 0: unknown key(s) ['outputs'] (known: ['input', 'output', 'testtype'])"),
])
def test_an_lcb_test_case_or_metadata_key_lcb_does_not_read_is_named(field, edit, message, tmp_path):
    # before: ignored; a misspelt func_name made a functional problem a stdin one
    rows = [json.loads(line) for line in (LCB_RAW / "test6.jsonl").read_text().splitlines()][:2]
    rows[1][field] = edit(rows[1][field])
    path = tmp_path / "test6.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(PrepError) as info:
        livecodebench.prepare_livecodebench([path], tmp_path / "lcb.parquet")
    assert str(info.value).startswith(f"{path}, row 2, field '{field}': {message}"), str(info.value)


@pytest.mark.parametrize("name, content, message", [
    ("missing.parquet", None, "not a readable parquet file (FileNotFoundError"),
    ("text.parquet", b"not parquet\n", "not a readable parquet file (ArrowInvalid"),
    ("raw.parquet", "raw", "row 1, field 'extra_info.problem_id': missing: not a parquet prepared by"),
])
def test_a_bad_check_disjoint_file_is_named_before_anything_is_written(name, content, message, tmp_path):
    # before: FileNotFoundError / ArrowInvalid / KeyError tracebacks after the whole split was prepared and written
    other = tmp_path / name
    if content == "raw":
        other = next((FIXTURES / "raw_parquet").rglob("*.parquet"))  # a raw LCB file, not a prepared one
    elif content is not None:
        other.write_bytes(content)
    out = tmp_path / "out" / "lcb.parquet"
    with pytest.raises(PrepError) as info:
        livecodebench.prepare_livecodebench([LCB_RAW], out, check_disjoint=[other])
    assert str(info.value).startswith(f"--check-disjoint {other}"), str(info.value)
    assert message in str(info.value), str(info.value)
    assert not out.exists()


def test_an_lcb_title_that_is_not_a_string_is_named_where_errata_are_dropped(tmp_path):
    # before: TypeError "unhashable type: 'list'" from the errata lookup, naming no row
    rows = [json.loads(line) for line in (LCB_RAW / "test6.jsonl").read_text().splitlines()][:2]
    rows[1]["question_title"] = ["A. Short Sort"]
    path = tmp_path / "test6.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(PrepError) as info:
        livecodebench.prepare_livecodebench([path], tmp_path / "lcb.parquet", errata="drop")
    assert str(info.value).startswith(f"{path}, row 2, field 'question_title': expected a string"), str(info.value)


def test_skip_invalid_counts_instead_of_stopping(tmp_path):
    out = tmp_path / "skip.parquet"
    summary = livecodebench.prepare_livecodebench([MALFORMED / "lcb/bad_platform.jsonl"], out, skip_invalid=True)
    assert [r["extra_info"]["problem_id"] for r in read_verl_parquet(out)] == ["abc904_b"]
    assert summary.skipped == {"invalid platform: 'hackerrank' is not one of ['leetcode', 'atcoder', 'codeforces']": 1}
    assert summary.rows_read == 2 and summary.rows_written == 1
    rows, summary = aime25.prepare_aime25(MALFORMED / "aime/answer_too_large.jsonl", skip_invalid=True, allow_partial=True)
    assert len(rows) == 1 and sum(summary.skipped.values()) == 1


def test_an_invalid_copy_does_not_claim_its_id_from_a_later_valid_one(tmp_path):
    # LiveCodeBench: the first copy of abc904_b has an unknown platform, the second is valid: with --skip-invalid
    # the valid one is written, not skipped as a duplicate of a row that was never kept
    rows = [json.loads(line) for line in (MALFORMED / "lcb/bad_platform.jsonl").read_text().splitlines()]
    valid = next(r for r in rows if r["platform"] == "atcoder")
    path = tmp_path / "copies.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ({**valid, "platform": "hackerrank"}, valid)))
    out = tmp_path / "lcb.parquet"
    summary = livecodebench.prepare_livecodebench([path], out, skip_invalid=True)
    assert [r["extra_info"]["problem_id"] for r in read_verl_parquet(out)] == ["abc904_b"]
    assert summary.rows_written == 1 and "duplicate question_id" not in " ".join(summary.skipped)
    # DAPO-Math: the same problem text first without a usable answer, then with one
    raw = pq.read_table(RAW / "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet").to_pylist()[0]
    broken = {**raw, "reward_model": {**raw["reward_model"], "ground_truth": " "}}
    folder = tmp_path / "dapo"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist([broken, raw]), folder / "dapo-math-17k.parquet")
    dapo_rows, dapo_summary = dapo_math.prepare_dapo_math(folder, skip_invalid=True)
    assert [r["reward_model"]["ground_truth"] for r in dapo_rows] == [raw["reward_model"]["ground_truth"]]
    assert "duplicate problem text" not in dapo_summary.skipped and dapo_rows[0]["extra_info"]["index"] == 0


def test_failed_run_leaves_no_output(tmp_path):
    out = tmp_path / "bad.parquet"
    with pytest.raises(PrepError):
        livecodebench.prepare_livecodebench([MALFORMED / "lcb/no_tests.jsonl"], out)
    assert not out.exists() and not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------------------------------------
# Schema, CLI and the all-in-one command


def test_write_rejects_heterogeneous_extra_info(tmp_path):
    rows, _ = gsm8k.prepare_gsm8k(RAW / "openai/gsm8k")
    rows[1]["extra_info"]["extra_key"] = 1
    with pytest.raises(ValueError, match="row 1: extra_info keys"):
        write_verl_parquet(rows, tmp_path / "x.parquet", MATH_EXTRA_INFO)


def test_build_all_writes_every_set_with_one_schema_per_family(tmp_path):
    summaries, missing = build_all(RAW, tmp_path, allow_partial=True)
    assert missing == []
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "aime25.parquet", "dapo_math_17k.parquet", "gsm8k_test.parquet", "gsm8k_train.parquet",
        "hmmt_feb_2025.parquet", "lcb_train.parquet", "lcb_v6.parquet",
    ]  # fmt: skip
    for name in names:
        schema = pq.read_schema(tmp_path / name).remove_metadata()
        family = CODE_EXTRA_INFO if name.startswith("lcb") else MATH_EXTRA_INFO
        assert schema.equals(verl_schema(family)), name
        rows = read_verl_parquet(tmp_path / name)
        assert len({tuple(r["extra_info"]) for r in rows}) == 1  # identical keys across rows
    lcb_train_summary = next(s for s in summaries if s.dataset == "livecodebench_train")
    assert lcb_train_summary.facts[f"question_ids shared with {tmp_path / 'lcb_v6.parquet'}"] == "0"


@pytest.mark.parametrize("module", [aime25, hmmt25, livecodebench, dapo_math, gsm8k])
def test_every_command_has_help(module, capsys):
    with pytest.raises(SystemExit) as info:
        module.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--input" in out and "--output" in out


def test_run_cli_prints_one_clear_error_line(tmp_path, capsys):
    path = MALFORMED / "lcb/bad_contest_date.jsonl"
    code = run_cli(livecodebench.main, ["--input", str(path), "--output", str(tmp_path / "o.parquet")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"error: {path}, row 2, field 'contest_date': not an ISO datetime: 'March 2025'\n"


def test_all_command_end_to_end(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "data_prep.all", "--raw-dir", str(RAW), "--out-dir", str(tmp_path), "--allow-partial"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "[livecodebench_v6] read 10 rows, wrote 4" in result.stdout
    assert "built 7 file(s)" in result.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "data_prep.all", "--raw-dir", str(tmp_path / "nothing"), "--out-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 2 and "raw data folder not found" in missing.stderr


# ----------------------------------------------------------------------------------------------------------
# Rows that contradict each other, or name another set: refused, never resolved silently


def _write_parquet(folder, rows, name):
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / name)
    return folder


def test_a_dapo_copy_with_another_answer_is_refused_naming_both_rows(tmp_path):
    raw = pq.read_table(RAW / "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet").to_pylist()
    gold = raw[0]["reward_model"]["ground_truth"]
    other = {**raw[0], "reward_model": {**raw[0]["reward_model"], "ground_truth": gold + "1"}}
    folder = _write_parquet(tmp_path / "dapo", [raw[0], raw[0], other], "dapo-math-17k.parquet")
    with pytest.raises(PrepError, match=r"row 3, field 'reward_model.ground_truth': ground truth .* differs from "
                                        rf"'{gold}' of the same problem text first read at .*row 1"):
        dapo_math.prepare_dapo_math(folder)
    rows, summary = dapo_math.prepare_dapo_math(folder, skip_invalid=True)  # counted, the first copy kept
    assert [r["reward_model"]["ground_truth"] for r in rows] == [gold] and sum(summary.skipped.values()) == 2


def test_a_dapo_row_of_another_data_source_is_refused(tmp_path):
    raw = pq.read_table(RAW / "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet").to_pylist()
    folder = _write_parquet(tmp_path / "dapo", [raw[0], {**raw[1], "data_source": "openai/gsm8k"}],
                            "dapo-math-17k.parquet")
    with pytest.raises(PrepError, match=r"row 2, field 'data_source': expected 'math_dapo', got 'openai/gsm8k'"):
        dapo_math.prepare_dapo_math(folder)


def test_a_gsm8k_answer_with_two_final_markers_is_refused(tmp_path):
    raw = pq.read_table(RAW / "openai/gsm8k/main/test-00000-of-00001.parquet").to_pylist()[0]
    path = _write_parquet(tmp_path / "gsm", [raw, {**raw, "answer": raw["answer"] + "\n#### 6"}],
                          "test-00000-of-00001.parquet") / "test-00000-of-00001.parquet"
    with pytest.raises(PrepError, match=r"row 2, field 'answer': 2 '####' final-answer markers, expected one"):
        gsm8k.prepare_gsm8k(path)


@pytest.mark.parametrize("written, expected", [("1,000", "1000"), ("-12,345.5", "-12345.5"), ("7,2", None),
                                               ("1,00", None), ("1000,000", None), (",72", None)])
def test_gsm8k_commas_are_removed_only_as_thousands_separators(written, expected):
    # before: every comma was deleted, so a malformed "7,2" became the gold 72
    raw = RawRow(RowRef("train.jsonl", 3), {"question": "q", "answer": f"work\n#### {written}"})
    if expected is not None:
        assert gsm8k.gsm8k_final_answer(raw) == expected
        return
    with pytest.raises(PrepError, match=rf"^train\.jsonl, row 3, field 'answer': final answer after '####' has "
                                        rf"commas that are not thousands separators: '{written}'$"):
        gsm8k.gsm8k_final_answer(raw)


def test_a_gsm8k_question_with_another_answer_is_refused_and_a_copy_skipped(tmp_path):
    # before: both copies were written, the same question with two golds (one of them rewards a wrong answer)
    raw = pq.read_table(RAW / "openai/gsm8k/main/train-00000-of-00001.parquet").to_pylist()
    other = {**raw[0], "question": "  " + raw[0]["question"] + "\n", "answer": raw[0]["answer"] + "1"}
    gold = gsm8k.gsm8k_final_answer(RawRow(RowRef("x", 1), raw[0]))
    path = _write_parquet(tmp_path / "gsm", [raw[0], raw[1], raw[0], other], "test-0.parquet") / "test-0.parquet"
    with pytest.raises(PrepError, match=rf"row 4, field 'answer': final answer '{gold}1' differs from '{gold}' of "
                                        r"the same question first read at .*test-0\.parquet, row 1$"):
        gsm8k.prepare_gsm8k(path)
    rows, summary = gsm8k.prepare_gsm8k(path, skip_invalid=True)  # the copy counted, the conflict skipped
    assert [r["extra_info"]["problem_id"] for r in rows] == ["gsm8k-test-00000", "gsm8k-test-00001"]
    assert summary.skipped["duplicate question"] == 1 and sum(summary.skipped.values()) == 2


def test_a_livecodebench_copy_with_other_tests_is_refused_naming_both_rows(tmp_path):
    # before: the second copy of a question_id was skipped unread, so which tests were kept depended on file order
    rows = [json.loads(line) for line in (MALFORMED / "lcb/bad_platform.jsonl").read_text().splitlines()]
    valid = next(r for r in rows if r["platform"] == "atcoder")
    tests = json.loads(valid["public_test_cases"])
    other = {**valid, "public_test_cases": json.dumps([{**tests[0], "output": tests[0]["output"] + "1"}, *tests[1:]])}
    path = tmp_path / "copies.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (valid, valid, other)))
    with pytest.raises(PrepError, match=r"copies\.jsonl, row 3, field 'public_test_cases': differs from the copy of "
                                        r"question_id 'abc904_b' first read at .*copies\.jsonl, row 1 \(differing "
                                        r"fields: \['public_test_cases'\]\)$"):
        livecodebench.prepare_livecodebench([path], tmp_path / "lcb.parquet")
    summary = livecodebench.prepare_livecodebench([path], tmp_path / "lcb.parquet", skip_invalid=True)
    assert summary.rows_written == 1 and summary.skipped["duplicate question_id (first seen in copies.jsonl)"] == 1


def test_a_bad_lcb_window_option_stops_data_prep_all_before_any_file(tmp_path, monkeypatch, capsys):
    # before: aime25.parquet and hmmt_feb_2025.parquet were written (or the hub fetched) before --start was read
    import data_prep.all as prep_all

    with pytest.raises(PrepError, match=r"^--end: end 2025-02-01 is not after start 2025-06-01$"):
        build_all(RAW, tmp_path / "out", allow_partial=True, start="2025-06-01", end="2025-02-01")
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(prep_all, "fetch_all", lambda *a, **k: pytest.fail("fetched before the options were read"))
    assert prep_all.main(["--out-dir", str(tmp_path / "out"), "--start", "2025-13-01"]) == 2
    assert capsys.readouterr().err == "error: --start: expected YYYY-MM-DD, got '2025-13-01'\n"
    assert not (tmp_path / "out").exists()


def test_the_same_problem_text_under_two_ids_is_refused(tmp_path):
    aime = [{"id": "0", "problem": "Find x.", "answer": "70"}, {"id": "1", "problem": "Find x.", "answer": "588"}]
    path = tmp_path / "aime.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in aime))
    with pytest.raises(PrepError, match=r"row 2, field 'problem': same problem text as .* \(first seen at .*row 1\)"):
        aime25.prepare_aime25(path, allow_partial=True)
    raw = pq.read_table(RAW / "MathArena/hmmt_feb_2025/data/train-00000-of-00001.parquet").to_pylist()
    copy = {**raw[1], "problem": raw[0]["problem"]}
    folder = _write_parquet(tmp_path / "hmmt", [raw[0], copy], "train.parquet")
    with pytest.raises(PrepError, match=r"row 2, field 'problem': same problem text as problem 1 "):
        hmmt25.prepare_hmmt25(folder, allow_partial=True)


@pytest.mark.parametrize("value, shown", [
    (5, "int 5"), (True, "bool True"), (-1, "int -1"), (99, "int 99"), (None, "NoneType None"), (5.0, "float 5.0"),
    ("-1", "'-1'"), ("30", "'30'"), ("\u00b2", "'\u00b2'"), ("", "''"), ("I-01", "'I-01'"),
])
def test_a_math_ai_aime_id_that_is_not_a_string_0_to_29_is_refused(tmp_path, value, shown):
    # before: an id that was not a string fell back to the row order (row 1 became AIME2025-I-01 whatever its id
    # said) and "\u00b2" (str.isdigit, not int()) raised a bare ValueError naming no row
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps({"problem": "Find x.", "answer": "70", "id": value}) + "\n")
    with pytest.raises(PrepError) as caught:
        aime25.prepare_aime25(path, allow_partial=True)
    expected = f"{path}, row 1, field 'id': expected a string '0'..'29' (math-ai/aime25 ids), got {shown}"
    assert str(caught.value) == expected


def test_a_math_ai_aime_copy_without_ids_uses_the_row_order(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps({"problem": f"Find {x}.", "answer": "70"}) + "\n" for x in "xy"))
    rows, _ = aime25.prepare_aime25(path, allow_partial=True)
    assert [r["extra_info"]["problem_id"] for r in rows] == ["AIME2025-I-01", "AIME2025-I-02"]


def test_a_null_field_is_called_null_not_missing(tmp_path):
    path = tmp_path / "aime.jsonl"
    path.write_text(json.dumps({"id": "0", "problem": "Find x.", "answer": None}) + "\n")
    with pytest.raises(PrepError, match=r"row 1, field 'answer': is null$"):
        aime25.prepare_aime25(path, allow_partial=True)
    path.write_text(json.dumps({"id": "0", "problem": None, "answer": "70"}) + "\n")
    with pytest.raises(PrepError, match=r"row 1, field 'problem': (is null|missing; expected one of)"):
        aime25.prepare_aime25(path, allow_partial=True)
    raw = pq.read_table(RAW / "openai/gsm8k/main/test-00000-of-00001.parquet").to_pylist()[0]
    gsm = _write_parquet(tmp_path / "gsm", [{**raw, "question": None}], "test-0.parquet") / "test-0.parquet"
    with pytest.raises(PrepError, match=r"row 1, field 'question': is null$"):
        gsm8k.prepare_gsm8k(gsm)
