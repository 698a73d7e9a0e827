"""AIME 2025 (30 problems) -> verl parquet, data_source ``aime25``.

Accepts any of the four public copies, downloaded from the Hugging Face hub (file or folder):

  math-ai/aime25            test.jsonl                    problem, answer (str), id ("0".."29", or absent)
  opencompass/AIME2025      aime2025-I.jsonl, aime2025-II.jsonl   question, answer (str)
  MathArena/aime_2025       data/train-00000-of-00001.parquet     problem_idx (1..30), problem, answer (int64)
  yentinglin/aime_2025      data/train-*.parquet          question (or problem), answer, id, year, solution, url

Answers are written as canonical integer text ("70", never "070"); problem ids are AIME2025-I-01 ...
AIME2025-II-15 (a math-ai ``id`` other than the string "0".."29" is refused naming its row, never renumbered
by row order). The run stops unless exactly 30 problems come out (``--allow-partial`` accepts fewer).

    python -m data_prep.aime25 --input ~/data/math-ai/aime25 --output data/aime25.parquet [--template dapo]
"""

from __future__ import annotations

import re
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
    first_present,
    format_counts,
    integer_text,
    make_math_row,
    require_str,
    run_cli,
    write_verl_parquet,
)

DATA_SOURCE = "aime25"
EXPECTED_ROWS = 30
INPUT_PATTERNS = ("*.jsonl", "*.parquet", "*.json")
STATEMENT_ALIASES = ("problem", "question", "Problem")
ANSWER_ALIASES = ("answer", "Answer")
OPENCOMPASS_FILE = re.compile(r"aime2025-(I|II)\.jsonl$", re.IGNORECASE)


def aime_problem_id(position: int) -> str:
    """``AIME2025-I-01`` .. ``AIME2025-II-15`` for zero-based positions 0..29 (AIME I first)."""
    if not 0 <= position < EXPECTED_ROWS:
        raise ValueError(f"AIME 2025 position {position} outside 0..29")
    part, number = ("I", position + 1) if position < 15 else ("II", position - 14)
    return f"AIME2025-{part}-{number:02d}"


def detect_layout(raw: RawRow) -> str:
    """Which hub copy a row comes from, by file name and columns."""
    if OPENCOMPASS_FILE.search(raw.ref.file):
        return "opencompass/AIME2025"
    if "problem_idx" in raw.data:
        return "MathArena/aime_2025"
    if "url" in raw.data or "year" in raw.data:
        return "yentinglin/aime_2025"
    if "id" in raw.data or "problem" in raw.data:
        return "math-ai/aime25"
    return "unknown"


