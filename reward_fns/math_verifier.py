"""Math verifier: final-answer extraction (ours) + math-verify equivalence in a pool of killable worker processes.

Flow for one response (spec section 4.2):
1. keep the text after the last ``</think>``; an unclosed ``<think>`` means no answer;
2. take the last balanced ``\\boxed{}`` (or ``\\fbox{}``), else the last ``Answer:`` line; optionally (evaluation
   sets) fall back to math-verify's own extraction on the last 2000 characters;
3. in a worker: gold = ``parse("\\boxed{gt}", [LatexExtractionConfig()])``; prediction parsed both wrapped in
   ``\\boxed{}`` and raw; correct iff either verifies against the gold (math-verify defaults, gold first).
Every parse/verify runs in a worker with a memory cap and a parent-side wall-clock kill.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .extract import FALLBACK_TAIL_CHARS, extract_math_answer, strip_thinking, truncate_middle
from .worker_pool import WorkerDied, WorkerPool, WorkerTimeout

logger = logging.getLogger(__name__)
PRED_CHARS = 300
_WORKER_SCRIPT = Path(__file__).with_name("_math_worker.py")


@dataclass(frozen=True)
class MathVerifierConfig:
    """Process-wide settings of the math worker pool (read once from the environment, see ``from_env``)."""

    workers: int
    memory_mb: int

    @classmethod
    def from_env(cls) -> "MathVerifierConfig":
        """``IBPO_MATH_WORKERS`` (default ``min(4, cpu_count)``), ``IBPO_MATH_MEMORY_MB`` (default 2048)."""
        cpus = os.cpu_count() or 1
        return cls(workers=_env_int("IBPO_MATH_WORKERS", min(4, cpus), minimum=1),
                   memory_mb=_env_int("IBPO_MATH_MEMORY_MB", 2048, minimum=256))


def _env_int(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from exc
    if value < minimum:
        raise ValueError(f"environment variable {name}={value} must be >= {minimum}")
    return value


_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def get_math_pool() -> WorkerPool:
    """The process-wide math worker pool (created on first use; thread-safe)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            cfg = MathVerifierConfig.from_env()
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
            _pool = WorkerPool([sys.executable, "-s", str(_WORKER_SCRIPT), str(cfg.memory_mb * 1024 * 1024)],
                               max_workers=cfg.workers, env=env, name="math-verify")
        return _pool


def reset_math_pool() -> None:
    """Close the pool so the next call builds a new one (tests use this after changing the environment)."""
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.close()
        _pool = None


def math_result(correct: bool, verdict: str, pred: str) -> dict:
    """The reward dict shared by all data sources (see :data:`reward_fns.RESULT_KEYS`)."""
    return {"score": 1.0 if correct else 0.0, "acc": 1.0 if correct else 0.0,
            "pred": truncate_middle(pred, PRED_CHARS), "verdict": verdict}


class BadGroundTruth(ValueError):
    """A ground truth the verifier cannot use (a data error, never a model error)."""


def compute_math_score(solution_str: str, ground_truth: str, *, fallback_extraction: bool = False,
                       timeout_s: float = 15.0, parsing_timeout: int = 5, verify_timeout: int = 5) -> dict:
    """Score one math response; returns ``{"score", "acc", "pred", "verdict"}``.

    Verdicts: ``correct``, ``wrong_answer``, ``no_answer``, ``timeout`` (worker killed after ``timeout_s`` or
    math-verify's own limit hit), ``memory_limit``, ``error`` (math-verify crashed on this prediction).
    Raises :class:`BadGroundTruth` if the gold answer does not parse: that is a dataset bug.
    """
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be str, got {type(solution_str).__name__}")
    if not isinstance(ground_truth, str) or not ground_truth.strip():
        raise BadGroundTruth(f"math ground truth must be a non-empty string, got {ground_truth!r}")
    final_text = strip_thinking(solution_str)
    if final_text is None:
        return math_result(False, "no_answer", "")
    answer, _how = extract_math_answer(final_text)
    request = {"gold": ground_truth.strip(), "answer": answer, "fallback_text": None,
               "parsing_timeout": parsing_timeout, "verify_timeout": verify_timeout}
    if answer is None:
        if not fallback_extraction or not final_text.strip():
            return math_result(False, "no_answer", "")
        request["fallback_text"] = final_text[-FALLBACK_TAIL_CHARS:]
    pred = answer if answer is not None else ""
    try:
        reply = get_math_pool().call(request, timeout_s=timeout_s)
    except WorkerTimeout:
        return math_result(False, "timeout", pred)
    except WorkerDied:
        # Killed by the kernel under RLIMIT_AS (or crashed in C): treat like a memory blow-up.
        return math_result(False, "memory_limit", pred)
    status = reply.get("status")
    if status == "bad_gold":
        raise BadGroundTruth(f"ground truth {ground_truth!r}: {reply.get('detail', '')}")
    if status == "ok":
        if answer is None:
            pred = reply.get("parsed", "")
            if not pred:
                return math_result(False, "no_answer", "")
        return math_result(bool(reply.get("correct")), "correct" if reply.get("correct") else "wrong_answer", pred)
    if status in ("timeout", "memory_limit"):
        return math_result(False, status, pred)
    logger.warning("math-verify failed on prediction %r (gold %r): %s", pred[:200], ground_truth[:200],
                   reply.get("detail", status))
    return math_result(False, "error", pred)
