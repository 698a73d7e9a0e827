"""Math verifier: final-answer extraction (ours) + math-verify equivalence in a pool of killable worker processes.

Flow for one response (spec section 4.2; the rule is written out in reward_fns/README.md, "Math"):
1. keep the text after the last ``</think>``; an unclosed ``<think>`` means no answer (in the caller);
2. in a worker, under the request's deadline: extract exactly ONE final answer (the box(es) of the final
   answer, else the last ``Answer:`` line, else -- evaluation sets only -- a stated "The final answer is ...");
3. reject answers that only contain a value (relations, approximations, hedges, chained equations:
   ``extract.answer_problem``);
4. parse the answer once, as a whole (wrapped in ``\\boxed{}``), and verify it against
   gold = ``parse("\\boxed{gt}", [LatexExtractionConfig()])`` (math-verify defaults, gold first).
Every step after 1 runs in a worker with a memory cap and a parent-side wall-clock kill.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .extract import gold_problem, math_final_text, reader_text, truncate_middle
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


# A worker killed by one of these signals was killed from outside (we only kill on the deadline, which is a
# WorkerTimeout): not the sample's fault, so the request is retried once on a fresh worker.
EXTERNAL_KILL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                                   signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE, signal.SIGALRM})
# Longest final-answer text sent to a worker (its tail is kept): bounds the pipe traffic and the worker's scan.
MAX_FINAL_TEXT_CHARS = 1 << 20


def ask_math_worker(request: dict, timeout_s: float) -> dict:
    """Send one request to the pool and return the worker's reply; deadline and deaths become a reply too.

    ``{"status": "timeout"}`` when the worker was killed at the deadline; a worker killed from outside
    (:data:`EXTERNAL_KILL_SIGNALS`) is retried once on a fresh worker with a fresh deadline, and a second
    death gives ``{"status": "worker_died"}``; a worker that crashed on its own (SIGSEGV/SIGABRT, an exit
    status) gives ``{"status": "memory_limit"}`` (under ``RLIMIT_AS`` an allocation failing in C is the usual
    cause).
    """
    for attempt in (1, 2):
        try:
            return get_math_pool().call(request, timeout_s=timeout_s)
        except WorkerTimeout:
            return {"status": "timeout", "detail": f"killed after {timeout_s} s"}
        except WorkerDied as exc:
            if exc.signal in EXTERNAL_KILL_SIGNALS:
                logger.warning("math worker killed from outside (%s); attempt %d of 2", exc, attempt)
                if attempt == 1:
                    continue
                return {"status": "worker_died", "detail": str(exc)}
            if exc.returncode is None:
                return {"status": "error", "detail": str(exc)}
            return {"status": "memory_limit", "detail": str(exc)}
    raise AssertionError("unreachable")


def compute_math_score(solution_str: str, ground_truth: str, *, fallback_extraction: bool = False,
                       timeout_s: float = 15.0, parsing_timeout: int = 5, verify_timeout: int = 5) -> dict:
    """Score one math response; returns ``{"score", "acc", "pred", "verdict"}``.

    Verdicts: ``correct``, ``wrong_answer``, ``no_answer``, ``timeout`` (worker killed after ``timeout_s`` or
    math-verify's own limit hit), ``memory_limit`` (the worker ran out of memory or crashed),
    ``worker_died`` (the worker was killed from outside twice: not the sample's fault, still scored 0),
    ``error`` (math-verify crashed on this prediction). Extraction, the answer rule and math-verify all run in
    the worker under ``timeout_s`` (see README "Math").
    Raises :class:`BadGroundTruth` if the gold answer does not parse: that is a dataset bug.
    """
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be str, got {type(solution_str).__name__}")
    problem = gold_problem(ground_truth)
    if problem is not None:
        raise BadGroundTruth(f"math ground truth {ground_truth!r} {problem}")
    final_text = math_final_text(reader_text(solution_str))  # README "Reading the text": one normalisation
    if final_text is None or not final_text.strip():
        return math_result(False, "no_answer", "")
    request = {"gold": ground_truth.strip(), "text": final_text[-MAX_FINAL_TEXT_CHARS:],
               "fallback": bool(fallback_extraction), "parsing_timeout": parsing_timeout,
               "verify_timeout": verify_timeout}
    reply = ask_math_worker(request, timeout_s)
    status = reply.get("status")
    pred = reply.get("pred") or ""
    if status == "bad_gold":
        raise BadGroundTruth(f"ground truth {ground_truth!r}: {reply.get('detail', '')}")
    if status == "ok":
        correct = bool(reply.get("correct"))
        return math_result(correct, "correct" if correct else "wrong_answer", pred)
    if status in ("no_answer", "timeout", "memory_limit", "worker_died"):
        return math_result(False, status, pred)
    logger.warning("math-verify failed on prediction %r (gold %r): %s", pred[:200], ground_truth[:200],
                   reply.get("detail", status))
    return math_result(False, "error", pred)
