"""Shared pieces of the data-prep commands: readers for downloaded hub files, row errors, the verl parquet
writer with a fixed schema, run summaries and CLI plumbing.

Every command reads local files only (jsonl / json / parquet, a file or a downloaded dataset folder) and
writes one parquet in the format verl's ``RLHFDataset`` reads: ``data_source``, ``prompt`` (chat messages),
``ability``, ``reward_model{style, ground_truth}``, ``extra_info{...}``. The ``extra_info`` struct has a
fixed, typed field list per family (:data:`MATH_EXTRA_INFO`, :data:`CODE_EXTRA_INFO`), so its keys are
identical across rows and across files of the same family.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from data_prep.templates import MATH_TEMPLATES, render_math_prompt

# ----------------------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True)
class RowRef:
    """Where a raw row came from: its file and its 1-based row number in that file."""

    file: str
    row: int

    def __str__(self) -> str:
        return f"{self.file}, row {self.row}"


class PrepError(ValueError):
    """A bad input: names the file, the row and the field, and says what is wrong."""

    def __init__(self, ref: RowRef | str, field_name: str | None, message: str):
        self.ref = ref
        self.field_name = field_name
        self.message = message
        where = str(ref) + (f", field '{field_name}'" if field_name else "")
        super().__init__(f"{where}: {message}")


# ----------------------------------------------------------------------------------------------------------
# Readers


@dataclass(frozen=True)
class RawRow:
    """One raw record of a downloaded dataset file."""

    ref: RowRef
    data: dict[str, Any]


def _natural_key(path: Path) -> list:
    """Sort key that puts ``test2.jsonl`` before ``test10.jsonl``."""
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", str(path))]


def find_input_files(path: str | Path, patterns: Iterable[str]) -> list[Path]:
    """``[path]`` for a file; for a folder, the files under it matching any glob in ``patterns`` (recursive),
    in natural order. Raises ``FileNotFoundError`` naming the folder and the patterns when nothing matches."""
    root = Path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such file or folder")
    found: set[Path] = set()
    for pattern in patterns:
        found.update(p for p in root.rglob(pattern) if p.is_file())
    if not found:
        raise FileNotFoundError(f"{root}: no input files matching {list(patterns)} under this folder")
    return sorted(found, key=_natural_key)


def iter_jsonl(path: Path) -> Iterator[RawRow]:
    """Rows of a JSON-lines file, streamed; a line that is not UTF-8 or not a JSON object is a :class:`PrepError`
    naming it."""
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:  # a bad byte: named below, by line
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            ref = RowRef(str(path), line_no)
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise PrepError(ref, None, f"line is not valid UTF-8 (byte at column {exc.start + 1})") from None
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PrepError(ref, None, f"line is not valid JSON ({exc})") from exc
            if not isinstance(obj, dict):
                raise PrepError(ref, None, f"expected a JSON object, got {type(obj).__name__}")
            yield RawRow(ref, obj)


def iter_parquet(path: Path, batch_size: int = 256) -> Iterator[RawRow]:
    """Rows of a parquet file as Python dicts, streamed in batches."""
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise PrepError(str(path), None, f"not a readable parquet file ({exc})") from exc
    row_no = 0
    for batch in parquet.iter_batches(batch_size=batch_size):
        for obj in batch.to_pylist():
            row_no += 1
            yield RawRow(RowRef(str(path), row_no), obj)


def iter_json(path: Path) -> Iterator[RawRow]:
    """Rows of a ``.json`` file: a JSON array of objects, or JSON lines (both are hub conventions)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PrepError(str(path), None, f"not valid UTF-8 (byte {exc.start} of the file)") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        yield from iter_jsonl(path)
        return
    if not isinstance(obj, list):
        raise PrepError(str(path), None, f"expected a JSON array of rows, got {type(obj).__name__}")
    for row_no, item in enumerate(obj, start=1):
        ref = RowRef(str(path), row_no)
        if not isinstance(item, dict):
            raise PrepError(ref, None, f"expected a JSON object, got {type(item).__name__}")
        yield RawRow(ref, item)


