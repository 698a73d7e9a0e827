"""Start-up self-test of the reward path: known-right and known-wrong samples per configured data source.

A verifier that cannot run code (interpreter invisible in the sandbox, namespaces forbidden, a broken install)
would otherwise score every response 0 and training would go on silently. :func:`self_test` runs built-in
samples through the reward function the trainer actually uses (same interpreter, same sandbox backend) and
raises :class:`VerifierSelfTestError` naming the data source, the backend and the cause when a right sample
does not score 1 or a wrong one does not score 0. A reward function whose scale is unknown (a user's: verl's
``math_dapo`` pays -1 for a wrong answer) is tested with ``relative=True``: it must score a right answer above the
wrong one, so a function that ignores the response (always 1, always 0) or the gold is refused.
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
# Final-answer phrasings common math reward functions read (ours: the last \boxed{}; verl's math_dapo: an
# "Answer:" line; verl's gsm8k: "####"), each with the gold 42 and, so that a function ignoring the gold fails
# too, the gold 41: a function of unknown scale must pay the right answer more in some phrasing, never less.
MATH_FORMS: tuple[tuple[str, str], ...] = (("boxed", "So the answer is \\boxed{%s}."),
                                           ("Answer: line", "Answer: %s"), ("####", "The answer is\n#### %s"))


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


def _score(reward_fn: Callable[..., Any], data_source: str, case: str, solution: str, ground_truth: str,
           reward_kwargs: Mapping[str, Any]) -> tuple[float | None, str, str, Any]:
    """``(score, verdict, cause, raw result)`` of one sample; an exception or a non-numeric score is the cause."""
    extra_info = {"index": f"self_test:{case}", "split": "self_test"}
    out: Any = None
    try:
        out = reward_fn(data_source, solution, ground_truth, extra_info, **reward_kwargs)
        score = float(out["score"] if isinstance(out, Mapping) else out)
        verdict = str(out.get("verdict", "")) if isinstance(out, Mapping) else ""
        return score, verdict, "", out
    except Exception as exc:  # noqa: BLE001 - reported with its type, never swallowed silently
        return None, "exception", f"{type(exc).__name__}: {exc}"[:500], out


def _pairs(kind: str) -> list[tuple[str, str, str, str]]:
    """``(case, right solution, wrong solution, ground truth)`` for the relative test of one kind of source."""
    if kind == "math":
        return [(f"math {name}, gold {gold}", form % gold, form % other, gold)
                for name, form in MATH_FORMS for gold, other in (("42", "41"), ("41", "42"))]
    samples = SAMPLES[kind]
    return [(right[0].replace(" right", ""), right[1], wrong[1], right[2])
            for right, wrong in zip(samples[::2], samples[1::2])]


def _relative_results(data_source: str, kind: str, reward_fn: Callable[..., Any],
                      reward_kwargs: Mapping[str, Any]) -> list[SelfTestResult]:
    """One result per right/wrong pair (``score``: the right answer's, ``expected_score``: the wrong one's, which
    it must not fall below) and one, ``tells right from wrong``, failed unless some right answer scores strictly
    more than its wrong one: a function that ignores the response or the gold pays them alike, or the wrong more.
    """
    results, margins = [], []
    for case, right, wrong, gold in _pairs(kind):
        right_score, verdict, cause, out = _score(reward_fn, data_source, f"{case} right", right, gold, reward_kwargs)
        wrong_score, _, wrong_cause, wrong_out = _score(reward_fn, data_source, f"{case} wrong", wrong, gold,
                                                        reward_kwargs)
        cause = cause or wrong_cause
        ok = not cause and right_score is not None and wrong_score is not None and right_score >= wrong_score
        if ok:
            margins.append(right_score - wrong_score)
        elif not cause:
            cause = (f"the wrong answer scored more: {wrong_out!r:.200} for {wrong!r:.80}, {out!r:.200} for the "
                     f"right {right!r:.80}")
        results.append(SelfTestResult(data_source, f"{case}: right vs wrong", wrong_score if wrong_score is not None
                                      else float("nan"), right_score, verdict, ok, cause))
    scores = sorted({r.score for r in results if r.score is not None})
    if not any(m > 0 for m in margins):
        results.append(SelfTestResult(
            data_source, "tells right from wrong", 1.0, None, "", False,
            f"no right answer scored more than its wrong one (scores seen: {scores}); the function ignores the "
            "response or the ground truth"))
    return results


def self_test(data_sources: Iterable[str], reward_fn: Callable[..., Any] | None = None,
              reward_kwargs: Mapping[str, Any] | None = None, *, kinds: Mapping[str, str] | None = None,
              raise_on_failure: bool = True, relative: bool = False) -> list[SelfTestResult]:
    """Score built-in known-right and known-wrong samples for every data source through ``reward_fn``.

    ``reward_fn`` is the configured reward function (default :func:`reward_fns.compute_score`), called as
    ``reward_fn(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)``; it may return a dict
    with ``"score"`` or a number. ``kinds`` maps data sources to ``"math"``/``"code"`` (default
    :data:`reward_fns.KNOWN_DATA_SOURCES`). Raises :class:`VerifierSelfTestError` (message: data source, case,
    verdict, sandbox backend, cause) when any sample scores wrong, or returns every result when
    ``raise_on_failure`` is False. A data source of unknown kind is itself a failure.

    With ``relative=True`` (a function whose scale is unknown) a right sample need not score 1 nor a wrong one 0:
    in each right/wrong pair (math: :data:`MATH_FORMS` with the golds 42 and 41; code: the programs above) the
    right one must score at least as much, and in one pair strictly more (see :func:`_relative_results`).
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
        if relative:
            results.extend(_relative_results(data_source, kind, reward_fn, reward_kwargs))
            continue
        for case, solution, ground_truth, expected in SAMPLES[kind]:
            score, verdict, cause, out = _score(reward_fn, data_source, case, solution, ground_truth, reward_kwargs)
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
        lines = [f"- data_source={r.data_source!r}, {r.case}: " + (r.cause if relative else (
                 f"expected score {r.expected_score}, got {r.score} (verdict {r.verdict or '?'})"
                 f"{'; cause: ' + r.cause if r.cause else ''}")) for r in failures]
        what = ("cannot tell a right answer from a wrong one" if relative
                else "cannot score these data sources correctly")
        raise VerifierSelfTestError(
            f"reward self-test failed; the verifier {what}, so training would receive wrong rewards:\n"
            + "\n".join(lines) + f"\nbackend: {_backend_description()}", results)
    return results
