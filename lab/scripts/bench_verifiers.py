"""Benchmark the verifiers. First the code verifier against verl's ``prime_code`` in one run on a neutral mix of
real LiveCodeBench rows (every verdict kind in stated shares; a comparison table with the time per verdict kind and
the ratio with and without the time-outs); then math against verl's ``math_verify``, samples/s for math and code at
1 and 2 workers, and the per-call cost of isolation.
Usage: ``python lab/scripts/bench_verifiers.py [--only-neutral-mix] [--mix-threads 2] [--samples N]``."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from data_prep.common import RawRow, RowRef
from data_prep.livecodebench import lcb_row
from option_types.cli import nonnegative_int, positive_int
from reward_fns import compute_score, encode_tests
from reward_fns.code_tests import decode_tests
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


# --- code: a NEUTRAL mix of real LiveCodeBench rows, ours against verl's prime_code in one run -----------------
# tests/fixtures/reward/lcb_bench_mix.json: five real LCB rows (stdin and functional) with their full private tests,
# decoded by data_prep.livecodebench as a user's data is, and 28 responses of every verdict kind in the stated
# shares ("mix"; where rows, responses and shares come from: its "source" and "mix_note").
MIX_FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "reward" / "lcb_bench_mix.json"
MIX_KINDS = ("correct", "wrong_answer", "runtime_error", "compile_error", "timeout", "memory_limit", "no_answer")


@dataclass(frozen=True)
class MixSample:
    """One response of the mix: its problem, the verdict it is stated to earn, and both verifiers' inputs."""

    question_id: str
    kind: str
    response: str
    ground_truth: str  # ours: encode_tests(...) as data_prep.livecodebench writes it
    tests_json: str  # prime_code: the same tests as JSON text, as a verl row carries them


