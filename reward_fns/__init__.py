"""verl custom reward function for ibpo-verl: ``reward.custom_reward_function.path=pkg://reward_fns``,
``reward.custom_reward_function.name=compute_score``.

``compute_score`` dispatches on ``data_source`` to the math verifier (math-verify in killable worker processes)
or the code verifier (LiveCodeBench semantics in a sandbox) and returns the same four keys for every source,
because verl stacks ``reward_extra_info`` by the keys of the first sample. The pinned verl calls it from executor
threads of its RewardLoopWorker actors, one sample per call (there is no batch entry point in its reward
loop: ``RewardLoopWorker.compute_score`` -> ``RewardManager.run_single``), so it is thread-safe and never uses
``signal``.
"""

from __future__ import annotations

import math
from typing import Any

from .code_tests import TestsDecodeError, decode_tests, encode_tests
from .code_verifier import BadCodeGroundTruth, compute_code_score, prepare_tests
from .extract import gold_problem
from .math_verifier import BadGroundTruth, compute_math_score
from .sandbox import IsolationReport, detect_isolation
from .selftest import SelfTestResult, VerifierSelfTestError, self_test

KNOWN_DATA_SOURCES: dict[str, str] = {
    "aime25": "math",
    "hmmt_feb_2025": "math",
    "math_dapo": "math",
    "openai/gsm8k": "math",
    "ibpo/synthetic_arith": "math",
    "ibpo/toy_addition": "math",
    "ibpo/toy_three_sum": "math",
    "ibpo/toy_three_sum_named": "math",
    "livecodebench_v6": "code",
    "livecodebench_train": "code",
}
# Evaluation sets also accept answers only math-verify's own extraction finds ("The final answer is $70$.");
# training sets require a boxed answer or an "Answer:" line (unanchored extraction rewards stray arithmetic).
EVAL_DATA_SOURCES = frozenset({"aime25", "hmmt_feb_2025", "livecodebench_v6"})
RESULT_KEYS = ("score", "acc", "pred", "verdict")
VERDICTS = ("correct", "wrong_answer", "no_answer", "timeout", "global_timeout", "runtime_error",
            "compile_error", "memory_limit", "output_limit", "killed", "worker_died", "error")

__all__ = ["compute_score", "KNOWN_DATA_SOURCES", "EVAL_DATA_SOURCES", "RESULT_KEYS", "VERDICTS",
           "compute_math_score", "compute_code_score", "encode_tests", "decode_tests", "TestsDecodeError",
           "BadGroundTruth", "BadCodeGroundTruth", "UnknownDataSource", "check_ground_truth", "isolation_report", "IsolationReport",
           "self_test", "SelfTestResult", "VerifierSelfTestError"]


class UnknownDataSource(ValueError):
    """``data_source`` is not in :data:`KNOWN_DATA_SOURCES`."""


def check_ground_truth(data_source: str, ground_truth: object, extra_info: dict | None = None, *,
                       thorough: bool = False) -> None:
    """Raise if ``ground_truth`` cannot be scored for ``data_source``; return ``None`` if it can.

    For a data pre-flight and ``data_prep``, one call per row. Raises :class:`UnknownDataSource`, or
    :class:`BadGroundTruth` (math: not a non-empty string, unbalanced braces such as ``\\frac{1}{`` or ``{70``,
    prose such as ``some words``; see :func:`reward_fns.extract.gold_problem`) or :class:`BadCodeGroundTruth`
    (code: not decodable to ``{inputs, outputs, fn_name}``, another field beside them, functional
    arguments/outputs not JSON), with a message naming the row (``extra_info``) and the field. Cost: math about
    10-30 µs per row (string scans, no math-verify); code one decode per distinct ground truth (cached).
    ``thorough=True`` also scores ``\\boxed{gold}`` through the math worker and requires ``correct`` (math-verify
    must parse the gold and accept it stated plainly; a few ms per distinct gold, cached in the worker)."""
    kind = KNOWN_DATA_SOURCES.get(data_source)
    if kind is None:
        raise UnknownDataSource(f"unknown data_source {data_source!r}; reward_fns knows "
                                f"{sorted(KNOWN_DATA_SOURCES)}")
    where = f"{_row_label(data_source, extra_info)}, field reward_model.ground_truth"
    if kind == "math":
        problem = gold_problem(ground_truth)
        if problem is not None:
            raise BadGroundTruth(f"{where}: math ground truth {ground_truth!r:.200} {problem}")
        if thorough:
            try:
                result = compute_math_score("\\boxed{" + ground_truth.strip() + "}", ground_truth)
            except BadGroundTruth as exc:
                raise BadGroundTruth(f"{where}: {exc}") from exc
            if result["verdict"] != "correct":
                raise BadGroundTruth(f"{where}: the gold {ground_truth!r:.200} stated plainly as \\boxed{{gold}} "
                                     f"scores {result['verdict']}")
        return
    if not isinstance(ground_truth, str):
        raise BadCodeGroundTruth(f"{where}: code ground truth must be a str, got {type(ground_truth).__name__}")
    try:
        prepare_tests(ground_truth)
    except BadCodeGroundTruth as exc:
        raise BadCodeGroundTruth(f"{where}: {exc}") from exc


