"""Checks of every row of a verl RL parquet file, shared by the run's pre-flight
(``recipe.common.preflight.preflight``) and ``data_prep`` (so an unusable row never reaches a parquet).

A row is usable when
- its ``data_source`` is one the configured reward function knows;
- its prompt is a chat list (``[{"role": ..., "content": ...}, ...]`` with a user message), the form verl's
  ``RLHFDataset`` applies the chat template to;
- its gold answer (``reward_model.ground_truth``) is one the verifier scores as right when stated plainly: for
  math, ``compute_score(data_source, "\\boxed{gold}", gold)`` is 1 and the gold does not read as prose; for
  code, the ground truth's own test structure parses (``reward_fns.code_verifier.prepare_tests``).

Prompts and data sources are checked column-wise with pyarrow (every row, microseconds per row). Gold answers
go through the real verifier, once per distinct ``(data_source, gold)`` pair, plain integers once per class
of digit count (:func:`golds_to_check`), on a thread pool as wide as the math worker pool.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})
# Words a math answer may contain outside LaTeX commands (functions, constants, common units of an answer).
MATH_WORDS = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "max", "min", "gcd",
                        "lcm", "mod", "deg", "inf", "sqrt", "frac", "pi", "arcsin", "arccos", "arctan", "det"})
# Gold answers that stand for a missing one (compared case-insensitively, stripped).
PLACEHOLDER_GOLDS = frozenset({"n/a", "na", "none", "null", "nan", "tbd", "unknown", "undefined", "answer"})
# Longest gold answer shown in a message.
SHOWN_CHARS = 80


class RowCheckError(ValueError):
    """A row of a data file cannot be used: names the file, the (0-based) row and the field."""

    def __init__(self, path: str, row: int | None, field_name: str | None, message: str):
        self.path, self.row, self.field_name, self.message = path, row, field_name, message
        where = str(path) + ("" if row is None else f", row {row}") + (f", field {field_name}" if field_name else "")
        super().__init__(f"{where}: {message}")


class BadGold(ValueError):
    """A gold answer the verifier cannot score as right (the message says why, without file or row)."""


# ------------------------------------------------------------------------------------------------ gold answers

def _without_latex_text(gold: str) -> str:
    """``gold`` without LaTeX command names and the contents of ``\\text{...}``-like groups (explicit text is
    allowed in an answer, e.g. a unit)."""
    text = re.sub(r"\\(?:text|mathrm|textbf|mbox|operatorname)\s*\{[^{}]*\}", " ", gold)
    return re.sub(r"\\[A-Za-z]+", " ", text)


def prose_words(gold: str) -> list[str]:
    """Words of three or more letters in ``gold`` outside LaTeX commands and ``\\text{}``, other than function
    names: a gold answer such as ``some words`` or ``no solution`` is prose, which math-verify "parses" into a
    product of symbols or a raw string, so every response would be compared against it as text."""
    return [w for w in re.findall(r"[A-Za-z]{3,}", _without_latex_text(gold)) if w.lower() not in MATH_WORDS]


def check_math_gold(data_source: str, gold: Any, score_fn: Callable[..., Any] | None = None,
                    reward_kwargs: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`BadGold` unless ``gold`` is a non-empty string the verifier scores as right when stated
    plainly (``\\boxed{gold}`` through ``score_fn``, default ``reward_fns.compute_score``) and that is not
    prose. ``reward_fns`` errors for the gold (``BadGroundTruth``) become :class:`BadGold`."""
    import reward_fns

    if not isinstance(gold, str) or not gold.strip():
        raise BadGold(f"expected a non-empty string, got {gold!r:.{SHOWN_CHARS}}")
    checker = getattr(reward_fns, "check_ground_truth", None)  # the verifier's own gold check, where it exists
    try:
        if checker is not None:
            checker(data_source, gold)
        if not re.search(r"[0-9A-Za-z]", gold) or gold.strip().lower() in PLACEHOLDER_GOLDS:
            raise BadGold(f"gold answer {gold!r:.{SHOWN_CHARS}} has no math in it (a placeholder or a fragment: "
                          "no number, variable or LaTeX command); every response would be compared against it as text")
        words = prose_words(gold)
        if words:
            raise BadGold(f"gold answer {gold!r:.{SHOWN_CHARS}} reads as prose (words {words[:3]}), not a math "
                          "answer; every response would be compared against it as text")
        result = (score_fn or reward_fns.compute_score)(data_source, "\\boxed{" + gold + "}", gold, None,
                                                        **dict(reward_kwargs or {}))
    except BadGold:
        raise
    except ValueError as exc:  # BadGroundTruth and the checker's errors are ValueErrors
        # the caller names file, row and field: keep the verifier's reason, not its own row label
        reason = str(exc).split(", field reward_model.ground_truth: ", 1)[-1]
        raise BadGold(f"gold answer {gold!r:.{SHOWN_CHARS}} is unusable: {reason}") from exc
    score = result.get("score") if isinstance(result, dict) else result
    if score != 1.0:
        verdict = result.get("verdict") if isinstance(result, dict) else None
        raise BadGold(f"gold answer {gold!r:.{SHOWN_CHARS}} stated plainly as \\boxed{{...}} scores {score!r}"
                      + (f" (verdict {verdict})" if verdict else "") + ", not 1: the verifier does not accept its own gold answer, so "
                      "every response to this row would score 0")


