"""Benchmark the pre-flight's every-row check (``data_prep.row_checks.check_rows``) on a DAPO-Math-17k-shaped
training parquet: 17,398 rows (the de-duplicated DAPO-Math-17k), ``data_source=math_dapo``, the DAPO chat
prompt, integer gold answers drawn like DAPO's (mostly small, a tail up to 10^7). Prints a table: columns and
prompts only, golds with the integer-class rule (the pre-flight's default), and every distinct gold through
the verifier. Usage: ``python lab/scripts/bench_preflight_rows.py [--rows N] [--full]``."""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from data_prep.common import MATH_EXTRA_INFO, make_math_row, write_verl_parquet
from data_prep.row_checks import check_rows
from option_types.cli import positive_int
from reward_fns import KNOWN_DATA_SOURCES

DAPO_ROWS = 17398


def dapo_shaped_rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` rows in data_prep's DAPO layout (``dapo`` template) with DAPO-like integer golds."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        gold = str(rng.randint(0, 2000) if rng.random() < 0.8 else rng.randint(0, 10 ** 7))
        rows.append(make_math_row(data_source="math_dapo", problem=f"Problem {i}: find the value of x + {i}.",
                                  answer=gold, template="dapo", split="train", index=i, problem_id=f"dapo-{i:05d}",
                                  source="bench"))
    return rows


def write_dapo_shaped_parquet(path: str | Path, n: int = DAPO_ROWS, seed: int = 0) -> Path:
    return write_verl_parquet(dapo_shaped_rows(n, seed), path, MATH_EXTRA_INFO)


def timed(**kwargs) -> tuple[float, int]:
    start = time.perf_counter()
    report = check_rows(known_sources=KNOWN_DATA_SOURCES, **kwargs)
    return time.perf_counter() - start, report.golds_checked


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rows", type=positive_int, default=DAPO_ROWS, help="rows of the DAPO-shaped parquet")
    parser.add_argument("--full", action="store_true", help="also time every distinct gold through the verifier")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(write_dapo_shaped_parquet(Path(tmp) / "dapo.parquet", args.rows))
        from reward_fns import compute_score

        compute_score("math_dapo", "\\boxed{1}", "1")  # start the math worker pool outside the timings
        cases = [("columns + prompts (no golds)", dict(check_gold_answers=False)),
                 ("+ golds, integer classes (pre-flight default)", dict())]
        if args.full:
            cases.append(("+ every distinct gold", dict(sample_integers=False)))
        print(f"rows={args.rows} cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
        print(f"{'check':<48} {'seconds':>8} {'golds scored':>13}")
        for name, extra in cases:
            seconds, golds = timed(path=path, **extra)
            print(f"{name:<48} {seconds:>8.2f} {golds:>13}")


if __name__ == "__main__":
    main()
