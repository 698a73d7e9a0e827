"""Start-up self-test of the reward path: known-right and known-wrong samples per configured data source.

A verifier that cannot run code (interpreter invisible in the sandbox, namespaces forbidden, a broken install)
would otherwise score every response 0 and training would go on silently. :func:`self_test` runs built-in
samples through the reward function the trainer actually uses (same interpreter, same sandbox backend) and
raises :class:`VerifierSelfTestError` naming the data source, the backend and the cause when a right sample
does not score 1 or a wrong one does not score 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from .code_tests import encode_tests

logger = logging.getLogger(__name__)

_STDIN_TRUTH = encode_tests({"inputs": ["1 2\n", "20 22\n"], "outputs": ["3\n", "42\n"], "fn_name": None})
_FUNC_TRUTH = encode_tests({"inputs": ["[1, 2, 3]\n2", "[5]\n3"], "outputs": ["[2, 4, 6]", "[15]"],
                            "fn_name": "scale"})
_STDIN_RIGHT = "```python\nimport sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n```"
_STDIN_WRONG = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
_FUNC_RIGHT = ("```python\nclass Solution:\n    def scale(self, xs: List[int], k: int) -> List[int]:\n"
               "        return [x * k for x in xs]\n```")
_FUNC_WRONG = "```python\nclass Solution:\n    def scale(self, xs, k):\n        return [x + k for x in xs]\n```"

# (case name, solution, ground truth, expected score) per kind of data source.
SAMPLES: dict[str, tuple[tuple[str, str, str, float], ...]] = {
    "math": (("math right (boxed)", "So the answer is \\boxed{42}.", "42", 1.0),
             ("math wrong (boxed)", "So the answer is \\boxed{41}.", "42", 0.0)),
    "code": (("code stdin right", _STDIN_RIGHT, _STDIN_TRUTH, 1.0),
             ("code stdin wrong", _STDIN_WRONG, _STDIN_TRUTH, 0.0),
             ("code functional right", _FUNC_RIGHT, _FUNC_TRUTH, 1.0),
             ("code functional wrong", _FUNC_WRONG, _FUNC_TRUTH, 0.0)),
}


@dataclass(frozen=True)
class SelfTestResult:
    """One built-in sample scored through the configured reward function."""

    data_source: str
    case: str
    expected_score: float
    score: float | None
    verdict: str
    ok: bool
    cause: str = ""


class VerifierSelfTestError(RuntimeError):
    """A known-right sample did not score 1 (or a known-wrong one did not score 0). ``results`` has them all."""

    def __init__(self, message: str, results: list[SelfTestResult]):
        super().__init__(message)
        self.results = results


def _backend_description() -> str:
    try:
        from .sandbox import detect_isolation
        return detect_isolation().describe()
    except Exception as exc:  # noqa: BLE001 - the description itself must not hide the real failure
        return f"code sandbox unavailable: {type(exc).__name__}: {exc}"


def _code_cause(solution: str, ground_truth: str, reward_kwargs: Mapping[str, Any]) -> str:
    """Re-run a failed code sample on the verifier path directly to report why (stderr, harness detail)."""
    try:
        from .code_verifier import CodeLimits, prepare_tests, run_code_tests
        from .extract import extract_code_lcb
        limits = CodeLimits.from_env(timeout_s=reward_kwargs.get("code_timeout_s"),
                                     memory_mb=reward_kwargs.get("code_memory_mb"))
        run = run_code_tests(extract_code_lcb(solution), prepare_tests(ground_truth), limits)
        return f"verdict {run.verdict}: {run.detail}" if run.detail else f"verdict {run.verdict}"
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


def self_test(data_sources: Iterable[str], reward_fn: Callable[..., Any] | None = None,
              reward_kwargs: Mapping[str, Any] | None = None, *, kinds: Mapping[str, str] | None = None,
              raise_on_failure: bool = True) -> list[SelfTestResult]:
    """Score built-in known-right and known-wrong samples for every data source through ``reward_fn``.

    ``reward_fn`` is the configured reward function (default :func:`reward_fns.compute_score`), called as
    ``reward_fn(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)``; it may return a dict
    with ``"score"`` or a number. ``kinds`` maps data sources to ``"math"``/``"code"`` (default
    :data:`reward_fns.KNOWN_DATA_SOURCES`). Raises :class:`VerifierSelfTestError` (message: data source, case,
    verdict, sandbox backend, cause) when any sample scores wrong, or returns every result when
    ``raise_on_failure`` is False. A data source of unknown kind is itself a failure.
    """
    from . import KNOWN_DATA_SOURCES, compute_score
    reward_fn = reward_fn or compute_score
    reward_kwargs = dict(reward_kwargs or {})
    kinds = dict(KNOWN_DATA_SOURCES if kinds is None else kinds)
    results: list[SelfTestResult] = []
    for data_source in dict.fromkeys(data_sources):
        kind = kinds.get(data_source)
        if kind not in SAMPLES:
            results.append(SelfTestResult(data_source, "kind", 1.0, None, "unknown", False,
                                          f"no self-test samples for data_source {data_source!r} (kind {kind!r}); "
                                          f"known: {sorted(kinds)}"))
            continue
        for case, solution, ground_truth, expected in SAMPLES[kind]:
            extra_info = {"index": f"self_test:{case}", "split": "self_test"}
            try:
                out = reward_fn(data_source, solution, ground_truth, extra_info, **reward_kwargs)
                score = float(out["score"] if isinstance(out, Mapping) else out)
                verdict = str(out.get("verdict", "")) if isinstance(out, Mapping) else ""
                cause = ""
            except Exception as exc:  # noqa: BLE001 - reported with its type, never swallowed silently
                score, verdict, cause = None, "exception", f"{type(exc).__name__}: {exc}"
            ok = score == expected
            if not ok and not cause:
                if kind == "code" and reward_fn is compute_score:  # same path again, for the harness's detail
                    cause = _code_cause(solution, ground_truth, reward_kwargs)
                else:
                    cause = f"the reward function returned {out!r}"[:500]
            results.append(SelfTestResult(data_source, case, expected, score, verdict, ok, cause))
    failures = [r for r in results if not r.ok]
    for r in results:
        logger.info("reward self-test %s / %s: score=%s verdict=%s%s", r.data_source, r.case, r.score, r.verdict,
                    "" if r.ok else " FAILED")
    if failures and raise_on_failure:
        lines = [f"- data_source={r.data_source!r}, {r.case}: expected score {r.expected_score}, got {r.score} "
                 f"(verdict {r.verdict or '?'}){'; cause: ' + r.cause if r.cause else ''}" for r in failures]
        raise VerifierSelfTestError(
            "reward self-test failed; the verifier cannot score these data sources correctly, so training "
            "would receive wrong rewards:\n" + "\n".join(lines) + f"\nbackend: {_backend_description()}", results)
    return results
