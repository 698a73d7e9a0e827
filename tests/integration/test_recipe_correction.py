"""Fast tier: the trainer's IBPO step on hand-built verl DataProtos, without Ray.

A stand-in rollout manager answers ``generate_sequences`` the way verl's agent loop does (left-padded
prompts, right-padded responses, ``rm_scores`` on the last response token, input non-tensor keys not
echoed). Everything else is the real code: the hook methods ``RayIBPOTrainer`` fills in verl's ``fit``
(``_before_generation``, ``_after_generation``, ``_extend_batch_before_balance``, ``_shape_rewards``,
``_after_advantage``, ``_step_metrics``), called in ``fit``'s order between verl's own steps (the batch
union, ``_balance_batch``, ``compute_advantage`` dispatching to the registered ``ibpo``).
"""

from __future__ import annotations

import copy
import json
import sys

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

import recipe.ibpo.verl_plugin  # noqa: F401  (registration; the entry point does this under `import verl` too)
from ibpo.advantages import get_mask_sign
from compute_accounting.flops import ModelShape, forward_flops
from ibpo.options import IBPOConfig
from ibpo.references import register_reference_rule, unregister_reference_rule
from recipe.ibpo.correction import batch as corr
from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer
from recipe.common.preflight import SetupError
from recipe.common.methods import method_options
from recipe.ibpo.start_checks import check_trainer_config

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


# The paper's rule (Alg. 1: every wrong response corrected, λ = 0.6): what these tests exercise unless they say
# otherwise; the package defaults differ (docs/evidence.md, section 2).
PAPER_RULE = {"lam": 0.6, "correct_groups": "all", "shaping": "reward"}


def make_trainer(ibpo_options: dict, n: int = 4, mini_batch: int = 2) -> RayIBPOTrainer:
    ibpo_options = {**PAPER_RULE, **ibpo_options}
    trainer = RayIBPOTrainer.__new__(RayIBPOTrainer)  # no Ray: only what the IBPO step touches
    trainer.config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": n, "agent": {"num_workers": 2}, "prompt_length": 4096,
                                          "response_length": RESP_LEN, "max_model_len": None},
                              "actor": {"ppo_mini_batch_size": mini_batch, "ppo_micro_batch_size_per_gpu": 1,
                                        "ppo_epochs": 1},
                              "model": {"enable_gradient_checkpointing": False}},
        "algorithm": {"adv_estimator": "ibpo"}, "ibpo": ibpo_options,
        "data": {"max_prompt_length": 64, "max_response_length": RESP_LEN},
        "reward": {"reward_model": {"enable": False}},
        "trainer": {"test_freq": -1},
    })
    trainer.tokenizer = FakeTokenizer()
    trainer._init_ibpo_state(model_context=None, model_shape=ModelShape(matmul_params=1000, num_layers=2,
                                                                       attention_dim=8))
    trainer._init_compute_budget()  # the base trainer's ledger (no budget: counts only)
    trainer.resource_pool_manager = SimpleNamespace(get_n_gpus=lambda: 2)
    trainer.total_training_steps = 10
    trainer.actor_rollout_wg = SimpleNamespace(world_size=2)  # 2 DP ranks, as balanced below
    trainer.async_rollout_manager = FakeRolloutManager()
    trainer.use_reference_policy = False
    trainer.global_steps = 1
    return trainer