def iter_rows(path: Path) -> Iterator[RawRow]:
    """Rows of one downloaded file, by extension (``.jsonl``, ``.json``, ``.parquet``)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".jsonl":
        return iter_jsonl(path)
    if suffix == ".parquet":
        return iter_parquet(path)
    if suffix == ".json":
        return iter_json(path)
    raise PrepError(str(path), None, "unsupported file type (expected .jsonl, .json or .parquet)")


# ----------------------------------------------------------------------------------------------------------
# Field access with row-level errors


# characters no text field of a dataset row may hold (check_text)
NOT_TEXT = re.compile("[\x00\ud800-\udfff]")


def check_text(ref: RowRef | str, field_name: str, value: str, part: str = "") -> str:
    """``value`` unchanged when it is text; a NUL or a lone surrogate in it is a :class:`PrepError` naming the row,
    the field and ``part`` (where inside the field, e.g. ``"test 3: 'input'"`` of a decoded test list). Every
    text a prep reads goes through it, top-level fields (:func:`require_str`) and nested or decoded ones alike."""
    bad = NOT_TEXT.search(value)
    if bad:  # a NUL ends a C string in a tokenizer or a sandbox; a lone surrogate cannot be written as UTF-8
        what = "a NUL character" if bad.group() == "\x00" else f"a lone surrogate U+{ord(bad.group()):04X}"
        raise PrepError(ref, field_name, f"{part + ' ' if part else ''}holds {what} at character {bad.start()}: "
                        "not text")
    return value


def require_str(raw: RawRow, name: str, allow_empty: bool = False) -> str:
    """``raw.data[name]`` as a string; missing, non-string or (unless allowed) empty is a :class:`PrepError`."""
    if name not in raw.data:
        raise PrepError(raw.ref, name, f"missing (row has fields {sorted(raw.data)})")
    value = raw.data[name]
    if value is None:
        raise PrepError(raw.ref, name, "is null")
    if not isinstance(value, str):
        raise PrepError(raw.ref, name, f"expected a string, got {type(value).__name__} {value!r:.80}")
    if not allow_empty and not value.strip():
        raise PrepError(raw.ref, name, "is empty")
    return check_text(raw.ref, name, value)


def first_present(raw: RawRow, aliases: Iterable[str]) -> str | None:
    """The first of ``aliases`` that is a key of the row with a non-null value, else ``None``."""
    for name in aliases:
        if raw.data.get(name) is not None:
            return name
    return None


# ----------------------------------------------------------------------------------------------------------
# Math answers


def checked_gold(ref: "RowRef | str", field_name: str, data_source: str, answer: str) -> str:
    """``answer`` if the project's verifier scores it as right when stated plainly (``\\boxed{answer}`` for
    math, the test structure parsing for code: ``data_prep.row_checks.check_gold``, the pre-flight's check),
    else a :class:`PrepError` naming the row and field: an unusable gold never reaches a parquet."""
    from data_prep.row_checks import check_gold_cached

    try:
        check_gold_cached(data_source, answer)
    except ValueError as exc:
        raise PrepError(ref, field_name, str(exc)) from exc
    return answer


def integer_text(value: Any) -> str | None:
    """Canonical decimal text of an integer-valued answer (int, integral float, or digit string such as
    ``"070"`` -> ``"70"``), else ``None``. Leading zeros are dropped: verl's ``math_dapo`` compares strings."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return str(int(value))
    return None


# ----------------------------------------------------------------------------------------------------------
# verl parquet schema and writer

PROMPT_TYPE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
REWARD_MODEL_TYPE = pa.struct([("style", pa.string()), ("ground_truth", pa.string())])

MATH_EXTRA_INFO = pa.struct(
    [
        ("split", pa.string()),  # "test" for eval sets, "train" for training sets
        ("index", pa.int64()),  # position in this file; verl uses it as the sample index
        ("problem_id", pa.string()),  # stable id, e.g. "AIME2025-I-01", "HMMT2025-FEB-10"
        ("source", pa.string()),  # hub layout and file the row came from
        ("template", pa.string()),  # prompt template: "boxed" | "dapo"
        ("question", pa.string()),  # the bare problem statement (no instruction)
        ("answer", pa.string()),  # the reference answer as written in the source (== ground_truth)
    ]
)

