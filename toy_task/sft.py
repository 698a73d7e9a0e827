"""What both toy tasks' warm starts share: the right-padding collate of an SFT batch and the sampled accuracy of
a model on verl rows through the CPU rollout generator (``verl_cpu.hf_rollout``). Neither task module imports the
other; both import this one."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import torch

ScoreFn = Callable[[str, str, str], float]  # (data_source, solution_str, ground_truth) -> score


def collate(examples: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch of ``(input_ids, labels)``."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (ids, lab) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(lab)] = torch.tensor(lab)
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


def default_score_fn() -> ScoreFn:
    """The project's scorer, ``reward_fns.compute_score`` (its ``score`` when it returns a dict)."""
    from reward_fns import compute_score

    def score(data_source: str, solution_str: str, ground_truth: str) -> float:
        result = compute_score(data_source, solution_str, ground_truth)
        return float(result["score"] if isinstance(result, dict) else result)

    return score


def sampled_accuracy(
    model_dir: str | Path,
    rows: list[dict],
    samples_per_prompt: int = 8,
    temperature: float = 1.0,
    max_tokens: int = 16,
    seed: int = 0,
    score_fn: Optional[ScoreFn] = None,
) -> dict[str, float]:
    """Per-sample accuracy of ``model_dir`` on verl ``rows`` under sampling, through the rollout generator.

    Also reports the fraction of prompts whose samples mix right and wrong answers (the groups GRPO
    and IBPO learn from).
    """
    from transformers import AutoTokenizer

    from verl_cpu.hf_rollout import GenRequest, HFGenerator, parse_sampling_spec

    score_fn = score_fn or default_score_fn()
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    generator = HFGenerator.from_pretrained(str(model_dir))
    spec = parse_sampling_spec({"temperature": temperature, "top_p": 1.0, "top_k": -1})
    requests, owners = [], []
    for row_idx, row in enumerate(rows):
        prompt = list(
            tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)["input_ids"]
        )
        for _ in range(samples_per_prompt):
            requests.append(GenRequest(prompt_ids=prompt, spec=spec, max_tokens=max_tokens, want_logprobs=False))
            owners.append(row_idx)
    results = generator.generate_batch(requests)
    per_row: dict[int, list[float]] = {}
    for owner, result in zip(owners, results, strict=True):
        text = tokenizer.decode(result.token_ids, skip_special_tokens=True)
        row = rows[owner]
        per_row.setdefault(owner, []).append(score_fn(row["data_source"], text, row["reward_model"]["ground_truth"]))
    scores = [s for group in per_row.values() for s in group]
    mixed = sum(1 for group in per_row.values() if 0 < sum(group) < len(group))
    return {"accuracy": sum(scores) / len(scores), "mixed_group_fraction": mixed / len(per_row), "samples": len(scores)}