def main_step(trainer: RayIBPOTrainer, responses: list[list[int]], n: int):
    """verl's fit up to the batch union, with the trainer's generation hooks around the main generation."""
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
    metrics, timing = {}, {}
    trainer._before_generation(gen_batch, metrics, timing)
    gen_output = gen_output_for(responses, score)  # the main generate_sequences
    trainer._after_generation(gen_batch, gen_output, metrics, timing)
    full = batch.repeat(n, interleave=True).union(gen_output)
    return full, trainer._step.correction, metrics, gen_batch


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
    # the main generation's keys, plus the length bound's loop name and max_tokens (ibpo.correction_lengths)
    assert set(call.non_tensor_batch.keys()) == set(gen_batch.non_tensor_batch.keys()) | {"agent_name",
                                                                                         "ibpo_max_tokens"}
    assert set(call.non_tensor_batch["agent_name"][: len(result.requests)]) == {"ibpo_correction"}
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

    # joint training rows: correction tensors, grouped per prompt, then whole mini-batches
    padded = trainer._extend_batch_before_balance(batch, metrics)
    joint = padded.select_idxs(padded.batch[corr.IS_CORRECTION_KEY].bool().numpy())
    assert len(joint) == 7 and set(joint.non_tensor_batch.keys()) == set(batch.non_tensor_batch.keys())
    assert joint.batch["responses"][0, :3].tolist() == CORRECT  # ŷ of row 1
    assert len(set(joint.non_tensor_batch["uid"])) == 2
    pad = int(padded.batch[corr.IS_PADDING_KEY].sum())
    # ibpo.joint_minibatch=grow: one optimizer update on all 15 rows, padded to whole micro-batches on 2 ranks
    assert len(padded) == 16 and pad == 1 and trainer._actor_plan.mini_batch_rows == 16
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
    padded.batch["token_level_scores"] = padded.batch["rm_scores"]  # verl's fit (no KL in the reward)
    padded.batch["token_level_rewards"] = padded.batch["token_level_scores"]
    trainer._shape_rewards(padded, metrics)
    out = compute_advantage(padded, adv_estimator="ibpo", gamma=1.0, lam=1.0, num_repeat=n,
                            config=OmegaConf.create({}))
    unmasked = out.batch["advantages"].clone()
    trainer._after_advantage(out, metrics, {})
    trainer._step_metrics(out, metrics, {"step": 1.0})
    assert metrics["ibpo/lambda"] == 0.6 and metrics["ibpo/num_joint_rows"] == 7
    # the base trainer's ledger counted the step: IBPO's FLOPs, and 1 s on 2 GPUs
    assert metrics["compute_budget/flops"] == metrics["ibpo/compute/step_flops"] == metrics["ibpo/compute/total_flops"]
    assert metrics["compute_budget/gpu_seconds"] == 2.0 and "compute_budget/limit_flops" not in metrics
    assert metrics["ibpo/num_padding_rows"] == pad
    # the correction pass generated 8 requests (7 corrections + 1 to pad to the 2 agent workers), then dropped the
    # 8th: its generation is work too (before: only the 7 were counted)
    generated = trainer.async_rollout_manager.generate_sequences(call)  # the same 8 requests again
    lengths = generated.batch["attention_mask"].sum(-1).tolist()
    assert len(call) == 8 and len(result.correction_output) == 7
    assert metrics["ibpo/compute/step_flops/correction_gen"] == forward_flops(lengths, trainer.model_shape)
    assert metrics["ibpo/cov_y_phi"] <= 1e-12  # Assumption A.1 on the main rows
    assert 0 < metrics["ibpo/batch_token_mask_mean"] < 1  # the mask reached the training batch
    # coverage: 7 wrong main rows, 2 of them (rows 1 and 6, Δ > 0) trained with a token mask
    assert (metrics["ibpo/localised/wrong_rows"], metrics["ibpo/localised/masked_rows"]) == (7.0, 2.0)
    assert metrics["ibpo/localised/coverage"] == pytest.approx(2 / 7)
    rows = {i: int(p) for i, p in enumerate(perm.tolist())}  # new position -> original row
    seq_reward = out.batch["token_level_rewards"].sum(-1)
    for new, old in rows.items():
        expected = (1.0 if old < 8 and responses[old] == CORRECT else 0.0) + (0.3 if old in (1, 6) else 0.0)
        if old < 8:
            assert seq_reward[new].item() == pytest.approx(expected)
        if old >= 15:  # padding rows: zero advantage
            assert out.batch["advantages"][new].abs().sum() == 0
    new_1 = [k for k, v in rows.items() if v == 1][0]  # group 0 has a right answer: Â < 0
    new_6 = [k for k, v in rows.items() if v == 6][0]  # group 1 is all wrong: the shaped row has Â > 0
    assert unmasked[new_1][0] < 0 and unmasked[new_6][0] > 0
    # the hook's default, negative_only: the Â < 0 row is masked, the Â > 0 row keeps the whole positive update
    assert trainer.ibpo.mask_sign == "negative_only"
    assert out.batch["advantages"][new_1][:2].abs().sum() == 0 and out.batch["advantages"][new_1][2] != 0
    assert torch.equal(out.batch["advantages"][new_6], unmasked[new_6])
    # literal mask (Eq. 17 as written): the shaped wrong rows keep their advantage only on the modified
    # token, whatever its sign
    literal = out.batch["advantages"]
    out.batch["advantages"] = unmasked.clone()
    corr.apply_token_mask(out, corr.IBPORows.of(out), get_mask_sign("literal"))
    for row in (new_1, new_6):
        assert out.batch["advantages"][row][:2].abs().sum() == 0 and out.batch["advantages"][row][2] != 0
    out.batch["advantages"] = literal
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
    with pytest.raises(SetupError, match="rollout.prompt_length=70 is too small"):
        check_trainer_config(cfg, trainer.ibpo, FakeTokenizer())
    cfg.actor_rollout_ref.rollout.prompt_length = 4096
    cfg.actor_rollout_ref.rollout.response_length = RESP_LEN
    check_trainer_config(cfg, trainer.ibpo, FakeTokenizer(), model_context=8192)
    with pytest.raises(SetupError, match="exceeds the model context 4000"):
        check_trainer_config(cfg, trainer.ibpo, FakeTokenizer(), model_context=4000)
    cfg.actor_rollout_ref.rollout.max_model_len = 2048  # an explicit rollout context wins
    with pytest.raises(SetupError, match="exceeds the model context 2048"):
        check_trainer_config(cfg, trainer.ibpo, FakeTokenizer(), model_context=8192)
    cfg.actor_rollout_ref.rollout.max_model_len = None
    for estimator in ("gae", "grpo"):  # verl's grpo: sample std, ε = 1e-6, singleton groups keep their reward
        cfg.algorithm.adv_estimator = estimator
        with pytest.raises(SetupError, match=f"algorithm.adv_estimator='{estimator}' with ibpo.enable=True.*"
                                                 "Set algorithm.adv_estimator=ibpo"):
            check_trainer_config(cfg, trainer.ibpo, FakeTokenizer())
    check_trainer_config(cfg, trainer.ibpo.replace(enable=False), FakeTokenizer())  # the baseline may use any
    with pytest.raises(Exception, match="group_size is not an option"):
        method_options(OmegaConf.create({"ibpo": {"group_size": 3}, "actor_rollout_ref": {"rollout": {"n": 4}}}), "ibpo")
    with pytest.raises(Exception, match="unknown ibpo option"):
        method_options(OmegaConf.create({"ibpo": {"lamda": 3}, "actor_rollout_ref": {"rollout": {"n": 4}}}), "ibpo")
    with pytest.raises(Exception, match="ibpo.reference_per_group was replaced by ibpo.reference_rule"):
        method_options(OmegaConf.create({"ibpo": {"reference_per_group": True},
                                           "actor_rollout_ref": {"rollout": {"n": 4}}}), "ibpo")
    with pytest.raises(Exception, match="ibpo.reference_rule='nearest'.*registered reference rules"):
        method_options(OmegaConf.create({"ibpo": {"reference_rule": "nearest"},
                                           "actor_rollout_ref": {"rollout": {"n": 4}}}), "ibpo")


