"""The synthetic arithmetic task: rows, verl's dataset on them, scoring, and the SFT warm start."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from toy_task.synthetic_task import (  # noqa: E402
    DATA_SOURCE,
    MAX_OPERAND,
    ArithProblem,
    encode_sft_example,
    problem_row,
    sample_problems,
    sft_warm_start,
    write_task_parquets,
)
from toy_task.sft import sampled_accuracy  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    from verl_cpu.tiny_assets import build_tiny_assets

    return build_tiny_assets(tmp_path_factory.mktemp("tiny"))


def test_problems_are_seeded_and_answers_correct():
    problems = sample_problems(200, seed=5)
    assert problems == sample_problems(200, seed=5) and problems != sample_problems(200, seed=6)
    for p in problems:
        assert 0 <= p.a <= MAX_OPERAND and 0 <= p.b <= MAX_OPERAND and p.op in ("+", "-")
        assert p.answer == eval(f"{p.a} {p.op} {p.b}")
    assert {p.op for p in problems} == {"+", "-"} and any(p.answer < 0 for p in problems)
    assert ArithProblem(7, "-", 9).solution == "7 - 9 = -2 \\boxed{-2}"


def test_rows_follow_the_agreed_schema():
    from reward_fns import KNOWN_DATA_SOURCES

    row = problem_row(ArithProblem(3, "+", 4), "train", 5)
    assert row["data_source"] == DATA_SOURCE == "ibpo/synthetic_arith" and KNOWN_DATA_SOURCES[DATA_SOURCE] == "math"
    assert row["reward_model"] == {"style": "rule", "ground_truth": "7"}
    (message,) = row["prompt"]
    assert (
        message["role"] == "user"
        and message["content"].startswith("What is 3 + 4?")
        and "\\boxed{}" in message["content"]
    )
    assert row["extra_info"]["index"] == 5 and row["extra_info"]["split"] == "train" and row["ability"] == "math"


def test_reward_fn_scores_the_task(tiny):
    from reward_fns import compute_score

    p = ArithProblem(8, "-", 9)
    right = compute_score(DATA_SOURCE, p.solution, str(p.answer))
    wrong = compute_score(DATA_SOURCE, "8 - 9 = 1 \\boxed{1}", str(p.answer))
    assert right["score"] == 1.0 and wrong["score"] == 0.0


def test_parquets_load_in_verls_rlhf_dataset(tmp_path, tiny):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    paths = write_task_parquets(tmp_path, n_train=12, n_val=4, seed=3)
    tokenizer = AutoTokenizer.from_pretrained(tiny["tokenizer"])
    config = OmegaConf.create({"max_prompt_length": 64, "prompt_key": "prompt", "filter_overlong_prompts": True})
    train = RLHFDataset(data_files=paths["train"], tokenizer=tokenizer, config=config)
    val = RLHFDataset(data_files=paths["val"], tokenizer=tokenizer, config=config)
    assert (len(train), len(val)) == (12, 4)  # no prompt was filtered as overlong
    item = train[0]
    assert item["data_source"] == DATA_SOURCE and item["raw_prompt"][0]["role"] == "user"
    assert int(item["reward_model"]["ground_truth"]) == sample_problems(12, 3)[0].answer
    val_questions = [r["extra_info"]["question"] for r in (val[i] for i in range(4))]
    assert val_questions == [p.question for p in sample_problems(4, 4)]  # val uses seed + 1


def test_sft_example_trains_on_the_answer_only(tiny):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny["tokenizer"])
    p = ArithProblem(2, "+", 3)
    ids, labels = encode_sft_example(tokenizer, p, "What is 2 + 3?")
    n_prompt = sum(1 for x in labels if x == -100)
    assert labels[:n_prompt] == [-100] * n_prompt and -100 not in labels[n_prompt:]
    assert ids[n_prompt:] == labels[n_prompt:]
    assert tokenizer.decode(ids[:n_prompt]).endswith("<|im_start|>assistant\n")
    assert tokenizer.decode(labels[n_prompt:]) == p.solution + "<|im_end|>"


def test_short_warm_start_lowers_the_loss_and_saves_a_loadable_model(tmp_path, tiny):
    from verl_cpu.hf_rollout import HFGenerator

    stats = sft_warm_start(tiny["model"], tmp_path / "sft", steps=40, batch_size=16)
    assert stats["last_loss"] < 0.5 * stats["first_loss"]
    gen = HFGenerator.from_pretrained(str(tmp_path / "sft"))
    assert gen.eos_ids == {2} and (tmp_path / "sft" / "tokenizer.json").exists()


def test_sampled_accuracy_aggregates_scores_per_group(tiny):
    problems = [ArithProblem(1, "+", 1), ArithProblem(2, "+", 3), ArithProblem(9, "-", 0)]  # distinct answers
    rows = [problem_row(p, "val", i) for i, p in enumerate(problems)]
    calls = []

    def first_sample_right(data_source, solution, ground_truth):
        calls.append((data_source, ground_truth))
        return 1.0 if sum(1 for c in calls if c[1] == ground_truth) == 1 else 0.0  # 1 of 4 per prompt

    stats = sampled_accuracy(tiny["model"], rows, samples_per_prompt=4, max_tokens=4, score_fn=first_sample_right)
    assert stats == {"accuracy": 0.25, "mixed_group_fraction": 1.0, "samples": 12}
    assert {c[0] for c in calls} == {DATA_SOURCE} and len(calls) == 12
