"""Fast tier: the trainer's IBPO step on hand-built verl DataProtos, without Ray.

A stand-in rollout manager answers ``generate_sequences`` the way verl's agent loop does (left-padded
prompts, right-padded responses, ``rm_scores`` on the last response token, input non-tensor keys not
echoed). Everything else is the real code: ``RayIBPOTrainer.ibpo_correction_pass``, the DataProto glue,
verl's ``DataProto`` ops and verl's ``compute_advantage`` dispatching to the registered ``ibpo``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

import ibpo.verl_plugin  # noqa: F401  (registration; the entry point does this under `import verl` too)
from ibpo.config import IBPOConfig
from recipe.ibpo import correction as corr
from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer
from recipe.ibpo.setup_checks import IBPOSetupError, check_trainer_config, ibpo_config_from

PROMPT_LEN, RESP_LEN = 24, 6
CORRECT = [7, 7, 7]  # token ids of a "correct" response in this toy world


class FakeTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids)

    def encode(self, text, add_special_tokens=False):
        return text.split()


def gen_output_for(responses: list[list[int]], reward_fn) -> DataProto:
    """What verl's agent loop returns for these responses (padded widths, streaming reward)."""
    n = len(responses)
    prompts = torch.zeros(n, PROMPT_LEN, dtype=torch.long)
    resp = torch.zeros(n, RESP_LEN, dtype=torch.long)
    resp_mask = torch.zeros(n, RESP_LEN, dtype=torch.long)
    rm = torch.zeros(n, RESP_LEN)
    for i, r in enumerate(responses):
        resp[i, : len(r)] = torch.tensor(r)
        resp_mask[i, : len(r)] = 1
        if r:
            rm[i, len(r) - 1] = reward_fn(r)
    attention = torch.cat([torch.ones(n, PROMPT_LEN, dtype=torch.long), resp_mask], dim=1)
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": resp, "response_mask": resp_mask,
                 "input_ids": torch.cat([prompts, resp], 1), "attention_mask": attention,
                 "position_ids": torch.cumsum(attention, 1) - 1, "rm_scores": rm,
                 "rollout_log_probs": torch.zeros(n, RESP_LEN)},
        non_tensors={"acc": np.array([float(reward_fn(r)) if r else 0.0 for r in responses]),
                     "__num_turns__": np.full(n, 2), "multi_modal_inputs": np.array([{} for _ in range(n)], dtype=object)},
    )


def score(r: list[int]) -> float:
    return 1.0 if r == CORRECT else 0.0


class FakeRolloutManager:
    """Corrections: a prompt whose first candidate ends in 9 is 'fixed' locally; one ending in 8 is rewritten."""

    def __init__(self):
        self.calls: list[DataProto] = []

    def generate_sequences(self, batch: DataProto) -> DataProto:
        self.calls.append(batch)
        outs = []
        for messages in batch.non_tensor_batch["raw_prompt"]:
            text = messages[-1]["content"]
            target = text.split("### Solution 1\n")[1].split("\n")[0].split()
            if target[-1] == "9":
                outs.append(CORRECT)  # local repair of [7, 7, 9]
            elif target[-1] == "8":
                outs.append(CORRECT)  # "copy" of the reference: far from [1, 2, 8]
            else:
                outs.append([5])
        out = gen_output_for(outs, score)
        out.meta_info["timing"] = {"agent_loop/generate_sequences/mean": 0.0}
        return out


def make_trainer(ibpo_options: dict, n: int = 4, mini_batch: int = 2) -> RayIBPOTrainer:
    trainer = RayIBPOTrainer.__new__(RayIBPOTrainer)  # no Ray: only what the IBPO step touches
    trainer.config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": n, "agent": {"num_workers": 2}, "prompt_length": 4096},
                              "actor": {"ppo_mini_batch_size": mini_batch}},
        "algorithm": {"adv_estimator": "ibpo"}, "ibpo": ibpo_options,
        "data": {"max_prompt_length": 64, "max_response_length": RESP_LEN},
        "reward": {"reward_model": {"enable": False}},
    })
    trainer.ibpo = ibpo_config_from(trainer.config)
    trainer.tokenizer = FakeTokenizer()
    trainer.async_rollout_manager = FakeRolloutManager()
    trainer.global_steps = 1
    return trainer