def test_a_registered_reference_rule_is_selected_by_name_in_the_trainer():
    """ibpo.reference_rule=<a registered rule> reaches the trainer's correction plan: every wrong response
    of a group is compared with the group's *last* correct response (rows 2 and 6), never the first."""
    calls = []

    @register_reference_rule("last_correct")
    def last_correct(group, num_references, rng):
        calls.append(group.rows)
        last = [j for j, ok in enumerate(group.is_correct) if ok][-1:]
        return [None if ok else last * num_references for ok in group.is_correct]

    try:
        n = 4
        trainer = make_trainer({"variant": "binary", "reference_rule": "last_correct"}, n=n)
        assert trainer.ibpo.reference_rule == "last_correct"
        responses = [CORRECT, [1, 2], CORRECT, [5, 5], CORRECT, [4], CORRECT, [3, 3]]
        _, result, _, _ = main_step(trainer, responses, n)
        assert calls == [(0, 1, 2, 3), (4, 5, 6, 7)]
        assert [(r.target_row, r.reference_rows) for r in result.requests] == [(1, (2,)), (3, (2,)), (5, (6,)),
                                                                                (7, (6,))]
    finally:
        unregister_reference_rule("last_correct")


def test_config_yaml_composes_against_verl(tmp_path):
    from hydra import compose, initialize_config_module

    from recipe.ibpo.config import register_config_resolvers
    from recipe.common.methods import trainer_class_for

    register_config_resolvers()  # ${ibpo_prompt_length:...}, as recipe.main does before resolving
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer",
                      overrides=["data.max_prompt_length=100", "data.max_response_length=50"])
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "gspo"
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"
    assert cfg.algorithm.adv_estimator == "ibpo"
    assert trainer_class_for(cfg) is RayIBPOTrainer and "counterfactual" not in cfg
    assert cfg.actor_rollout_ref.rollout.prompt_length == 100 + 256 + 2 * (50 + 16)  # + truncation marker
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        off = compose(config_name="ibpo_trainer", overrides=["data.max_prompt_length=100", "ibpo.enable=False"])
    assert off.actor_rollout_ref.rollout.prompt_length == 100  # no correction prompts, no widening
    assert IBPOConfig.from_mapping(OmegaConf.to_container(cfg.ibpo)).variant == "binary"
    assert method_options(cfg, "ibpo") == IBPOConfig()  # the generated block composes to the dataclass defaults
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        per_group = compose(config_name="ibpo_trainer", overrides=["ibpo.reference_rule=per_group"])
        old = compose(config_name="ibpo_trainer", overrides=["+ibpo.reference_per_group=true"])  # a key Hydra appends
    assert method_options(per_group, "ibpo").reference_rule == "per_group"
    with pytest.raises(Exception, match="ibpo.reference_per_group was replaced by ibpo.reference_rule"):
        method_options(old, "ibpo")


