"""LiveCodeBench code generation -> verl parquet: the v6 eval window (data_source ``livecodebench_v6``) or
the training set of problems dated before it (data_source ``livecodebench_train``).

Input: ``livecodebench/code_generation_lite`` downloaded from the Hugging Face hub, in either layout:

  original (main branch)   test.jsonl, test2.jsonl, ..., test6.jsonl  (release_v6 = all six files)
  parquet conversion       <config>/test-000KK-of-000NN.parquet, e.g. release_v6/ (refs/pr/7, lighteval mirror)

``--input`` takes files or folders (several allowed). In a folder, every ``test*.jsonl`` is read in order
test.jsonl -> test6.jsonl; without jsonl files, one parquet config is read (``--config``, default the first
present of release_v6, release_latest, v5_v6, v6). Rows are de-duplicated by ``question_id`` (first
occurrence wins) *before* the date split, so a problem lands in exactly one of the two sets; a later copy whose
statement, tests, metadata, starter code or date differ from the first's is refused naming both rows.

  eval  (default): start <= contest_date < end        (default [2025-02-01, 2025-06-01): Feb..May 2025)
  train          : contest_date < start               (everything dated before the eval window)

Private tests are decoded from plain JSON or base64(zlib(pickle(json))) with an unpickler that refuses
every global (so no code can run). Ground truth is ``reward_fns.code_tests.encode_tests`` of
``{"inputs", "outputs", "fn_name"}`` with the public tests first -- exactly LiveCodeBench's
``get_evaluation_sample()["input_output"]``. Prompts are LiveCodeBench's official generic prompt.
Problems listed in LiveCodeBench's ERRATA.md are kept for eval (to reproduce official numbers) and dropped
for training (their tests reject correct answers); ``--errata`` overrides.

    python -m data_prep.livecodebench --input ~/data/code_generation_lite --output data/lcb_v6.parquet
    python -m data_prep.livecodebench --input ~/data/code_generation_lite --split train \\
        --output data/lcb_train.parquet --check-disjoint data/lcb_v6.parquet
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import io
import json
import pickle
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow as pa

from data_prep.common import (
    CODE_EXTRA_INFO,
    PrepError,
    PrepSummary,
    RawRow,
    RowRef,
    check_text,
    format_counts,
    iter_converted,
    iter_rows,
    read_verl_parquet,
    require_str,
    run_cli,
    unlimited_int_digits,
    write_verl_parquet,
)
from data_prep.templates import CODE_PROMPT_STYLES, lcb_messages
from reward_fns.code_tests import TestsDecodeError, encode_tests

DATA_SOURCES = {"eval": "livecodebench_v6", "train": "livecodebench_train"}
DEFAULT_START = "2025-02-01"
DEFAULT_END = "2025-06-01"
PREFERRED_PARQUET_CONFIGS = ("release_v6", "release_latest", "v5_v6", "v6")
PLATFORMS = ("leetcode", "atcoder", "codeforces")
DIFFICULTIES = ("easy", "medium", "hard")
TEST_TYPES = ("stdin", "functional")

# LiveCodeBench ERRATA.md (LiveCodeBench@28fef95): multiple accepted outputs, interactive problems and
# broken tests. AtCoder entries are question_ids, LeetCode entries are question_title slugs.
LCB_ERRATA = frozenset(
    {
        "abc311_c", "abc326_d", "abc327_b", "abc333_e", "abc343_e", "abc362_c", "arc185_c", "abc343_a",
        "find-words-containing-character", "find-the-peaks", "generate-binary-strings-without-adjacent-zeros",
        "abc337_e", "abc355_e",
        "abc350_c", "apply-operations-to-make-string-empty", "most-frequent-ids", "arc189_a",
    }
)  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Private test payloads


class TestPayloadError(ValueError):
    """A ``private_test_cases`` value that is neither JSON nor a global-free base64/zlib/pickle string."""


class _NoGlobalsUnpickler(pickle.Unpickler):
    """LCB pickles a plain ``str``; refusing every global means the payload cannot name a callable, so
    unpickling cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing pickle global {module}.{name} in a test payload")


