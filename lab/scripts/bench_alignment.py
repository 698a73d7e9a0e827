"""Benchmark: alignment + rewrite check + token mask for a batch of (y, ŷ, y_ref) token-id triples.

Realistic pairs: token ids follow a Zipf law over a 32k vocabulary (rank-frequency exponent ``--zipf``,
≈1 for natural text), ŷ is y with a few spans edited (what a local correction does), y_ref an independent
sequence. Every compared row computes the same quantities for every triple: d(y, ŷ), the unmodified mask
of y, d(ŷ, y_ref) and the rewrite decision (Eq. 18); the project's rapidfuzz path (``ibpo.alignment``) is
compared on one core against a plain-Python Levenshtein DP (with traceback) and difflib. Times are CPU
time of this process (``time.process_time``), not wall clock. A last, separate line times the trainer's
own path (``ibpo.pipeline.shape_batch``), which skips d(ŷ, y_ref) whenever d(y, ŷ) ≤ α (Eq. 18 is then
decided), so it does less work than the rows above.

    python lab/scripts/bench_alignment.py                 # 256 pairs at 1k, 4k, 16k tokens
    python lab/scripts/bench_alignment.py --pairs 64 --lengths 1000 4000

The plain DP is O(n²) in Python, so it is timed on ``--dp-pairs`` pairs (and not at all above
``--dp-max-len``: then its time is extrapolated quadratically from the largest measured length and marked
"est."). difflib's SequenceMatcher is not an optimal edit-distance alignment; it is the stdlib baseline.
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import time

import numpy as np

from ibpo.alignment import align, normalized_edit_distance
from ibpo.options import IBPOConfig
from ibpo.pipeline import CorrectionRequest, shape_batch
from ibpo.shaping import is_full_rewrite
from option_types.cli import nonnegative_float, nonnegative_int, positive_int

ALPHA = IBPOConfig().alpha


def zipf_sampler(vocab: int, exponent: float, rng: np.random.Generator):
    """``draw(n)``: n token ids with P(rank k) ∝ k^-exponent over ``vocab`` ids (rank k ↦ a fixed random id)."""
    p = 1.0 / np.arange(1, vocab + 1, dtype=np.float64) ** exponent
    p /= p.sum()
    ids = rng.permutation(vocab)
    return lambda n: ids[rng.choice(vocab, size=n, p=p)].tolist()


def make_triple(rng: random.Random, draw, length: int, spans: int = 6, span_len: int = 40):
    """(y, ŷ, y_ref): ŷ is y with ``spans`` spans replaced by fresh tokens of other lengths; y_ref independent."""
    y = draw(length)
    y_hat = list(y)
    for _ in range(spans):
        start = rng.randrange(len(y_hat))
        cut = rng.randrange(1, span_len)
        y_hat[start:start + cut] = draw(rng.randrange(1, span_len))
    return y, y_hat, draw(length)


MASK_CONFIG = IBPOConfig(variant="mask")


def ours_batch(triples) -> list[float]:
    """The trainer's real path: ``ibpo.pipeline.shape_batch`` (alignment, rewrite filter, Δ, mask) over a
    batch where row 2k is y_ref (correct) and row 2k+1 is y (wrong), each corrected by ŷ (right)."""
    responses, requests, corrections = [], [], []
    for k, (y, y_hat, y_ref) in enumerate(triples):
        responses += [y_ref, y]
        requests.append(CorrectionRequest(2 * k + 1, (2 * k,), [], k))
        corrections.append(y_hat)
    is_correct = [True, False] * len(triples)
    out = shape_batch(requests, corrections, [True] * len(triples), responses, is_correct, MASK_CONFIG)
    return [float(out.token_masks[2 * k + 1].mean()) for k in range(len(triples))]  # modified share


def dp_align(a, b):
    """Plain DP with traceback: (distance, unmodified mask over a)."""
    n, m = len(a), len(b)
    d = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        d[i][0] = i
    for j in range(m + 1):
        d[0][j] = j
    for i in range(1, n + 1):
        ai, row, prev = a[i - 1], d[i], d[i - 1]
        for j in range(1, m + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ai != b[j - 1]))
    mask = np.zeros(n, dtype=bool)
    i, j = n, m
    while i > 0 and j > 0:
        if a[i - 1] == b[j - 1] and d[i][j] == d[i - 1][j - 1]:
            mask[i - 1] = True
            i, j = i - 1, j - 1
        elif d[i][j] == d[i - 1][j - 1] + 1:
            i, j = i - 1, j - 1
        elif d[i][j] == d[i - 1][j] + 1:
            i -= 1
        else:
            j -= 1
    return d[n][m], mask


def ours_pipeline(y, y_hat, y_ref, alpha=ALPHA):
    """The project's functions (``ibpo.alignment``, rapidfuzz), computing every quantity: d(y, ŷ) and U from
    one optimal alignment, d(ŷ, y_ref) always, then Eq. 18 and the mask of modified tokens."""
    alignment = align(y, y_hat)
    d_ref = normalized_edit_distance(y_hat, y_ref)
    return alignment.d_original, is_full_rewrite(alignment.d_original, d_ref, alpha), \
        (~alignment.unmodified).astype(np.float32), d_ref


def dp_pipeline(y, y_hat, y_ref, alpha=ALPHA):
    dist, mask = dp_align(y, y_hat)
    d_orig = dist / max(len(y), len(y_hat))
    d_ref = dp_align(y_hat, y_ref)[0] / max(len(y_hat), len(y_ref))
    return d_orig, is_full_rewrite(d_orig, d_ref, alpha), (~mask).astype(np.float32), d_ref


def difflib_pipeline(y, y_hat, y_ref, alpha=ALPHA):
    sm = difflib.SequenceMatcher(None, y, y_hat, autojunk=False)
    mask = np.zeros(len(y), dtype=bool)
    for tag, i1, i2, _, _ in sm.get_opcodes():
        if tag == "equal":
            mask[i1:i2] = True
    d_orig = 1.0 - sm.ratio()
    d_ref = 1.0 - difflib.SequenceMatcher(None, y_hat, y_ref, autojunk=False).ratio()
    return d_orig, is_full_rewrite(d_orig, d_ref, alpha), (~mask).astype(np.float32), d_ref


def time_per_pair(fn, triples) -> float:
    """CPU seconds of this process per triple."""
    start = time.process_time()
    for t in triples:
        fn(*t)
    return (time.process_time() - start) / len(triples)


def time_batch(triples) -> float:
    """CPU seconds per triple of the trainer's batched path."""
    start = time.process_time()
    ours_batch(triples)
    return (time.process_time() - start) / len(triples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=positive_int, default=256)
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[1000, 4000, 16000])
    parser.add_argument("--dp-pairs", type=positive_int, default=2)
    parser.add_argument("--dp-max-len", type=positive_int, default=4000)
    parser.add_argument("--difflib-pairs", type=positive_int, default=8)
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--zipf", type=nonnegative_float, default=1.0, help="Zipf exponent of the token ids (≈1: natural text)")
    parser.add_argument("--vocab", type=positive_int, default=32000)
    args = parser.parse_args(argv)
    if min(args.lengths) > args.dp_max_len:
        # the plain-DP times of longer rows are extrapolated from a measured row: at least one must be measured
        parser.error(f"--dp-max-len {args.dp_max_len} is below every --lengths value {args.lengths}: no row would "
                     "time the plain DP that longer rows are extrapolated from")
    args.lengths = sorted(args.lengths)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, as the issue asks

    rng = random.Random(args.seed)
    draw = zipf_sampler(args.vocab, args.zipf, np.random.default_rng(args.seed))
    rows = []
    dp_ref: tuple[int, float] | None = None
    for length in args.lengths:
        triples = [make_triple(rng, draw, length) for _ in range(args.pairs)]
        ours_pair = time_per_pair(ours_pipeline, triples)
        trainer_pair = time_batch(triples)
        if length <= args.dp_max_len:
            dp_pair = time_per_pair(dp_pipeline, triples[: args.dp_pairs])
            dp_ref = (length, dp_pair)
            # agreement with the slow reference: both distances exactly, the rewrite decision, and the share
            # of modified tokens (optimal alignments can differ in tie-breaks, not in their distance)
            got, want = ours_pipeline(*triples[0]), dp_pipeline(*triples[0])
            assert got[0] == want[0] and got[3] == want[3] and got[1] == want[1], (got[:2], want[:2])
            assert abs(float(got[2].mean()) - float(want[2].mean())) < 0.05
            dp_note = ""
        else:
            base_len, base_time = dp_ref
            dp_pair = base_time * (length / base_len) ** 2
            dp_note = " est."
        diff_pair = time_per_pair(difflib_pipeline, triples[: args.difflib_pairs])
        rows.append((length, args.pairs, ours_pair * args.pairs, dp_pair * args.pairs, dp_note,
                     diff_pair * args.pairs, trainer_pair * args.pairs))

    print(f"d(y, ŷ) + mask + d(ŷ, y_ref) + rewrite decision for every triple, {args.pairs} triples per row, "
          f"one core, CPU seconds (process_time); Zipf({args.zipf}) token ids over {args.vocab}, ŷ = y with 6 "
          f"edited spans, y_ref independent\n")
    print("| tokens | triples | ibpo.alignment (rapidfuzz) s | plain DP s | difflib s | speed-up vs DP "
          "| speed-up vs difflib | trainer path (skips d(ŷ, y_ref) when d(y, ŷ) ≤ α) s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for length, pairs, t_ours, t_dp, note, t_diff, t_trainer in rows:
        print(f"| {length} | {pairs} | {t_ours:.3f} | {t_dp:.1f}{note} | {t_diff:.2f} | "
              f"{t_dp / t_ours:,.0f}x | {t_diff / t_ours:,.1f}x | {t_trainer:.3f} |")


if __name__ == "__main__":
    main()