def check_code_gold(gold: Any) -> None:
    """Raise :class:`BadGold` unless ``gold`` decodes into the verifier's test structure
    (``reward_fns.code_verifier.prepare_tests``: inputs/outputs lists of strings, functional tests as JSON)."""
    from reward_fns.code_verifier import BadCodeGroundTruth, prepare_tests

    if not isinstance(gold, str) or not gold.strip():
        raise BadGold(f"expected the encoded tests as a non-empty string, got {gold!r:.{SHOWN_CHARS}}")
    try:
        prepare_tests(gold)
    except (BadCodeGroundTruth, ValueError) as exc:
        raise BadGold(f"the tests do not parse: {exc}") from exc


def check_gold(data_source: str, gold: Any, score_fn: Callable[..., Any] | None = None,
               reward_kwargs: Mapping[str, Any] | None = None) -> None:
    """:func:`check_math_gold` or :func:`check_code_gold` by the kind ``reward_fns`` gives ``data_source``;
    raises :class:`BadGold` (and ``reward_fns.UnknownDataSource`` for an unknown source)."""
    from reward_fns import KNOWN_DATA_SOURCES, UnknownDataSource

    kind = KNOWN_DATA_SOURCES.get(data_source)
    if kind is None:
        raise UnknownDataSource(f"unknown data_source {data_source!r}; reward_fns knows {sorted(KNOWN_DATA_SOURCES)}")
    if kind == "math":
        check_math_gold(data_source, gold, score_fn, reward_kwargs)
    else:
        check_code_gold(gold)


_gold_verdicts: dict[tuple, str | None] = {}  # (data_source, gold or integer class) -> None (usable) or the error
_gold_lock = threading.Lock()


def _gold_cache_key(data_source: str, gold: Any) -> tuple:
    if isinstance(gold, str) and PLAIN_INTEGER.fullmatch(gold):
        return (data_source, "integer", gold.startswith("-"), len(gold.lstrip("-")))
    return (data_source, gold if isinstance(gold, (str, int, float, type(None))) else repr(gold))


def check_gold_cached(data_source: str, gold: Any) -> None:
    """:func:`check_gold` with the project's verifier, remembered per ``(data_source, gold)`` and, for plain
    integers, per class of sign and digit count (the class's first gold stands for it, as in
    :func:`golds_to_check`): ``data_prep`` checks every row it writes this way while streaming."""
    key = _gold_cache_key(data_source, gold)
    with _gold_lock:
        known = key in _gold_verdicts
        verdict = _gold_verdicts.get(key)
    if not known:
        try:
            check_gold(data_source, gold)
            verdict = None
        except ValueError as exc:
            verdict = str(exc)
        with _gold_lock:
            _gold_verdicts[key] = verdict
    if verdict is not None:
        raise BadGold(verdict)