def isolation_report() -> IsolationReport:
    """What the code sandbox enforces on this machine (``.missing`` lists what it lacks without bubblewrap)."""
    return detect_isolation()


def _row_label(data_source: str, extra_info: dict | None) -> str:
    info = extra_info if isinstance(extra_info, dict) else {}
    ids = [f"{k}={info[k]!r}" for k in ("index", "problem_id", "question_id", "split") if k in info]
    return f"data_source={data_source!r}" + (f" ({', '.join(ids)})" if ids else "")


def check_limit_options(**limits: object) -> None:
    """Raise ``ValueError`` naming the keyword when a limit option of :func:`compute_score` is set (not ``None``)
    but is not a finite number > 0 (``code_memory_mb``: an int): a timeout or memory cap of 0, below 0 or NaN
    would otherwise score every response 0 (``timeout`` / ``memory_limit``), and an infinite one raises deep
    in the worker pool or the sandbox."""
    for name, value in limits.items():
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if name.endswith("_mb") and not isinstance(value, int):
            number = False
        if not number or not math.isfinite(value) or value <= 0:
            kind = "an integer" if name.endswith("_mb") else "a finite number"
            raise ValueError(f"reward_kwargs.{name}={value!r}: must be {kind} > 0 "
                             f"({'MiB' if name.endswith('_mb') else 'seconds'})")


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  *, math_fallback_extraction: bool | None = None, math_timeout_s: float = 15.0,
                  code_timeout_s: float | None = None, code_memory_mb: int | None = None,
                  reward_router_address: Any = None, reward_model_tokenizer: Any = None) -> dict:
    """Score one response: ``{"score": float, "acc": float, "pred": str, "verdict": str}``.

    The keyword-only options are the whole of what it takes (no ``**kwargs``), so the pre-flight checks
    ``reward.custom_reward_function.reward_kwargs`` against this signature and a misspelt option fails by
    name instead of being swallowed. ``reward_router_address`` / ``reward_model_tokenizer`` are what the
    pinned verl's reward managers add when a reward model is served; they are accepted and ignored. Raises
    :class:`UnknownDataSource` for an unknown ``data_source``, ``ValueError`` subclasses naming the row and
    field ``reward_model.ground_truth`` for an unusable ground truth (a dataset bug is never scored as 0), and
    ``ValueError`` naming the keyword for a limit that is not a finite number > 0 (:func:`check_limit_options`).
    """
    check_limit_options(math_timeout_s=math_timeout_s, code_timeout_s=code_timeout_s, code_memory_mb=code_memory_mb)
    kind = KNOWN_DATA_SOURCES.get(data_source)
    if kind is None:
        raise UnknownDataSource(f"unknown data_source {data_source!r}; reward_fns knows "
                                f"{sorted(KNOWN_DATA_SOURCES)}")
    try:
        if kind == "math":
            fallback = data_source in EVAL_DATA_SOURCES if math_fallback_extraction is None else math_fallback_extraction
            return compute_math_score(solution_str, ground_truth, fallback_extraction=fallback,
                                      timeout_s=math_timeout_s)
        return compute_code_score(solution_str, ground_truth, timeout_s=code_timeout_s, memory_mb=code_memory_mb)
    except (BadGroundTruth, BadCodeGroundTruth) as exc:
        raise type(exc)(f"{_row_label(data_source, extra_info)}, field reward_model.ground_truth: {exc}") from exc