CODE_EXTRA_INFO = pa.struct(
    [
        ("split", pa.string()),
        ("index", pa.int64()),
        ("problem_id", pa.string()),  # LiveCodeBench question_id
        ("source", pa.string()),
        ("template", pa.string()),  # prompt style: "chat" | "single_turn"
        ("question", pa.string()),  # question_content
        ("title", pa.string()),
        ("platform", pa.string()),
        ("contest_id", pa.string()),
        ("contest_date", pa.string()),  # ISO datetime as in the source
        ("difficulty", pa.string()),
        ("starter_code", pa.string()),
        ("fn_name", pa.string()),  # "" for stdin problems
        ("test_type", pa.string()),  # "stdin" | "functional"
        ("num_tests", pa.int64()),  # public + private
        ("num_public_tests", pa.int64()),
    ]
)


def verl_schema(extra_info_type: pa.StructType) -> pa.Schema:
    """The parquet schema of one prepared file."""
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", PROMPT_TYPE),
            ("ability", pa.string()),
            ("reward_model", REWARD_MODEL_TYPE),
            ("extra_info", extra_info_type),
        ]
    )


def write_verl_parquet(
    rows: Iterable[dict], path: str | Path, extra_info_type: pa.StructType, batch_rows: int = 64
) -> Path:
    """Write prepared rows (a list or a stream) with the fixed schema, in batches, atomically: the file
    appears only when every row was written. Every row's ``extra_info`` must have exactly the schema's keys
    (a programming error otherwise, so this raises ``ValueError``)."""
    expected = sorted(f.name for f in extra_info_type)
    schema = verl_schema(extra_info_type)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            batch: list[dict] = []
            for i, row in enumerate(rows):
                if sorted(row["extra_info"]) != expected:
                    raise ValueError(f"row {i}: extra_info keys {sorted(row['extra_info'])} differ from {expected}")
                batch.append(row)
                if len(batch) >= batch_rows:
                    writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                    batch = []
            if batch:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def make_math_row(
    *,
    data_source: str,
    problem: str,
    answer: str,
    template: str,
    split: str,
    index: int,
    problem_id: str,
    source: str,
) -> dict:
    """One verl row for a math problem; ``answer`` becomes the ground truth verbatim."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": render_math_prompt(problem, template)}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {
            "split": split,
            "index": index,
            "problem_id": problem_id,
            "source": source,
            "template": template,
            "question": problem,
            "answer": answer,
        },
    }


def read_verl_parquet(path: str | Path) -> list[dict]:
    """Rows of a prepared parquet as dicts (for checks and tests)."""
    return pq.read_table(path).to_pylist()


# ----------------------------------------------------------------------------------------------------------
# Summaries and row loops


@dataclass
class PrepSummary:
    """What one prep run did; printed at the end of every command."""

    dataset: str
    output: str = ""
    rows_read: int = 0
    rows_written: int = 0
    skipped: Counter = field(default_factory=Counter)
    facts: dict[str, str] = field(default_factory=dict)

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] += count

    def format(self) -> str:
        lines = [f"[{self.dataset}] read {self.rows_read} rows, wrote {self.rows_written} -> {self.output}"]
        total_skipped = sum(self.skipped.values())
        lines.append(f"  skipped: {total_skipped}")
        for reason, count in sorted(self.skipped.items()):
            lines.append(f"    {count:6d}  {reason}")
        for key, value in self.facts.items():
            lines.append(f"  {key}: {value}")
        return "\n".join(lines)


def format_counts(counter: Counter) -> str:
    """``"a=3, b=1"`` ordered by key, or ``"-"`` when empty."""
    return ", ".join(f"{k}={v}" for k, v in sorted(counter.items())) or "-"


def iter_converted(
    rows: Iterable[RawRow],
    convert: Callable[[RawRow], dict | None],
    summary: PrepSummary,
    skip_invalid: bool,
    label: str = "rows",
) -> Iterator[dict]:
    """Apply ``convert`` to every raw row, counting reads. A :class:`PrepError` stops the run, or with
    ``skip_invalid`` is counted as ``invalid <field>: <message>`` and the row dropped. ``convert`` returns
    ``None`` for rows it deliberately leaves out (it records the reason itself). A progress bar named
    ``label`` counts the rows on stderr when it is a terminal (large files take minutes)."""
    from tqdm import tqdm

    # On a terminal only (disable=None), and cleared when done: the summary and any error stay one clean line.
    for raw in tqdm(rows, desc=label, unit=" rows", file=sys.stderr, mininterval=2.0, disable=None, leave=False):
        summary.rows_read += 1
        try:
            result = convert(raw)
            if result is not None:  # whatever the converter: the written gold must be usable
                checked_gold(raw.ref, "reward_model.ground_truth", result["data_source"],
                             result["reward_model"]["ground_truth"])
        except PrepError as exc:
            if not skip_invalid:
                raise
            summary.skip(f"invalid {exc.field_name or 'row'}: {exc.message[:80]}")
            continue
        if result is not None:
            yield result


def convert_rows(
    rows: Iterable[RawRow],
    convert: Callable[[RawRow], dict | None],
    summary: PrepSummary,
    skip_invalid: bool,
    label: str = "rows",
) -> list[dict]:
    """:func:`iter_converted` as a list."""
    return list(iter_converted(rows, convert, summary, skip_invalid, label))


def convert_files(input_path: str | Path, paths: Iterable[Path], convert, summary, skip_invalid: bool) -> list[dict]:
    """Rows converted from every file of ``paths`` in order (see :func:`convert_rows`); no row at all is an
    error naming ``input_path``."""
    rows: list[dict] = []
    for path in paths:
        rows += convert_rows(iter_rows(path), convert, summary, skip_invalid, label=path.name)
    if not rows:
        raise PrepError(str(input_path), None, "no rows prepared")
    return rows


def finish_eval_rows(rows: list[dict], expected: int, dataset: str, allow_partial: bool, summary) -> list[dict]:
    """Eval-set rows in problem order, with the expected row count checked and recorded in ``summary``."""
    rows.sort(key=lambda r: r["extra_info"]["index"])
    check_row_count(len(rows), expected, dataset, allow_partial)
    summary.rows_written = len(rows)
    return rows


def check_row_count(written: int, expected: int, dataset: str, allow_partial: bool) -> None:
    """Stop when an eval set with a known size came out at another size (``--allow-partial`` permits fewer)."""
    if written == expected or (allow_partial and 0 < written < expected):
        return
    hint = " (pass --allow-partial to accept a subset)" if written < expected else ""
    raise PrepError(dataset, None, f"prepared {written} rows but {dataset} has {expected} problems{hint}")


@contextlib.contextmanager
def unlimited_int_digits() -> Iterator[None]:
    """Lift Python's int<->str digit limit (LCB tests hold integers with more than 4300 digits)."""
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(previous)


# ----------------------------------------------------------------------------------------------------------
# CLI plumbing


def base_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argument parser (``prog`` = the module, e.g. ``data_prep.aime25``) with the options every command
    shares."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {prog}", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", required=True, help="downloaded dataset file or folder")
    parser.add_argument("--output", required=True, help="output parquet file")
    parser.add_argument(
        "--skip-invalid",
        action="store_true",
        help="skip and count malformed rows instead of stopping at the first one",
    )
    return parser


def add_math_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by the math eval commands."""
    parser.add_argument("--template", choices=MATH_TEMPLATES, default="boxed", help="prompt template")
    parser.add_argument(
        "--allow-partial", action="store_true", help="accept fewer rows than the set's known size"
    )


def run_cli(main: Callable[[list[str] | None], PrepSummary], argv: list[str] | None = None) -> int:
    """Run a command's ``main``; a :class:`PrepError` or missing input prints one clear line and exits 2."""
    try:
        summary = main(argv)
    except (PrepError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary.format())
    return 0
