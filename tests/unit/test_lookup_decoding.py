"""The lookup-decoding proxy (ibpo/lookup_decoding.py): vLLM's ngram rule, the step replay, and the
acceptance rule's exactness (docs/correction_pass.md, "Lossless")."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ibpo.correction_lengths import bounded_lengths, correction_max_tokens
from ibpo.lookup_decoding import (
    LookupStats,
    NgramParams,
    NgramProposer,
    emitted_token_distribution,
    ngram_params_from_speculative_config,
    ngram_propose,
    simulate_batch,
    simulate_lookup,
    verify_deterministic_draft,
)


CHI2_CRIT_0001_DF26 = 54.05  # chi-square upper 0.1% point, 26 degrees of freedom (standard table)


# ------------------------------------------------------------------------------------------ slow references
def slow_propose(context: list[int], lo: int, hi: int, k: int, max_model_len: int | None) -> list[int]:
    """The rule as the vLLM docstring states it, with Python lists: the longest suffix n-gram (lo <= n <=
    hi) that occurs earlier, its earliest occurrence, up to k following tokens inside the context."""
    total = len(context)
    if max_model_len is not None:
        k = min(k, max_model_len - total)
    if total < lo or k <= 0:
        return []
    for n in range(hi, lo - 1, -1):
        if n >= total:
            continue
        suffix = context[total - n:]
        for j in range(0, total - n):
            if context[j:j + n] == suffix:
                return context[j + n: j + n + k]
    return []


def slow_replay(prompt: list[int], output: list[int], p: NgramParams) -> tuple[int, int, int, int]:
    """Speculative generation of ``output`` token by token, coupled to the realised sample: the target
    emits output[t] at position t; a draft token is accepted iff it is that token (lossless rule); a step
    ends at the first rejection (the target's own token is emitted) or after the draft (bonus token).
    Returns (decode steps, steps with a draft, drafted, accepted)."""
    emitted = [output[0]]  # the prefill
    steps = draft_steps = drafted = accepted = 0
    while len(emitted) < len(output):
        draft = slow_propose(prompt + emitted, p.prompt_lookup_min, p.prompt_lookup_max,
                             p.num_speculative_tokens, p.max_model_len)
        steps += 1
        draft_steps += bool(draft)
        drafted += len(draft)
        for token in draft:
            if len(emitted) == len(output) or token != output[len(emitted)]:
                break
            emitted.append(token)
            accepted += 1
        if len(emitted) < len(output):
            emitted.append(output[len(emitted)])  # the rejected position's token, or the bonus token
    return steps, draft_steps, drafted, accepted


def random_params(rng) -> NgramParams:
    lo = int(rng.integers(1, 4))
    return NgramParams(lo, int(rng.integers(lo, 6)), int(rng.integers(1, 7)),
                       None if rng.random() < 0.7 else int(rng.integers(10, 60)))


# ------------------------------------------------------------------------------------------ the rule
def test_fast_proposer_equals_the_rule_at_every_prefix():
    rng = np.random.default_rng(0)
    for _ in range(200):
        seq = rng.integers(0, int(rng.integers(2, 6)), size=int(rng.integers(0, 50))).tolist()
        p = random_params(rng)
        proposer = NgramProposer(seq, p)
        for length in range(len(seq) + 1):
            want = slow_propose(seq[:length], p.prompt_lookup_min, p.prompt_lookup_max, p.num_speculative_tokens,
                                p.max_model_len)
            assert proposer.propose(length).tolist() == want
            assert ngram_propose(seq[:length], p).tolist() == want


def test_the_rule_on_vllms_documented_example():
    # vLLM's docstring: [1,2,3,4,2,3], min 2, max 3, k 4: [4,2,3] has no earlier match, [2,3] does -> [4,2,3]
    assert ngram_propose([1, 2, 3, 4, 2, 3], NgramParams(2, 3, 4)).tolist() == [4, 2, 3]
    # the longest n wins over an earlier shorter match; ties go to the earliest occurrence
    assert ngram_propose([7, 1, 9, 5, 1, 9, 6, 5, 1, 9], NgramParams(1, 3, 2)).tolist() == [6, 5]
    assert ngram_propose([1, 9, 5, 1, 9, 6, 1, 9], NgramParams(2, 2, 1)).tolist() == [5]
    # a draft never runs past the context limit
    assert ngram_propose([1, 2, 3, 1, 2], NgramParams(2, 2, 5, max_model_len=6)).tolist() == [3]
    assert ngram_propose([1, 2, 3, 1, 2], NgramParams(2, 2, 5, max_model_len=5)).tolist() == []


# ------------------------------------------------------------------------------------------ the replay
def test_replay_equals_token_by_token_speculative_generation():
    rng = np.random.default_rng(1)
    for _ in range(300):
        vocab = int(rng.integers(2, 8))
        prompt = rng.integers(0, vocab, size=int(rng.integers(0, 30))).tolist()
        output = rng.integers(0, vocab, size=int(rng.integers(0, 40))).tolist()
        if rng.random() < 0.5 and prompt:  # a copy with edits, the correction's shape
            output = [t if rng.random() < 0.8 else int(rng.integers(0, vocab)) for t in prompt]
        p = random_params(rng)
        stats = simulate_lookup(prompt, output, p)
        if not output:
            assert (stats.requests, stats.decode_steps) == (0, 0)
            continue
        steps, draft_steps, drafted, accepted = slow_replay(prompt, output, p)
        assert (stats.decode_steps, stats.draft_steps, stats.drafted_tokens, stats.accepted_tokens) == (
            steps, draft_steps, drafted, accepted)
        assert stats.plain_decode_steps == len(output) - 1
        # every step emits its accepted tokens plus one, except possibly the last (the request ends)
        assert stats.decode_steps + stats.accepted_tokens >= len(output) - 1 >= stats.accepted_tokens


def test_an_exact_copy_is_decoded_k_plus_one_tokens_per_step():
    """Prompt = y with distinct tokens, output = y, min = 2: step 1 has no 2-gram to match (the prompt's
    last token + y0 never occurred), every later step accepts k and adds one."""
    y = list(range(100, 200))
    for k in (1, 3, 8):
        stats = simulate_lookup(y, y, NgramParams(2, 4, k))
        assert stats.decode_steps == 1 + -(-(len(y) - 2) // (k + 1))
        assert stats.accepted_tokens == stats.drafted_tokens - (stats.drafted_tokens - stats.accepted_tokens)
        assert stats.decode_step_reduction == pytest.approx(1 - stats.decode_steps / (len(y) - 1))


def test_batch_sums_requests_and_metrics_name_what_they_measure():
    p = NgramParams(1, 2, 3)
    a = simulate_lookup([1, 2, 3, 4], [1, 2, 3, 4, 9], p)
    b = simulate_lookup([5, 6], [7, 8, 7, 8, 7, 8], p)
    total = simulate_batch([[1, 2, 3, 4], [5, 6]], [[1, 2, 3, 4, 9], [7, 8, 7, 8, 7, 8]], p)
    assert total.decode_steps == a.decode_steps + b.decode_steps
    assert total.per_request_steps == [a.decode_steps, b.decode_steps]
    m = total.as_metrics("ibpo/correction/")
    assert m["ibpo/correction/lookup_tokens_per_decode_step"] == pytest.approx((11 - 2) / total.decode_steps)
    assert LookupStats().decode_step_reduction == 0.0
    with pytest.raises(ValueError, match="2 prompts but 1 outputs"):
        simulate_batch([[1], [2]], [[1]], p)


# ------------------------------------------------------------------------------------------ lossless
def test_one_position_emits_exactly_the_target_distribution():
    rng = np.random.default_rng(2)
    for _ in range(200):
        vocab = int(rng.integers(2, 7))
        p = rng.dirichlet(np.full(vocab, 0.5))
        p[rng.integers(0, vocab)] = 0.0 if rng.random() < 0.2 else p[0]  # zero-probability drafts too
        p /= p.sum()
        for d in range(vocab):
            accept, emitted = emitted_token_distribution(p, d)
            np.testing.assert_allclose(emitted, p, rtol=0, atol=1e-14)
            # the draft is emitted only when accepted: P(emit d) = P(accept)
            assert emitted[d] == pytest.approx(accept, abs=1e-15)


def exact_sequence_law(cond, draft: list[int], vocab: int) -> dict[tuple[int, ...], float]:
    """Law of the first len(draft) + 1 tokens produced by speculative verification of ``draft``, composed
    exactly from the per-position law (each verification position conditions on the tokens emitted before
    it; after a rejection, plain decoding continues)."""
    law: dict[tuple[int, ...], float] = {}

    def walk(prefix: tuple[int, ...], prob: float, on_draft: bool) -> None:
        if len(prefix) == len(draft) + 1:
            law[prefix] = law.get(prefix, 0.0) + prob
            return
        p = cond(prefix)
        i = len(prefix)
        if on_draft and i < len(draft):
            _, emitted = emitted_token_distribution(p, draft[i])
            for v in range(vocab):
                if emitted[v] > 0:
                    walk(prefix + (v,), prob * emitted[v], v == draft[i])
        else:
            for v in range(vocab):
                if p[v] > 0:
                    walk(prefix + (v,), prob * p[v], False)

    walk((), 1.0, True)
    return law


def test_multi_token_verification_keeps_the_sequence_law():
    rng = np.random.default_rng(3)
    vocab, k = 3, 3
    for _ in range(20):
        table = {prefix: rng.dirichlet(np.ones(vocab)) for n in range(k + 1)
                 for prefix in itertools.product(range(vocab), repeat=n)}
        draft = rng.integers(0, vocab, size=k).tolist()
        law = exact_sequence_law(lambda prefix: table[prefix], draft, vocab)
        for seq in itertools.product(range(vocab), repeat=k + 1):
            target = np.prod([table[seq[:i]][seq[i]] for i in range(k + 1)])
            assert law.get(seq, 0.0) == pytest.approx(target, abs=1e-14)


def test_vllm_rejection_sampler_samples_the_target_and_accepts_iff_equal():
    """Monte Carlo of verify_deterministic_draft (vLLM's NO_DRAFT_PROBS kernel logic) against the exact
    law, fixed seed, chi-square; and the coupling: the draft token is emitted iff it was accepted."""
    rng = np.random.default_rng(4)
    vocab, k, draws = 3, 2, 12_000
    table = {prefix: rng.dirichlet(np.ones(vocab)) for n in range(k + 1)
             for prefix in itertools.product(range(vocab), repeat=n)}
    draft = [1, 2]
    assert (vocab, k) == (3, 2)  # the critical value above is for 27 cells
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        # the target's distributions along the draft path (one forward pass scores draft prefixes)
        probs = np.stack([table[tuple(draft[:i])] for i in range(k + 1)])
        u = rng.random(k)
        out = verify_deterministic_draft(probs, draft, u, rng.exponential(size=(k, vocab)), rng.exponential(size=vocab))
        accepted = 0
        while accepted < len(out) - 1 and out[accepted] == draft[accepted]:
            accepted += 1
        # coupling: positions before the last emitted token are accepted drafts; the last is a draft token
        # only if all drafts were accepted (then it is the bonus); a rejection never re-emits its draft
        n_acc = len(out) - 1
        assert out[:n_acc] == draft[:n_acc]
        if n_acc < k:
            assert out[n_acc] != draft[n_acc] and u[n_acc] > table[tuple(draft[:n_acc])][draft[n_acc]]
        # continue plainly to len k + 1 so every sample is a sequence of the same length
        seq = list(out)
        while len(seq) < k + 1:
            seq.append(int(rng.choice(vocab, p=table[tuple(seq)])))
        counts[tuple(seq)] = counts.get(tuple(seq), 0) + 1
    support = list(itertools.product(range(vocab), repeat=k + 1))
    expected = np.array([np.prod([table[s[:i]][s[i]] for i in range(k + 1)]) for s in support]) * draws
    observed = np.array([counts.get(s, 0) for s in support])
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < CHI2_CRIT_0001_DF26  # 27 cells, p = 0.001 (fixed seed: deterministic)


# ------------------------------------------------------------------------------------------ bound, config
def test_correction_max_tokens():
    assert correction_max_tokens(100, 1.5, 64, 4096) == 214
    assert correction_max_tokens(101, 1.5, 0, 4096) == 152  # ceil(151.5)
    assert correction_max_tokens(4000, 2.0, 64, 4096) == 4096  # never above the rollout's bound
    assert correction_max_tokens(0, 2.0, 0, 4096) == 1
    assert correction_max_tokens(100, 0.0, 64, 4096) == 4096  # off
    assert bounded_lengths([10, 20], 1.0, 5, 22).tolist() == [15, 22]
    with pytest.raises(ValueError, match="response_length"):
        correction_max_tokens(10, 1.0, 0, 0)


def test_ngram_params_from_a_speculative_config():
    spec = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4, "num_speculative_tokens": 6}
    assert ngram_params_from_speculative_config(spec, 100) == NgramParams(2, 4, 6, 100)
    assert ngram_params_from_speculative_config({"method": "suffix"}) is None
    assert ngram_params_from_speculative_config(None) is None
    with pytest.raises(ValueError, match="prompt_lookup_min"):
        NgramParams(3, 2, 1)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        NgramParams(1, 2, 0)


# ------------------------------------------------------------------------------------------ vLLM's own code
def vllm_kmp_propose(origin: list[int], min_ngram: int, max_ngram: int, max_model_len: int, k: int) -> list[int]:
    """A line-by-line port of vLLM's ``_find_longest_matched_ngram_and_propose_tokens``
    (vllm/v1/spec_decode/ngram_proposer.py: a KMP over the reversed context, capped at ``max_ngram``, keeping the
    last position in reversed order of the longest match, i.e. its earliest occurrence): the code the rule of
    :func:`slow_propose` restates."""
    total = len(origin)
    if total < min_ngram:
        return []
    k = min(k, max_model_len - total)
    if k <= 0:
        return []
    tokens = origin[::-1]
    lps = [0] * max_ngram
    longest = position = prev = 0
    i = 1
    while i < total:
        if tokens[prev] == tokens[i]:
            prev += 1
            if prev >= longest:
                longest, position = prev, i
            if i < max_ngram:
                lps[i] = prev
            if prev == max_ngram:
                prev = lps[max_ngram - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < min_ngram:
        return []
    start = total - 1 - position + longest
    return origin[start:start + min(k, total - start)]


def test_the_proposer_equals_vllms_kmp_code_at_every_prefix():
    rng = np.random.default_rng(7)
    for _ in range(300):
        seq = rng.integers(0, int(rng.integers(1, 5)), size=int(rng.integers(0, 45))).tolist()
        p = random_params(rng)
        limit = p.max_model_len if p.max_model_len is not None else 10 ** 9
        proposer = NgramProposer(seq, p)
        for length in range(len(seq) + 1):
            want = vllm_kmp_propose(seq[:length], p.prompt_lookup_min, p.prompt_lookup_max, limit,
                                    p.num_speculative_tokens)
            assert proposer.propose(length).tolist() == want
            assert ngram_propose(seq[:length], p).tolist() == want