# ------------------------------------------------------------------------------------------------ whole files

@dataclass(frozen=True)
class RowCheckReport:
    """What :func:`check_rows` looked at."""

    path: str
    rows: int
    data_sources: tuple[str, ...]
    golds_checked: int  # distinct (data_source, gold) pairs scored by the verifier
    first_row_of_source: dict[str, int]


def _struct_field(column: pa.ChunkedArray | pa.Array, name: str):
    return pc.struct_field(column, name)


def check_prompts(path: str, prompts: pa.ChunkedArray, prompt_key: str = "prompt") -> None:
    """Every row's prompt is a non-empty chat list of ``{role, content}`` messages with string content, roles
    among :data:`CHAT_ROLES` and at least one user message; raises :class:`RowCheckError` at the first bad row."""
    field = prompt_key
    typ = prompts.type
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ)):
        raise RowCheckError(path, 0, field, f"stored as {typ}, not a chat list: verl applies the chat template to "
                            "a list of {'role', 'content'} messages (data_prep writes that form)")
    value = typ.value_type
    if not pa.types.is_struct(value) or {"role", "content"} - {value.field(i).name for i in range(value.num_fields)}:
        raise RowCheckError(path, 0, field, f"messages are {value}, not structs with 'role' and 'content'")
    prompts = prompts.combine_chunks() if isinstance(prompts, pa.ChunkedArray) else prompts
    n = len(prompts)
    bad_rows: dict[int, str] = {}
    null_rows = pc.is_null(prompts).to_numpy(zero_copy_only=False)
    lengths = pc.fill_null(pc.list_value_length(prompts), 0).to_numpy(zero_copy_only=False)
    for row in (null_rows | (lengths == 0)).nonzero()[0][:1]:
        bad_rows[int(row)] = "no messages (empty or null prompt)"
    messages = pc.list_flatten(prompts)
    parents = pc.list_parent_indices(prompts).to_numpy(zero_copy_only=False)
    roles = pc.struct_field(messages, "role")
    contents = pc.struct_field(messages, "content")
    if not pa.types.is_string(contents.type) and not pa.types.is_large_string(contents.type):
        raise RowCheckError(path, 0, f"{field}[].content", f"stored as {contents.type}, not text")
    checks = [
        (pc.is_null(messages), "a message is null"),
        (pc.invert(pc.is_in(pc.fill_null(pc.cast(roles, pa.string()), ""), value_set=pa.array(sorted(CHAT_ROLES)))),
         f"a message's role is not one of {sorted(CHAT_ROLES)}"),
        (pc.is_null(contents), "a message's content is null"),
    ]
    for mask, message in checks:
        hits = pc.fill_null(mask, True).to_numpy(zero_copy_only=False).nonzero()[0]
        if len(hits):
            bad_rows.setdefault(int(parents[hits[0]]), message)
    user = pc.fill_null(pc.equal(roles, "user"), False).to_numpy(zero_copy_only=False)
    nonempty_user = user & (pc.fill_null(pc.utf8_length(pc.utf8_trim_whitespace(contents)), 0)
                            .to_numpy(zero_copy_only=False) > 0)
    import numpy as np

    has_user = np.zeros(n, dtype=bool)
    has_user[parents[nonempty_user]] = True
    for row in (~has_user & ~null_rows & (lengths > 0)).nonzero()[0][:1]:
        bad_rows.setdefault(int(row), "no user message with non-empty content")
    if bad_rows:
        row = min(bad_rows)
        raise RowCheckError(path, row, field, bad_rows[row])


