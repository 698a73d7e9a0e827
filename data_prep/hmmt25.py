"""HMMT February 2025 (30 problems) -> verl parquet, data_source ``hmmt_feb_2025``.

Input: ``MathArena/hmmt_feb_2025`` from the Hugging Face hub (``data/train-00000-of-00001.parquet``, or the
folder), columns ``problem_idx`` (int64, 1..30), ``problem`` (str), ``answer`` (str, LaTeX),
``problem_type`` (list of str).

Answers are LaTeX (fractions, radicals, pi, factorials, one two-value list) and are kept verbatim (only
surrounding whitespace is stripped); a non-string answer stops the run rather than being cast. Every
answer must parse as the math verifier's gold (``math_verify.parse("\\boxed{answer}")``). Problem ids are
HMMT2025-FEB-01 .. HMMT2025-FEB-30. The run stops unless exactly 30 problems come out
(``--allow-partial`` accepts fewer).

    python -m data_prep.hmmt25 --input ~/data/MathArena/hmmt_feb_2025 --output data/hmmt_feb_2025.parquet
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from data_prep.common import (
    MATH_EXTRA_INFO,
    PrepError,
    PrepSummary,
    RawRow,
    add_math_options,
    base_parser,
    convert_files,
    find_input_files,
    finish_eval_rows,
    format_counts,
    checked_gold,
    make_math_row,
    require_str,
    run_cli,
    write_verl_parquet,
)

DATA_SOURCE = "hmmt_feb_2025"
EXPECTED_ROWS = 30
INPUT_PATTERNS = ("*.parquet", "*.jsonl", "*.json")


def hmmt_answer(raw: RawRow) -> str:
    """The LaTeX answer, stripped but otherwise verbatim; it must be a string the math verifier can parse."""
    value = raw.data.get("answer")
    if value is not None and not isinstance(value, str):
        raise PrepError(raw.ref, "answer", f"HMMT answers are LaTeX strings; got {type(value).__name__} {value!r}")
    answer = require_str(raw, "answer").strip()
    return checked_gold(raw.ref, "answer", DATA_SOURCE, answer)


def problem_number(raw: RawRow) -> int:
    """``problem_idx`` (1..30)."""
    value = raw.data.get("problem_idx")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= EXPECTED_ROWS:
        raise PrepError(raw.ref, "problem_idx", f"expected an integer 1..30, got {value!r}")
    return value


def problem_types(raw: RawRow) -> list[str]:
    """``problem_type`` (for the summary only): a list of topics, one topic written as a plain string, or absent."""
    value = raw.data.get("problem_type")
    if value is None:
        return []
    if isinstance(value, str):  # one topic, not one per character
        return [value]
    if not isinstance(value, (list, tuple)):
        raise PrepError(raw.ref, "problem_type", f"expected a list of topics, got {type(value).__name__}")
    return [str(topic) for topic in value]


def prepare_hmmt25(
    input_path: str | Path,
    template: str = "boxed",
    skip_invalid: bool = False,
    allow_partial: bool = False,
) -> tuple[list[dict], PrepSummary]:
    """Read the HMMT Feb 2025 file(s) under ``input_path`` and build the verl rows (by problem number)."""
    summary = PrepSummary(DATA_SOURCE)
    seen: dict[int, str] = {}
    texts: dict[str, tuple[int, str]] = {}  # problem text -> (its number, where it was first read)
    topics: Counter = Counter()

    def convert(raw: RawRow) -> dict:
        number = problem_number(raw)
        problem = require_str(raw, "problem").strip()
        answer = hmmt_answer(raw)
        if number in seen:
            raise PrepError(raw.ref, "problem_idx", f"duplicate problem {number} (first seen at {seen[number]})")
        if problem in texts:  # one problem under two numbers would count twice in an eval set of 30
            raise PrepError(raw.ref, "problem", f"same problem text as problem {texts[problem][0]} "
                            f"(first seen at {texts[problem][1]})")
        seen[number] = str(raw.ref)
        texts[problem] = (number, str(raw.ref))
        for topic in problem_types(raw):
            topics[topic] += 1
        return make_math_row(
            data_source=DATA_SOURCE,
            problem=problem,
            answer=answer,
            template=template,
            split="test",
            index=number - 1,
            problem_id=f"HMMT2025-FEB-{number:02d}",
            source=f"MathArena/hmmt_feb_2025:{Path(raw.ref.file).name}",
        )

    rows = convert_files(input_path, find_input_files(input_path, INPUT_PATTERNS), convert, summary, skip_invalid)
    rows = finish_eval_rows(rows, EXPECTED_ROWS, DATA_SOURCE, allow_partial, summary)
    summary.facts["problem types"] = format_counts(topics)
    answers = [r["reward_model"]["ground_truth"] for r in rows]
    summary.facts["non-integer answers"] = str(sum(not a.lstrip("-").isdigit() for a in answers))
    summary.facts["template"] = template
    return rows, summary


def main(argv: list[str] | None = None) -> PrepSummary:
    parser = base_parser("data_prep.hmmt25", __doc__)
    add_math_options(parser)
    args = parser.parse_args(argv)
    rows, summary = prepare_hmmt25(args.input, args.template, args.skip_invalid, args.allow_partial)
    summary.output = str(write_verl_parquet(rows, args.output, MATH_EXTRA_INFO))
    return summary


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