def decode_private_tests(text: str) -> Any:
    """Decode ``private_test_cases`` as LiveCodeBench does: ``json.loads``, else
    ``json.loads(pickle.loads(zlib.decompress(base64.b64decode(text))))`` -- with the restricted unpickler."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
    except (UnicodeEncodeError, binascii.Error, zlib.error) as exc:
        raise TestPayloadError(f"neither JSON nor base64(zlib(pickle)): {exc}") from exc
    try:
        obj = _NoGlobalsUnpickler(io.BytesIO(raw)).load()
    except pickle.UnpicklingError as exc:
        raise TestPayloadError(str(exc)) from exc
    except Exception as exc:  # malformed pickle streams raise assorted types (EOFError, KeyError, ...)
        raise TestPayloadError(f"corrupt pickle stream: {type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, str):
        raise TestPayloadError(f"pickle payload is a {type(obj).__name__}, expected the JSON text of the tests")
    try:
        return json.loads(obj)
    except json.JSONDecodeError as exc:
        raise TestPayloadError(f"unpickled text is not JSON: {exc}") from exc


# ----------------------------------------------------------------------------------------------------------
# Row validation


# the keys of one LiveCodeBench test case (lcb_runner's Test dataclass)
TEST_KEYS = ("input", "output", "testtype")


def parse_test_cases(raw: RawRow, field_name: str, value: Any, test_type: str) -> list[dict]:
    """Validate a decoded test list: objects with string ``input``/``output`` and ``testtype`` == ``test_type``;
    functional inputs must be JSON values one per line, outputs one JSON value (LCB ``grade_call_based``)."""
    if not isinstance(value, list):
        raise PrepError(raw.ref, field_name, f"expected a list of tests, got {type(value).__name__}")
    for k, test in enumerate(value):
        if not isinstance(test, dict):
            raise PrepError(raw.ref, field_name, f"test {k} is a {type(test).__name__}, expected an object")
        unknown = sorted(set(test) - set(TEST_KEYS))
        if unknown:  # LCB builds Test(**test): an unknown key (a misspelt 'output') fails there too
            raise PrepError(raw.ref, field_name, f"test {k}: unknown key(s) {unknown} (known: {list(TEST_KEYS)})")
        for key in ("input", "output"):
            if not isinstance(test.get(key), str):
                raise PrepError(raw.ref, field_name, f"test {k}: '{key}' must be a string, got {test.get(key)!r:.60}")
            # JSON's \u0000 and \ud800 escapes decode to a NUL and a lone surrogate: the raw field passed as text
            check_text(raw.ref, field_name, test[key], f"test {k}: '{key}'")
        if test.get("testtype") != test_type:
            raise PrepError(
                raw.ref, field_name, f"test {k}: testtype {test.get('testtype')!r} but the problem is {test_type}"
            )
        if test_type == "functional":
            try:
                for line in test["input"].split("\n"):
                    json.loads(line)
            except json.JSONDecodeError as exc:
                raise PrepError(raw.ref, field_name, f"test {k}: input line is not JSON ({exc})") from exc
            try:
                json.loads(test["output"])
            except json.JSONDecodeError as exc:
                raise PrepError(raw.ref, field_name, f"test {k}: output is not JSON ({exc})") from exc
    return value


def contest_datetime(raw: RawRow) -> datetime:
    """``contest_date`` parsed with ``datetime.fromisoformat`` (as LiveCodeBench does); a date with a UTC offset
    (``...+00:00``, ``...Z``) is a :class:`PrepError`: LiveCodeBench's dates are naive, and so are the window's
    ``--start``/``--end``, which an offset-aware date cannot be compared with."""
    text = require_str(raw, "contest_date")
    try:
        date = datetime.fromisoformat(text)
    except ValueError as exc:
        raise PrepError(raw.ref, "contest_date", f"not an ISO datetime: {text!r}") from exc
    if date.tzinfo is not None:
        raise PrepError(raw.ref, "contest_date", f"{text!r} has a UTC offset; LiveCodeBench dates are naive ISO "
                        "datetimes (e.g. '2025-03-15T00:00:00'), compared with the naive --start/--end")
    return date


def choice_field(raw: RawRow, name: str, allowed: tuple[str, ...]) -> str:
    """A string field restricted to ``allowed``."""
    value = require_str(raw, name)
    if value not in allowed:
        raise PrepError(raw.ref, name, f"{value!r} is not one of {list(allowed)}")
    return value


def function_name(raw: RawRow) -> str | None:
    """``metadata["func_name"]`` (LeetCode functional problems) or ``None`` (stdin problems)."""
    text = require_str(raw, "metadata")
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PrepError(raw.ref, "metadata", f"not JSON: {exc}") from exc
    if not isinstance(metadata, dict):
        raise PrepError(raw.ref, "metadata", f"expected a JSON object, got {type(metadata).__name__}")
    unknown = sorted(set(metadata) - {"func_name"})
    if unknown:  # LCB reads only func_name: a misspelt 'fn_name' would turn a functional problem into a stdin one
        raise PrepError(raw.ref, "metadata", f"unknown key(s) {unknown}; LiveCodeBench's metadata is {{}} (stdin) "
                        "or {\"func_name\": <method>} (LeetCode functional)")
    fn_name = metadata.get("func_name")
    if fn_name is not None and not (isinstance(fn_name, str) and fn_name.isidentifier()):
        raise PrepError(raw.ref, "metadata", f"func_name must be a Python identifier, got {fn_name!r}")
    return fn_name


def lcb_tests(raw: RawRow) -> tuple[dict, int]:
    """``({"inputs", "outputs", "fn_name"}, number of public tests)`` for a row, public tests first."""
    fn_name = function_name(raw)
    test_type = "functional" if fn_name else "stdin"
    try:
        public_value = json.loads(require_str(raw, "public_test_cases"))
    except json.JSONDecodeError as exc:
        raise PrepError(raw.ref, "public_test_cases", f"not JSON: {exc}") from exc
    public = parse_test_cases(raw, "public_test_cases", public_value, test_type)
    try:
        private_value = decode_private_tests(require_str(raw, "private_test_cases"))
    except TestPayloadError as exc:
        raise PrepError(raw.ref, "private_test_cases", str(exc)) from exc
    private = parse_test_cases(raw, "private_test_cases", private_value, test_type)
    tests = public + private
    if not tests:
        raise PrepError(raw.ref, "private_test_cases", "the problem has no tests at all")
    return (
        {"inputs": [t["input"] for t in tests], "outputs": [t["output"] for t in tests], "fn_name": fn_name},
        len(public),
    )


def lcb_row(raw: RawRow, data_source: str, split: str, index: int, prompt_style: str) -> dict:
    """One verl row for a LiveCodeBench problem (validates every field it uses)."""
    question_id = require_str(raw, "question_id").strip()
    tests, num_public = lcb_tests(raw)
    fn_name = tests["fn_name"]
    starter_code = require_str(raw, "starter_code", allow_empty=True)
    if fn_name and f"def {fn_name}(" not in starter_code:
        raise PrepError(raw.ref, "starter_code", f"functional problem, but no 'def {fn_name}(' in its starter code")
    question = require_str(raw, "question_content")
    try:
        ground_truth = encode_tests(tests)
    except TestsDecodeError as exc:
        raise PrepError(raw.ref, "private_test_cases", str(exc)) from exc
    return {
        "data_source": data_source,
        "prompt": lcb_messages(question, starter_code, prompt_style),
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "split": "test" if split == "eval" else "train",
            "index": index,
            "problem_id": question_id,
            "source": f"livecodebench/code_generation_lite:{Path(raw.ref.file).name}",
            "template": prompt_style,
            "question": question,
            "title": require_str(raw, "question_title"),
            "platform": choice_field(raw, "platform", PLATFORMS),
            "contest_id": require_str(raw, "contest_id", allow_empty=True),
            "contest_date": require_str(raw, "contest_date"),
            "difficulty": choice_field(raw, "difficulty", DIFFICULTIES),
            "starter_code": starter_code,
            "fn_name": fn_name or "",
            "test_type": "functional" if fn_name else "stdin",
            "num_tests": len(tests["inputs"]),
            "num_public_tests": num_public,
        },
    }


# ----------------------------------------------------------------------------------------------------------
# Inputs


def find_lcb_files(paths: Iterable[str | Path], config: str | None = None) -> list[Path]:
    """The raw LCB files to read, in order (see the module docstring for the rules)."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_file():
            files.append(path)
            continue
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: no such file or folder")
        jsonl = sorted(path.rglob("test*.jsonl"), key=lambda p: (len(p.name), p.name))
        if jsonl:
            files += jsonl
            continue
        by_config: dict[str, list[Path]] = {}
        for p in path.rglob("test-*.parquet"):
            by_config.setdefault(p.parent.name, []).append(p)
        if not by_config:
            raise FileNotFoundError(f"{path}: no test*.jsonl files and no <config>/test-*.parquet files under it")
        wanted = [config] if config else [c for c in PREFERRED_PARQUET_CONFIGS if c in by_config]
        if not wanted and len(by_config) == 1:
            wanted = list(by_config)
        if not wanted or wanted[0] not in by_config:
            raise FileNotFoundError(
                f"{path}: parquet config {config or 'release_v6'} not found; available: {sorted(by_config)}"
                " (choose one with --config)"
            )
        files += sorted(by_config[wanted[0]])
    return files