def main_step(trainer: RayIBPOTrainer, responses: list[list[int]], n: int):
    """The first half of RayIBPOTrainer.fit's step: batch, gen batch, generation, correction pass, union."""
    prompts = len(responses) // n
    batch = DataProto.from_dict(
        tensors={"dummy_tensor": torch.zeros(prompts, 1)},
        non_tensors={
            "raw_prompt": np.array([[{"role": "user", "content": f"problem {p}"}] for p in range(prompts)] + [None],
                                   dtype=object)[:-1],
            "data_source": np.array(["ibpo/synthetic_arith"] * prompts, dtype=object),
            "reward_model": np.array([{"ground_truth": "7", "style": "rule"} for _ in range(prompts)], dtype=object),
            "extra_info": np.array([{"index": p} for p in range(prompts)], dtype=object),
            "uid": np.array([f"uid{p}" for p in range(prompts)], dtype=object),
        },
    )
    gen_batch = trainer._get_gen_batch(batch).repeat(n, interleave=True)
    gen_output = gen_output_for(responses, score)
    metrics, timing = {}, {}
    result = trainer.ibpo_correction_pass(gen_batch, gen_output, metrics, timing)
    corr.attach_shaping(gen_output, result)
    full = batch.repeat(n, interleave=True).union(gen_output)
    return full, result, metrics, gen_batch


def test_correction_pass_places_delta_on_the_right_rows_after_reordering():
    n = 4
    trainer = make_trainer({"variant": "mask", "lam": 0.6, "joint_training": True}, n=n, mini_batch=2)
    responses = [CORRECT, [7, 7, 9], [1, 2, 8], [5, 5],  # prompt 0: one right, three wrong
                 [4], [4, 4], [7, 7, 9], [3, 3, 3]]  # prompt 1: all wrong
    batch, result, metrics, gen_batch = main_step(trainer, responses, n)

    # references: prompt 0 -> the correct row 0; prompt 1 -> another wrong row of the same group
    by_target = {r.target_row: r.reference_rows for r in result.requests}
    assert by_target[1] == (0,) and by_target[2] == (0,) and by_target[3] == (0,)
    for row in (4, 5, 6, 7):
        assert by_target[row][0] in {4, 5, 6, 7} - {row}

    # one generate call for all corrections, padded to the agent workers, chat messages as raw_prompt
    call = trainer.async_rollout_manager.calls[0]
    assert len(call) % 2 == 0 and len(call) >= len(result.requests)
    assert set(call.non_tensor_batch.keys()) == set(gen_batch.non_tensor_batch.keys())
    first = call.non_tensor_batch["raw_prompt"][0]
    assert first[-1]["role"] == "user" and "### Solution 2" in first[-1]["content"]
    assert call.non_tensor_batch["extra_info"][0] is not call.non_tensor_batch["extra_info"][1]
    assert all(u.endswith(corr.CORRECTION_UID_SUFFIX) for u in call.non_tensor_batch["uid"])

    # Δ: row 1 repaired locally (β = 0.5); row 2 corrected by copying the reference (rewrite, 0);
    # row 6 ([7,7,9] in the all-wrong group) repaired; failed corrections get 0 (no penalty)
    delta = batch.batch[corr.DELTA_KEY].tolist()
    assert delta == [0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0]
    assert metrics["ibpo/num_corrections"] == 7 and metrics["ibpo/rewrite_rate"] == pytest.approx(1 / 3)
    # mask: only the changed token of the repaired rows keeps its gradient
    mask = batch.batch[corr.TOKEN_MASK_KEY]
    assert mask[1].tolist() == [0, 0, 1, 1, 1, 1] and mask[6].tolist() == [0, 0, 1, 1, 1, 1]
    assert mask[0].tolist() == [1] * RESP_LEN and mask[2].tolist() == [1] * RESP_LEN

    # joint training rows: same keys, correction tensors, grouped per prompt, then whole mini-batches
    joint = corr.build_joint_rows(batch, result, trainer.ibpo)
    assert set(joint.batch.keys()) == set(batch.batch.keys())
    assert set(joint.non_tensor_batch.keys()) == set(batch.non_tensor_batch.keys())
    assert joint.batch["responses"][0, :3].tolist() == CORRECT  # ŷ of row 1
    assert len(set(joint.non_tensor_batch["uid"])) == 2
    merged = DataProto.concat([batch, joint])
    padded, pad = corr.pad_to_multiple(merged, trainer._ibpo_batch_multiple())
    assert len(padded) % 8 == 0 and pad == len(padded) - 15
    assert padded.batch[corr.IS_PADDING_KEY].sum() == pad
    pad_rows = padded.batch[corr.IS_PADDING_KEY].bool()
    assert padded.batch["response_mask"][pad_rows].sum() == 0 and padded.batch["rm_scores"][pad_rows].sum() == 0
    assert (padded.batch["attention_mask"][pad_rows].sum(-1) == 2).all()  # one prompt + one response token

    # verl's own _balance_batch reorders rows across 2 DP ranks (by sequence length)
    padded.batch["test_row_id"] = torch.arange(len(padded))
    trainer._get_dp_size = lambda worker_group, role: 2
    trainer.actor_rollout_wg = None
    balance_metrics = {}
    trainer._balance_batch(padded, metrics=balance_metrics)
    assert balance_metrics  # it ran
    perm = padded.batch["test_row_id"]
    assert not torch.equal(perm, torch.arange(len(padded)))  # and did reorder
    padded.batch["token_level_scores"] = padded.batch["rm_scores"]
    padded.batch["token_level_rewards"] = corr.shaped_token_rewards(padded, lam=0.6)
    out = compute_advantage(padded, adv_estimator="ibpo", gamma=1.0, lam=1.0, num_repeat=n,
                            config=OmegaConf.create({}))
    corr.apply_token_mask(out)
    rows = {i: int(p) for i, p in enumerate(perm.tolist())}  # new position -> original row
    seq_reward = out.batch["token_level_rewards"].sum(-1)
    for new, old in rows.items():
        expected = (1.0 if old < 8 and responses[old] == CORRECT else 0.0) + (0.3 if old in (1, 6) else 0.0)
        if old < 8:
            assert seq_reward[new].item() == pytest.approx(expected)
        if old >= 15:  # padding rows: zero advantage
            assert out.batch["advantages"][new].abs().sum() == 0
    # the shaped wrong row of group 0 has a positive advantage only on the modified token
    new_1 = [k for k, v in rows.items() if v == 1][0]
    assert out.batch["advantages"][new_1][:2].abs().sum() == 0 and out.batch["advantages"][new_1][2] != 0
    # group 0: advantages sum to 0 over the group (at one token per row)
    group0 = [k for k, v in rows.items() if v in (0, 2, 3)]
    assert all(out.batch["advantages"][k][0] != 0 for k in group0)


