"""Draft-free speculative decoding of the correction pass, simulated exactly on realised samples.

vLLM's ``ngram`` method (prompt lookup) drafts from the request's own context: after every step it looks
for the longest n-gram, n in [``prompt_lookup_min``, ``prompt_lookup_max``], that ends the context
(prompt + tokens generated so far) and occurs earlier in it, takes its *earliest* earlier occurrence and
proposes up to ``num_speculative_tokens`` tokens that followed it (never past the end of the context,
never past ``max_model_len``). The target model then scores the draft in one forward pass.

Why a simulation on realised samples is exact (docs/correction_pass.md, "Lossless"): with a
deterministic draft d, vLLM's rejection sampler accepts d with probability p(d) and otherwise emits a
token drawn from p restricted to tokens ≠ d (:func:`verify_deterministic_draft`). So the emitted token
has distribution p, and *the draft token is accepted iff the emitted token equals it*. The speculative
run's output therefore has the policy's distribution, and the number of forward passes is a
deterministic function of that output (:func:`simulate_lookup`). A correction sampled without
speculation is a sample from the same distribution, so replaying the proposer on it gives the exact
step count a speculative run would have needed for that output.

``suffix`` (vLLM's Arctic-Inference suffix trees, which also draft from earlier *responses* of other
requests and score paths by frequency) is not replicated here; the GPU benchmark measures it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from option_types import matches

# vLLM's draft-free methods; the lossless argument above covers both (their drafts are token ids, no q).
LOOKUP_METHODS = ("ngram", "suffix")


@dataclass(frozen=True)
class NgramParams:
    """vLLM ``speculative_config`` fields of the ``ngram`` method."""

    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 5
    num_speculative_tokens: int = 8
    max_model_len: int | None = None  # drafts stop at the context limit (None: unbounded)

    def __post_init__(self) -> None:
        for name in ("prompt_lookup_min", "prompt_lookup_max", "num_speculative_tokens", "max_model_len"):
            value = getattr(self, name)
            if not (value is None and name == "max_model_len") and not matches(value, int):
                raise ValueError(f"NgramParams.{name}={value!r} must be an integer")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"NgramParams.max_model_len={self.max_model_len} must be >= 1 (None: unbounded)")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError(f"need 1 <= prompt_lookup_min ({self.prompt_lookup_min}) <= prompt_lookup_max "
                             f"({self.prompt_lookup_max})")
        if self.num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {self.num_speculative_tokens}")


# -------------------------------------------------------------------------------------------- the rule
def ngram_propose(context: Sequence[int], params: NgramParams) -> np.ndarray:
    """vLLM's ngram proposal for ``context`` (prompt + generated tokens), straight from the rule.

    Longest n in [min, max] such that ``context[-n:]`` also starts at some j < len - n; the smallest such
    j; the draft is ``context[j + n : j + n + k]`` with k = min(num_speculative_tokens, max_model_len -
    len). O(len · max) per call: the reference; :class:`NgramProposer` is the fast equivalent.
    """
    ctx = np.asarray(context, dtype=np.int64)
    total = ctx.size
    k = params.num_speculative_tokens
    if params.max_model_len is not None:
        k = min(k, params.max_model_len - total)
    if total < params.prompt_lookup_min or k <= 0:
        return ctx[:0]
    for n in range(min(params.prompt_lookup_max, total - 1), params.prompt_lookup_min - 1, -1):
        suffix = ctx[total - n:]
        windows = np.lib.stride_tricks.sliding_window_view(ctx[: total - 1], n)  # starts 0 .. total - n - 1
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[0]) + n
            return ctx[start: min(start + k, total)]
    return ctx[:0]


class NgramProposer:
    """The ngram proposal at every prefix of one fixed token sequence (prompt + realised output), fast.

    For each n the earliest start of every n-gram is precomputed (exact n-gram ids by rank compression,
    then ``np.unique``): the suffix n-gram of a prefix of length T occurs earlier iff its earliest start
    in the whole sequence is < T - n (an earliest start is never after the suffix's own start T - n, so
    later tokens of the sequence cannot change the answer).
    """

    def __init__(self, sequence: Sequence[int], params: NgramParams) -> None:
        self.seq = np.asarray(sequence, dtype=np.int64)
        self.params = params
        self._first_start: dict[int, np.ndarray] = {}
        size = self.seq.size
        if size == 0:
            return
        # exact n-gram ids by rank compression: ids_1 = rank of the token; ids_n[s] = rank of the pair
        # (ids_{n-1}[s], ids_1[s + n - 1]), so equal ids <=> equal n-grams (no hashing, no collisions)
        _, unigram = np.unique(self.seq, return_inverse=True)
        unigram = np.asarray(unigram, dtype=np.int64).reshape(-1)
        ids = unigram
        for n in range(1, params.prompt_lookup_max + 1):
            if n > 1:
                if size < n:
                    break
                pair = ids[: size - n + 1] * (int(unigram.max()) + 1) + unigram[n - 1:]
                _, ids = np.unique(pair, return_inverse=True)
                ids = np.asarray(ids, dtype=np.int64).reshape(-1)
            if n >= params.prompt_lookup_min:
                _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
                # earliest start of the n-gram that starts at s, for every start s
                self._first_start[n] = first[np.asarray(inverse).reshape(-1)]

    def propose(self, length: int) -> np.ndarray:
        """The draft vLLM would propose after the first ``length`` tokens of the sequence (0 <= ``length`` <= its
        size: a longer prefix is not known)."""
        if not (matches(length, int) and 0 <= length <= self.seq.size):
            raise ValueError(f"length={length!r}: a prefix of the {self.seq.size}-token sequence needs 0 <= length "
                             f"<= {self.seq.size}")
        p = self.params
        k = p.num_speculative_tokens
        if p.max_model_len is not None:
            k = min(k, p.max_model_len - length)
        if length < p.prompt_lookup_min or k <= 0:
            return self.seq[:0]
        for n in range(min(p.prompt_lookup_max, length - 1), p.prompt_lookup_min - 1, -1):
            first = int(self._first_start[n][length - n])
            if first < length - n:
                start = first + n
                return self.seq[start: min(start + k, length)]
        return self.seq[:0]


# -------------------------------------------------------------------------------------------- simulation
@dataclass
class LookupStats:
    """Forward passes of one or more requests' decode, with and without lookup drafts.

    ``output_tokens``: tokens generated; ``plain_decode_steps``: forward passes after the prefill without
    speculation (output_tokens - 1 per request: the prefill emits the first token);
    ``decode_steps``: forward passes with lookup (each verifies the current draft, possibly empty, and
    emits the accepted draft tokens plus one); ``drafted_tokens`` / ``accepted_tokens``: draft tokens
    proposed / accepted; ``draft_steps``: steps that verified a non-empty draft.
    """

    requests: int = 0
    output_tokens: int = 0
    plain_decode_steps: int = 0
    decode_steps: int = 0
    draft_steps: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    per_request_steps: list[int] = field(default_factory=list)

    def __add__(self, other: "LookupStats") -> "LookupStats":
        return LookupStats(*(getattr(self, f) + getattr(other, f) for f in (
            "requests", "output_tokens", "plain_decode_steps", "decode_steps", "draft_steps", "drafted_tokens",
            "accepted_tokens", "per_request_steps")))

    @property
    def decode_step_reduction(self) -> float:
        """1 - decode_steps / plain_decode_steps: the share of decode forward passes lookup saves."""
        return 1.0 - self.decode_steps / self.plain_decode_steps if self.plain_decode_steps else 0.0

    @property
    def tokens_per_decode_step(self) -> float:
        """Tokens emitted per decode forward pass (1 without speculation)."""
        return (self.output_tokens - self.requests) / self.decode_steps if self.decode_steps else 0.0

    @property
    def accepted_per_draft_step(self) -> float:
        """Draft tokens accepted per verification of a non-empty draft (vLLM's mean acceptance length - 1)."""
        return self.accepted_tokens / self.draft_steps if self.draft_steps else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted over proposed draft tokens."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    def as_metrics(self, prefix: str) -> dict[str, float]:
        """The four rates as metrics; a rate over an empty set (no decode step, no draft) is left out, not 0 (the
        properties' 0 would read as "nothing saved" or "none accepted")."""
        rates = ((self.plain_decode_steps, "decode_step_reduction", self.decode_step_reduction),
                 (self.decode_steps, "tokens_per_decode_step", self.tokens_per_decode_step),
                 (self.draft_steps, "accepted_per_draft_step", self.accepted_per_draft_step),
                 (self.drafted_tokens, "acceptance_rate", self.acceptance_rate))
        return {f"{prefix}lookup_{name}": value for denominator, name, value in rates if denominator}


def simulate_lookup(prompt: Sequence[int], output: Sequence[int], params: NgramParams,
                    proposer: NgramProposer | None = None) -> LookupStats:
    """Replay vLLM's ngram speculation on one realised request (prompt ids, generated ids).

    The prefill emits ``output[0]``. Then, with t tokens generated, the draft is proposed from
    prompt + output[:t]; its accepted length a is the length of its longest prefix equal to output[t:]
    (lossless rejection: accepted iff equal, :func:`verify_deterministic_draft`); the step emits
    min(a + 1, len(output) - t) tokens (the request stops at its last token, EOS or max_tokens).
    """
    prompt = np.asarray(prompt, dtype=np.int64)
    out = np.asarray(output, dtype=np.int64)
    n = int(out.size)
    stats = LookupStats(requests=1, output_tokens=n, plain_decode_steps=max(n - 1, 0))
    if n == 0:
        stats.requests = 0
        stats.per_request_steps = [0]
        return stats
    if proposer is None:
        proposer = NgramProposer(np.concatenate([prompt, out]), params)
    base = prompt.size
    t = 1
    while t < n:
        draft = proposer.propose(base + t)
        remaining = n - t
        d = int(draft.size)
        if d:
            m = min(d, remaining)
            neq = np.flatnonzero(draft[:m] != out[t: t + m])
            a = int(neq[0]) if neq.size else m
            stats.draft_steps += 1
            stats.drafted_tokens += d
            stats.accepted_tokens += min(a, remaining)
        else:
            a = 0
        t += min(a + 1, remaining)
        stats.decode_steps += 1
    stats.per_request_steps = [stats.decode_steps]
    return stats


def simulate_batch(prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]],
                   params: NgramParams) -> LookupStats:
    """:func:`simulate_lookup` summed over requests."""
    if len(prompts) != len(outputs):
        raise ValueError(f"{len(prompts)} prompts but {len(outputs)} outputs")
    total = LookupStats()
    for prompt, output in zip(prompts, outputs):
        total = total + simulate_lookup(prompt, output, params)
    return total