@dataclass
class WindowSplit:
    """Which rows a run keeps: ``eval`` keeps ``start <= date < end``, ``train`` keeps ``date < start``."""

    split: str
    start: datetime
    end: datetime

    def keeps(self, date: datetime) -> bool:
        if self.split == "eval":
            return self.start <= date < self.end
        return date < self.start

    def in_eval_window(self, date: datetime) -> bool:
        return self.start <= date < self.end


@dataclass
class LcbRunState:
    """Counters gathered while streaming (for the summary and the disjointness check)."""

    seen: dict[str, str] = field(default_factory=dict)
    # question_id -> (field -> digest of its raw value, where it was first read): a later copy must agree
    first_copy: dict[str, tuple[dict[str, str], str]] = field(default_factory=dict)
    eval_window_ids: set[str] = field(default_factory=set)
    written_ids: list[str] = field(default_factory=list)
    dates: list[datetime] = field(default_factory=list)
    platforms: Counter = field(default_factory=Counter)
    difficulties: Counter = field(default_factory=Counter)
    test_types: Counter = field(default_factory=Counter)


# What a second copy of a question_id must repeat: the statement, the tests (its answer) and what decides them.
COPY_FIELDS = ("question_content", "public_test_cases", "private_test_cases", "metadata", "starter_code",
               "contest_date")


