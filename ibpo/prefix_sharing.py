"""How much of a batch of prompts a prefix cache could skip: the CPU proxy of vLLM's cached-token count.

A prompt's *shared prefix* is its longest common prefix with any earlier prompt of the batch: the tokens
an unbounded prefix cache (vLLM's automatic prefix caching with no eviction, requests admitted in batch
order) would not prefill again. vLLM caches whole KV blocks only, so ``block_size > 1`` rounds each
length down to a multiple of the block size; vLLM also always recomputes a prompt's last token, so a
prompt can never be shared in full (``len - 1`` at most). Used by ``lab/scripts/bench_correction_prompts.py``
and the trainer's ``ibpo/correction/prompt_tokens_in_shared_prefix_frac`` metric (docs/correction_pass.md).
"""

from __future__ import annotations

import bisect
from typing import Sequence

import numpy as np


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading tokens ``a`` and ``b`` have in common."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def shared_prefix_lengths(prompts: Sequence[Sequence[int]], block_size: int = 1) -> list[int]:
    """Per prompt, the tokens lying in a prefix shared with an earlier prompt of ``prompts``.

    The longest common prefix of a sequence with a set of sequences is reached at one of its two
    lexicographic neighbours in the set, so each prompt is compared with two neighbours in a sorted list
    of the earlier prompts: O(n log n) comparisons, no trie (a 32k-token batch would not fit one in memory).
    The result is capped at ``len(prompt) - 1`` (the last prompt token is always computed) and rounded
    down to whole blocks of ``block_size`` tokens.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    # big-endian fixed-width bytes sort like the token sequences, and compare with memcmp
    earlier: list[bytes] = []
    out = []
    for prompt in prompts:
        ids = np.asarray(prompt, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= 2**32):
            raise ValueError("token ids must lie in [0, 2**32)")
        key = ids.astype(">u4").tobytes()
        pos = bisect.bisect_left(earlier, key)
        best = 0
        for j in (pos - 1, pos):
            if 0 <= j < len(earlier):
                best = max(best, common_prefix_length(ids, np.frombuffer(earlier[j], dtype=">u4")))
        best = min(best, max(len(ids) - 1, 0))
        out.append(best - best % block_size)
        earlier.insert(pos, key)
    return out


def shared_prefix_fraction(prompts: Sequence[Sequence[int]], block_size: int = 1) -> float:
    """Share of all prompt tokens of the batch lying in a prefix shared with an earlier prompt (0 if empty)."""
    total = sum(len(p) for p in prompts)
    return float(sum(shared_prefix_lengths(prompts, block_size)) / total) if total else 0.0


__all__ = ["common_prefix_length", "shared_prefix_lengths", "shared_prefix_fraction"]
