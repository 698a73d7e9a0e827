"""Math-verify worker process (run as a script by :mod:`reward_fns.math_verifier`; imports nothing from the repo).

Protocol: prints ``{"ready": true}`` after importing math-verify, then answers each JSON request line on stdin
with one JSON line. It runs in its own main thread, so math-verify's signal-based timeouts work here; the parent
still kills it on a wall-clock deadline because some inputs hang inside C code or sympy and ignore SIGALRM.

Request: ``{"gold": str, "answer": str | null, "fallback_text": str | null, "parsing_timeout": int,
"verify_timeout": int}``. ``answer`` is the extracted final answer; ``fallback_text`` (used only when ``answer``
is null) is handed to math-verify's own extraction.
Reply: ``{"status": "ok" | "bad_gold" | "timeout" | "memory_limit" | "error", "correct": bool, "parsed": str,
"detail": str, "exit_after": bool}``.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections import OrderedDict

GOLD_CACHE_SIZE = 512


def _limit_memory(max_bytes: int) -> None:
    if max_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main() -> None:
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    # Keep the protocol on a private copy of stdout; anything the libraries print goes to stderr.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    _limit_memory(max_bytes)

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    from math_verify.errors import TimeoutException

    gold_config = [LatexExtractionConfig()]
    answer_config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    fallback_config = [LatexExtractionConfig(), ExprExtractionConfig()]
    gold_cache: OrderedDict[str, list] = OrderedDict()

    def parse_gold(gold: str, timeout: int) -> list:
        if gold in gold_cache:
            gold_cache.move_to_end(gold)
            return gold_cache[gold]
        parsed = parse("\\boxed{" + gold + "}", gold_config, parsing_timeout=timeout, raise_on_error=True)
        gold_cache[gold] = parsed
        if len(gold_cache) > GOLD_CACHE_SIZE:
            gold_cache.popitem(last=False)
        return parsed

    def safe_parse(text: str, config: list, timeout: int) -> list:
        try:
            return parse(text, config, parsing_timeout=timeout, raise_on_error=True)
        except TimeoutException:
            raise
        except Exception:  # an unparseable prediction is simply not an answer
            return []

    def safe_verify(gold: list, pred: list, timeout: int) -> bool:
        try:
            return bool(verify(gold, pred, timeout_seconds=timeout, raise_on_error=True))
        except TimeoutException:
            raise
        except Exception:
            return False

    def handle(req: dict) -> dict:
        pt, vt = int(req.get("parsing_timeout", 5)), int(req.get("verify_timeout", 5))
        try:
            gold = parse_gold(req["gold"], pt)
        except TimeoutException:
            return {"status": "bad_gold", "detail": "parsing the ground truth timed out"}
        except Exception as exc:
            return {"status": "bad_gold", "detail": f"math-verify cannot parse the ground truth: {exc!r}"[:500]}
        if not gold:
            return {"status": "bad_gold", "detail": "math-verify parses the ground truth to nothing"}
        answer = req.get("answer")
        if answer is not None:
            candidates = [safe_parse("\\boxed{" + answer + "}", answer_config, pt), safe_parse(answer, answer_config, pt)]
        else:
            candidates = [safe_parse(req.get("fallback_text") or "", fallback_config, pt)]
        candidates = [c for c in candidates if c]
        parsed = str(candidates[0][-1]) if candidates else ""
        correct = any(safe_verify(gold, c, vt) for c in candidates)
        return {"status": "ok", "correct": correct, "parsed": parsed[:500]}

    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        exit_after = False
        try:
            reply = handle(json.loads(line))
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
