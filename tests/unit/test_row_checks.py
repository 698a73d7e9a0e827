"""data_prep.row_checks: every row of a verl parquet is checked (not row 0), with file, 0-based row and field
named; the integer-class rule for gold answers picks what it says it picks."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep.row_checks import (BadGold, RowCheckError, check_code_gold, check_gold, check_rows, golds_to_check,
                                  prose_words)
from reward_fns import KNOWN_DATA_SOURCES, encode_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab" / "scripts"))
from bench_preflight_rows import dapo_shaped_rows, write_dapo_shaped_parquet  # noqa: E402


def row(gold: str = "5", source: str = "math_dapo", prompt=None) -> dict:
    return {"data_source": source, "prompt": [{"role": "user", "content": "What is 2 + 3?"}] if prompt is None else prompt,
            "reward_model": {"style": "rule", "ground_truth": gold}}


def written(tmp_path, rows, name="rows.parquet") -> str:
    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def message_of(path: str, **kwargs) -> str:
    with pytest.raises(RowCheckError) as info:
        check_rows(path, known_sources=KNOWN_DATA_SOURCES, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_good_file_passes_and_reports_what_it_checked(tmp_path):
    report = check_rows(written(tmp_path, [row("5"), row("5"), row("x^2+1", "hmmt_feb_2025")]),
                        known_sources=KNOWN_DATA_SOURCES)
    assert report.rows == 3 and report.data_sources == ("math_dapo", "hmmt_feb_2025")
    assert report.first_row_of_source == {"math_dapo": 0, "hmmt_feb_2025": 2} and report.golds_checked == 2


@pytest.mark.parametrize("bad, expected", [
    (row(source="mathdapo"), "row 3, field data_source: 'mathdapo' is not a data source the reward function knows"),
    (row(prompt=[]), "row 3, field prompt: no messages (empty or null prompt)"),
    (row(prompt=[{"role": "user", "content": None}]), "row 3, field prompt: a message's content is null"),
    (row(prompt=[{"role": "human", "content": "hi"}]), "row 3, field prompt: a message's role is not one of"),
    (row(prompt=[{"role": "user", "content": "  "}]), "row 3, field prompt: no user message with non-empty content"),
    (row("\\frac{1}{"), "row 3, field reward_model.ground_truth: gold answer '\\\\frac{1}{' is unusable: math "
                        "ground truth '\\\\frac{1}{' has an unclosed '{'"),
    (row("some words"), "row 3, field reward_model.ground_truth: gold answer 'some words' is unusable: math ground "
                        "truth 'some words' is prose, not a math answer"),
    (row(""), "row 3, field reward_model.ground_truth: expected a non-empty string, got ''"),
])
def test_a_bad_later_row_is_named(tmp_path, bad, expected):
    path = written(tmp_path, [row("1"), row("2"), row("3"), bad, row("4")])
    assert message_of(path).startswith(f"{path}, {expected}")


def test_a_null_gold_and_a_string_prompt_column_are_named(tmp_path):
    rows = [row(), row()]
    rows[1]["reward_model"]["ground_truth"] = None
    path = written(tmp_path, rows)
    assert message_of(path) == f"{path}, row 1, field reward_model.ground_truth: is null"
    path = written(tmp_path, [dict(row(), prompt="What is 2 + 3?")], "str.parquet")
    assert message_of(path).startswith(f"{path}, row 0, field prompt: stored as string, not a chat list")


def test_a_missing_column_is_named(tmp_path):
    path = written(tmp_path, [{"data_source": "math_dapo", "question": "q", "reward_model": {"ground_truth": "1"}}])
    assert message_of(path).startswith(f"{path}, field prompt: no such column")
    # a configured data.prompt_key is the column read
    assert message_of(path, prompt_key="question").startswith(f"{path}, row 0, field question: stored as string")


@pytest.mark.parametrize("name, content", [
    ("rows.jsonl", b'{"data_source": "math_dapo"}\n'),  # verl reads JSON lines, the pre-flight parquet only
    ("truncated.parquet", None),  # a download cut short: the parquet footer is missing
    ("tiny.parquet", b"PAR1"),
])
def test_a_file_that_is_not_a_readable_parquet_is_named(tmp_path, name, content):
    # before: a bare ArrowInvalid ("Parquet magic bytes not found in footer...") naming no file
    path = tmp_path / name
    if content is None:
        whole = Path(written(tmp_path, [row(), row()])).read_bytes()
        content = whole[:len(whole) // 2]
    path.write_bytes(content)
    message = message_of(str(path))
    assert message.startswith(f"{path}: not a readable parquet file (ArrowInvalid: "), message
    assert message.endswith("(build them with data_prep)"), message


@pytest.mark.parametrize("extra_info, stored", [("{\"index\": 0}", "string"), ([1, 2], "list<")])
def test_an_extra_info_that_is_not_a_struct_is_named(tmp_path, extra_info, stored):
    # before: passed the row checks; verl's RLHFDataset then fails on extra_info.get('index') in a dataloader worker
    path = written(tmp_path, [dict(row(), extra_info=extra_info), dict(row(), extra_info=extra_info)])
    assert message_of(path).startswith(f"{path}, row 0, field extra_info: stored as {stored}"), message_of(path)


def test_an_extra_info_struct_with_null_rows_passes(tmp_path):
    path = written(tmp_path, [dict(row(), extra_info={"index": 0}), dict(row(), extra_info=None)])
    assert check_rows(path, known_sources=KNOWN_DATA_SOURCES).rows == 2
    assert check_rows(written(tmp_path, [dict(row(), extra_info=None)], "null.parquet"),
                      known_sources=KNOWN_DATA_SOURCES).rows == 1


@pytest.mark.parametrize("gold", ["?", "-", "N/A", " n/a ", "TBD"])
def test_a_placeholder_gold_is_refused(gold):
    with pytest.raises(BadGold, match="has no math in it"):
        check_gold("hmmt_feb_2025", gold)


@pytest.mark.parametrize("gold", ["70", "-3", "x^2+1", "\\frac{\\sqrt{3}}{2}", "(1,2)", "\\pi", "2\\sqrt{2}",
                                  "\\{1,2\\}", "\\infty", "3/4", "0.5", "\\text{Alice}"])
def test_plain_math_golds_pass(gold):
    check_gold("hmmt_feb_2025", gold)


def test_code_ground_truth_structure_is_checked():
    good = encode_tests({"inputs": ["1\n"], "outputs": ["1\n"], "fn_name": None})
    check_code_gold(good)
    check_gold("livecodebench_v6", good)
    with pytest.raises(BadGold, match="the tests do not parse: .*neither JSON nor base64"):
        check_gold("livecodebench_v6", "not-tests")
    with pytest.raises(BadGold, match="the tests do not parse"):
        check_gold("livecodebench_v6", '{"inputs": ["1"], "outputs": []}')


def test_prose_words_spare_latex_and_function_names():
    assert prose_words("some words") == ["some", "words"]
    assert prose_words("\\frac{\\sqrt{3}}{2}") == [] and prose_words("\\sin x + \\log 2") == []
    assert prose_words("5\\text{ cm}") == [] and prose_words("x^2+1") == [] and prose_words("\\pi") == []
    assert prose_words("no solution") == ["solution"]


def test_integer_golds_are_checked_per_class_first_middle_last_and_the_rest_each():
    sources = ["math_dapo"] * 9 + ["aime25"]
    golds = ["1", "2", "3", "4", "10", "11", "-5", "1/2", "1/2", "7"]
    picked = golds_to_check(sources, golds)
    # classes of math_dapo: 1 digit {1,2,3,4} -> first/middle/last 1, 3, 4; 2 digits {10, 11} -> both;
    # negative 1 digit {-5}; 1/2 is not a plain integer: checked itself (once, at its first row); aime25's 7 alone
    assert picked == {("math_dapo", "1"): 0, ("math_dapo", "3"): 2, ("math_dapo", "4"): 3, ("math_dapo", "10"): 4,
                      ("math_dapo", "11"): 5, ("math_dapo", "-5"): 6, ("math_dapo", "1/2"): 7, ("aime25", "7"): 9}
    assert len(golds_to_check(sources, golds, sample_integers=False)) == 9


def test_a_dapo_shaped_file_passes_with_few_verifier_calls(tmp_path):
    path = write_dapo_shaped_parquet(tmp_path / "dapo.parquet", n=2000)
    report = check_rows(str(path), known_sources=KNOWN_DATA_SOURCES)
    assert report.rows == 2000
    golds = [r["reward_model"]["ground_truth"] for r in dapo_shaped_rows(2000)]
    assert report.golds_checked == len(golds_to_check(["math_dapo"] * 2000, golds)) < 30