def check_extra_info(path: str, extra_info: pa.ChunkedArray) -> None:
    """``extra_info``, where a file has it, is a struct (a dict per row; a null row is one verl fills with ``{}``):
    verl's ``RLHFDataset`` reads ``extra_info.get("index")`` from every row and the reward function is called with
    it, so a string or a list there fails only in a dataloader worker, after Ray and the models have started."""
    if not (pa.types.is_struct(extra_info.type) or pa.types.is_null(extra_info.type)):
        raise RowCheckError(path, 0, "extra_info", f"stored as {extra_info.type}, not a struct: verl reads "
                            "extra_info.get('index') from every row (data_prep writes a struct)")


PLAIN_INTEGER = re.compile(r"-?[0-9]+")
# Plain-integer golds checked per (data_source, sign, digit count) class: the first, middle and last of them.
INTEGER_CLASS_REPRESENTATIVES = 3


def golds_to_check(sources: list, golds: list, sample_integers: bool = True) -> dict[tuple[str, Any], int]:
    """The ``(data_source, gold)`` pairs to score -> the first row holding each.

    Every distinct pair, except that plain integers (``-?[0-9]+``, DAPO-Math's and AIME's answers: 12.6k
    distinct on a 17k-row training set, 60 s through the verifier on 2 busy cores) are checked
    :data:`INTEGER_CLASS_REPRESENTATIVES` per class of the same data source, sign and number of digits
    (the first, the middle and the last distinct gold of the class in row order): the verifier reads a digit
    string the same way whatever its digits, so one class member scoring right shows the class does, while a
    gold with anything else in it (a sign, a space, a brace, a decimal point) is checked itself.
    ``sample_integers=False`` checks every distinct pair."""
    first: dict[tuple[str, Any], int] = {}
    for row, key in enumerate(zip(sources, golds)):
        first.setdefault(key, row)
    if not sample_integers:
        return first
    chosen: dict[tuple[str, Any], int] = {}
    classes: dict[tuple[str, bool, int], list[tuple[tuple[str, Any], int]]] = {}
    for key, row in first.items():
        gold = key[1]
        if isinstance(gold, str) and PLAIN_INTEGER.fullmatch(gold):
            classes.setdefault((key[0], gold.startswith("-"), len(gold.lstrip("-"))), []).append((key, row))
        else:
            chosen[key] = row
    for members in classes.values():
        picks = {0, len(members) // 2, len(members) - 1}
        for i in sorted(picks)[:INTEGER_CLASS_REPRESENTATIVES]:
            chosen[members[i][0]] = members[i][1]
    return chosen


GOLDS_PER_THREAD = 200


def default_gold_workers() -> int:
    """Threads for the gold checks: as many as the math verifier has worker processes."""
    from reward_fns.math_verifier import MathVerifierConfig

    return MathVerifierConfig.from_env().workers


def check_golds(path: str, sources: list, golds: list, score_fn: Callable[..., Any] | None = None,
                reward_kwargs: Mapping[str, Any] | None = None, workers: int | None = None,
                sample_integers: bool = True) -> int:
    """:func:`check_gold` on the ``(data_source, gold)`` pairs :func:`golds_to_check` picks; raises
    :class:`RowCheckError` naming the first bad row. Returns the number of pairs checked."""
    pairs = golds_to_check(sources, golds, sample_integers)
    items = sorted(pairs.items(), key=lambda kv: kv[1])

    def one(item) -> tuple[int, str] | None:
        (source, gold), row = item
        try:
            check_gold(source, gold, score_fn, reward_kwargs)
        except ValueError as exc:
            return row, str(exc)
        return None

    # each thread keeps one math worker process busy; a worker costs ~1 s to start, worth it from
    # GOLDS_PER_THREAD golds (~0.5 s of verifier calls) on
    workers = max(1, min(workers or default_gold_workers(), len(items) // GOLDS_PER_THREAD))
    if workers == 1:
        failures = [f for f in map(one, items) if f is not None]
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="gold-check") as pool:
            failures = [f for f in pool.map(one, items, chunksize=64) if f is not None]
    if failures:
        row, message = min(failures)
        raise RowCheckError(path, row, "reward_model.ground_truth", message)
    return len(items)


def read_columns(path: str, prompt_key: str = "prompt") -> pa.Table:
    """The columns the checks need (and ``extra_info`` where the file has it); a file that is not a readable
    parquet file (a JSON-lines file, a truncated download) or a missing column raises :class:`RowCheckError`
    naming it."""
    try:
        names = pq.ParquetFile(path).schema_arrow.names
    except (pa.ArrowException, OSError) as exc:
        raise RowCheckError(path, None, None, f"not a readable parquet file ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:200]}); the run's data files are verl RL parquet files "
                            "(build them with data_prep)") from None
    for name in ("data_source", prompt_key, "reward_model"):
        if name not in names:
            raise RowCheckError(path, None, name, f"no such column (has {names}); not a verl RL parquet file "
                                "(build it with data_prep)")
    columns = ["data_source", prompt_key, "reward_model"] + (["extra_info"] if "extra_info" in names else [])
    try:
        table = pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise RowCheckError(path, None, None, f"not a readable parquet file ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:200]})") from None
    if table.num_rows == 0:
        raise RowCheckError(path, None, None, "has no rows")
    return table


def check_rows(path: str, *, known_sources: Iterable[str] | None, prompt_key: str = "prompt",
               check_gold_answers: bool = True, score_fn: Callable[..., Any] | None = None,
               reward_kwargs: Mapping[str, Any] | None = None, workers: int | None = None,
               sample_integers: bool = True) -> RowCheckReport:
    """Check every row of the verl parquet file ``path``: a known ``data_source`` (when ``known_sources`` is
    given), a chat-list prompt and (``check_gold_answers``) a usable gold answer (:func:`check_gold`).
    Raises :class:`RowCheckError` naming the file, the 0-based row and the field."""
    table = read_columns(path, prompt_key)
    sources_col = table.column("data_source")
    if not pa.types.is_string(sources_col.type) and not pa.types.is_large_string(sources_col.type):
        raise RowCheckError(path, 0, "data_source", f"stored as {sources_col.type}, not a string")
    nulls = pc.is_null(sources_col).combine_chunks().to_numpy(zero_copy_only=False).nonzero()[0]
    if len(nulls):
        raise RowCheckError(path, int(nulls[0]), "data_source", "is null")
    sources = sources_col.to_pylist()
    first_of: dict[str, int] = {}
    for row, source in enumerate(sources):
        first_of.setdefault(source, row)
    if known_sources is not None:
        known = set(known_sources)
        unknown = {s: r for s, r in first_of.items() if s not in known}
        if unknown:
            source, row = min(unknown.items(), key=lambda kv: kv[1])
            raise RowCheckError(path, row, "data_source", f"{source!r} is not a data source the reward function "
                                f"knows ({sorted(known)})")
    check_prompts(path, table.column(prompt_key), prompt_key)
    if "extra_info" in table.column_names:
        check_extra_info(path, table.column("extra_info"))
    reward_model = table.column("reward_model")
    if not pa.types.is_struct(reward_model.type) or reward_model.type.get_field_index("ground_truth") < 0:
        raise RowCheckError(path, 0, "reward_model", f"stored as {reward_model.type}, has no ground_truth")
    golds_col = pc.struct_field(reward_model, "ground_truth")
    missing = pc.is_null(golds_col).combine_chunks().to_numpy(zero_copy_only=False).nonzero()[0]
    if len(missing):
        raise RowCheckError(path, int(missing[0]), "reward_model.ground_truth", "is null")
    checked = 0
    if check_gold_answers:
        checked = check_golds(path, sources, golds_col.to_pylist(), score_fn, reward_kwargs, workers, sample_integers)
    return RowCheckReport(str(path), table.num_rows, tuple(first_of), checked, first_of)


__all__ = ["RowCheckError", "BadGold", "RowCheckReport", "check_rows", "check_gold", "check_math_gold",
           "check_code_gold", "check_prompts", "golds_to_check", "check_gold_cached", "prose_words", "CHAT_ROLES"]
