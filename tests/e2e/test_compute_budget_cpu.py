"""End-to-end: one FLOP budget for two methods of different step cost (IBPO with joint training, and
counterfactual weighting) through the real trainer on CPU (``python -m recipe.main method=...``). Both must
stop at the budget by the rule of ``compute_accounting/budget.py`` (the last step starts below the budget, ends
past it by less than one step, and no earlier step was predicted to reach it) and validate at its fractions,
well before the step cap."""

from __future__ import annotations

import pytest

from compute_accounting.flops import forward_flops
from recipe.common.preflight.model import model_flop_shape
from recipe.ibpo.quickstart import ibpo_overrides, run_cpu_training

pytestmark = pytest.mark.e2e

RUN_TIMEOUT_S = 900
CAP = 24  # trainer.total_training_steps: only a cap under a budget
ROWS, MAX_LEN = 4 * 4, 64 + 16  # cpu_overrides: 4 prompts x n=4, prompt 64 + response 16 tokens at most


def _budget(model_path) -> float:
    """Ten plain GRPO/GSPO steps at full length (generation + old-log-prob + update: 5 forwards): measured on
    the demo task, 4 IBPO steps (correction pass and joint rows: ~4e9 FLOPs each) and 13 counterfactual steps
    (~1.2e9 each); overshoot 0.69e9 and 0.83e9, each under one step."""
    return 10 * 5 * forward_flops([MAX_LEN] * ROWS, model_flop_shape(str(model_path)))


def _run(assets, tmp_path_factory, name, overrides, method="ibpo"):
    budget = _budget(assets["model"])
    out = tmp_path_factory.mktemp(name)
    overrides = overrides + [f"compute_budget.limit={budget!r}", "compute_budget.unit=flops",
                             "compute_budget.val_fractions=[0.5,1.0]", "trainer.test_freq=-1"]
    result, metrics = run_cpu_training(assets, out, name, overrides, CAP, RUN_TIMEOUT_S, None, method)
    print(f"\n[e2e {name}] rc={result.returncode} wall={result.wall_s:.1f}s log={result.log_path}")
    assert not result.timed_out, f"{name} hung:\n{result.log_tail()}"
    assert result.returncode == 0, f"{name} failed (rc={result.returncode}):\n{result.log_tail()}"
    return budget, metrics


@pytest.fixture(scope="module")
def budgeted_runs(cpu_demo_assets, tmp_path_factory):
    ibpo = _run(cpu_demo_assets, tmp_path_factory, "ibpo_budget", ibpo_overrides("binary", True, baseline=False)
                + ["ibpo.lam=0.6", "ibpo.correct_groups=all", "ibpo.shaping=reward"])
    cf = _run(cpu_demo_assets, tmp_path_factory, "counterfactual_budget",
              ["actor_rollout_ref.actor.optim.lr=1e-4", "counterfactual.min_sentence_tokens=2"],
              method="counterfactual")
    return {"ibpo": (ibpo, "ibpo/compute/step_flops"), "counterfactual": (cf, "counterfactual/compute/step_flops")}


@pytest.mark.parametrize("method", ["ibpo", "counterfactual"])
def test_each_method_stops_at_the_budget(budgeted_runs, method):
    (budget, metrics), step_key = budgeted_runs[method]
    steps = sorted(metrics)
    last = steps[-1]
    assert steps == list(range(1, last + 1)) and last < CAP, steps
    spent = {k: metrics[k]["compute_budget/flops"] for k in steps}
    cost = {k: metrics[k][step_key] for k in steps}
    assert all(c > 0 for c in cost.values())
    # the ledger is the running sum of the method's own step FLOPs
    running = 0.0
    for k in steps:
        running += cost[k]
        assert spent[k] == pytest.approx(running, rel=1e-9), k
        assert metrics[k]["compute_budget/limit_flops"] == pytest.approx(budget)
    # no step before the last-but-one predicted that the next would reach the budget
    for k in steps[:-1][:-1]:
        assert spent[k] + cost[k] < budget, k
    # the last step started below the budget, was predicted to reach it, and overshoots by less than itself
    before = spent[last - 1]
    assert before < budget <= before + cost[last - 1]
    overshoot = metrics[last]["compute_budget/overshoot"]
    assert overshoot == pytest.approx(spent[last] - budget)
    assert overshoot < cost[last]
    # validation ran where the spend first reached 50% of the budget, and at the last step
    validated = [k for k in steps if metrics[k].get("compute_budget/validated") == 1.0]
    first_half = next(k for k in steps if spent[k] >= 0.5 * budget)
    assert validated == sorted({first_half, last}), (validated, spent)
    assert all(any(key.startswith("val-core/") for key in metrics[k]) for k in validated)


@pytest.mark.parametrize("method", ["ibpo", "counterfactual"])
def test_each_method_prices_its_steps_with_the_gpu_time_model(budgeted_runs, method):
    """The modelled GPU seconds (``compute_accounting.gpu_time``, the default roofline cost model on the run's own
    model) are logged every step and summed by the ledger (``compute_budget.unit=modelled_gpu_seconds`` budgets
    on this sum); each method's own phase is priced: IBPO's correction generation, counterfactual's forwards."""
    (_, metrics), _ = budgeted_runs[method]
    running = 0.0
    for k in sorted(metrics):
        step = metrics[k]["compute/modelled_gpu_seconds"]
        assert step > 0, k
        running += step
        assert metrics[k]["compute_budget/modelled_gpu_seconds"] == pytest.approx(running, rel=1e-9), k
    own = "correction_gen_decode" if method == "ibpo" else "counterfactual_forward"
    assert any(m[f"compute/modelled_gpu_seconds/{own}"] > 0 for m in metrics.values())


def test_the_methods_have_different_step_costs(budgeted_runs):
    mean_cost = {}
    for method, ((_, metrics), step_key) in budgeted_runs.items():
        mean_cost[method] = sum(m[step_key] for m in metrics.values()) / len(metrics)
    # IBPO's correction pass and joint rows cost more per step than counterfactual's extra forwards: the
    # same budget buys a different number of steps
    assert mean_cost["ibpo"] != pytest.approx(mean_cost["counterfactual"], rel=0.05), mean_cost
