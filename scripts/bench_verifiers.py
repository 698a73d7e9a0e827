"""Benchmark the verifiers: samples/s for math and code (stdin, functional) at 1 and 2 workers, and the per-call
cost of isolation. Prints a comparison table. Usage: ``python scripts/bench_verifiers.py [--samples N]``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from reward_fns import compute_score, encode_tests
from reward_fns.code_verifier import CodeLimits, prepare_tests, run_code_tests, set_max_concurrent_sandboxes
from reward_fns.math_verifier import get_math_pool, reset_math_pool
from reward_fns.sandbox import detect_isolation

MATH_ITEMS = [("aime25", "Reasoning...\n\\boxed{70}", "70"), ("hmmt_feb_2025", r"\boxed{\frac{\sqrt{570}}{12}}",
              r"\sqrt{\frac{95}{24}}"), ("math_dapo", "Answer: 71", "70"), ("ibpo/synthetic_arith", "Answer: 42", "42")]
STDIN_TRUTH = encode_tests({"inputs": [f"{i} {i + 1}\n" for i in range(5)],
                            "outputs": [f"{2 * i + 1}\n" for i in range(5)], "fn_name": None})
STDIN_CODE = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
FUNC_TRUTH = encode_tests({"inputs": [f"{i}\n{i + 1}" for i in range(5)], "outputs": [str(2 * i + 1) for i in range(5)],
                           "fn_name": "add"})
FUNC_CODE = "```python\nclass Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b\n```"


def throughput(items: list[tuple], threads: int) -> float:
    """Samples per second scoring ``items`` with ``threads`` caller threads (like verl's executor threads)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(lambda item: compute_score(*item), items))
    elapsed = time.perf_counter() - start
    assert all(r["verdict"] in ("correct", "wrong_answer") for r in results), results[:3]
    return len(items) / elapsed


# --- comparison with verl's own verifiers on the same samples ------------------------------------------------
# LiveCodeBench-style stdin problems (verl's prime_code runs APPS-style stdin tests; its call-based format differs
# from LCB's, so the comparison uses stdin problems only): a right and a wrong program per problem, and the real
# LCB row 1873_A from tests/fixtures.
_FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures", "reward",
                        "lcb_1873_A.json")
_PROBLEMS = [
    ("a, b = map(int, input().split())\nprint(a + b)", "a, b = map(int, input().split())\nprint(a - b)",
     [f"{i} {3 * i + 1}\n" for i in range(8)], [f"{4 * i + 1}\n" for i in range(8)]),
    ("n = int(input())\nxs = list(map(int, input().split()))\nprint(max(xs) - min(xs))",
     "n = int(input())\nxs = list(map(int, input().split()))\nprint(max(xs))",
     [f"5\n{i} {i + 7} 3 {2 * i} 1\n" for i in range(1, 9)],
     [f"{max(i, i + 7, 3, 2 * i, 1) - min(i, i + 7, 3, 2 * i, 1)}\n" for i in range(1, 9)]),
    ("import sys\nfor line in sys.stdin.read().split()[1:]:\n    print(line[::-1])",
     "import sys\nfor line in sys.stdin.read().split()[1:]:\n    print(line)",
     [f"2\nab{i}\nxyz{i}\n" for i in range(8)], [f"{i}ba\n{i}zyx\n" for i in range(8)]),
]


def comparison_samples() -> list[tuple[str, dict]]:
    """(program, {"inputs", "outputs"}) pairs: for each problem its right and its wrong program."""
    import json
    samples = []
    for right, wrong, inputs, outputs in _PROBLEMS:
        samples += [(right, {"inputs": inputs, "outputs": outputs}), (wrong, {"inputs": inputs, "outputs": outputs})]
    with open(_FIXTURE, encoding="utf-8") as fh:
        row = json.load(fh)
    solution = ("t = int(input())\nfor _ in range(t):\n    s = input().strip()\n"
                "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) <= 2 else 'NO')")
    samples.append((solution, {"inputs": row["inputs"], "outputs": row["outputs"]}))
    return samples


