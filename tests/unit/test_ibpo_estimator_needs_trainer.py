"""Plain ``verl.trainer.main_ppo algorithm.adv_estimator=ibpo`` is refused (docs/method_ibpo.md, "Running IBPO"):
verl's ``compute_advantage`` dispatching to the registered ``ibpo`` inside a run that no IBPO trainer started
raises, saying how to run IBPO; the IBPO trainers (``assert_registered`` at start) and direct library calls
(no run config) get the estimator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

import recipe.ibpo.verl_plugin as plugin
from ibpo.advantages import compute_ibpo_outcome_advantage


def batch() -> DataProto:
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": torch.ones(4, 3),
                                        "responses": torch.zeros(4, 3, dtype=torch.long),
                                        "attention_mask": torch.ones(4, 5)},
                               non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)})
    return data


def run_config():
    """What verl's trainers pass: the run's ``algorithm`` block."""
    return OmegaConf.create({"adv_estimator": "ibpo", "gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True})


def test_stock_trainer_dispatch_is_refused_with_how_to_run_ibpo(monkeypatch):
    monkeypatch.setattr(plugin, "_ibpo_trainer_started", False)
    with pytest.raises(plugin.IBPONeedsItsTrainer) as info:
        compute_advantage(batch(), adv_estimator="ibpo", num_repeat=2, config=run_config())
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("algorithm.adv_estimator=ibpo needs the IBPO trainer")
    assert "python -m recipe.main method=ibpo" in message and "algorithm.adv_estimator=grpo" in message


def test_after_an_ibpo_trainer_started_the_estimator_runs(monkeypatch):
    monkeypatch.setattr(plugin, "_ibpo_trainer_started", False)
    plugin.assert_registered()  # what RayIBPOTrainer.init_workers calls
    out = compute_advantage(batch(), adv_estimator="ibpo", num_repeat=2, config=run_config())
    expected, _ = compute_ibpo_outcome_advantage(batch().batch["token_level_rewards"], torch.ones(4, 3),
                                                 ["a", "a", "b", "b"])
    assert torch.equal(out.batch["advantages"], expected)
    assert out.batch["advantages"][:, 0].tolist() == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-6)


def test_a_direct_library_call_without_a_run_config_is_not_refused(monkeypatch):
    monkeypatch.setattr(plugin, "_ibpo_trainer_started", False)
    out = compute_advantage(batch(), adv_estimator="ibpo", num_repeat=2, config=OmegaConf.create({}))
    assert out.batch["advantages"].shape == (4, 3)


def test_a_trainer_without_the_correction_pass_cannot_announce_itself(monkeypatch):
    """method=counterfactual with algorithm.adv_estimator=ibpo: the registry refuses it in the pre-flight
    (``method_of``) and again where the task runner picks the trainer (``trainer_class_for``), before any worker
    starts; only IBPO's own trainer marks the process as running an IBPO trainer (its ``init_workers``), so
    under another trainer the estimator keeps refusing."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from recipe.common.preflight import SetupError
    from recipe.common.methods import method_of, trainer_class_for
    from recipe.counterfactual.counterfactual_trainer import RayCounterfactualTrainer
    from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer

    monkeypatch.setattr(plugin, "_ibpo_trainer_started", False)
    config = OmegaConf.create({"method": "counterfactual", "counterfactual": {},
                               "algorithm": {"adv_estimator": "ibpo"}})
    for pick in (method_of, trainer_class_for):
        with pytest.raises(SetupError, match="algorithm.adv_estimator=ibpo with method=counterfactual"):
            pick(config)
    monkeypatch.setattr(RayPPOTrainer, "init_workers", lambda self: None)  # no Ray workers in a unit test
    trainer = RayCounterfactualTrainer.__new__(RayCounterfactualTrainer)
    trainer.config = config
    trainer.init_workers()
    assert plugin._ibpo_trainer_started is False
    with pytest.raises(plugin.IBPONeedsItsTrainer):
        compute_advantage(batch(), adv_estimator="ibpo", num_repeat=2, config=run_config())
    ibpo_trainer = RayIBPOTrainer.__new__(RayIBPOTrainer)
    ibpo_trainer.config = OmegaConf.create({"method": "ibpo", "algorithm": {"adv_estimator": "ibpo"}})
    ibpo_trainer.init_workers()
    assert plugin._ibpo_trainer_started is True