def problem_position(raw: RawRow, layout: str, row_order: int) -> int:
    """Zero-based AIME position of a row (AIME I #1 = 0 .. AIME II #15 = 29).

    MathArena's ``problem_idx`` is 1-based; opencompass has one file per exam; math-ai's ``id`` is the
    0-based position as a string (every real copy holds ``"0"``..``"29"``; one without the key uses the row
    order). Other copies (yentinglin, whose integer ``id`` base is not documented) use the row order across
    the input files."""
    if layout == "MathArena/aime_2025":
        value = raw.data["problem_idx"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= EXPECTED_ROWS:
            raise PrepError(raw.ref, "problem_idx", f"expected an integer 1..30, got {value!r}")
        return value - 1
    if layout == "opencompass/AIME2025":
        part = OPENCOMPASS_FILE.search(raw.ref.file).group(1).upper()
        if not 1 <= raw.ref.row <= 15:
            raise PrepError(raw.ref, None, "an opencompass AIME2025 file has 15 rows; this is beyond row 15")
        return raw.ref.row - 1 + (15 if part == "II" else 0)
    if layout == "math-ai/aime25" and "id" in raw.data:
        return math_ai_position(raw)
    if not 0 <= row_order < EXPECTED_ROWS:
        raise PrepError(raw.ref, None, f"more than {EXPECTED_ROWS} rows in the input")
    return row_order


def math_ai_position(raw: RawRow) -> int:
    """The position a math-ai ``id`` names. Its real copies hold the string ``"0"``..``"29"``; anything else
    (an int, a bool, null, ``"-1"``, ``"²"``) is a :class:`PrepError` naming the row: falling back to the row
    order would silently renumber a row whose id says something else."""
    value = raw.data["id"]
    if not isinstance(value, str) or not re.fullmatch(r"[0-9]+", value.strip()) or int(value) >= EXPECTED_ROWS:
        shown = f"{type(value).__name__} {value!r}" if not isinstance(value, str) else repr(value)
        raise PrepError(raw.ref, "id", f"expected a string '0'..'29' (math-ai/aime25 ids), got {shown}")
    return int(value)


def aime_answer(raw: RawRow) -> str:
    """The answer as canonical integer text in 0..999; anything else is a :class:`PrepError`."""
    name = first_present(raw, ANSWER_ALIASES)
    if name is None:
        null = [a for a in ANSWER_ALIASES if a in raw.data]
        raise PrepError(raw.ref, null[0] if null else "answer",
                        "is null" if null else f"missing (row has fields {sorted(raw.data)})")
    text = integer_text(raw.data[name])
    if text is None or not 0 <= int(text) <= 999:
        raise PrepError(raw.ref, name, f"AIME answers are integers 0..999, got {raw.data[name]!r}")
    return text


def prepare_aime25(
    input_path: str | Path,
    template: str = "boxed",
    skip_invalid: bool = False,
    allow_partial: bool = False,
) -> tuple[list[dict], PrepSummary]:
    """Read every AIME 2025 file under ``input_path`` and build the verl rows (sorted by problem id)."""
    summary = PrepSummary(DATA_SOURCE)
    layouts: Counter = Counter()
    seen: dict[str, str] = {}
    texts: dict[str, tuple[str, str]] = {}  # problem text -> (its id, where it was first read)
    counter = {"row_order": 0}

    def convert(raw: RawRow) -> dict:
        layout = detect_layout(raw)
        position = problem_position(raw, layout, counter["row_order"])
        counter["row_order"] += 1
        statement_field = first_present(raw, STATEMENT_ALIASES)
        if statement_field is None:
            raise PrepError(raw.ref, "problem", f"missing; expected one of {list(STATEMENT_ALIASES)}")
        problem = require_str(raw, statement_field).strip()
        answer = aime_answer(raw)
        problem_id = aime_problem_id(position)
        if problem_id in seen:
            raise PrepError(raw.ref, None, f"duplicate problem {problem_id} (first seen at {seen[problem_id]})")
        if problem in texts:  # one problem under two ids would count twice in an eval set of 30
            raise PrepError(raw.ref, statement_field, f"same problem text as {texts[problem][0]} "
                            f"(first seen at {texts[problem][1]})")
        seen[problem_id] = str(raw.ref)
        texts[problem] = (problem_id, str(raw.ref))
        layouts[layout] += 1
        return make_math_row(
            data_source=DATA_SOURCE,
            problem=problem,
            answer=answer,
            template=template,
            split="test",
            index=position,
            problem_id=problem_id,
            source=f"{layout}:{Path(raw.ref.file).name}",
        )

    rows = convert_files(input_path, find_input_files(input_path, INPUT_PATTERNS), convert, summary, skip_invalid)
    rows = finish_eval_rows(rows, EXPECTED_ROWS, DATA_SOURCE, allow_partial, summary)
    summary.facts["layout"] = format_counts(layouts)
    summary.facts["template"] = template
    return rows, summary


def main(argv: list[str] | None = None) -> PrepSummary:
    parser = base_parser("data_prep.aime25", __doc__)
    add_math_options(parser)
    args = parser.parse_args(argv)
    rows, summary = prepare_aime25(args.input, args.template, args.skip_invalid, args.allow_partial)
    summary.output = str(write_verl_parquet(rows, args.output, MATH_EXTRA_INFO))
    return summary


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
