"""DAPO-Math-17k (training set) -> verl parquet, data_source ``math_dapo``, re-templated like the eval sets.

Input, downloaded from the Hugging Face hub (file or folder):

  BytedTsinghua-SIA/DAPO-Math-17k        data/dapo-math-17k.parquet: already verl-shaped --
      data_source "math_dapo", prompt [{"content", "role"}] in the DAPO "Answer:" template, ability "MATH",
      reward_model {"ground_truth", "style": "rule-lighteval/MATH_v2"}, extra_info {"index": <uuid str>}.
      The file holds ~1.79M rows: the ~17.9k unique prompts duplicated ~100x by accident
      (BytedTsinghua-SIA/DAPO issue #36), so rows are de-duplicated by problem text (first wins).
  open-r1/DAPO-Math-17k-Processed        prompt (str), solution (str) plus the original columns.

The bare problem is recovered by removing the DAPO template (a prompt not in that template stops the run)
and re-rendered with ``--template`` (default ``boxed``, as the eval sets; ``dapo`` reproduces the original
prompt text exactly). Every answer must parse as the math verifier's gold.

    python -m data_prep.dapo_math --input ~/data/DAPO-Math-17k --output data/dapo_math_17k.parquet
"""

from __future__ import annotations

import re
from pathlib import Path

from data_prep.common import (
    MATH_EXTRA_INFO,
    PrepError,
    PrepSummary,
    RawRow,
    base_parser,
    check_text,
    convert_files,
    find_input_files,
    checked_gold,
    make_math_row,
    run_cli,
    write_verl_parquet,
)
from data_prep.templates import MATH_TEMPLATES, strip_dapo_template

DATA_SOURCE = "math_dapo"
INPUT_PATTERNS = ("*.parquet", "*.jsonl", "*.json")
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def dapo_problem(raw: RawRow) -> str:
    """The bare problem statement of a DAPO row (either layout)."""
    prompt = raw.data.get("prompt")
    if isinstance(prompt, list):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if not users or not isinstance(users[-1].get("content"), str):
            raise PrepError(raw.ref, "prompt", "no user message with string content")
        problem = strip_dapo_template(check_text(raw.ref, "prompt", users[-1]["content"], "user message"))
        if problem is None:
            raise PrepError(raw.ref, "prompt", "user message is not in the DAPO 'Answer:' template")
    elif isinstance(prompt, str):
        # open-r1's processed copy stores the templated user text; accept a bare statement as well.
        problem = strip_dapo_template(check_text(raw.ref, "prompt", prompt))
        problem = prompt if problem is None else problem
    else:
        raise PrepError(raw.ref, "prompt", f"expected chat messages or a string, got {type(prompt).__name__}")
    problem = problem.strip()
    if not problem:
        raise PrepError(raw.ref, "prompt", "problem statement is empty")
    return problem


def dapo_answer(raw: RawRow) -> str:
    """The ground truth: ``reward_model.ground_truth`` (original) or ``solution`` (open-r1 copy), checked as the
    math verifier's gold."""
    field_name, answer = dapo_answer_text(raw)
    return checked_gold(raw.ref, field_name, DATA_SOURCE, answer)


def dapo_answer_text(raw: RawRow) -> tuple[str, str]:
    """The field holding the ground truth and its stripped text, not yet checked as a gold."""
    reward_model = raw.data.get("reward_model")
    if isinstance(reward_model, dict) and "ground_truth" in reward_model:
        field_name, value = "reward_model.ground_truth", reward_model["ground_truth"]
    elif "solution" in raw.data:
        field_name, value = "solution", raw.data["solution"]
    else:
        raise PrepError(raw.ref, "reward_model", f"no ground truth (row has fields {sorted(raw.data)})")
    if not isinstance(value, str) or not value.strip():
        raise PrepError(raw.ref, field_name, f"expected a non-empty string, got {value!r:.60}")
    return field_name, check_text(raw.ref, field_name, value).strip()


def dapo_source_id(raw: RawRow, fallback: int) -> str:
    """The row's original ``extra_info.index`` (a uuid string) or a positional id."""
    extra = raw.data.get("extra_info")
    if isinstance(extra, dict) and extra.get("index") not in (None, ""):
        return check_text(raw.ref, "extra_info.index", str(extra["index"]))
    return f"dapo-{fallback:05d}"


def prepare_dapo_math(
    input_path: str | Path, template: str = "boxed", skip_invalid: bool = False
) -> tuple[list[dict], PrepSummary]:
    """Read DAPO-Math-17k under ``input_path``, de-duplicate by problem text and build the verl rows."""
    summary = PrepSummary(DATA_SOURCE)
    seen: dict[str, tuple[str, str]] = {}  # problem text -> (its answer, where it was first read)
    stats = {"non_integer": 0, "cjk": 0}

    def convert(raw: RawRow) -> dict | None:
        source = raw.data.get("data_source", DATA_SOURCE)
        if source != DATA_SOURCE:  # another set's row would be relabelled and scored as DAPO's
            raise PrepError(raw.ref, "data_source", f"expected {DATA_SOURCE!r}, got {source!r:.60}")
        problem = dapo_problem(raw)
        if problem in seen:
            first_answer, first_ref = seen[problem]
            field_name, answer = dapo_answer_text(raw)
            if answer != first_answer:  # the ~100 accidental copies agree; a copy that does not is corrupt
                raise PrepError(raw.ref, field_name, f"ground truth {answer!r:.60} differs from {first_answer!r:.60}"
                                f" of the same problem text first read at {first_ref}")
            summary.skip("duplicate problem text")
            return None
        answer = dapo_answer(raw)  # before the text is claimed: a later valid copy still counts (--skip-invalid)
        seen[problem] = (answer, str(raw.ref))
        index = len(seen) - 1
        stats["non_integer"] += not re.fullmatch(r"-?\d+", answer)
        stats["cjk"] += bool(CJK.search(problem))
        return make_math_row(
            data_source=DATA_SOURCE,
            problem=problem,
            answer=answer,
            template=template,
            split="train",
            index=index,
            problem_id=dapo_source_id(raw, index),
            source=f"BytedTsinghua-SIA/DAPO-Math-17k:{Path(raw.ref.file).name}",
        )

    rows = convert_files(input_path, find_input_files(input_path, INPUT_PATTERNS), convert, summary, skip_invalid)
    for i, row in enumerate(rows):  # contiguous indices after skips
        row["extra_info"]["index"] = i
    summary.rows_written = len(rows)
    summary.facts["non-integer answers"] = str(stats["non_integer"])
    summary.facts["problems with CJK text"] = str(stats["cjk"])
    summary.facts["template"] = template
    return rows, summary


def main(argv: list[str] | None = None) -> PrepSummary:
    parser = base_parser("data_prep.dapo_math", __doc__)
    parser.add_argument("--template", choices=MATH_TEMPLATES, default="boxed", help="prompt template")
    args = parser.parse_args(argv)
    rows, summary = prepare_dapo_math(args.input, args.template, args.skip_invalid)
    summary.output = str(write_verl_parquet(rows, args.output, MATH_EXTRA_INFO))
    return summary


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