def compare_with_verl(threads: int, rounds: int) -> list[tuple[str, float, str]]:
    """Samples/s and agreement of ours vs verl's prime_code (code) and verl's math_verify (math)."""
    from verl.utils.reward_score import math_verify as verl_math_verify
    from verl.utils.reward_score import prime_code

    rows = []
    code = comparison_samples() * rounds
    ours_items = [("livecodebench_v6", f"```python\n{prog}\n```", encode_tests(dict(tc, fn_name=None)))
                  for prog, tc in code]

    def timed(fn, items):
        with ThreadPoolExecutor(max_workers=threads) as pool:  # warm: every worker/pool/manager starts untimed
            list(pool.map(fn, items[:2 * threads]))
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            out = list(pool.map(fn, items))
        return len(items) / (time.perf_counter() - start), out

    rate, ours = timed(lambda it: compute_score(*it)["score"], ours_items)
    rows.append((f"code, ours (compute_score, sandboxed), {threads} thread(s)", rate,
                 f"{sum(ours):.0f}/{len(ours)} right"))
    rate, theirs = timed(lambda it: float(prime_code.compute_score(f"```python\n{it[0]}\n```", it[1], continuous=True)[0] == 1),
                         code)
    rows.append((f"code, verl prime_code, {threads} thread(s)", rate, f"{sum(theirs):.0f}/{len(theirs)} right"))
    math_items = [MATH_ITEMS[i % len(MATH_ITEMS)] for i in range(16 * rounds)]
    rate, ours = timed(lambda it: compute_score(*it)["score"], math_items)
    rows.append((f"math, ours (compute_score), {threads} thread(s)", rate, f"{sum(ours):.0f}/{len(ours)} right"))
    rate, theirs = timed(lambda it: float(verl_math_verify.compute_score(it[1], it[2])), math_items)
    rows.append((f"math, verl math_verify, {threads} thread(s)", rate, f"{sum(theirs):.0f}/{len(theirs)} right"))
    return rows


def per_call_seconds(fn, repeats: int) -> float:
    fn()  # warm
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--compare-rounds", type=int, default=2,
                        help="passes over the comparison samples (7 code, 16 math per pass); 0 skips the comparison")
    parser.add_argument("--only-compare", action="store_true", help="print only the comparison with verl")
    args = parser.parse_args()
    report = detect_isolation()
    print(report.describe(), file=sys.stderr)
    if args.compare_rounds:
        print(f"\n| {'same samples: ours vs verl':<58} | {'samples/s':>9} | {'agreement':<12} |\n"
              f"|{'-' * 60}|{'-' * 11}|{'-' * 14}|")
        for threads in (1, 2):
            set_max_concurrent_sandboxes(threads)
            for name, rate, note in compare_with_verl(threads, args.compare_rounds):
                print(f"| {name:<58} | {rate:>9.2f} | {note:<12} |", flush=True)
        if args.only_compare:
            return
    rows = []
    for workers in (1, 2):
        os.environ["IBPO_MATH_WORKERS"] = str(workers)
        reset_math_pool()
        get_math_pool().warm_up()
        set_max_concurrent_sandboxes(workers)
        math_items = [MATH_ITEMS[i % len(MATH_ITEMS)] for i in range(args.samples)]
        rows.append((f"math ({workers} worker{'s' if workers > 1 else ''})", throughput(math_items, 16)))
        code_n = max(8, args.samples // 4)
        rows.append((f"code stdin, 5 tests ({workers} sandbox{'es' if workers > 1 else ''})",
                     throughput([("livecodebench_v6", STDIN_CODE, STDIN_TRUTH)] * code_n, 16)))
        rows.append((f"code functional, 5 tests ({workers} sandbox{'es' if workers > 1 else ''})",
                     throughput([("livecodebench_v6", FUNC_CODE, FUNC_TRUTH)] * code_n, 16)))
    print(f"\n| {'workload':<42} | {'samples/s':>10} |\n|{'-' * 44}|{'-' * 12}|")
    for name, rate in rows:
        print(f"| {name:<42} | {rate:>10.1f} |")

    # Per-call overhead of isolation, one test, sequential calls.
    one = prepare_tests(encode_tests({"inputs": ["1 2\n"], "outputs": ["3\n"], "fn_name": None}))
    code = "a, b = map(int, input().split())\nprint(a + b)"
    limits = CodeLimits()
    overhead = [("bare `python -I -c` subprocess (no isolation, no LCB prefix)",
                 per_call_seconds(lambda: subprocess.run([sys.executable, "-I", "-c", code], input=b"1 2\n",
                                                         capture_output=True, check=True), args.repeats))]
    for backend in ("fallback", "bwrap"):
        try:
            rep = detect_isolation(backend)
        except Exception as exc:  # bwrap missing: say so in the table
            print(f"({backend}: {exc})", file=sys.stderr)
            continue
        overhead.append((f"sandboxed run, backend={backend}",
                         per_call_seconds(lambda: run_code_tests(code, one, limits, rep), args.repeats)))
    from math_verify import parse, verify  # in-process baseline (main thread, so its signal timeouts work)
    gold = parse("\\boxed{70}")
    overhead.append(("math-verify in-process (unsafe in verl threads)",
                     per_call_seconds(lambda: verify(gold, parse("\\boxed{70}")), args.repeats)))
    overhead.append(("math via worker pool (compute_score)",
                     per_call_seconds(lambda: compute_score("aime25", "\\boxed{70}", "70"), args.repeats)))
    print(f"\n| {'per-call cost (sequential)':<62} | {'ms/call':>8} |\n|{'-' * 64}|{'-' * 10}|")
    for name, seconds in overhead:
        print(f"| {name:<62} | {seconds * 1000:>8.1f} |")


if __name__ == "__main__":
    main()