def test_an_option_block_is_validated_once_per_process(monkeypatch):
    """The pre-flight, IBPO's start checks and the trainer read the same block: its types are checked and its
    dataclass built once (the same frozen object comes back); a changed block is validated anew, and an invalid
    one raises every time it is read."""
    import recipe.common.methods as methods

    checked = []
    real_check = methods.check_option_types
    monkeypatch.setattr(methods, "check_option_types", lambda *a: (checked.append(a[2]), real_check(*a)))
    config = OmegaConf.create({"ibpo": {"lam": 0.25, "variant": "ratio"}})
    first = method_options(config, "ibpo")
    assert method_options(config, "ibpo") is first and method_options(OmegaConf.create(
        {"ibpo": {"variant": "ratio", "lam": 0.25}}), "ibpo") is first
    assert checked == ["ibpo"] and first.lam == 0.25
    assert method_options(OmegaConf.create({"ibpo": {"lam": 0.3}}), "ibpo").lam == 0.3 and len(checked) == 2
    bad = OmegaConf.create({"ibpo": {"lamda": 0.3}})
    for _ in range(2):
        with pytest.raises(Exception, match="lamda"):
            method_options(bad, "ibpo")


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

    assert all(u.endswith(corr.CORRECTION_UID_SUFFIX) for u in joint.non_tensor_batch["uid"])


def test_correction_groups_per_correction_prompt():
    """joint_grouping=per_correction_prompt (App. C.3): the corrections_per_target samples of one x~ form
    a group; per_prompt puts every correction for x in one group."""
    n = 4
    responses = [CORRECT, [7, 7, 9], [5, 5], [4]]  # three wrong rows -> three correction prompts
    groups = {}
    for grouping in ("per_prompt", "per_correction_prompt"):
        trainer = make_trainer({"variant": "binary", "corrections_per_target": 2, "joint_training": True,
                                "joint_grouping": grouping}, n=n)
        batch, result, _, _ = main_step(trainer, responses, n)
        uids = list(corr.build_joint_rows(batch, result, trainer.ibpo).non_tensor_batch["uid"])
        groups[grouping] = [sorted(i for i, u in enumerate(uids) if u == g) for g in dict.fromkeys(uids)]
    assert groups["per_prompt"] == [[0, 1, 2, 3, 4, 5]]
    assert groups["per_correction_prompt"] == [[0, 1], [2, 3], [4, 5]]  # the two samples of each x~


def test_correction_uids_stay_apart_from_main_uids():
    """A joint row never shares a group with a main row: the main rows' advantages are the same with and
    without the joint rows in the batch, and each correction group is normalised on its own."""
    n = 4
    trainer = make_trainer({"variant": "binary", "joint_training": True}, n=n)
    responses = [CORRECT, [7, 7, 9], [5, 5], [4], [4], [4, 4], [7, 7, 9], [3, 3, 3]]
    batch, result, _, _ = main_step(trainer, responses, n)
    joint = corr.build_joint_rows(batch, result, trainer.ibpo)
    main_uids, joint_uids = set(batch.non_tensor_batch["uid"]), set(joint.non_tensor_batch["uid"])
    assert main_uids.isdisjoint(joint_uids) and len(joint_uids) == 2

    def advantages(data: DataProto) -> torch.Tensor:
        data.batch["token_level_scores"] = data.batch["rm_scores"]
        data.batch["token_level_rewards"] = corr.shaped_token_rewards(data, corr.IBPORows.of(data), lam=0.6)
        return compute_advantage(data, adv_estimator="ibpo", gamma=1.0, lam=1.0, num_repeat=n,
                                 config=OmegaConf.create({})).batch["advantages"]

    alone = advantages(copy.deepcopy(batch))
    merged = advantages(DataProto.concat([copy.deepcopy(batch), copy.deepcopy(joint)]))
    assert torch.equal(merged[: len(batch)], alone)
    assert torch.equal(merged[len(batch):], advantages(copy.deepcopy(joint)))
    # the corrections of prompt 0 succeed and fail: a real group signal of their own
    assert merged[len(batch):].abs().sum() > 0

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



