"""The correction pass's new options against verl's real config and rollout request path (CPU).

1. Composition: the trainer's Hydra config (recipe/ibpo/config/ibpo_trainer.yaml over verl's ppo_trainer)
   takes the new ``ibpo.*`` keys and a vLLM ``speculative_config`` under
   ``actor_rollout_ref.rollout.engine_kwargs.vllm``, verl's own ``RolloutConfig`` keeps it verbatim (what
   verl's vLLM server spreads into the engine arguments), and the start checks pass or name the option.
2. The per-correction bound reaches the rollout request: correction rows built by the trainer's glue,
   dispatched the way verl's agent loop does (``run(sampling_params, **row)``), through the correction
   agent loop, into the CPU ``hf`` server (``verl_cpu/hf_rollout.py``), which generates exactly the bound.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from verl import DataProto

from ibpo.options import IBPOConfig, IBPOConfigError
from ibpo.correction_lengths import AGENT_LOOP_NAME, MAX_TOKENS_KEY
from ibpo.pipeline import CorrectionRequest
from recipe.ibpo.correction import batch as corr
from recipe.ibpo.config import register_config_resolvers
from recipe.ibpo.correction.rollout import SPEC_OPTION, check_correction_rollout, speculative_config_of
from recipe.common.methods import method_options
from verl_cpu.launch import cpu_overrides

SPEC = "{method:ngram,prompt_lookup_min:2,prompt_lookup_max:5,num_speculative_tokens:8}"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from toy_task.synthetic_task import write_task_parquets
    from verl_cpu.tiny_assets import build_tiny_assets

    root = tmp_path_factory.mktemp("bound")
    model = build_tiny_assets(root / "tiny")["model"]
    data = write_task_parquets(root / "data", n_train=8, n_val=4)
    return {"model": model, **data}


def composed(tiny_run, *extra: str):
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer",
                      overrides=[*cpu_overrides(tiny_run["model"], tiny_run["train"], tiny_run["val"]), *extra])
    OmegaConf.resolve(cfg)
    return cfg


def test_new_keys_compose_with_verls_config(tiny_run):
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import RolloutConfig

    cfg = composed(tiny_run, "ibpo.correction_max_tokens_factor=1.5", "ibpo.correction_closing_tokens=32",
                   f"+actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config={SPEC}")
    ibpo = method_options(cfg, "ibpo")
    assert (ibpo.correction_max_tokens_factor, ibpo.correction_closing_tokens) == (1.5, 32)
    assert IBPOConfig().lookup_proxy_interval == ibpo.lookup_proxy_interval == 1
    spec = speculative_config_of(cfg)
    assert spec == {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5, "num_speculative_tokens": 8}
    # verl's rollout dataclass keeps the engine kwargs verbatim: what vllm_async_server spreads into vLLM's args
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout, dataclass_type=RolloutConfig)
    assert dict(rollout.engine_kwargs["vllm"]["speculative_config"]) == spec
    # the CPU demo runs the hf rollout, which would ignore it: named
    with pytest.raises(IBPOConfigError, match="rollout.name='hf'"):
        check_correction_rollout(cfg, ibpo)
    cfg.actor_rollout_ref.rollout.name = "vllm"
    # verl's default disable_log_stats=True would leave the per-step speculation metrics unknown: named
    with pytest.raises(IBPOConfigError, match="disable_log_stats=False"):
        check_correction_rollout(cfg, ibpo)
    cfg.actor_rollout_ref.rollout.disable_log_stats = False
    check_correction_rollout(cfg, ibpo)


def test_a_draft_model_in_the_composed_config_is_named(tiny_run):
    cfg = composed(tiny_run, "actor_rollout_ref.rollout.name=vllm",
                   "+actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config="
                   "{method:draft_model,model:/models/small,num_speculative_tokens:4}")
    with pytest.raises(IBPOConfigError, match=f"{SPEC_OPTION}.method='draft_model'"):
        check_correction_rollout(cfg, method_options(cfg, "ibpo"))


def test_the_bound_reaches_the_hf_servers_request(tiny_run, monkeypatch):
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    from recipe.ibpo.correction.agent_loop import IBPOCorrectionAgentLoop
    from verl_cpu.hf_rollout import HFServer

    with initialize_config_module("verl.trainer.config", version_base=None):
        cfg = compose("ppo_trainer", overrides=[f"actor_rollout_ref.model.path={tiny_run['model']}",
                                                "actor_rollout_ref.rollout.name=hf", "data.max_prompt_length=64",
                                                "data.max_response_length=8"])
    OmegaConf.resolve(cfg)
    server = HFServer(cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model, replica_rank=0, name="hf_bound")
    tok = AutoTokenizer.from_pretrained(tiny_run["model"])

    # the trainer's glue: two wrong targets of 2 and 5 tokens, c = 1, 1 closing token -> bounds 3 and 6
    messages = [[{"role": "user", "content": "What is 3 + 4?"}]] * 2
    raw_prompt = np.empty(2, dtype=object)
    raw_prompt[0], raw_prompt[1] = messages
    gen_batch = DataProto.from_dict(non_tensors={"raw_prompt": raw_prompt, "uid": np.array(["a", "b"], dtype=object)})
    requests = [CorrectionRequest(0, (), messages[0], "a"), CorrectionRequest(1, (), messages[1], "b")]
    corr_batch = corr.build_correction_gen_batch(gen_batch, requests)
    bounds = corr.attach_length_bound(corr_batch, requests, [[5, 6], [5, 6, 7, 8, 9]],
                                      IBPOConfig(correction_max_tokens_factor=1.0, correction_closing_tokens=1),
                                      response_length=8)
    assert bounds.tolist() == [3, 6]
    assert list(corr_batch.non_tensor_batch["agent_name"]) == [AGENT_LOOP_NAME] * 2

    # verl's single-turn loop hands sampling_params unchanged to the server; stand in for its tokenisation
    async def single_turn(self, sampling_params, **kwargs):
        ids = tok.apply_chat_template(list(kwargs["raw_prompt"]), add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return await server.generate(prompt_ids=list(ids), sampling_params=sampling_params, request_id="r")

    monkeypatch.setattr(SingleTurnAgentLoop, "run", single_turn)
    loop = object.__new__(IBPOCorrectionAgentLoop)
    greedy = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}

    async def dispatch():  # verl agent_loop.py:645: kwargs = {k: v[i] for k, v in non_tensor_batch.items()}
        rows = corr_batch.non_tensor_batch
        outs = [loop.run(dict(greedy), **{k: v[i] for k, v in rows.items() if k != "agent_name"})
                for i in range(len(corr_batch))]
        unbounded = loop.run(dict(greedy), raw_prompt=messages[0])
        return await asyncio.gather(*outs, unbounded)

    first, second, unbounded = asyncio.run(dispatch())
    assert MAX_TOKENS_KEY in corr_batch.non_tensor_batch
    assert len(unbounded.token_ids) == 8  # the rollout's own response_length (greedy: this prompt never hits EOS)
    assert (len(first.token_ids), len(second.token_ids)) == (3, 6)
    assert first.token_ids == unbounded.token_ids[:3]  # same greedy path, cut by the bound
