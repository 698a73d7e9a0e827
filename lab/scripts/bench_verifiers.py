"""Benchmark the verifiers: samples/s for math and code (stdin, functional) at 1 and 2 workers, and the per-call
cost of isolation. Prints a comparison table. Usage: ``python lab/scripts/bench_verifiers.py [--samples N]``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from option_types.cli import nonnegative_int, positive_int
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
_FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "fixtures", "reward",
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


# --- a NEUTRAL mix: real LiveCodeBench tests, every verdict kind in a stated share -----------------------------
# The real row 1873_A (tests/fixtures/reward/lcb_1873_A.json: its public test, then its 4 decoded private tests;
# the only real LCB row whose private tests this project holds offline) with 28 responses in the shares of the
# issue-36 mix of real LCB responses: 12 right, 9 wrong answer, 4 runtime error, 1 compile error, 2 time-outs
# (43% right, 32% wrong, 14% runtime error, 4% compile error, 7% time-out). Each response is a full chat answer
# (prose, then a fenced program), written as a model writes them.
_RIGHT = [
    "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n    print('YES' if sum(a != b for a, b in zip(s, 'abc')) <= 2 else 'NO')",
    "import sys\ndata = sys.stdin.read().split()\nfor s in data[1:]:\n    print('NO' if s in ('bca', 'cab') else 'YES')",
    "t = int(input())\nfor _ in range(t):\n    s = input()\n    ok = s == 'abc' or any(''.join(x) == 'abc' for x in [\n        (s[1], s[0], s[2]), (s[2], s[1], s[0]), (s[0], s[2], s[1])])\n    print('YES' if ok else 'NO')",
    "def solve(s):\n    if s == 'abc':\n        return True\n    for i in range(3):\n        for j in range(i + 1, 3):\n            t = list(s)\n            t[i], t[j] = t[j], t[i]\n            if ''.join(t) == 'abc':\n                return True\n    return False\n\nfor _ in range(int(input())):\n    print('YES' if solve(input().strip()) else 'NO')",
    "n = int(input())\nout = []\nfor _ in range(n):\n    s = input().strip()\n    diff = sum(1 for i in range(3) if s[i] != 'abc'[i])\n    out.append('YES' if diff != 3 else 'NO')\nprint('\\n'.join(out))",
    "import sys\ninput = sys.stdin.readline\nt = int(input())\nfor _ in range(t):\n    s = input().strip()\n    print('YES' if s[0] == 'a' or s[1] == 'b' or s[2] == 'c' else 'NO')",
    "from itertools import permutations\ngood = {'abc'}\nfor i in range(3):\n    for j in range(i + 1, 3):\n        t = list('abc'); t[i], t[j] = t[j], t[i]; good.add(''.join(t))\nfor _ in range(int(input())):\n    print('YES' if input().strip() in good else 'NO')",
    "def main():\n    t = int(input())\n    for _ in range(t):\n        s = input()\n        cnt = 0\n        for a, b in zip(s, 'abc'):\n            if a != b:\n                cnt += 1\n        print('YES' if cnt in (0, 2) else 'NO')\n\nif __name__ == '__main__':\n    main()",
    "lines = open(0).read().split()\nprint('\\n'.join('YES' if sum(c != d for c, d in zip(w, 'abc')) < 3 else 'NO' for w in lines[1:]))",
    "t = int(input())\nres = []\nfor _ in range(t):\n    s = input().strip()\n    res.append('NO' if s in ['bca', 'cab'] else 'YES')\nfor r in res:\n    print(r)",
    "import sys\nfor line in sys.stdin.readlines()[1:]:\n    s = line.strip()\n    if not s:\n        continue\n    print('YES' if sorted(s) == list('abc') and sum(x != y for x, y in zip(s, 'abc')) <= 2 else 'NO')",
    "T = int(input())\nfor _ in range(T):\n    s = list(input().strip())\n    wrong = [i for i in range(3) if s[i] != 'abc'[i]]\n    print('YES' if len(wrong) <= 2 else 'NO')",
]
_WRONG = [
    "t = int(input())\nfor _ in range(t):\n    input()\n    print('YES')",
    "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n    print('YES' if sum(a != b for a, b in zip(s, 'abc')) <= 1 else 'NO')",
    "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n    print('yes' if s != 'bca' and s != 'cab' else 'no')",
    "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n    print('NO' if s in ('bca', 'cba') else 'YES')",
    "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n    print('YES' if s == 'abc' else 'NO')",
    "t = int(input())\nans = 0\nfor _ in range(t):\n    s = input().strip()\n    ans += s in ('bca', 'cab')\nprint(ans)",
    "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n    print('YES' if s[0] == 'a' and s[2] == 'c' else 'NO')",
    "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n    print('NO' if sum(a == b for a, b in zip(s, 'abc')) == 0 else 'YES', end=' ')",
    "t = int(input())\nfor _ in range(t - 1):\n    s = input().strip()\n    print('NO' if s in ('bca', 'cab') else 'YES')",
]
_RUNTIME_ERROR = [
    "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n    print('YES' if s[3] == 'c' else 'NO')",
    "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n    print(answer(s))",
    "t, s = map(int, input().split())\nprint(t + s)",
    "import sys\nsys.setrecursionlimit(100)\ndef f(n):\n    return f(n + 1)\nt = int(input())\nprint(f(t))",
]
_COMPILE_ERROR = ["t = int(input())\nfor _ in range(t)\n    print('YES')"]
_TIMEOUT = [
    "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n    while s != 'abc':\n        s = s[1:] + s[0]\n    print('YES')",
    "t = int(input())\ncount = 0\nfor i in range(10 ** 12):\n    count += i % 3\nprint('YES')",
]
NEUTRAL_MIX = ([(p, "correct") for p in _RIGHT] + [(p, "wrong_answer") for p in _WRONG]
               + [(p, "runtime_error") for p in _RUNTIME_ERROR] + [(p, "compile_error") for p in _COMPILE_ERROR]
               + [(p, "timeout") for p in _TIMEOUT])


def neutral_mix_samples() -> list[tuple[str, str, dict]]:
    """(response, expected verdict, LCB tests) for the neutral mix, interleaved so kinds spread over the run."""
    import json
    with open(_FIXTURE, encoding="utf-8") as fh:
        row = json.load(fh)
    tests = {"inputs": row["inputs"], "outputs": row["outputs"]}
    ordered = sorted(enumerate(NEUTRAL_MIX), key=lambda item: (item[0] * 7919) % len(NEUTRAL_MIX))
    return [(f"Let me think about the swaps.\n\n```python\n{prog}\n```\nThis reads the input and prints the answers.",
             verdict, tests) for _, (prog, verdict) in ordered]


def compare_on_neutral_mix(threads: int) -> tuple[list[tuple], dict]:
    """Run ours and verl's prime_code (``continuous=True``, as verl's default reward calls it) on the neutral mix
    with ``threads`` caller threads; per-sample latency and verdicts. Returns (rows, totals)."""
    from verl.utils.reward_score import prime_code
    samples = neutral_mix_samples()

    def ours(item):
        t0 = time.perf_counter()
        out = compute_score("livecodebench_v6", item[0], encode_tests(dict(item[2], fn_name=None)))
        return out["verdict"], time.perf_counter() - t0

    def theirs(item):
        t0 = time.perf_counter()
        ok = prime_code.compute_score(item[0], item[2], continuous=True)[0]
        return ("correct" if ok is True or ok == 1 else "not correct"), time.perf_counter() - t0

    totals = {}
    results = {}
    for name, fn in (("ours", ours), ("prime_code", theirs)):
        with ThreadPoolExecutor(max_workers=threads) as pool:  # warm-up outside the timed region
            list(pool.map(fn, samples[:2]))
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            results[name] = list(pool.map(fn, samples))
        totals[name] = time.perf_counter() - start
    rows = []
    for kind in ("correct", "wrong_answer", "runtime_error", "compile_error", "timeout"):
        idx = [i for i, s in enumerate(samples) if s[1] == kind]
        ours_ok = sum(results["ours"][i][0] == kind for i in idx)
        prime_ok = sum((results["prime_code"][i][0] == "correct") == (kind == "correct") for i in idx)
        rows.append((kind, len(idx), sum(results["ours"][i][1] for i in idx) / len(idx),
                     sum(results["prime_code"][i][1] for i in idx) / len(idx), ours_ok, prime_ok))
    return rows, totals


def print_neutral_mix(threads: int) -> None:
    rows, totals = compare_on_neutral_mix(threads)
    n = sum(r[1] for r in rows)
    print(f"\nNeutral mix, real LCB row 1873_A (5 tests), {threads} thread(s), load average "
          f"{os.getloadavg()[0]:.1f}: " + ", ".join(f"{r[0]} {r[1]} ({r[1] / n:.0%})" for r in rows))
    print(f"| {'verdict':<14} | {'n':>2} | {'ours s/sample':>13} | {'prime_code s/sample':>19} | {'ours right':>10} |"
          f" {'prime right':>11} |\n|{'-' * 16}|{'-' * 4}|{'-' * 15}|{'-' * 21}|{'-' * 12}|{'-' * 13}|")
    for kind, count, ours_s, prime_s, ours_ok, prime_ok in rows:
        print(f"| {kind:<14} | {count:>2} | {ours_s:>13.3f} | {prime_s:>19.3f} | {ours_ok:>7}/{count:<2} |"
              f" {prime_ok:>8}/{count:<2} |")
    print(f"| {'total (wall)':<14} | {n:>2} | {totals['ours']:>12.2f}s | {totals['prime_code']:>18.2f}s |"
          f" {'':>10} | {'':>11} |")
    print(f"samples/s: ours {n / totals['ours']:.2f}, prime_code {n / totals['prime_code']:.2f}, "
          f"ratio {totals['prime_code'] / totals['ours']:.2f}x", flush=True)


def per_call_seconds(fn, repeats: int) -> float:
    fn()  # warm
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=positive_int, default=64)
    parser.add_argument("--repeats", type=positive_int, default=20)
    parser.add_argument("--compare-rounds", type=nonnegative_int, default=2,
                        help="passes over the comparison samples (7 code, 16 math per pass); 0 skips the comparison")
    parser.add_argument("--only-compare", action="store_true", help="print only the comparison with verl")
    parser.add_argument("--neutral-mix", type=int, choices=[0, 1], default=1, help="1: also run the neutral mix of real LCB tests")
    parser.add_argument("--only-neutral-mix", action="store_true", help="print only the neutral-mix comparison")
    args = parser.parse_args(argv)
    report = detect_isolation()
    print(report.describe(), file=sys.stderr)
    if args.neutral_mix or args.only_neutral_mix:
        for threads in (1, 2):
            set_max_concurrent_sandboxes(threads)
            print_neutral_mix(threads)
        if args.only_neutral_mix:
            return
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