def batch_decode_steps(per_request_steps: Sequence[int]) -> int:
    """Forward passes of a batch decoded together: the longest request's (every pass serves every
    unfinished request; with continuous batching and no memory pressure, the batch's wall time in
    decode steps is set by its slowest request)."""
    return int(max(per_request_steps, default=0))


# -------------------------------------------------------------------------------------------- acceptance
def verify_deterministic_draft(target_probs: np.ndarray, draft: Sequence[int], uniforms: Sequence[float],
                               recovered_noise: np.ndarray, bonus_noise: np.ndarray) -> list[int]:
    """vLLM's rejection sampler for a draft without draft probabilities (``NO_DRAFT_PROBS``: ngram, suffix).

    ``target_probs``: (len(draft) + 1, V), the target's next-token distributions after each draft prefix
    (row i conditions on draft[:i]). Position i accepts draft[i] iff p_i(draft[i]) >= u_i (draft
    probability 1); on the first rejection it emits the recovered token argmax_v p_i(v)·1[v ≠ draft[i]] /
    e_v (``recovered_noise[i]``: i.i.d. Exp(1), the exponential race, a draw from p_i restricted to
    v ≠ draft[i]) and stops; if all are accepted it appends the bonus token drawn from the last row
    (``bonus_noise``, same race). Returns the emitted tokens.
    """
    probs = np.asarray(target_probs, dtype=np.float64)
    out: list[int] = []
    for i, token in enumerate(draft):
        p = probs[i]
        if p[token] >= uniforms[i]:
            out.append(int(token))
            continue
        masked = p.copy()
        masked[token] = 0.0
        out.append(int(np.argmax(masked / recovered_noise[i])))
        return out
    out.append(int(np.argmax(probs[len(draft)] / bonus_noise)))
    return out


