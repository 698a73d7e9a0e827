"""``reward_fns.compute_score`` through verl 0.9.1's real reward machinery: ``get_custom_reward_fn`` loads it from
the config, ``NaiveRewardManager.run_single`` decodes token ids and calls it from the event loop's executor
threads (the path RewardLoopWorker actors take), for math and code rows in the same batch."""

import asyncio

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from reward_fns import RESULT_KEYS, encode_tests


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from verl_cpu.tiny_assets import build_tiny_tokenizer

    return build_tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def make_item(tokenizer, data_source, response, ground_truth, index):
    from verl import DataProto

    prompt_ids = tokenizer("What is 1 + 1?")["input_ids"]
    response_ids = tokenizer(response)["input_ids"]
    prompts = torch.tensor([prompt_ids])
    responses = torch.tensor([response_ids])
    attention = torch.ones(1, len(prompt_ids) + len(response_ids), dtype=torch.long)
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": attention},
        non_tensors={"data_source": np.array([data_source], dtype=object),
                     "reward_model": np.array([{"ground_truth": ground_truth, "style": "rule"}], dtype=object),
                     "extra_info": np.array([{"index": index}], dtype=object)},
    )


def test_naive_reward_manager_calls_compute_score_from_threads(tokenizer):
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": "pkg://reward_fns", "name": "compute_score", "reward_kwargs": {"code_timeout_s": 2.0}}}})
    fn = get_custom_reward_fn(config)
    manager = NaiveRewardManager(config, tokenizer, fn)
    add = encode_tests({"inputs": ["1 2\n"], "outputs": ["3\n"], "fn_name": None})
    rows = [
        ("ibpo/synthetic_arith", "1 + 1 = 2 \\boxed{2}", "2", 1.0),
        ("ibpo/synthetic_arith", "1 + 1 = 3 \\boxed{3}", "2", 0.0),
        ("aime25", "Answer: 70", "70", 1.0),
        ("livecodebench_v6", "```python\na, b = map(int, input().split())\nprint(a + b)\n```", add, 1.0),
        ("livecodebench_train", "```python\nprint(4)\n```", add, 0.0),
    ]
    items = [make_item(tokenizer, src, resp, gt, i) for i, (src, resp, gt, _) in enumerate(rows)]

    async def score_all():
        return await asyncio.gather(*(manager.run_single(item) for item in items))

    outputs = manager.loop.run_until_complete(score_all())
    assert [o["reward_score"] for o in outputs] == [want for *_, want in rows]
    keys = [list(o["reward_extra_info"]) for o in outputs]
    assert all(k[:4] == list(RESULT_KEYS) for k in keys) and len({tuple(k) for k in keys}) == 1
    # verl stacks every extra key with np.array across samples (agent_loop / reward_loop)
    stacked = {k: np.array([o["reward_extra_info"][k] for o in outputs]) for k in keys[0]}
    assert stacked["acc"].dtype.kind == "f" and stacked["verdict"][0] == "correct"