@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_reward_stops_the_step_naming_rows_and_source(bad, monkeypatch):
    """A verifier that returns nan would make its group's advantages and then the weights nan: the scores of the
    main generation (and of the corrections, read by the same function) and of the trained batch are checked."""
    from recipe.common.step_io import NonFiniteRewardError

    trainer = make_trainer({"variant": "binary"})
    monkeypatch.setattr(sys.modules[__name__], "score", lambda r: bad if r == [7, 7, 9] else float(r == CORRECT))
    with pytest.raises(NonFiniteRewardError, match=r"^step 1, main generation: .* for 1 of 4 rows \(rows \[1\].*"
                                                   r"data_source \['ibpo/synthetic_arith'\]"):
        main_step(trainer, [CORRECT, [7, 7, 9], CORRECT, [7, 7, 8]], n=4)
    batch = DataProto.from_dict(tensors={"token_level_scores": torch.tensor([[0.0, 1.0], [0.0, bad]])},
                                non_tensors={"data_source": np.array(["a", "b"], dtype=object)})
    with pytest.raises(NonFiniteRewardError, match=r"^step 1: .* for 1 of 2 rows \(rows \[1\].*data_source \['b'\]"):
        trainer._shape_rewards(batch, {})


def test_resuming_with_changed_options_stops_naming_them(capsys):
    """The checkpoint stores the ibpo options and G; a resume that changes what is trained on stops (the
    shaped reward would change mid-run), a change of a diagnostic interval does not, and the opt-out resumes
    and says what changed."""
    from recipe.ibpo.run_state import IBPOResumeError

    saved = make_trainer({"variant": "binary", "lam": 0.6})
    saved.run_state.compute_totals["total_flops"] = 123.0
    state = json.loads(json.dumps(saved.run_state.state_dict()))  # as written to and read from ibpo_state.json
    assert state["ibpo_options"]["lam"] == 0.6 and state["rollout_n"] == 4

    same = make_trainer({"variant": "binary", "lam": 0.6, "grad_probe_interval": 5})
    same.run_state.load_state_dict(state, "ckpt/global_step_1/ibpo_state.json", 1)
    assert same.run_state.compute_totals["total_flops"] == 123.0

    for options, n, named in [({"variant": "binary", "lam": 0.3}, 4, r"ibpo\.lam: 0\.6 -> 0\.3"),
                              ({"variant": "ratio", "lam": 0.6}, 4, r"ibpo\.variant: 'binary' -> 'ratio'"),
                              ({"variant": "binary", "lam": 0.6}, 8, r"actor_rollout_ref\.rollout\.n \(G\): 4 -> 8")]:
        changed = make_trainer(options, n=n)
        with pytest.raises(IBPOResumeError, match=rf"^resuming at step 1 from ckpt/x with changed options \({named}\)"):
            changed.run_state.load_state_dict(state, "ckpt/x", 1)
        assert changed.run_state.compute_totals["total_flops"] == 0.0  # nothing restored

    allowed = make_trainer({"variant": "binary", "lam": 0.3, "resume_allow_option_changes": True})
    allowed.run_state.load_state_dict(state, "ckpt/x", 1)
    assert allowed.run_state.compute_totals["total_flops"] == 123.0
    assert "with changed options: ibpo.lam: 0.6 -> 0.3" in capsys.readouterr().out

    legacy = {k: v for k, v in state.items() if k not in ("ibpo_options", "rollout_n")}  # written before this check
    make_trainer({"variant": "ratio"}).run_state.load_state_dict(legacy, "ckpt/old", 1)


HOW_TO_GO_ON = (r"; it is not what the IBPO trainer writes: resume from a checkpoint the IBPO trainer wrote "
                r"\(trainer\.resume_from_path\), or start a new run \(trainer\.resume_mode=disable\)$")


