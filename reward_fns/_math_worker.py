"""Math-verify worker process (run as a script by :mod:`reward_fns.math_verifier`).

Protocol: prints ``{"ready": true}`` after importing math-verify, then answers each JSON request line on stdin
with one JSON line. It runs in its own main thread, so math-verify's signal-based timeouts work here; the parent
still kills it on a wall-clock deadline because some inputs hang inside C code or sympy and ignore SIGALRM.
Extraction (``extract.py``, loaded by path: this script imports nothing else from the repo) also runs here, so
it is inside the same deadline as parsing and verification.

Request: ``{"gold": str, "text": str, "fallback": bool, "parsing_timeout": int, "verify_timeout": int}``;
``text`` is the final-answer text (after ``</think>``); ``fallback`` enables the stated-final-answer fallback
(evaluation sets). A test-only ``"sleep_s"`` makes the worker sleep first (to kill it mid-request in tests).
Reply: ``{"status": "ok" | "no_answer" | "bad_gold" | "timeout" | "memory_limit" | "error", "correct": bool,
"pred": str, "how": str, "detail": str, "exit_after": bool}``.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import resource
import sys
import time
from collections import OrderedDict

GOLD_CACHE_SIZE = 512
PRED_REPLY_CHARS = 2000


def _limit_memory(max_bytes: int) -> None:
    if max_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _load_extract():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "extract.py")
    spec = importlib.util.spec_from_file_location("_ibpo_math_extract", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# RULE "numbers" (README). A decimal is an approximation unless the gold is itself a decimal:
# * gold with no decimal in it (integer, fraction, symbolic, irrational, big integer): the prediction must equal
#   it EXACTLY; a decimal in the prediction is read as the exact number it writes (0.25 = 1/4, 70.0 = 70,
#   2.5 \times 10^3 = 2500), so 3.14159 is not pi, 0.333333 is not 1/3, 1.0 \times 10^{20} is not 10^{20}+1.
# * gold that is itself a decimal (the problem stated its precision by asking for one): a prediction within a
#   RELATIVE error of REL_TOL of it matches (representation noise only: 0.50, 1/2, 5 \times 10^{-1} for 0.5;
#   never a fixed number of decimal places, which made 0.0 equal to every gold below 5e-7).
REL_TOL = 5e-6
GOLD_PROBE_ANSWER = "1"  # compared once with each distinct gold (Verifier.parse_gold)
EXACT_PRECISION = 60  # digits used to evaluate an exact difference (no chop: tiny values are not zero); a
# difference below 10^-45 of the gold's size is taken as zero (mathematically equal forms evaluate to ~10^-60)


def patch_numeric_comparison(grader, sympy) -> None:
    """Replace math-verify 0.9.0's ``sympy_numeric_eq`` (fixed-decimal rounding, ``evalf(chop=True)``) in this
    worker with RULE "numbers" above; matrices keep its own per-element recursion (into this function).
    math-verify calls it as ``sympy_numeric_eq(gold, pred, ...)`` (grader.sympy_expr_eq)."""
    original = grader.sympy_numeric_eq

    def exact_value(expr):
        """``expr`` with every Float replaced by the exact rational it writes (its decimal digits)."""
        floats = expr.atoms(sympy.Float)
        if not floats:
            return expr
        return expr.xreplace({f: sympy.Rational(str(f)) for f in floats})

    def exact_equal(gold, pred) -> bool:
        exact = gold - pred
        if exact.is_Rational:
            return bool(exact == 0)
        diff = exact.evalf(n=EXACT_PRECISION)
        if diff == 0:
            return True
        scale = abs(sympy.sympify(gold).evalf(n=EXACT_PRECISION))
        return bool(diff.is_comparable and scale.is_comparable and scale > 0
                    and abs(diff) <= sympy.Float(10, EXACT_PRECISION) ** (15 - EXACT_PRECISION) * scale)

    def numeric_eq(a, b, float_rounding, numeric_precision):
        if isinstance(a, (sympy.MatrixBase, sympy.MatrixExpr)) or isinstance(b, (sympy.MatrixBase, sympy.MatrixExpr)):
            return original(a, b, float_rounding, numeric_precision)  # recurses into this function per element
        atomic = grader.is_atomic_or_pct_atomic
        if atomic(a, sympy.Integer) and atomic(b, sympy.Integer):
            return original(a, b, float_rounding, numeric_precision)  # integers and percentages of integers
        try:
            gold, pred = grader.safe_sympy_doit(a), grader.safe_sympy_doit(b)
            if not (getattr(gold, "is_number", False) and getattr(pred, "is_number", False)):
                return original(a, b, float_rounding, numeric_precision)
            if gold.is_finite is not True or pred.is_finite is not True:
                # an infinity (oo, -oo, zoo) or NaN equals only itself: the relative tolerances below would
                # accept any number against an infinite gold (oo - 70 = oo <= tol * |oo| = oo)
                return bool(gold.is_finite is False and pred.is_finite is False and gold == pred)
            if gold.has(sympy.Float):  # a decimal gold: the problem asked for a decimal
                return float_close(gold, pred)
            if pred.has(sympy.Float):  # an exact gold: the decimal must BE it
                pred = exact_value(pred)
            if gold.is_Rational and pred.is_Rational:
                return bool(gold == pred)
            return exact_equal(gold, pred)
        except Exception:
            return False

    def float_close(gold, pred):
        try:
            g, p = gold.evalf(30), pred.evalf(30)
            if not (g.is_comparable and p.is_comparable):
                return False
            return bool(abs(g - p) <= sympy.Float(REL_TOL, 30) * abs(g))
        except Exception:
            return False

    original_symbolic = grader.sympy_symbolic_eq

    def symbolic_eq(a, b):
        """math-verify's ``simplify(gold - pred) == 0``, with the prediction's decimals read exactly when the
        gold has none (in floating point 10^20 + 1 - 1.0 \times 10^20 simplifies to 0)."""
        try:
            if not a.has(sympy.Float) and b.has(sympy.Float):
                b = exact_value(b)
        except Exception:
            return False
        return original_symbolic(a, b)

    grader.sympy_numeric_eq = numeric_eq
    grader.sympy_symbolic_eq = symbolic_eq


class Verifier:
    """The worker's request handler: the parsed-gold cache and math-verify's functions (imported by
    :func:`main` after the process limits are in place)."""

    def __init__(self, extract, math_verify, timeout_exception: type):
        self.extract, self.mv, self.timeout_exception = extract, math_verify, timeout_exception
        self.gold_config = [math_verify.LatexExtractionConfig()]
        self.answer_config = [math_verify.LatexExtractionConfig(boxed_match_priority=0)]
        self.gold_cache: OrderedDict[str, list] = OrderedDict()

    def parse_gold(self, gold: str, timeout: int) -> list:
        """The parsed gold; raises ValueError when the gold is unusable: it fails the structural check, parses to
        nothing, math-verify does not accept the gold itself stated plainly (``\\boxed{gold}``), or comparing an
        ordinary answer (:data:`GOLD_PROBE_ANSWER`) with it times out."""
        if gold in self.gold_cache:
            self.gold_cache.move_to_end(gold)
            return self.gold_cache[gold]
        problem = self.extract.gold_problem(gold)
        if problem is not None:
            raise ValueError(f"the ground truth {problem}")
        parsed = self.mv.parse("\\boxed{" + gold + "}", self.gold_config, parsing_timeout=timeout, raise_on_error=True)
        if not parsed:
            raise ValueError("math-verify parses the ground truth to nothing")
        if self.extract.colon_form(gold) is None:
            plain = self.parse_answer(self.extract.rewrite_admitted_forms(gold, gold), timeout, keep_percent=True)
            if not plain or not self.safe_verify(parsed, plain, timeout):
                raise ValueError("math-verify does not accept the ground truth itself stated plainly as "
                                 "\\boxed{gold}")
        try:  # an ordinary answer must be comparable with it in time (10^{10^{10}} - 1 never is)
            self.safe_verify(parsed, self.parse_answer(GOLD_PROBE_ANSWER, timeout), timeout)
        except self.timeout_exception:
            raise ValueError(f"comparing the answer {GOLD_PROBE_ANSWER} with this ground truth takes longer than "
                             f"{timeout} s: every response would time out") from None
        self.gold_cache[gold] = parsed
        if len(self.gold_cache) > GOLD_CACHE_SIZE:
            self.gold_cache.popitem(last=False)
        return parsed

    def parse_answer(self, answer: str, timeout: int, keep_percent: bool = False) -> list:
        # The answer is parsed ONE way, as a whole: wrapped in \boxed{} and only the match spanning the whole
        # box is tried (extraction_mode="first_match"), so math-verify never picks a sub-expression out of it.
        try:
            return self.mv.parse("\\boxed{" + self.extract.answer_for_parsing(answer, keep_percent) + "}",
                                 self.answer_config, extraction_mode="first_match", parsing_timeout=timeout,
                                 raise_on_error=True)
        except self.timeout_exception:
            raise
        except Exception:  # an unparseable prediction is simply not an answer
            return []

    def safe_verify(self, gold: list, pred: list, timeout: int) -> bool:
        try:
            return bool(self.mv.verify(gold, pred, timeout_seconds=timeout, raise_on_error=True))
        except self.timeout_exception:
            raise
        except Exception:
            return False

    def gold_or_error(self, gold_str: str, timeout: int) -> tuple[list | None, dict | None]:
        """The parsed gold, or the ``bad_gold`` reply that says why there is none."""
        try:
            return self.parse_gold(gold_str, timeout), None
        except self.timeout_exception:
            return None, {"status": "bad_gold", "detail": "parsing the ground truth timed out"}
        except ValueError as exc:
            return None, {"status": "bad_gold", "detail": str(exc)[:500]}
        except Exception as exc:
            return None, {"status": "bad_gold", "detail": f"math-verify cannot parse the ground truth: {exc!r}"[:500]}

    def handle(self, req: dict) -> dict:
        extract = self.extract
        if req.get("sleep_s"):
            time.sleep(float(req["sleep_s"]))
        pt, vt = int(req.get("parsing_timeout", 5)), int(req.get("verify_timeout", 5))
        gold_str = req["gold"]
        gold, bad_gold = self.gold_or_error(gold_str, pt)
        if bad_gold is not None:
            return bad_gold
        text = req.get("text") or ""
        same_value = functools.lru_cache(maxsize=256)(lambda restated, box: self.same_value(restated, box, pt, vt))
        answer, how = extract.extract_math_answer(text, same_value)  # a value restated many times is compared once
        if answer is None and req.get("fallback"):
            answer, how = extract.stated_final_answer(text), "statement"
        if answer is None:
            return {"status": "no_answer", "how": "none"}
        reply = {"status": "ok", "correct": False, "pred": answer[:PRED_REPLY_CHARS], "how": how}
        if how == "boxed_embedded":
            reply["detail"] = "the final box is an operand of a larger expression, or hedged after it"
            return reply
        reply["correct"], problem = self.judge(answer, gold_str, gold, pt, vt)
        if problem is not None:
            reply["detail"] = problem
        return reply

    def judge(self, answer: str, gold_str: str, gold: list, pt: int, vt: int) -> tuple[bool, str | None]:
        """Whether the extracted ``answer`` is the value of the gold (``gold`` parsed from ``gold_str``), and why
        it cannot be accepted as a whole answer (``None`` if it can): the admitted forms rewritten, the
        one-final-answer rule, then colon golds, percent golds, or math-verify."""
        extract = self.extract
        answer = extract.rewrite_admitted_forms(answer, gold_str)
        problem = extract.answer_problem(answer, gold_str)
        if problem is not None:
            return False, problem
        colon_gold = extract.colon_form(gold_str)
        if colon_gold is not None:
            return extract.colon_form(answer) == colon_gold, None
        percent = extract.percent_value(gold_str, spelled=False)
        if percent is not None:  # RULE "percent": math-verify parses a % gold only as text; compare the values
            value = extract.percent_value(answer)
            return value is not None and self.safe_verify(self.parse_answer(percent, pt),
                                                          self.parse_answer(value, pt), vt), None
        pred = self.parse_answer(answer, pt, keep_percent="%" in gold_str)
        return bool(pred) and self.safe_verify(gold, pred, vt), None

    def same_value(self, restated: str, box: str, pt: int, vt: int) -> bool:
        """RULE "restatement after the box": whether a value restated after the final box is the box's value,
        judged as an answer is judged against a gold (:meth:`judge`, the box as the gold): ``1/2`` restates
        ``\\frac12``, ``101_3`` does not restate ``101_2``. A box math-verify cannot parse, or a comparison that
        times out, is no restatement."""
        try:
            gold = self.mv.parse("\\boxed{" + box + "}", self.gold_config, parsing_timeout=pt, raise_on_error=True)
            return bool(gold) and self.judge(restated, box, gold, pt, vt)[0]
        except (Exception, self.timeout_exception):  # then the restated value is not shown to be the box's
            return False


def main() -> None:
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    # Keep the protocol on a private copy of stdout; anything the libraries print goes to /dev/null (a pipe
    # nobody reads would fill up and block the worker), and their warnings are silenced for the same reason.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    _limit_memory(max_bytes)

    import math_verify
    import sympy
    from math_verify import grader
    from math_verify.errors import TimeoutException

    patch_numeric_comparison(grader, sympy)
    verifier = Verifier(_load_extract(), math_verify, TimeoutException)

    logging.disable(logging.CRITICAL)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        exit_after = False
        try:
            reply = verifier.handle(json.loads(line))
        except TimeoutException as exc:
            reply = {"status": "timeout", "detail": str(exc)[:300]}
        except MemoryError:
            reply = {"status": "memory_limit", "detail": f"math-verify exceeded {max_bytes} bytes"}
            exit_after = True  # the heap may be fragmented or half-updated caches may remain: start afresh
        except Exception as exc:
            reply = {"status": "error", "detail": repr(exc)[:500]}
        reply["exit_after"] = exit_after
        proto.write(json.dumps(reply) + "\n")
        if exit_after:
            break


if __name__ == "__main__":
    main()