def copy_digests(raw: RawRow) -> dict[str, str]:
    """A digest of each raw :data:`COPY_FIELDS` value (private tests run to megabytes: only digests are kept)."""
    return {name: hashlib.sha256(repr(raw.data.get(name)).encode("utf-8", "surrogatepass")).hexdigest()
            for name in COPY_FIELDS}


def iter_lcb_rows(
    files: list[Path],
    window: WindowSplit,
    summary: PrepSummary,
    state: LcbRunState,
    skip_invalid: bool = False,
    drop_errata: bool = False,
    prompt_style: str = "chat",
) -> Iterator[dict]:
    """Stream verl rows from the raw files: de-duplicate, window, drop errata, then decode and validate.
    Rows outside the window are skipped before their private tests are decoded."""
    data_source = DATA_SOURCES[window.split]

    def convert(raw: RawRow) -> dict | None:
        question_id = require_str(raw, "question_id").strip()
        digests = copy_digests(raw)
        if question_id in state.seen:
            first, first_ref = state.first_copy[question_id]
            differing = [name for name in COPY_FIELDS if digests[name] != first[name]]
            if differing:  # which copy's tests are right is unknowable: first-wins would pick one silently
                raise PrepError(raw.ref, differing[0], f"differs from the copy of question_id {question_id!r} "
                                f"first read at {first_ref} (differing fields: {differing})")
            summary.skip(f"duplicate question_id (first seen in {Path(state.seen[question_id]).name})")
            return None
        state.seen[question_id] = raw.ref.file
        state.first_copy[question_id] = (digests, str(raw.ref))
        try:
            return convert_new(raw, question_id)
        except PrepError:  # an invalid copy does not claim its id: a later valid one is kept (--skip-invalid)
            del state.seen[question_id], state.first_copy[question_id]
            raise

    def convert_new(raw: RawRow, question_id: str) -> dict | None:
        date = contest_datetime(raw)
        if window.in_eval_window(date):
            state.eval_window_ids.add(question_id)
        if not window.keeps(date):
            summary.skip("outside the date range of this split")
            return None
        if drop_errata and (question_id in LCB_ERRATA or require_str(raw, "question_title") in LCB_ERRATA):
            summary.skip("listed in LiveCodeBench ERRATA.md")
            return None
        row = lcb_row(raw, data_source, window.split, len(state.written_ids), prompt_style)
        state.written_ids.append(question_id)
        state.dates.append(date)
        info = row["extra_info"]
        state.platforms[info["platform"]] += 1
        state.difficulties[info["difficulty"]] += 1
        state.test_types[info["test_type"]] += 1
        return row

    def all_rows() -> Iterator[RawRow]:
        for path in files:
            yield from iter_rows(path)

    yield from iter_converted(all_rows(), convert, summary, skip_invalid)