def test_step_with_no_wrong_responses_and_with_all_failures():
    trainer = make_trainer({"variant": "binary"}, n=2)
    batch, result, metrics, _ = main_step(trainer, [CORRECT, CORRECT], 2)
    assert metrics["ibpo/no_wrong_responses"] == 1.0 and not trainer.async_rollout_manager.calls
    assert batch.batch[corr.DELTA_KEY].tolist() == [0.0, 0.0]
    batch, result, metrics, _ = main_step(trainer, [[3], [4]], 2)
    assert metrics["ibpo/all_corrections_failed"] == 1.0
    assert batch.batch[corr.DELTA_KEY].tolist() == [0.0, 0.0]


def test_correction_pass_fails_loudly_on_a_short_answer():
    trainer = make_trainer({"variant": "binary"}, n=2)

    class Broken(FakeRolloutManager):
        def generate_sequences(self, batch):
            out = super().generate_sequences(batch)
            return out.slice(0, len(out) - 1) if len(out) > 1 else DataProto.from_dict(
                tensors={"rm_scores": torch.zeros(0, RESP_LEN), "responses": torch.zeros(0, RESP_LEN, dtype=torch.long),
                         "response_mask": torch.zeros(0, RESP_LEN)}, meta_info={"timing": {}})

    trainer.async_rollout_manager = Broken()
    with pytest.raises(Exception):
        main_step(trainer, [CORRECT, [3]], 2)


def test_start_checks_name_the_key():
    trainer = make_trainer({"variant": "binary"}, n=4)
    cfg = trainer.config
    cfg.actor_rollout_ref.rollout.prompt_length = 70
    with pytest.raises(IBPOSetupError, match="rollout.prompt_length=70 is too small"):
        check_trainer_config(cfg, trainer.ibpo, FakeTokenizer())
    cfg.actor_rollout_ref.rollout.prompt_length = 4096
    cfg.actor_rollout_ref.rollout.response_length = RESP_LEN
    check_trainer_config(cfg, trainer.ibpo, FakeTokenizer(), max_positions=8192)
    with pytest.raises(IBPOSetupError, match="exceeds the model context 4000"):
        check_trainer_config(cfg, trainer.ibpo, FakeTokenizer(), max_positions=4000)
    cfg.actor_rollout_ref.rollout.max_model_len = 2048  # an explicit rollout context wins
    with pytest.raises(IBPOSetupError, match="exceeds the model context 2048"):
        check_trainer_config(cfg, trainer.ibpo, FakeTokenizer(), max_positions=8192)
    cfg.actor_rollout_ref.rollout.max_model_len = None
    cfg.algorithm.adv_estimator = "gae"
    with pytest.raises(IBPOSetupError, match="adv_estimator='gae'"):
        check_trainer_config(cfg, trainer.ibpo, FakeTokenizer())
    with pytest.raises(IBPOSetupError, match="disagrees with actor_rollout_ref.rollout.n"):
        ibpo_config_from(OmegaConf.create({"ibpo": {"group_size": 3}, "actor_rollout_ref": {"rollout": {"n": 4}}}))
    with pytest.raises(Exception, match="unknown ibpo option"):
        ibpo_config_from(OmegaConf.create({"ibpo": {"lamda": 3}, "actor_rollout_ref": {"rollout": {"n": 4}}}))


