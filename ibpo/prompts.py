"""Correction prompt x~ = (x; y_i; y_ref) as chat messages (paper Eq. 13/28, App. C.1 template).

The candidates are shown under neutral labels ("Solution 1", "Solution 2"), target first
(``candidate_order=target_first``, the paper's order) or the references first (``reference_first``: the
corrections of a prompt that share a reference then share the prefix problem + reference, which vLLM's
prefix cache reuses; docs/correction_pass.md), or in random order with ``shuffle_candidates``; a thinking
model's candidates can be shown without their thinking block (``candidate_view=strip_thinking``); a
candidate over the token budget is cut from the middle with a visible marker, never silently. The budget
counts tokens of the candidate *as it will be re-tokenised* in the correction prompt, not of the
generated ids: decoded text can re-tokenise longer (1.55x for a random-token response).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ibpo.options import IBPOConfig

THINK_END = "</think>"
TRUNCATION_MARKER = "\n[... {n} tokens omitted ...]\n"

Message = dict[str, str]


def strip_thinking(text: str) -> str:
    """The part of a response after its last ``</think>`` (the whole text when there is none)."""
    cut = text.rfind(THINK_END)
    return text if cut < 0 else text[cut + len(THINK_END):].lstrip()


def truncate_middle(token_ids: Sequence[int], max_tokens: int) -> tuple[list[int], list[int], int]:
    """Split ``token_ids`` into (head, tail, n_omitted) keeping at most ``max_tokens`` tokens in total.

    ``max_tokens <= 0`` or a short enough sequence keeps everything (tail empty, 0 omitted). The head
    keeps the larger half so a solution's setup survives, the tail keeps its final answer.
    """
    ids = list(token_ids)
    if max_tokens <= 0 or len(ids) <= max_tokens:
        return ids, [], 0
    head_len = (max_tokens + 1) // 2
    tail_len = max_tokens - head_len
    tail = ids[len(ids) - tail_len:] if tail_len else []
    return ids[:head_len], tail, len(ids) - head_len - tail_len


def thinking_end_index(token_ids: Sequence[int], decode: Callable[[list[int]], str]) -> int:
    """Index of the first token after the last ``</think>`` (0 when there is none).

    The smallest k whose prefix ``decode(ids[:k])`` already holds every ``</think>`` of the response,
    found by binary search (the count is monotone in k), so a long response costs O(log n) decodes and a
    marker split across tokens is handled. Text sharing the marker's last token is dropped with it.
    """
    ids = list(token_ids)
    total = decode(ids).count(THINK_END)
    if total == 0:
        return 0
    lo, hi = 0, len(ids)  # invariant: prefix lo lacks a marker, prefix hi holds them all
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if decode(ids[:mid]).count(THINK_END) >= total:
            hi = mid
        else:
            lo = mid
    return hi


def render_candidate(token_ids: Sequence[int], decode: Callable[[list[int]], str], config: IBPOConfig,
                     encode: Callable[[str], list[int]] | None = None) -> str:
    """Text of one candidate as shown in the correction prompt: the view first (``strip_thinking`` drops
    everything up to the last ``</think>``), then middle truncation of what is shown, with a marker, so
    the token budget is spent on the visible text and a thinking block can never leak through the cut.

    With ``encode`` (the run's tokenizer, no special tokens) the shown text is re-tokenised and the cut is
    made on those ids, so the candidate takes at most ``max_candidate_tokens`` tokens of the correction
    prompt however differently its text re-tokenises. Without it the cut is made on the generated ids (for
    callers with no tokenizer, e.g. the simulation). ``max_candidate_tokens = 0`` keeps everything: the
    trainer replaces 0 by the budget it derives at start (``ibpo/correction_lengths.py: correction_budget``).
    """
    ids = list(token_ids)
    if config.candidate_view == "strip_thinking":
        ids = ids[thinking_end_index(ids, decode):]
    if encode is not None:
        text = decode(ids)
        if config.max_candidate_tokens <= 0:
            return text.strip()
        ids = list(encode(text))
    head, tail, omitted = truncate_middle(ids, config.max_candidate_tokens)
    text = decode(head)
    if omitted:
        text = text + TRUNCATION_MARKER.format(n=omitted) + decode(tail)
    return text.strip()


def problem_text(messages: Sequence[Message]) -> str:
    """The problem statement: the content of the last user message of the original prompt x."""
    for message in reversed(list(messages)):
        if message.get("role") == "user":
            return str(message["content"])
    raise ValueError(f"original prompt has no user message: roles {[m.get('role') for m in messages]}")


def build_correction_messages(
    original_messages: Sequence[Message],
    target_text: str,
    reference_texts: Sequence[str],
    config: IBPOConfig,
    rng: np.random.Generator | None = None,
) -> list[Message]:
    """Chat messages of x~ = (x; y; y_ref): system messages of x kept, one user turn with the template.

    ``candidate_order = reference_first`` shows the references before the target, (x; y_ref; y), under the
    same neutral labels. With no reference (``num_references = 0``) the prompt shows the target alone under
    the first label and uses ``config.self_instruction``.
    """
    if config.candidate_order == "reference_first":
        candidates = [*reference_texts, target_text]
    else:
        candidates = [target_text, *reference_texts]
    if config.shuffle_candidates and len(candidates) > 1:
        if rng is None:
            raise ValueError("shuffle_candidates=True needs an rng")
        candidates = [candidates[j] for j in rng.permutation(len(candidates))]
    if len(candidates) > len(config.candidate_labels):
        raise ValueError(f"{len(candidates)} candidates but only {len(config.candidate_labels)} labels")
    blocks = "\n\n".join(
        f"### {label}\n{text}" for label, text in zip(config.candidate_labels, candidates)
    )
    instruction = config.instruction if reference_texts else config.self_instruction
    content = config.template.format(
        instruction=instruction,
        problem=problem_text(original_messages),
        candidates=blocks,
        format_reminder=config.format_reminder,
    )
    system = [dict(m) for m in original_messages if m.get("role") == "system"]
    return system + [{"role": "user", "content": content}]
