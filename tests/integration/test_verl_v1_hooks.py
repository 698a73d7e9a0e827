"""Can verl 0.9.1's V1 trainer (``verl/trainer/ppo/v1``) host the IBPO correction pass? Measured at runtime:
``PPOTrainerSync._step_once`` is driven on recording stand-ins and the order of its calls is asserted.
The decision and the upstream PR text are in docs/verl_v1_trainer.md; this test is its evidence and
fails if a verl upgrade changes the facts it rests on.
"""

from __future__ import annotations

import inspect
import types

import pytest
from omegaconf import OmegaConf

v1 = pytest.importorskip("verl.trainer.ppo.v1", reason="verl's V1 trainer needs the transfer_queue package")
from verl.trainer.ppo.v1 import AgentLoopManagerTQ, PPOTrainerSync  # noqa: E402
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ  # noqa: E402


def recording_trainer(calls: list[str]) -> PPOTrainerSync:
    """A PPOTrainerSync without Ray or TransferQueue: every collaborator records its call."""
    trainer = object.__new__(PPOTrainerSync)
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"temperature": 1.0}},
                                       "trainer": {"critic_warmup": 0}})
    trainer.global_steps = 1
    trainer.curr_step_profile = False
    trainer.use_reference_policy = False
    trainer.use_critic = False
    trainer.reward_loop_manager = types.SimpleNamespace(reward_loop_worker_handles=["streaming reward"])
    sampled = types.SimpleNamespace(keys=["uid0"], tags=[{}], partition_id="train", extra_info={})

    def sample(global_steps, partition_id, batch_size):
        calls.append(f"replay_buffer.sample(partition_id={partition_id})")
        return sampled, {}

    trainer.replay_buffer = types.SimpleNamespace(sample=sample)
    trainer.checkpoint_manager = types.SimpleNamespace(sleep_replicas=lambda: calls.append("sleep_replicas"))

    def record(name):
        def method(batch, metrics=None, **kwargs):
            calls.append(name)
            return batch
        return method

    for name in ("_balance_batch", "_compute_old_log_prob", "_compute_advantage", "_update_actor"):
        setattr(trainer, name, record(name))
    original_begin = trainer.on_sample_begin
    trainer.on_sample_begin = lambda: (calls.append("on_sample_begin"), original_begin())[1]
    original_end = trainer.on_sample_end
    trainer.on_sample_end = lambda: (calls.append("on_sample_end"), original_end())[1]
    return trainer


def test_v1_sync_step_order_leaves_no_hook_with_the_batch_before_the_replicas_sleep():
    calls: list[str] = []
    trainer = recording_trainer(calls)
    PPOTrainerSync._step_once(trainer, {}, {}, sample_batch_size=1)
    assert calls == ["on_sample_begin", "replay_buffer.sample(partition_id=train)", "on_sample_end",
                     "sleep_replicas", "_balance_batch", "_compute_old_log_prob", "_compute_advantage",
                     "_update_actor"]
    # the only hook between "outputs available" and "replicas asleep" sees no batch
    assert list(inspect.signature(PPOTrainerSync.on_sample_end).parameters) == ["self"]
    assert list(inspect.signature(PPOTrainerSync.on_sample_begin).parameters) == ["self"]


def test_v1_generation_is_fire_and_forget_into_the_train_partition():
    # the trainer cannot get a second generation's output back: dispatch returns None ...
    assert inspect.signature(AgentLoopManagerTQ.generate_sequences).return_annotation in (None, "None")
    # ... and every non-validation agent loop writes into partition "train", where the replay buffer
    # would sample correction outputs as ordinary training rollouts
    source = inspect.getsource(AgentLoopWorkerTQ._run_prompt)
    assert 'partition_id = prompt["uid"], "train" if not trajectory["validate"] else "val"' in source
    # main generation is dispatched in prepare_step, before the step samples from the replay buffer
    step_source = inspect.getsource(PPOTrainerSync.step)
    assert step_source.index("self.prepare_step()") < step_source.index("self._step_once(")