def test_config_yaml_composes_against_verl(tmp_path):
    from hydra import compose, initialize_config_module

    import recipe.ibpo.main_ibpo  # noqa: F401  registers the prompt-length resolver

    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer",
                      overrides=["data.max_prompt_length=100", "data.max_response_length=50"])
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "gspo"
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"
    assert cfg.algorithm.adv_estimator == "ibpo"
    assert cfg.actor_rollout_ref.rollout.prompt_length == 100 + 256 + 2 * (50 + 16)  # + truncation marker
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        off = compose(config_name="ibpo_trainer", overrides=["data.max_prompt_length=100", "ibpo.enable=False"])
    assert off.actor_rollout_ref.rollout.prompt_length == 100  # no correction prompts, no widening
    assert IBPOConfig.from_mapping({**OmegaConf.to_container(cfg.ibpo), "group_size": 8}).variant == "binary"


def test_several_corrections_per_target_and_rewrite_penalty():
    """corrections_per_target = 2: two requests per wrong row, Δ their mean; joint rows share one uid per
    prompt; a rewritten correction's training reward carries the rewrite penalty (App. C.3)."""
    n = 2
    trainer = make_trainer({"variant": "binary", "corrections_per_target": 2, "joint_training": True,
                            "rewrite_penalty": 0.25}, n=n)
    responses = [CORRECT, [1, 2, 8]]  # row 1's corrections copy the reference: rewrites
    batch, result, metrics, _ = main_step(trainer, responses, n)
    assert [r.target_row for r in result.requests] == [1, 1]
    assert metrics["ibpo/num_corrections"] == 2 and metrics["ibpo/rewrite_rate"] == 1.0
    assert batch.batch[corr.DELTA_KEY].tolist() == [0.0, 0.0]
    joint = corr.build_joint_rows(batch, result, trainer.ibpo)
    assert len(set(joint.non_tensor_batch["uid"])) == 1
    assert joint.batch["rm_scores"].sum(-1).tolist() == pytest.approx([0.75, 0.75])  # r(ŷ) = 1 minus 0.25


def test_correction_prefix_cache_metrics():
    """The proxy share is logged every step; the rollout's cached count only where every row reports it."""
    trainer = make_trainer({"variant": "binary"}, n=4)
    _, _, metrics, _ = main_step(trainer, [CORRECT, [7, 7, 9], [1, 2, 8], [5, 5]], 4)
    assert 0.0 <= metrics["ibpo/correction/prompt_tokens_in_shared_prefix_frac"] <= 1.0
    assert "ibpo/correction/prompt_tokens_cached_frac" not in metrics  # the fake rollout reports none

    # left-padded prompts [pad, 1, 2, 3] and [1, 2, 4, 5]: the second shares 2 of its 4 tokens
    prompts = torch.tensor([[0, 1, 2, 3], [1, 2, 4, 5]])
    attention = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    out = DataProto.from_dict(tensors={"prompts": prompts, "attention_mask": attention},
                              non_tensors={"num_cached_tokens": np.array([0, 2], dtype=object)})
    assert corr.prompt_token_ids(out) == [[1, 2, 3], [1, 2, 4, 5]]
    got = corr.prefix_cache_metrics(out)
    assert got["ibpo/correction/prompt_tokens_in_shared_prefix_frac"] == pytest.approx(2 / 7)
    assert got["ibpo/correction/prompt_tokens_cached_frac"] == pytest.approx(2 / 7)
    out.non_tensor_batch["num_cached_tokens"] = np.array([0, None], dtype=object)
    assert "ibpo/correction/prompt_tokens_cached_frac" not in corr.prefix_cache_metrics(out)
    assert corr.prefix_cache_metrics(None) == {}