def emitted_token_distribution(p: np.ndarray, draft_token: int) -> tuple[float, np.ndarray]:
    """Exact law of one verification position of :func:`verify_deterministic_draft` with target p and a
    deterministic draft d: (P(accept) = p(d), distribution of the emitted token). On rejection the race
    draws v ≠ d with probability p(v) / (1 - p(d)); so P(emit v) = p(d)·1[v = d] + (1 - p(d))·p(v)1[v ≠ d]
    / (1 - p(d)) = p(v): lossless, and the emitted token equals d iff the draft was accepted."""
    p = np.asarray(p, dtype=np.float64)
    accept = float(p[draft_token])
    rest = p.copy()
    rest[draft_token] = 0.0
    emitted = np.zeros_like(p)
    emitted[draft_token] = accept
    if accept < 1.0:
        emitted += (1.0 - accept) * rest / rest.sum()
    return accept, emitted


# -------------------------------------------------------------------------------------------- vLLM config
def ngram_params_from_speculative_config(spec: Mapping[str, Any] | None,
                                         max_model_len: int | None = None) -> NgramParams | None:
    """The proposer parameters of a vLLM ``speculative_config`` mapping with ``method: ngram`` (None for
    no config or another method). The start check requires all three fields, so vLLM's version-dependent
    defaults never decide the window."""
    if not spec or spec.get("method") != "ngram":
        return None
    fields = ("prompt_lookup_min", "prompt_lookup_max", "num_speculative_tokens")
    for name in fields:
        if not matches(spec.get(name), int):
            raise ValueError(f"speculative_config.{name}={spec.get(name)!r} must be set to an integer (method ngram)")
    return NgramParams(*(int(spec[name]) for name in fields), max_model_len)


__all__ = ["LOOKUP_METHODS", "LookupStats", "NgramParams", "NgramProposer", "batch_decode_steps",
           "emitted_token_distribution", "ngram_params_from_speculative_config",
           "ngram_propose", "simulate_batch", "simulate_lookup", "verify_deterministic_draft"]
