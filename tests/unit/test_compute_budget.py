"""The compute budget's arithmetic (compute_accounting/budget.py): options, the predicted last step, validation at
fractions, resume state, and the axis a budgeted run's curves are drawn on."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from compute_accounting.budget import ComputeBudgetConfig, ComputeBudgetError, ComputeLedger, matched_axis
from recipe.common.preflight.errors import SetupError
from recipe.common.methods import check_option_block_types
from recipe.common.preflight.compute_budget import compute_budget_from


def run_ledger(costs: list[float], limit: float, cap: int = 1000) -> tuple[list[int], ComputeLedger]:
    """Drive a ledger as the trainer does: after each step, stop if the next one is predicted to reach the
    limit. Returns the steps validated and the ledger."""
    ledger = ComputeLedger(ComputeBudgetConfig(limit=limit, unit="flops"))
    validated, total = [], cap
    for step, cost in enumerate(costs, start=1):
        ledger.add_step(flops=cost, gpu_seconds=0.0)
        is_last = step >= total
        if not is_last and ledger.next_step_is_last():
            total = step + 1
        if ledger.validation_due(is_last):
            validated.append(step)
        if is_last:
            break
    return validated, ledger


def test_steady_steps_stop_within_one_step_of_the_budget():
    validated, ledger = run_ledger([3.0] * 100, limit=100.0)
    # 33 steps spend 99 < 100; the 34th reaches 102: the last step starts below the budget and ends past it
    assert ledger.steps == 34 and ledger.flops == 102.0
    assert 0 <= ledger.flops - 100.0 < 3.0
    # fractions 25/50/75/100 are first reached at spends 27 (step 9), 51 (17), 75 (25), 102 (34)
    assert validated == [9, 17, 25, 34]


def test_a_cheaper_method_takes_more_steps_to_the_same_budget():
    _, cheap = run_ledger([1.0] * 1000, limit=100.0)
    _, dear = run_ledger([8.0] * 1000, limit=100.0)
    assert (cheap.steps, cheap.flops) == (100, 100.0)  # exact: the 100th step reaches the limit
    assert (dear.steps, dear.flops) == (13, 104.0)


def test_a_cheaper_last_step_can_fall_short_by_at_most_the_difference():
    _, ledger = run_ledger([10.0, 10.0, 10.0, 10.0, 4.0] + [10.0] * 10, limit=50.0)
    # after step 4 (40 spent) the prediction 40 + 10 >= 50 makes step 5 the last; it cost 4, not 10
    assert ledger.steps == 5 and ledger.flops == 44.0 and 50.0 - ledger.flops <= 10.0 - 4.0


def test_the_cap_ends_a_run_before_its_budget_and_validates_it_once():
    validated, ledger = run_ledger([1.0] * 10, limit=100.0, cap=10)
    assert ledger.steps == 10 and validated == [10]


def test_without_a_limit_nothing_stops_or_validates_but_both_units_are_counted():
    ledger = ComputeLedger(ComputeBudgetConfig())
    ledger.add_step(flops=5.0, gpu_seconds=2.0)
    assert not ledger.next_step_is_last() and not ledger.validation_due(False)
    assert ledger.metrics() == {"compute_budget/flops": 5.0, "compute_budget/gpu_seconds": 2.0,
                                "compute_budget/modelled_gpu_seconds": 0.0}


def test_gpu_seconds_budget_counts_seconds():
    ledger = ComputeLedger(ComputeBudgetConfig(limit=10.0, unit="gpu_seconds"))
    ledger.add_step(flops=1e20, gpu_seconds=6.0)
    assert ledger.spent() == 6.0 and ledger.next_step_is_last()
    assert ledger.metrics()["compute_budget/limit_gpu_seconds"] == 10.0


@pytest.mark.parametrize("options, named", [
    ({"unit": "tokens"}, "compute_budget.unit"),
    ({"limit": -1.0}, "compute_budget.limit"),
    ({"val_fractions": [0.5, 0.25]}, "compute_budget.val_fractions"),
    ({"val_fractions": [0.0, 1.0]}, "compute_budget.val_fractions"),
    ({"budget": 1.0}, "unknown compute_budget option"),
])
def test_bad_options_fail_naming_the_option(options, named):
    with pytest.raises(ComputeBudgetError, match=named):
        ComputeBudgetConfig.from_mapping(options)


def test_the_config_block_is_typed_and_refuses_a_step_validation_schedule():
    cfg = OmegaConf.create({"compute_budget": {"limit": "3.3e21 FLOPs"}, "trainer": {"test_freq": -1}})
    with pytest.raises(SetupError, match="compute_budget.limit='3.3e21 FLOPs'"):
        check_option_block_types(cfg)
    cfg = OmegaConf.create({"compute_budget": {"limit": 1.0e21}, "trainer": {"test_freq": 10}})
    with pytest.raises(ComputeBudgetError, match="trainer.test_freq=-1"):
        compute_budget_from(cfg)
    cfg.trainer.test_freq = -1
    assert compute_budget_from(cfg).limit == 1.0e21
    assert not compute_budget_from(OmegaConf.create({"trainer": {"test_freq": 5}})).enabled  # no block: no budget


def test_resume_restores_the_spend_and_refuses_another_budget():
    _, ledger = run_ledger([3.0] * 5, limit=100.0)
    resumed = ComputeLedger(ComputeBudgetConfig(limit=100.0))
    resumed.load_state_dict(ledger.state_dict())
    assert (resumed.flops, resumed.steps, resumed.validated) == (15.0, 5, 0)
    with pytest.raises(ComputeBudgetError, match="limit=200"):
        ComputeLedger(ComputeBudgetConfig(limit=200.0)).load_state_dict(ledger.state_dict())


@pytest.mark.parametrize("edit, refusal", [
    (lambda s: s.update(flops="15"), r"flops='15' has type str; expected float"),
    (lambda s: s.update(gpu_seconds=True), r"gpu_seconds=True has type bool; expected float"),
    (lambda s: s.update(last_cost=-1.0), r"last_cost = -1\.0: a compute cost must be a finite number >= 0"),
    (lambda s: s.update(modelled_gpu_seconds=float("nan")), r"modelled_gpu_seconds = nan"),
    (lambda s: s.update(steps=2.5), r"steps=2\.5 must be an int >= 0"),
    (lambda s: s.update(validated="0"), r"validated='0' must be an int >= 0"),
    (lambda s: s.pop("steps"), r"unknown field\(s\) \[\], missing field\(s\) \['steps'\]"),
    (lambda s: s.update(total_flops=1.0), r"unknown field\(s\) \['total_flops'\], missing field\(s\) \[\]"),
    (lambda s: s.update(budget=[100.0, "flops"]), r"budget=\[100\.0, 'flops'\] is not a compute_budget block"),
    (lambda s: s["budget"].update(limit="100"), r"budget=\{.*\} is not a compute_budget block"),
])
def test_a_resumed_ledger_that_the_trainer_did_not_write_is_refused_naming_the_file_and_field(edit, refusal):
    """compute_budget_state.json is checked before anything is restored: a field missing, unknown, of the wrong
    type or out of range stops the resume naming the file and the field."""
    _, ledger = run_ledger([3.0] * 5, limit=100.0)
    state = ledger.state_dict()
    edit(state)
    resumed = ComputeLedger(ComputeBudgetConfig(limit=100.0))
    with pytest.raises(ComputeBudgetError, match=rf"^ckpt/compute_budget_state\.json: {refusal}.*start a new run "
                                                 r"\(trainer\.resume_mode=disable\)$"):
        resumed.load_state_dict(state, "ckpt/compute_budget_state.json")
    assert (resumed.flops, resumed.steps) == (0.0, 0)  # nothing restored
    older = {k: v for k, v in ledger.state_dict().items() if k != "modelled_gpu_seconds"}  # written before it was
    resumed.load_state_dict(older, "ckpt/compute_budget_state.json")
    assert (resumed.flops, resumed.modelled_gpu_seconds, resumed.steps) == (15.0, 0.0, 5)


def test_a_ledger_another_method_wrote_is_refused_naming_the_file_both_methods_and_how_to_go_on():
    """Every method's trainer writes compute_budget_state.json: the method it records tells a counterfactual
    checkpoint resumed as IBPO (or the reverse) before anything is restored; a state written before the method was
    stored loads under any method."""
    _, ledger = run_ledger([3.0] * 5, limit=100.0)
    ledger.method = "counterfactual"
    state = ledger.state_dict()
    assert state["method"] == "counterfactual"
    resumed = ComputeLedger(ComputeBudgetConfig(limit=100.0, unit="flops"), method="ibpo")
    with pytest.raises(ComputeBudgetError) as refusal:
        resumed.load_state_dict(state, "ckpt/global_step_5/compute_budget_state.json")
    assert str(refusal.value) == (
        "ckpt/global_step_5/compute_budget_state.json: written by method=counterfactual but this run is method=ibpo: "
        "a checkpoint resumes only as the method that wrote it. Resume from a checkpoint method=ibpo wrote "
        "(trainer.resume_from_path), or start a new run (trainer.resume_mode=disable)")
    assert (resumed.flops, resumed.steps) == (0.0, 0)  # nothing restored
    with pytest.raises(ComputeBudgetError, match=r"^ckpt/x: method=5 has type int; expected str or null; it is not "):
        resumed.load_state_dict({**state, "method": 5}, "ckpt/x")
    older = {k: v for k, v in state.items() if k != "method"}  # written before the method was stored
    resumed.load_state_dict(older, "ckpt/old")
    assert (resumed.flops, resumed.steps, resumed.method) == (15.0, 5, "ibpo")
    same = ComputeLedger(ComputeBudgetConfig(limit=100.0, unit="flops"), method="counterfactual")
    same.load_state_dict(state, "ckpt/x")
    assert same.steps == 5


def test_the_trainer_records_its_method_in_the_ledger_and_a_resume_as_another_method_stops(tmp_path, monkeypatch):
    """The base trainer's ledger takes the config's ``method:``; its _load_checkpoint reads the ledger before a
    method's own state (a counterfactual checkpoint resumed as IBPO stopped on a missing ibpo_state.json naming no
    method; an IBPO checkpoint resumed as counterfactual went on)."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from recipe.common.trainer_base import HookedRayPPOTrainer

    monkeypatch.setattr(RayPPOTrainer, "_load_checkpoint", lambda self: None)  # verl's own checkpoint: not here

    def trainer(method: str) -> HookedRayPPOTrainer:
        made = HookedRayPPOTrainer.__new__(HookedRayPPOTrainer)
        made.config = OmegaConf.create({"method": method, "trainer": {
            "test_freq": -1, "resume_mode": "auto", "default_local_dir": str(tmp_path)}})
        made._init_compute_budget()
        made.global_steps = 3
        return made

    wrote = trainer("ibpo")
    folder = tmp_path / "global_step_3"
    folder.mkdir()
    wrote._write_compute_ledger(str(folder))
    path = folder / "compute_budget_state.json"
    with pytest.raises(ComputeBudgetError, match=rf"^{path}: written by method=ibpo but this run is "
                                                 r"method=counterfactual: .*\(trainer\.resume_mode=disable\)$"):
        trainer("counterfactual")._load_checkpoint()
    trainer("ibpo")._load_checkpoint()


def test_the_matched_axis_is_read_from_the_logged_limit():
    assert matched_axis({"compute_budget/flops", "compute_budget/limit_flops"}) == "compute_budget/flops"
    assert matched_axis({"compute_budget/gpu_seconds", "compute_budget/limit_gpu_seconds"}) == "compute_budget/gpu_seconds"
    assert matched_axis({"compute_budget/flops"}) is None
