"""GSM8K -> verl parquet, data_source ``openai/gsm8k`` (the set of the counterfactual-importance method).

Input: ``openai/gsm8k`` from the Hugging Face hub -- ``main/train-00000-of-00001.parquet`` /
``main/test-00000-of-00001.parquet`` (or the original ``train.jsonl`` / ``test.jsonl``), columns
``question`` (str) and ``answer`` (str: worked solution ending in ``#### <number>``). A folder input is
searched for files named ``<split>*`` (``--split``), preferring the ``main`` config over ``socratic``.

Ground truth is the number after the last ``####`` with thousands separators removed (as verl's
``examples/data_preprocess/gsm8k.py``); the prompt uses the same math templates as every other set.

    python -m data_prep.gsm8k --input ~/data/gsm8k/main/train-00000-of-00001.parquet --output data/gsm8k_train.parquet
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
    convert_files,
    make_math_row,
    require_str,
    run_cli,
    write_verl_parquet,
)
from data_prep.templates import MATH_TEMPLATES

DATA_SOURCE = "openai/gsm8k"
NUMBER = re.compile(r"-?\d+(\.\d+)?")
THOUSANDS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")  # 1,000 and 12,345.5: the commas verl's prep removes


def gsm8k_final_answer(raw: RawRow) -> str:
    """The number after the one ``####`` of the ``answer`` field, thousands commas removed (``1,000``); commas
    anywhere else (``7,2``) are refused naming the row."""
    text = require_str(raw, "answer")
    if "####" not in text:
        raise PrepError(raw.ref, "answer", "no '#### <number>' final answer")
    if text.count("####") > 1:  # which one is final is a guess: GSM8K's solutions end with exactly one
        raise PrepError(raw.ref, "answer", f"{text.count('####')} '####' final-answer markers, expected one")
    written = text.rsplit("####", 1)[1].strip()
    if "," in written and not THOUSANDS.fullmatch(written):  # "7,2" is no thousands grouping: 72? 7.2? 7 and 2?
        raise PrepError(raw.ref, "answer", f"final answer after '####' has commas that are not thousands "
                        f"separators: {written!r}")
    final = written.replace(",", "")
    if not NUMBER.fullmatch(final):
        raise PrepError(raw.ref, "answer", f"final answer after '####' is not a number: {final!r}")
    return final


def find_gsm8k_files(path: str | Path, split: str) -> list[Path]:
    """``[path]`` for a file; in a folder, the ``<split>*.parquet|jsonl`` files of one config (``main``
    preferred when several configs are present)."""
    root = Path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such file or folder")
    files = [p for pattern in (f"{split}*.parquet", f"{split}*.jsonl") for p in root.rglob(pattern)]
    if not files:
        raise FileNotFoundError(f"{root}: no {split}*.parquet or {split}*.jsonl files under this folder")
    configs = {p.parent for p in files}
    if len(configs) > 1:
        main_config = [p for p in files if p.parent.name == "main"]
        if not main_config:
            raise FileNotFoundError(f"{root}: {split} files in several folders {sorted(map(str, configs))}; pass one")
        files = main_config
    return sorted(files)


def infer_split(path: str | Path) -> str:
    """``test`` for a file named ``test*``, else ``train``."""
    return "test" if Path(path).is_file() and Path(path).name.startswith("test") else "train"


def prepare_gsm8k(
    input_path: str | Path, split: str | None = None, template: str = "boxed", skip_invalid: bool = False
) -> tuple[list[dict], PrepSummary]:
    """Read one GSM8K split (``None``: inferred from the file name) and build the verl rows. A question read again
    with the same final answer is skipped (counted); with another final answer it is refused naming both rows."""
    summary = PrepSummary(DATA_SOURCE)
    split = split or infer_split(input_path)
    out_split = split
    seen: dict[str, tuple[str, str]] = {}  # question -> (its final answer, where it was first read)

    def convert(raw: RawRow) -> dict | None:
        question = require_str(raw, "question").strip()
        answer = gsm8k_final_answer(raw)
        if question in seen:
            first_answer, first_ref = seen[question]
            if answer != first_answer:  # which answer is right is unknowable; either would train a wrong reward
                raise PrepError(raw.ref, "answer", f"final answer {answer!r:.60} differs from {first_answer!r:.60} "
                                f"of the same question first read at {first_ref}")
            summary.skip("duplicate question")  # a second copy would weigh the problem twice
            return None
        seen[question] = (answer, str(raw.ref))  # after both checks: an invalid copy claims nothing
        return make_math_row(
            data_source=DATA_SOURCE,
            problem=question,
            answer=answer,
            template=template,
            split=out_split,
            index=summary.rows_read - 1,
            problem_id=f"gsm8k-{out_split}-{summary.rows_read - 1:05d}",
            source=f"openai/gsm8k:{Path(raw.ref.file).name}",
        )

    rows = convert_files(input_path, find_gsm8k_files(input_path, split), convert, summary, skip_invalid)
    summary.rows_written = len(rows)
    summary.facts["template"] = template
    return rows, summary


def main(argv: list[str] | None = None) -> PrepSummary:
    parser = base_parser("data_prep.gsm8k", __doc__)
    parser.add_argument("--split", choices=("train", "test"), default=None,
                        help="split to read from a folder / to record (default: from the file name, else train)")
    parser.add_argument("--template", choices=MATH_TEMPLATES, default="boxed", help="prompt template")
    args = parser.parse_args(argv)
    rows, summary = prepare_gsm8k(args.input, args.split, args.template, args.skip_invalid)
    summary.facts["split"] = rows[0]["extra_info"]["split"]
    summary.output = str(write_verl_parquet(rows, args.output, MATH_EXTRA_INFO))
    return summary


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