def parse_day(text: str, flag: str) -> datetime:
    """A ``YYYY-MM-DD`` command-line date at midnight."""
    try:
        return datetime.strptime(text, "%Y-%m-%d")
    except ValueError as exc:
        raise PrepError(flag, None, f"expected YYYY-MM-DD, got {text!r}") from exc


def eval_window(split: str, start: str, end: str) -> WindowSplit:
    """The rows ``split`` keeps for the ``--start``/``--end`` options; a malformed date or an end not after the
    start raises :class:`PrepError` naming the option (``data_prep.all`` calls it before building any set)."""
    window = WindowSplit(split, parse_day(start, "--start"), parse_day(end, "--end"))
    if window.end <= window.start:
        raise PrepError("--end", None, f"end {end} is not after start {start}")
    return window


def eval_problem_ids(parquet_path: str | Path) -> set[str]:
    """``problem_id`` of every row of a prepared LCB parquet (``--check-disjoint``); a file that is missing, not
    a parquet file or not a prepared one (no ``extra_info.problem_id``) is a :class:`PrepError` naming it."""
    where = f"--check-disjoint {parquet_path}"
    try:
        rows = read_verl_parquet(parquet_path)
    except (OSError, pa.ArrowException) as exc:
        raise PrepError(where, None, f"not a readable parquet file ({type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:200]})") from None
    ids = set()
    for row_no, row in enumerate(rows, start=1):
        extra = row.get("extra_info")
        if not isinstance(extra, dict) or not isinstance(extra.get("problem_id"), str):
            raise PrepError(RowRef(where, row_no), "extra_info.problem_id",
                            "missing: not a parquet prepared by data_prep.livecodebench")
        ids.add(extra["problem_id"])
    return ids


