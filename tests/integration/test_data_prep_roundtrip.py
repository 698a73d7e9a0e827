"""Round trip: prepared parquet -> verl's RLHFDataset (tokenizer built locally) -> reward_fns.compute_score.

Every ground truth of every prepared fixture file is scored twice: a known-correct response must score 1 and a
wrong one 0. For math the correct response states the reference answer in the form its prompt template asks
for; for code the correct programs below solve the fixture problems.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from data_prep.all import build_all
from data_prep.common import read_verl_parquet

os.environ.setdefault("HF_HUB_OFFLINE", "1")

RAW = Path(__file__).resolve().parents[1] / "fixtures" / "data_prep" / "raw"


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code.strip()}\n```\n"


# problem_id -> (correct program, wrong program), for every code problem in the fixtures
CODE_SOLUTIONS: dict[str, tuple[str, str]] = {
    "1873_A": (
        "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n"
        "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) <= 2 else 'NO')",
        "t = int(input())\nfor _ in range(t):\n    input()\n    print('YES')",
    ),
    "3902": (
        "class Solution:\n    def countPairs(self, nums: List[int], target: int) -> int:\n"
        "        return sum(1 for i in range(len(nums)) for j in range(i + 1, len(nums)) if nums[i] + nums[j] == target)",
        "class Solution:\n    def countPairs(self, nums: List[int], target: int) -> int:\n        return len(nums)",
    ),
    "abc902_b": ("print(input().strip()[::-1])", "print(input().strip())"),
    "abc904_b": (
        "n = int(input())\nprint(max(map(int, input().split())))",
        "n = int(input())\nprint(min(map(int, input().split())))",
    ),
    "abc901_a": ("a, b = map(int, input().split())\nprint(a + b)", "a, b = map(int, input().split())\nprint(a - b)"),
    "3901": (
        "class Solution:\n    def addToEvery(self, nums: List[int], k: int) -> List[int]:\n"
        "        return [x + k for x in nums]",
        "class Solution:\n    def addToEvery(self, nums: List[int], k: int) -> List[int]:\n        return nums",
    ),
    "3708": (
        "class Solution:\n    def zigzagTraversal(self, grid: List[List[int]]) -> List[int]:\n"
        "        order = []\n        for r, row in enumerate(grid):\n"
        "            order += row if r % 2 == 0 else row[::-1]\n        return order[::2]",
        "class Solution:\n    def zigzagTraversal(self, grid: List[List[int]]) -> List[int]:\n"
        "        return [x for row in grid for x in row]",
    ),
}


def math_response(answer: str, template: str) -> str:
    """A response giving ``answer`` the way the row's prompt template asks."""
    if template == "dapo":
        return f"Let me work through it.\nAnswer: {answer}"
    return f"Working through it, the result is \\boxed{{{answer}}}."


def wrong_math_answer(answer: str) -> str:
    return "1" if answer.strip() != "1" else "2"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prepared")
    build_all(RAW, out, allow_partial=True)
    return out


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from verl_cpu.tiny_assets import build_tiny_tokenizer

    return build_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def load_rlhf_dataset(files: list[Path], tokenizer, cache_dir: Path):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 8192,
            "filter_overlong_prompts": True,  # exercised: must drop nothing at this length
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(cache_dir),
        }
    )
    return RLHFDataset([str(f) for f in files], tokenizer, config)


def test_prepared_files_load_in_verl_rlhf_dataset(prepared, tokenizer, tmp_path):
    groups = {
        "math": ["aime25.parquet", "hmmt_feb_2025.parquet", "dapo_math_17k.parquet", "gsm8k_train.parquet"],
        "code": ["lcb_v6.parquet", "lcb_train.parquet"],
    }
    for family, names in groups.items():
        files = [prepared / n for n in names]
        expected = [row for f in files for row in read_verl_parquet(f)]
        dataset = load_rlhf_dataset(files, tokenizer, tmp_path / family)
        assert len(dataset) == len(expected) > 0, family
        for i, row in enumerate(expected):
            item = dataset[i]
            assert item["raw_prompt"] == row["prompt"]
            assert item["data_source"] == row["data_source"]
            assert item["reward_model"]["ground_truth"] == row["reward_model"]["ground_truth"]
            assert item["index"] == row["extra_info"]["index"]
            assert item["extra_info"] == row["extra_info"]
            rendered = tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=False)
            assert row["prompt"][-1]["content"] in rendered


def test_prepared_data_sources_are_known_to_reward_fns(prepared):
    from reward_fns import KNOWN_DATA_SOURCES

    for path in prepared.glob("*.parquet"):
        for row in read_verl_parquet(path):
            assert KNOWN_DATA_SOURCES[row["data_source"]] == row["ability"], (path.name, row["data_source"])


def test_every_math_ground_truth_scores_right_and_wrong(prepared):
    from reward_fns import compute_score

    names = ["aime25.parquet", "hmmt_feb_2025.parquet", "dapo_math_17k.parquet", "gsm8k_train.parquet",
             "gsm8k_test.parquet"]  # fmt: skip
    scored = 0
    for name in names:
        for row in read_verl_parquet(prepared / name):
            gt, info = row["reward_model"]["ground_truth"], row["extra_info"]
            good = compute_score(row["data_source"], math_response(gt, info["template"]), gt, info)
            bad = compute_score(row["data_source"], math_response(wrong_math_answer(gt), info["template"]), gt, info)
            assert good["score"] == 1.0, (name, info["problem_id"], good)
            assert bad["score"] == 0.0, (name, info["problem_id"], bad)
            scored += 1
    assert scored == 4 + 4 + 3 + 3 + 1


def test_dapo_template_rows_score_with_answer_line(tmp_path):
    from data_prep.aime25 import prepare_aime25
    from reward_fns import compute_score

    rows, _ = prepare_aime25(RAW / "MathArena/aime_2025", template="dapo", allow_partial=True)
    for row in rows:
        gt = row["reward_model"]["ground_truth"]
        assert compute_score("aime25", math_response(gt, "dapo"), gt, row["extra_info"])["score"] == 1.0


def test_every_code_ground_truth_scores_right_and_wrong(prepared):
    from reward_fns import compute_score

    rows = read_verl_parquet(prepared / "lcb_v6.parquet") + read_verl_parquet(prepared / "lcb_train.parquet")
    assert {r["extra_info"]["problem_id"] for r in rows} == set(CODE_SOLUTIONS)
    for row in rows:
        correct, wrong = CODE_SOLUTIONS[row["extra_info"]["problem_id"]]
        gt, info = row["reward_model"]["ground_truth"], row["extra_info"]
        good = compute_score(row["data_source"], fenced(correct), gt, info)
        bad = compute_score(row["data_source"], fenced(wrong), gt, info)
        assert good["score"] == 1.0, (info["problem_id"], good)
        assert bad["score"] == 0.0, (info["problem_id"], bad)
        assert set(good) == set(bad) == {"score", "acc", "pred", "verdict"}
