"""The trainer survives verl upgrades: its ``fit`` is verl's, byte for byte, plus one-line hook calls.

- the installed verl's ``RayPPOTrainer.fit`` still equals the stored 0.9.1 text (else: merge instructions);
- the check really fails on a modified copy of verl's ``fit`` (so a green run means something);
- our ``HookedRayPPOTrainer.fit`` differs from the stored text only by the hook-call lines (difflib).
"""

from __future__ import annotations

import inspect

import pytest

from recipe.ibpo import upstream
from recipe.ibpo.counterfactual_trainer import RayCounterfactualTrainer
from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer
from recipe.ibpo.trainer_base import HookedRayPPOTrainer


def test_installed_verl_fit_is_the_copied_text():
    upstream.check_upstream_fit_unchanged(upstream.installed_fit_source())


def test_drift_check_fails_on_a_modified_verl_fit_with_merge_instructions():
    verl_fit = upstream.installed_fit_source()
    anchor = "                        self.checkpoint_manager.sleep_replicas()\n"
    assert verl_fit.count(anchor) == 1
    modified = verl_fit.replace(anchor, anchor + "                        self.new_upstream_step()\n")
    with pytest.raises(upstream.UpstreamDriftError) as info:
        upstream.check_upstream_fit_unchanged(modified)
    message = str(info.value)
    assert "+                        self.new_upstream_step()" in message  # the upstream diff is shown
    assert "inspect.getsource(RayPPOTrainer.fit)" in message and "HOOK_CALLS" in message  # how to merge
    assert "(1 lines)" in message
    with pytest.raises(upstream.UpstreamDriftError):  # a deleted line is drift too
        upstream.check_upstream_fit_unchanged(verl_fit.replace(anchor, ""))


def test_our_fit_is_upstream_plus_hook_calls_only():
    ours = inspect.getsource(HookedRayPPOTrainer.fit)
    added, removed = upstream.fit_changes(ours, upstream.upstream_fit_source())
    assert removed == []
    assert added == list(upstream.HOOK_CALLS)
    assert set(added) == {
        "self._before_generation(combined_gen_batch, metrics, timing_raw)",
        "self._after_generation(combined_gen_batch, combined_gen_output, metrics, timing_raw)",
        "batch = self._extend_batch_before_balance(batch, metrics)",
        "self._shape_rewards(batch, metrics)",
        "self._after_advantage(batch, metrics, timing_raw)",
        "self._step_metrics(batch, metrics, timing_raw)",
    }
    upstream.check_fit_is_upstream_plus_hooks(ours)


def test_hook_check_rejects_a_changed_upstream_line_or_a_stray_insertion():
    ours = inspect.getsource(HookedRayPPOTrainer.fit)
    line = "                        self.checkpoint_manager.sleep_replicas()\n"
    with pytest.raises(upstream.UpstreamDriftError, match="removed or changed: .*sleep_replicas"):
        upstream.check_fit_is_upstream_plus_hooks(ours.replace(line, "                        pass\n"))
    with pytest.raises(upstream.UpstreamDriftError, match="lines added: .*ibpo_work"):
        upstream.check_fit_is_upstream_plus_hooks(ours.replace(line, line + "                        ibpo_work()\n"))


def test_the_hook_calls_sit_where_their_contracts_say():
    """Order inside the step: the correction hook runs before the replicas sleep, the batch extension
    before balancing, shaping before the advantage, the mask after it."""
    lines = [s.strip() for s in inspect.getsource(HookedRayPPOTrainer.fit).splitlines()]

    def at(text):
        return lines.index(text)

    assert at(upstream.HOOK_CALLS[0]) + 1 == at(
        "combined_gen_output = self.async_rollout_manager.generate_sequences(combined_gen_batch)")
    assert at(upstream.HOOK_CALLS[1]) + 1 == at("self.checkpoint_manager.sleep_replicas()")
    assert at(upstream.HOOK_CALLS[2]) + 1 == at("if self.config.trainer.balance_batch:")
    assert at('batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]') < at(upstream.HOOK_CALLS[3])
    assert at(upstream.HOOK_CALLS[3]) < at("batch = compute_advantage(") < at(upstream.HOOK_CALLS[4]) < at(
        "actor_output = self._update_actor(batch)")
    assert at(upstream.HOOK_CALLS[5]) + 1 == at("logger.log(data=metrics, step=self.global_steps)")


def test_each_method_overrides_only_hooks_not_the_loop():
    for cls in (RayIBPOTrainer, RayCounterfactualTrainer):
        assert cls.fit is HookedRayPPOTrainer.fit
    assert RayCounterfactualTrainer._extend_batch_before_balance is HookedRayPPOTrainer._extend_batch_before_balance
    assert RayCounterfactualTrainer._shape_rewards is HookedRayPPOTrainer._shape_rewards
    assert not hasattr(RayCounterfactualTrainer, "ibpo_correction_pass")
    assert not hasattr(RayIBPOTrainer, "apply_counterfactual_weights")


def test_copied_update_actor_matches_installed_verl_and_fails_on_drift():
    installed = upstream.installed_fit_source("_update_actor")
    upstream.check_upstream_fit_unchanged(installed, method="_update_actor")
    modified = installed.replace("ppo_epochs = ", "ppo_epochs = 2 * ", 1)
    assert modified != installed
    with pytest.raises(upstream.UpstreamDriftError, match=r"RayPPOTrainer._update_actor differs.*# IBPO"):
        upstream.check_upstream_fit_unchanged(modified, method="_update_actor")