@pytest.mark.parametrize("edit, refusal", [
    (lambda s: s["compute_totals"].update(total_flops="nan"),
     r"compute_totals\.total_flops='nan' has type str; expected float"),
    (lambda s: s["compute_totals"].update(total_flops=float("nan")),
     r"compute_totals\.total_flops = nan: a compute cost must be a finite number >= 0"),
    (lambda s: s["compute_totals"].update(total_tokens=True), r"compute_totals\.total_tokens=True has type bool"),
    (lambda s: s["time_totals"].update(cumulative_step_s=-5),
     r"time_totals\.cumulative_step_s = -5\.0: a compute cost must be a finite number >= 0"),
    (lambda s: s["time_totals"].update(cumulative_step_s=float("inf")), r"time_totals\.cumulative_step_s = inf"),
    (lambda s: s.pop("lambda_schedule"), r"the file lacks \['lambda_schedule'\]"),
    (lambda s: s["compute_totals"].pop("total_flops"), r"compute_totals lacks \['compute_totals\.total_flops'\]"),
    (lambda s: s.update(rollout_n="8"), r"rollout_n='8' must be an int >= 1 \(the group size G\)"),
    (lambda s: s.update(rollout_n=True), r"rollout_n=True must be an int >= 1"),
    (lambda s: s.update(steps=3), r"unknown field\(s\) \['steps'\] in the file \(known: \['lambda_schedule', "),
    (lambda s: s["compute_totals"].update(flops=1.0), r"unknown field\(s\) \['compute_totals\.flops'\]"),
    (lambda s: s.update(compute_totals=[1.0, 2.0, 3.0]), r"compute_totals is a JSON array, not an object"),
    (lambda s: s.update(lambda_schedule=None), r"lambda_schedule is a JSON null, not an object"),
    (lambda s: s["lambda_schedule"].update(running_lambda_max="0.3"),
     r"lambda_schedule\.running_lambda_max='0\.3' must be null or a finite number >= 0"),
    (lambda s: s["lambda_schedule"].update(running_lambda_max=-1.0), r"lambda_schedule\.running_lambda_max=-1\.0"),
    (lambda s: s["lambda_schedule"].update(running_max=0.5), r"unknown field\(s\) \['lambda_schedule\.running_max'"),
    (lambda s: s["ibpo_options"].update(lam="0.6"), r"ibpo_options\.lam='0\.6' has type str; expected float"),
    (lambda s: s.update(ibpo_options=["binary"]), r"ibpo_options is a JSON array, not an object"),
])
def test_a_resumed_state_that_the_trainer_did_not_write_is_refused_naming_the_file_and_field(edit, refusal):
    """ibpo_state.json is checked before anything is restored: a field missing, unknown, of the wrong type (a
    numeric string, a bool) or out of range (negative, non-finite) stops the resume naming the file and the field,
    whatever ibpo.resume_allow_option_changes (which allows changed options, not a broken file)."""
    from recipe.ibpo.run_state import IBPOStateError

    state = json.loads(json.dumps(make_trainer({"variant": "binary"}).run_state.state_dict()))
    edit(state)
    for allow in (False, True):
        resumed = make_trainer({"variant": "binary", "resume_allow_option_changes": allow})
        with pytest.raises(IBPOStateError, match=rf"^ckpt/x/ibpo_state\.json: {refusal}.*{HOW_TO_GO_ON}"):
            resumed.run_state.load_state_dict(state, "ckpt/x/ibpo_state.json", 1)
        assert resumed.run_state.compute_totals["total_flops"] == 0.0  # nothing restored
    assert make_trainer({"variant": "binary"}).run_state.state_dict()["time_totals"] == {"cumulative_step_s": 0.0}


def test_a_resumed_state_of_another_run_or_option_set_stops_naming_the_option():
    """A GSPO baseline's state (ibpo.enable=false) resumed as IBPO, and a state holding an option this version no
    longer has (removed or renamed since), are changed options: refused naming them unless
    ibpo.resume_allow_option_changes."""
    from recipe.ibpo.run_state import IBPOResumeError

    gspo = json.loads(json.dumps(make_trainer({"variant": "binary", "enable": False}).run_state.state_dict()))
    with pytest.raises(IBPOResumeError, match=r"with changed options \(ibpo\.enable: False -> True[,)]"):
        make_trainer({"variant": "binary"}).run_state.load_state_dict(gspo, "ckpt/gspo", 1)
    older = json.loads(json.dumps(make_trainer({"variant": "binary"}).run_state.state_dict()))
    older["ibpo_options"]["reference_per_group"] = True
    with pytest.raises(IBPOResumeError, match=r"with changed options \(ibpo\.reference_per_group: True -> "
                                              r"\(no such option now\)\)"):
        make_trainer({"variant": "binary"}).run_state.load_state_dict(older, "ckpt/old", 1)
    make_trainer({"variant": "binary", "resume_allow_option_changes": True}).run_state.load_state_dict(
        older, "ckpt/old", 1)