def load_mix(path: Path = MIX_FIXTURE) -> list[MixSample]:
    """The mix's samples, every row decoded by ``data_prep.livecodebench.lcb_row``; raises ``ValueError`` naming
    the file when a response names no row or the responses' kinds differ from the file's stated ``mix``."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    truths = {}
    for number, raw in enumerate(doc["rows"], start=1):
        row = lcb_row(RawRow(RowRef(str(path), number), raw), "livecodebench_v6", "eval", number, "chat")
        truths[raw["question_id"]] = row["reward_model"]["ground_truth"]
    samples = []
    for number, item in enumerate(doc["responses"], start=1):
        if item["question_id"] not in truths or item["kind"] not in MIX_KINDS:
            raise ValueError(f"{path}: response {number}: question_id {item['question_id']!r} or kind "
                             f"{item['kind']!r} unknown (rows: {sorted(truths)}, kinds: {MIX_KINDS})")
        truth = truths[item["question_id"]]
        samples.append(MixSample(item["question_id"], item["kind"], item["response"], truth,
                                 json.dumps(decode_tests(truth))))
    counts = Counter(s.kind for s in samples)
    if counts != Counter(doc["mix"]):
        raise ValueError(f"{path}: the responses' kinds {dict(counts)} differ from its stated mix {doc['mix']}")
    return samples


def ours(sample: MixSample) -> tuple[str, float]:
    """(verdict, seconds) of our ``compute_score`` on one sample."""
    start = time.perf_counter()
    verdict = compute_score("livecodebench_v6", sample.response, sample.ground_truth)["verdict"]
    return verdict, time.perf_counter() - start


def prime(sample: MixSample) -> tuple[str, float]:
    """(``correct`` or ``not correct``, seconds) of verl's ``prime_code`` called as verl's default reward calls
    it (``continuous=True``, the ground truth as JSON text)."""
    from verl.utils.reward_score import prime_code
    start = time.perf_counter()
    score = prime_code.compute_score(sample.response, sample.tests_json, continuous=True)[0]
    return ("correct" if score is True or score == 1 else "not correct"), time.perf_counter() - start


def timed_pass(fn, samples: list[MixSample], threads: int) -> tuple[list[tuple[str, float]], float]:
    """Per-sample (verdict, seconds) and the wall time of one pass with ``threads`` caller threads, after an
    untimed warm-up call (the first worker, pool or manager starts outside the timed region)."""
    fn(samples[0])
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(fn, samples))
    return results, time.perf_counter() - start


@dataclass
class MixRun:
    """One run of both verifiers on the mix: per-sample results and wall times (all, and without time-outs)."""

    samples: list[MixSample]
    results: dict[str, list[tuple[str, float]]]
    wall: dict[str, float]
    wall_no_timeouts: dict[str, float]


def run_mix(samples: list[MixSample], threads: int) -> MixRun:
    """Ours then prime_code over the whole mix, then each again over the mix without its time-outs."""
    run = MixRun(samples, {}, {}, {})
    rest = [s for s in samples if s.kind != "timeout"]
    for name, fn in (("ours", ours), ("prime_code", prime)):
        run.results[name], run.wall[name] = timed_pass(fn, samples, threads)
        run.wall_no_timeouts[name] = timed_pass(fn, rest, threads)[1] if rest else 0.0
    return run


def mix_table(run: MixRun, header: str) -> str:
    """The comparison table: per verdict kind, each verifier's seconds per sample and in all (where the time
    goes) and how many it judged right; then the wall times and the ratios, with and without the time-outs."""
    lines = [header, "| verdict kind   |  n | ours s/sample | prime s/sample | ours s, all | prime s, all | ours right |"
             " prime right |", "|" + "|".join("-" * w for w in (16, 4, 15, 16, 13, 14, 12, 13)) + "|"]
    for kind in MIX_KINDS:
        idx = [i for i, s in enumerate(run.samples) if s.kind == kind]
        if not idx:
            continue
        mine = [run.results["ours"][i] for i in idx]
        theirs = [run.results["prime_code"][i] for i in idx]
        ours_s, prime_s = sum(t for _, t in mine), sum(t for _, t in theirs)
        ours_ok = sum(verdict == kind for verdict, _ in mine)
        prime_ok = sum((verdict == "correct") == (kind == "correct") for verdict, _ in theirs)
        lines.append(f"| {kind:<14} | {len(idx):>2} | {ours_s / len(idx):>13.3f} | {prime_s / len(idx):>14.3f} | "
                     f"{ours_s:>11.2f} | {prime_s:>12.2f} | {ours_ok:>7}/{len(idx):<2} | {prime_ok:>8}/{len(idx):<2} |")
    wall, rest = run.wall, run.wall_no_timeouts
    n, n_rest = len(run.samples), sum(s.kind != "timeout" for s in run.samples)
    lines.append(f"wall, whole mix ({n}): ours {wall['ours']:.2f} s, prime_code {wall['prime_code']:.2f} s, "
                 f"ratio {wall['prime_code'] / wall['ours']:.2f}x (prime_code time / ours; >1: ours faster)")
    if n_rest:
        lines.append(f"wall, without the time-outs ({n_rest}, a second pass): ours {rest['ours']:.2f} s, prime_code "
                     f"{rest['prime_code']:.2f} s, ratio {rest['prime_code'] / rest['ours']:.2f}x")
    return "\n".join(lines)


def print_neutral_mix(threads: int, path: Path = MIX_FIXTURE) -> None:
    samples = load_mix(path)
    counts = Counter(s.kind for s in samples)
    load_before = os.getloadavg()[0]
    with contextlib.redirect_stderr(io.StringIO()):  # prime_code prints every failing program's traceback
        run = run_mix(samples, threads)
    header = (f"\nNeutral mix: {len(samples)} responses on {len({s.question_id for s in samples})} real LCB rows, "
              f"{threads} thread(s), load average {load_before:.1f} before / {os.getloadavg()[0]:.1f} after: "
              + ", ".join(f"{k} {counts[k]} ({counts[k] / len(samples):.0%})" for k in MIX_KINDS if counts[k]))
    print(mix_table(run, header), flush=True)


def compare_math_with_verl(threads: int, rounds: int) -> list[tuple[str, float, str]]:
    """Samples/s and agreement of ours vs verl's math_verify on the same items."""
    from verl.utils.reward_score import math_verify as verl_math_verify

    def timed(fn, items):
        with ThreadPoolExecutor(max_workers=threads) as pool:  # warm: every worker/pool starts untimed
            list(pool.map(fn, items[:2 * threads]))
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            out = list(pool.map(fn, items))
        return len(items) / (time.perf_counter() - start), out

    rows = []
    math_items = [MATH_ITEMS[i % len(MATH_ITEMS)] for i in range(16 * rounds)]
    rate, mine = timed(lambda it: compute_score(*it)["score"], math_items)
    rows.append((f"math, ours (compute_score), {threads} thread(s)", rate, f"{sum(mine):.0f}/{len(mine)} right"))
    rate, theirs = timed(lambda it: float(verl_math_verify.compute_score(it[1], it[2])), math_items)
    rows.append((f"math, verl math_verify, {threads} thread(s)", rate, f"{sum(theirs):.0f}/{len(theirs)} right"))
    return rows


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
                        help="passes over the math comparison items (16 per pass); 0 skips the comparison")
    parser.add_argument("--neutral-mix", type=int, choices=[0, 1], default=1, help="1: run the code neutral mix")
    parser.add_argument("--only-neutral-mix", action="store_true", help="print only the code neutral-mix comparison")
    parser.add_argument("--mix-threads", type=positive_int, default=2,
                        help="caller threads (and our concurrent sandboxes) for the neutral mix")
    args = parser.parse_args(argv)
    report = detect_isolation()
    print(report.describe(), file=sys.stderr)
    if args.neutral_mix or args.only_neutral_mix:
        set_max_concurrent_sandboxes(args.mix_threads)
        print_neutral_mix(args.mix_threads)
        if args.only_neutral_mix:
            return
    if args.compare_rounds:
        print(f"\n| {'same items: ours vs verl':<58} | {'samples/s':>9} | {'agreement':<12} |\n"
              f"|{'-' * 60}|{'-' * 11}|{'-' * 14}|")
        for threads in (1, 2):
            for name, rate, note in compare_math_with_verl(threads, args.compare_rounds):
                print(f"| {name:<58} | {rate:>9.2f} | {note:<12} |", flush=True)
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
