"""Fast tier: IBPO + joint training makes as many optimizer updates per step as the GSPO baseline.

The trainer's real ``_update_actor`` (and its mini-batch plan) hands the batch to verl 0.9.1's real
``TrainingWorker.train_mini_batch`` -- the function that splits it into mini-batches and calls
``train_batch`` (one ``optimizer_step``, one ``grad_norm``) per mini-batch and epoch -- running in this
process on a stand-in engine (no model, no Ray; a one-rank gloo group for its all-gather). The update
count is read back the way the trainer logs it, from the actor's output.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist
from omegaconf import OmegaConf
from verl import DataProto
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import TrainingWorker

from ibpo.minibatch import RowMultiples, actor_minibatch_plan, optimizer_updates_reported, row_multiples
from recipe.ibpo.correction import batch as corr
from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer
from recipe.common.methods import method_options

PROMPT, RESPONSE = 5, 4


@pytest.fixture(scope="module", autouse=True)
def one_rank_gloo(tmp_path_factory):
    if dist.is_initialized():
        yield
        return
    store = tmp_path_factory.mktemp("gloo") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class StandInEngine:
    """What ``train_mini_batch`` asks of the engine, for one data-parallel rank."""

    def get_data_parallel_size(self):
        return 1

    def get_data_parallel_rank(self):
        return 0

    def get_data_parallel_group(self):
        return None

    def is_mp_src_rank_with_outputs(self):
        return True

    @contextlib.contextmanager
    def train_mode(self, **_):
        yield


class StandInWorker:
    """``self`` for verl's ``TrainingWorker.train_mini_batch``; ``train_batch`` is one optimizer update."""

    def __init__(self):
        self.engine = StandInEngine()
        self.profiler = SimpleNamespace(step=lambda: None)
        self.update_rows: list[int] = []

    def train_batch(self, mini_batch):
        self.update_rows.append(int(mini_batch.batch_size[0]))
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": {"grad_norm": 1.0, "loss": 0.0, "mfu": 0.0}})


class StandInWorkerGroup:
    world_size = 1

    def __init__(self):
        self.worker = StandInWorker()

    def update_actor(self, batch_td):
        return TrainingWorker.train_mini_batch(self.worker, batch_td)


def rows(n_rows: int, is_correction: bool = False, is_padding: bool = False) -> DataProto:
    prompts = torch.randint(3, 50, (n_rows, PROMPT))
    responses = torch.randint(3, 50, (n_rows, RESPONSE))
    attention = torch.ones(n_rows, PROMPT + RESPONSE, dtype=torch.long)
    return DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": attention, "position_ids": torch.cumsum(attention, 1) - 1,
        "response_mask": torch.ones(n_rows, RESPONSE, dtype=torch.long), "advantages": torch.randn(n_rows, RESPONSE),
        "old_log_probs": torch.zeros(n_rows, RESPONSE), "rm_scores": torch.zeros(n_rows, RESPONSE), corr.DELTA_KEY: torch.zeros(n_rows),
        corr.TOKEN_MASK_KEY: torch.ones(n_rows, RESPONSE), corr.IS_CORRECTION_KEY: torch.full((n_rows,), float(is_correction)),
        corr.IS_PADDING_KEY: torch.full((n_rows,), float(is_padding)),
    }, non_tensors={"uid": np.array([f"u{i // 4}" for i in range(n_rows)], dtype=object)})


def make_trainer(joint_minibatch: str, ppo_epochs: int = 1) -> RayIBPOTrainer:
    trainer = RayIBPOTrainer.__new__(RayIBPOTrainer)
    trainer.config = OmegaConf.create({
        "actor_rollout_ref": {
            "rollout": {"n": 4, "multi_turn": {"enable": False}, "temperature": 1.0, "log_prob_micro_batch_size_per_gpu": 4},
            "actor": {"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 4, "ppo_epochs": ppo_epochs,
                      "calculate_entropy": False, "entropy_coeff": 0.0, "data_loader_seed": 1, "shuffle": False},
            "ref": {"log_prob_micro_batch_size_per_gpu": 4}},
        "ibpo": {"joint_training": True, "joint_minibatch": joint_minibatch},
    })
    trainer.ibpo = method_options(trainer.config, "ibpo")
    trainer.use_reference_policy = False
    trainer.actor_rollout_wg = StandInWorkerGroup()
    return trainer