@pytest.mark.parametrize("text, refusal", [
    ('{"lambda_schedule": {"running_lambda_max": nu', r"is not a JSON file \(Expecting value: line 1"),
    ("", r"is not a JSON file \(Expecting value: line 1 column 1"),
    ("[1, 2]", r"holds a JSON array, not an object"),
    ("null", r"holds a JSON null, not an object"),
])
def test_a_checkpoint_state_file_that_is_not_a_json_object_is_refused_naming_it(tmp_path, text, refusal):
    """What every resumed state file is read through (the compute ledger, ibpo_state.json): a truncated or
    non-JSON file, or JSON that is not an object, is refused naming the file."""
    from recipe.common.step_io import ResumedStateError, read_state_file

    path = tmp_path / "ibpo_state.json"
    path.write_text(text)
    with pytest.raises(ResumedStateError,
                       match=rf"^{path}.* {refusal}.*start a new run \(trainer\.resume_mode=disable\)$"):
        read_state_file(str(path))
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ResumedStateError, match=r"is not a JSON file \('utf-8' codec can't decode"):
        read_state_file(str(path))


@pytest.mark.parametrize("shaping", ["reward", "reward_capped", "advantage"])
def test_the_loop_trains_on_the_trainers_advantages(shaping):
    """lab.analysis.toy_loop's advantages (main rows: ibpo_sequence_advantages; joint rows: joint_token_advantages)
    equal what the trainer's hooks and verl's compute_advantage give the actor on the same step, under every
    ibpo.shaping, with joint training on; and the trainer logs the mechanism metrics of the same numbers."""
    from lab.analysis import toy_loop
    from ibpo.advantages import ibpo_sequence_advantages
    from ibpo.mechanism import advantage_mechanism
    from ibpo.pipeline import joint_rewards, joint_row_uids

    n = 4
    trainer = make_trainer({"variant": "binary", "lam": 0.6, "joint_training": True, "shaping": shaping,
                            "rewrite_penalty": 0.25}, n=n, mini_batch=2)
    responses = [CORRECT, [7, 7, 9], [1, 2, 8], [5, 5], [4], [4, 4], [7, 7, 9], [3, 3, 3]]
    batch, result, metrics, _ = main_step(trainer, responses, n)
    padded = trainer._extend_batch_before_balance(batch, metrics)
    padded.batch["token_level_scores"] = padded.batch["rm_scores"]
    padded.batch["token_level_rewards"] = padded.batch["token_level_scores"]
    trainer._shape_rewards(padded, metrics)
    out = compute_advantage(padded, adv_estimator="ibpo", gamma=1.0, lam=1.0, num_repeat=n,
                            config=OmegaConf.create({}))
    trainer._after_advantage(out, metrics, {})
    trained = corr.sequence_advantages(out)

    rewards = torch.tensor([score(r) for r in responses], dtype=torch.float64)
    delta = batch.batch[corr.DELTA_KEY].double()
    groups = [k // n for k in range(len(responses))]
    loop_main = ibpo_sequence_advantages(rewards, delta, rewards >= 0.5, groups, 0.6, shaping)
    torch.testing.assert_close(trained[:8].double(), loop_main, rtol=1e-6, atol=1e-6)
    if shaping == "reward":  # the all-wrong group's shaped row 6 is reinforced; capped and advantage never do
        assert loop_main[6] > 0
    else:
        assert (loop_main[1:] <= 0).all()

    ok = result.correction_scores >= 0.5
    cfg = trainer.ibpo
    joint = toy_loop.CorrectionResult(  # the joint rows as analysis.toy_loop.correction_pass builds them
        delta.numpy(), joint_responses=[[0] * 3 for _ in result.requests],
        joint_rewards=joint_rewards(result.correction_scores, result.outcome.correction_rewrite, cfg).tolist(),
        joint_group_ids=joint_row_uids(result.requests, cfg.joint_grouping).tolist())
    loop_joint = [float(a[0]) for a in toy_loop.joint_token_advantages(joint)]
    rows = len(result.requests)
    assert trained[8:8 + rows].tolist() == pytest.approx(loop_joint, abs=1e-6)
    assert ok.any() and not ok.all()  # the step has both outcomes, so the joint groups are not constant

    want = advantage_mechanism(loop_main.numpy(), (rewards >= 0.5).tolist(), delta.numpy(), groups)
    for key, value in want.items():
        assert metrics[f"ibpo/mechanism/{key}"] == pytest.approx(value, abs=1e-6)
    assert metrics["ibpo/alarm/reward_drop"] == 0.0


def test_the_loops_gspo_loss_is_verls():
    """gspo_loss_from_log_probs equals verl's compute_policy_loss_gspo (seq-mean-token-mean, old = current
    log-probs, the update's rows as the global batch) in value and gradient, on random inputs."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_gspo
    from verl.workers.config import ActorConfig

    from lab.analysis.toy_loop import gspo_loss_from_log_probs

    torch.manual_seed(0)
    config = ActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=1, clip_ratio=0.2,
                         rollout_n=1)
    for _ in range(3):
        rows, width = 6, 9
        mask = (torch.rand(rows, width) < 0.7).float()
        mask[:, 0] = 1.0
        advantages = torch.randn(rows, 1).expand(rows, width) * mask
        log_probs = (-torch.rand(rows, width) * 3).requires_grad_(True)
        ours = gspo_loss_from_log_probs(log_probs, advantages, mask)
        (g_ours,) = torch.autograd.grad(ours, log_probs)
        theirs, _ = compute_policy_loss_gspo(log_probs.detach().clone(), log_probs, advantages, mask,
                                             loss_agg_mode="seq-mean-token-mean", config=config)
        (g_theirs,) = torch.autograd.grad(theirs, log_probs)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(g_ours, g_theirs, rtol=1e-5, atol=1e-7)


def test_correction_fraction_in_the_trainer_corrects_a_random_share_and_trains_the_rest_as_gspo():
    """ibpo.correction_fraction=0.5 through the trainer's correction pass: of the 3 eligible wrong rows of the
    mixed group (correct_groups=mixed, the all-wrong group is not eligible), ceil(0.5·3) = 2 are sent to the
    policy, exactly the rows ibpo.pipeline.correction_subset draws for this step; the others keep Δ = 0 and a
    full token mask."""
    from ibpo.pipeline import correction_subset

    n = 4
    trainer = make_trainer({"variant": "mask", "lam": 0.0, "correct_groups": "mixed", "correction_fraction": 0.5},
                           n=n)
    responses = [CORRECT, [7, 7, 9], [1, 2, 8], [5, 5], [4], [4, 4], [7, 7, 9], [3, 3, 3]]
    batch, result, metrics, _ = main_step(trainer, responses, n)
    kept = correction_subset([1, 2, 3], 0.5, seed=trainer.ibpo.seed, step=trainer.global_steps)
    assert len(kept) == 2
    assert sorted(r.target_row for r in result.requests) == sorted(kept)
    assert metrics["ibpo/num_corrections"] == 2
    delta = batch.batch[corr.DELTA_KEY].tolist()
    mask = batch.batch[corr.TOKEN_MASK_KEY]
    for row in range(8):
        if row not in kept:
            assert delta[row] == 0.0 and mask[row].tolist() == [1] * RESP_LEN, row


def test_the_trainer_prices_decode_with_the_rollouts_ngram_proposer():
    """With ngram speculation on the rollout, the modelled GPU seconds replay that proposer on every generation
    (``corr.speculative_generation_work``); without speculation, plain decode."""
    from ibpo.lookup_decoding import NgramParams

    base = make_trainer({})
    assert base._ngram is None
    trainer = RayIBPOTrainer.__new__(RayIBPOTrainer)
    spec = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4, "num_speculative_tokens": 6}
    trainer.config = copy.deepcopy(base.config)
    trainer.config.actor_rollout_ref.rollout.engine_kwargs = {"vllm": {"speculative_config": spec}}
    trainer.config.actor_rollout_ref.rollout.name = "vllm"
    trainer.config.actor_rollout_ref.rollout.disable_log_stats = False
    trainer.tokenizer = FakeTokenizer()
    trainer._init_ibpo_state(model_context=None, model_shape=base.model_shape)
    assert trainer._ngram == NgramParams(2, 4, 6)
