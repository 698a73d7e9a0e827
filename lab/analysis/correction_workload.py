"""A synthetic training step's correction workload, for the correction-pass benchmarks (docs/correction_pass.md).

``P`` prompts × ``G`` responses of ``L`` tokens of Zipf-distributed words (text, so it re-tokenises
like generated text does), the first ``num_correct`` of each group verified correct; the correction
prompts come from the project's own :func:`ibpo.pipeline.plan_corrections` with the given layout
options and are tokenised through the tokenizer's chat template, as verl's agent loop does. Used by
``lab/scripts/bench_correction_prompts.py`` (CPU proxy of prefix-cache reuse) and
``lab/scripts/bench_correction_pass.py`` (vLLM on a GPU).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ibpo.options import IBPOConfig
from ibpo.pipeline import CorrectionRequest, plan_corrections

# Layouts compared by the benchmarks: name -> IBPO options.
LAYOUTS: dict[str, dict] = {
    "target_first": {"candidate_order": "target_first"},
    "target_first+shuffle": {"candidate_order": "target_first", "shuffle_candidates": True},
    "target_first+per_group": {"candidate_order": "target_first", "reference_rule": "per_group"},
    "reference_first": {"candidate_order": "reference_first"},
    "reference_first+per_group": {"candidate_order": "reference_first", "reference_rule": "per_group"},
}

WORDS = (
    "the answer is we need to compute first then so therefore let us check step sum product of and a an "
    "number value equation solve for x y z total each case since because which gives equals thus hence "
    "now consider term factor divide multiply add subtract result final box remainder prime even odd"
).split()


def build_tokenizer(out_dir: str | os.PathLike):
    """The project's locally built chat tokenizer (``verl_cpu.tiny_assets``: byte-level BPE, ChatML)."""
    from verl_cpu.tiny_assets import build_tiny_tokenizer

    return build_tiny_tokenizer(Path(out_dir))


def chat_prompt_ids(tokenizer, messages: Sequence[dict]) -> list[int]:
    """Token ids of ``messages`` through the chat template with the generation prompt (verl's agent loop)."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return list(tokenizer.encode(text, add_special_tokens=False))


def zipf_text_ids(tokenizer, num_tokens: int, rng: np.random.Generator, exponent: float = 1.2) -> list[int]:
    """``num_tokens`` token ids of text made of Zipf-distributed words and digits (a response's stand-in)."""
    ids: list[int] = []
    while len(ids) < num_tokens:
        ranks = rng.zipf(exponent, size=256)
        words = [WORDS[(r - 1) % len(WORDS)] if r <= 4 * len(WORDS) else str(int(r) % 1000) for r in ranks]
        ids.extend(tokenizer.encode(" " + " ".join(words), add_special_tokens=False))
    return ids[:num_tokens]


@dataclass
class Workload:
    """One step: main prompts (P·G rows, group-major), response ids, correctness, group ids."""

    main_messages: list[list[dict]]
    response_ids: list[list[int]]
    is_correct: list[bool]
    group_ids: list[int]


def build_workload(tokenizer, num_prompts: int, group_size: int, num_correct: int, response_tokens: int,
                   problem_words: int = 60, seed: int = 0) -> Workload:
    """``num_prompts`` problems × ``group_size`` responses of ``response_tokens`` tokens, ``num_correct``
    correct per group."""
    if not 0 <= num_correct <= group_size:
        raise ValueError(f"num_correct={num_correct} must be in [0, group_size={group_size}]")
    rng = np.random.default_rng(seed)
    messages, responses, correct, groups = [], [], [], []
    for p in range(num_prompts):
        problem = f"Problem {p}: " + " ".join(rng.choice(WORDS, size=problem_words)) + " Put the answer in \\boxed{}."
        for g in range(group_size):
            messages.append([{"role": "user", "content": problem}])
            responses.append(zipf_text_ids(tokenizer, response_tokens, rng))
            correct.append(g < num_correct)
            groups.append(p)
    return Workload(messages, responses, correct, groups)


def correction_requests(tokenizer, workload: Workload, layout: dict, max_candidate_tokens: int,
                        num_references: int = 1, seed: int = 0) -> list[CorrectionRequest]:
    """The step's correction requests under ``layout`` (IBPO options), through ``plan_corrections`` with the
    tokenizer's decode/encode, so candidates are cut to ``max_candidate_tokens`` re-tokenised tokens."""
    config = IBPOConfig(num_references=num_references, correct_groups="all",  # every wrong response's request
                        max_candidate_tokens=max_candidate_tokens, seed=seed, **layout)

    def decode(ids):
        return tokenizer.decode(list(ids), skip_special_tokens=True)

    def encode(text):
        return tokenizer.encode(text, add_special_tokens=False)

    return plan_corrections(workload.group_ids, workload.is_correct, workload.main_messages,
                            workload.response_ids, decode, config, step=0, encode=encode)


def distinct_references_per_prompt(requests: Sequence[CorrectionRequest]) -> float:
    """Mean number of distinct reference sets among the corrections of a prompt."""
    by_group: dict = {}
    for req in requests:
        by_group.setdefault(req.group_id, set()).add(req.reference_rows)
    return float(np.mean([len(s) for s in by_group.values()])) if by_group else 0.0


__all__ = ["LAYOUTS", "Workload", "build_tokenizer", "build_workload", "chat_prompt_ids", "correction_requests",
           "distinct_references_per_prompt", "zipf_text_ids"]


if __name__ == "__main__":
    sys.exit('lab.analysis.correction_workload builds benchmark workloads, it is not a command: '
             'run `python lab/scripts/bench_correction_prompts.py` (CPU) or `python lab/scripts/bench_correction_pass.py` (GPU)')