def one_step(trainer: RayIBPOTrainer, main_rows: int, joint_rows: int):
    """The trainer's step from the joint rows to the actor update: plan, pad, update, count."""
    batch = rows(main_rows)
    if joint_rows:
        batch = DataProto.concat([batch, rows(joint_rows, is_correction=True)])
    trainer._actor_plan = trainer._plan_actor_minibatches(main_rows, joint_rows)
    batch, _ = corr.pad_to_rows(batch, trainer._actor_plan.padded_rows)
    output = trainer._update_actor(batch)
    return optimizer_updates_reported(output.meta_info["metrics"]), trainer.actor_rollout_wg.worker.update_rows


@pytest.mark.parametrize("ppo_epochs", [1, 2])
def test_joint_training_makes_the_baselines_number_of_updates(ppo_epochs):
    # the issue's step: 16 main rows (4 prompts x n = 4, one mini-batch) + 14 correction rows
    baseline, baseline_rows = one_step(make_trainer("grow", ppo_epochs), 16, 0)
    grown, grown_rows = one_step(make_trainer("grow", ppo_epochs), 16, 14)
    fixed, fixed_rows = one_step(make_trainer("verl", ppo_epochs), 16, 14)
    assert baseline == ppo_epochs and baseline_rows == [16] * ppo_epochs
    assert grown == baseline and grown_rows == [32] * ppo_epochs  # 30 rows + 2 no-op rows, one update
    assert fixed == 2 * baseline and fixed_rows == [16] * (2 * ppo_epochs)  # verl's fixed mini-batch


def test_several_mini_batches_per_step_keep_their_count():
    trainer = make_trainer("grow")
    trainer.config.actor_rollout_ref.actor.ppo_mini_batch_size = 2  # 2 updates per step without joint rows
    baseline, _ = one_step(trainer, 16, 0)
    trainer.actor_rollout_wg = StandInWorkerGroup()
    grown, sizes = one_step(trainer, 16, 9)
    assert baseline == grown == 2 and sizes == [16, 16]  # 25 rows -> 2 mini-batches of 16 (4 | 16)


def test_plan_matches_verls_split():
    """The plan's padded batch splits, with verl's own iterator, into the planned number of mini-batches."""
    for main, joint, mini, update, batch, mode in [
            (16, 14, 16, 4, 4, "grow"), (16, 14, 16, 4, 4, "verl"), (64, 37, 16, 8, 8, "grow"),
            (64, 0, 16, 8, 8, "grow"), (64, 0, 16, 8, 8, "verl"), (48, 5, 24, 6, 6, "grow"),
            (32, 0, 8, 1, 16, "grow"), (32, 0, 8, 1, 16, "verl"), (32, 5, 8, 2, 16, "grow"),
            (32, 5, 8, 2, 16, "verl"), (48, 3, 12, 4, 16, "grow")]:
        multiples = RowMultiples(update, batch)
        plan = actor_minibatch_plan(main, joint, mini, multiples, mode)
        td = tu.get_tensordict({"x": torch.arange(plan.padded_rows)})
        batches = list(tu.make_iterator(td, mini_batch_size=plan.mini_batch_rows, epochs=1))
        assert len(batches) == plan.updates_per_epoch
        assert plan.padded_rows >= main + joint and plan.mini_batch_rows % update == 0
        assert plan.padded_rows % batch == 0  # whole old-log-prob / reference micro-batches on every rank
        if mode == "grow":
            assert plan.updates_per_epoch == main // mini
            smaller = plan.mini_batch_rows - update  # minimal: one multiple of `update` less fails a constraint
            assert smaller * plan.updates_per_epoch < main + joint or (smaller * plan.updates_per_epoch) % batch
        if joint == 0:
            assert (plan.padded_rows, plan.mini_batch_rows) == (main, mini)  # verl's own layout
    with pytest.raises(ValueError, match="not a whole number of actor mini-batches"):
        actor_minibatch_plan(20, 0, 8, RowMultiples(4, 4), "grow")


def test_forward_micro_batches_constrain_the_batch_not_each_mini_batch():
    # before: one multiple lcm(actor, log-prob, ref micro-batches) per mini-batch: a log-prob micro-batch of 16 grew
    # a GSPO run's mini-batches of 8 to 16 and padded its 32 rows to 64 (half of them no-op rows)
    assert row_multiples(2, 3, 4) == RowMultiples(6, 24) and row_multiples(2, None, None) == RowMultiples(2, 2)
    assert row_multiples(4, 2, 2, 8) == RowMultiples(8, 32) and row_multiples(1, None, 16) == RowMultiples(1, 16)
    plan = actor_minibatch_plan(32, 0, 8, row_multiples(1, 1, 16), "grow")
    assert (plan.mini_batch_rows, plan.padded_rows, plan.updates_per_epoch) == (8, 32, 4)
    with pytest.raises(ValueError, match="dp_size must be >= 1"):
        row_multiples(0, 1, 1)