def prepare_livecodebench(
    inputs: Iterable[str | Path],
    output: str | Path,
    split: str = "eval",
    start: str = DEFAULT_START,
    end: str = DEFAULT_END,
    config: str | None = None,
    skip_invalid: bool = False,
    errata: str | None = None,
    prompt_style: str = "chat",
    check_disjoint: Iterable[str | Path] = (),
) -> PrepSummary:
    """Prepare one LCB split from raw files and write it to ``output``; returns the run summary."""
    if split not in DATA_SOURCES:
        raise ValueError(f"split must be one of {list(DATA_SOURCES)}, got {split!r}")
    window = eval_window(split, start, end)
    drop_errata = (errata or ("drop" if split == "train" else "keep")) == "drop"
    files = find_lcb_files(inputs, config)
    # read before the (minutes-long) preparation: a missing or wrong file stops the run before it writes anything
    disjoint_ids = {str(other): eval_problem_ids(other) for other in check_disjoint}
    summary = PrepSummary(DATA_SOURCES[split])
    state = LcbRunState()
    with unlimited_int_digits():
        rows = iter_lcb_rows(files, window, summary, state, skip_invalid, drop_errata, prompt_style)
        summary.output = str(write_verl_parquet(rows, output, CODE_EXTRA_INFO))
    summary.rows_written = len(state.written_ids)
    if summary.rows_written == 0:
        Path(output).unlink(missing_ok=True)
        raise PrepError(", ".join(map(str, files)), None, f"no {split} rows survived (see the date range)")

    rule = f"{start} <= contest_date < {end}" if split == "eval" else f"contest_date < {start}"
    summary.facts["input files"] = ", ".join(p.name for p in files)
    summary.facts["kept"] = rule + (", ERRATA.md problems dropped" if drop_errata else "")
    summary.facts["date range"] = f"{min(state.dates).date()} .. {max(state.dates).date()}"
    summary.facts["platforms"] = format_counts(state.platforms)
    summary.facts["difficulty"] = format_counts(state.difficulties)
    summary.facts["test types"] = format_counts(state.test_types)
    written = set(state.written_ids)
    overlaps: dict[str, set[str]] = {}
    if split == "train":
        overlaps["this input's eval window"] = written & state.eval_window_ids
    for other, ids in disjoint_ids.items():
        overlaps[other] = written & ids
    for name, shared in overlaps.items():
        if shared:
            Path(output).unlink(missing_ok=True)
            raise PrepError(str(output), None, f"shares {len(shared)} question_ids with {name}: {sorted(shared)[:10]}")
        summary.facts[f"question_ids shared with {name}"] = "0"
    return summary


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m data_prep.livecodebench``."""
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.livecodebench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--input", required=True, nargs="+", help="downloaded LCB files or folders")
    add("--output", required=True, help="output parquet file")
    add("--split", choices=sorted(DATA_SOURCES), default="eval", help="eval window or training set")
    add("--start", default=DEFAULT_START, help="eval window start, inclusive (YYYY-MM-DD)")
    add("--end", default=DEFAULT_END, help="eval window end, exclusive (YYYY-MM-DD)")
    add("--config", default=None, help="parquet layout: config folder to read (e.g. release_v6)")
    add("--prompt-style", choices=CODE_PROMPT_STYLES, default="chat", help="system+user turns or one user turn")
    add("--errata", choices=("keep", "drop"), default=None,
        help="problems in LCB's ERRATA.md (default: keep for eval, drop for train)")
    add("--check-disjoint", nargs="*", default=[], metavar="PARQUET",
        help="prepared LCB parquet(s) that must share no question_id with the output")
    add("--skip-invalid", action="store_true", help="skip and count malformed rows instead of stopping")
    return parser


def main(argv: list[str] | None = None) -> PrepSummary:
    args = build_parser().parse_args(argv)
    return prepare_livecodebench(
        args.input,
        args.output,
        split=args.split,
        start=args.start,
        end=args.end,
        config=args.config,
        skip_invalid=args.skip_invalid,
        errata=args.errata,
        prompt_style=args.prompt_style,
        check_disjoint=args.check_disjoint,
    )


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
