"""The driver's pre-flight (``recipe.ibpo.main_ibpo.run_preflight``): configuration mistakes stop the run
before Ray starts, in seconds, with one line naming the option."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from recipe.ibpo.config import register_config_resolvers
from recipe.ibpo.setup_checks import IBPOSetupError, preflight
from verl_cpu.launch import cpu_env, cpu_overrides, process_env

REPO = Path(__file__).resolve().parents[2]
PREFLIGHT_BUDGET_S = 15.0


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny (not warm-started) model and the synthetic task's parquet files: enough for every check."""
    from recipe.ibpo.synthetic_task import write_task_parquets
    from verl_cpu.tiny_assets import build_tiny_assets

    root = tmp_path_factory.mktemp("preflight")
    model = build_tiny_assets(root / "tiny")["model"]
    data = write_task_parquets(root / "data", n_train=8, n_val=4)
    return {"model": model, **data}


def overrides_for(tiny_run, *extra: str) -> list[str]:
    return [*cpu_overrides(tiny_run["model"], tiny_run["train"], tiny_run["val"]), *extra]


def composed(tiny_run, *extra: str):
    register_config_resolvers()  # ${ibpo_prompt_length:...}, as main_ibpo.main does before resolving
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer", overrides=overrides_for(tiny_run, *extra))
    OmegaConf.resolve(cfg)
    return cfg


def test_a_good_config_passes(tiny_run):
    preflight(composed(tiny_run))


@pytest.mark.parametrize("override, named", [
    ("reward.custom_reward_function.path=pkg://reward_fns_does_not_exist", "reward.custom_reward_function.path"),
    ("reward.custom_reward_function.path=/nowhere/reward.py", "reward.custom_reward_function.path"),
    ("reward.custom_reward_function.name=compute_scores", "reward.custom_reward_function.name"),
    ("data.val_files=/nowhere/val.parquet", "data.val_files"),
    ("ibpo.alpha=1.5", "alpha"),
    ("ibpo.variant=masked", "variant"),
    ("+ibpo.group_size=3", "ibpo.group_size"),
    ("actor_rollout_ref.rollout.prompt_length=32", "actor_rollout_ref.rollout.prompt_length"),
    ("data.train_files=/nowhere/train.parquet", "data.train_files"),
    ("algorithm.adv_estimator=gae", "algorithm.adv_estimator"),
])
def test_a_mistake_is_named(tiny_run, override, named):
    with pytest.raises((IBPOSetupError, ValueError), match=named.replace(".", r"\.")):
        preflight(composed(tiny_run, override))


def test_a_reward_function_returning_nonsense_is_caught(tiny_run, tmp_path):
    bad = tmp_path / "bad_reward.py"
    bad.write_text("def score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n    return None\n")
    with pytest.raises(IBPOSetupError, match="numeric 'score'"):
        preflight(composed(tiny_run, f"reward.custom_reward_function.path={bad}",
                           "reward.custom_reward_function.name=score"))


def test_a_wrong_reward_name_stops_main_ibpo_before_ray_within_seconds(tiny_run, tmp_path):
    """The real entry point as a subprocess: exit status 2, one line naming the option, no Ray start."""
    env = process_env(os.environ, {**cpu_env(), "PYTHONPATH": str(REPO)})
    cmd = [sys.executable, "-m", "recipe.ibpo.main_ibpo",
           *overrides_for(tiny_run, "reward.custom_reward_function.name=compute_scores")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert out.returncode == 2, out.stderr[-3000:]
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("[ibpo] configuration error")]
    assert len(errors) == 1 and "reward.custom_reward_function.name=compute_scores" in errors[0], out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert "ray" not in (out.stdout + out.stderr).lower().replace("array", ""), "Ray started before the check"
    print(f"main_ibpo with a wrong reward name exited after {wall:.1f} s wall, {cpu:.1f} s CPU "
          f"(load average {os.getloadavg()[0]:.1f})")
    # CPU seconds, not wall: on a shared CI machine the wall time grows with the load (imports of torch and
    # verl dominate). On an idle machine the two agree (docs/gpu.md records a 16-core run).
    assert cpu < PREFLIGHT_BUDGET_S, f"pre-flight failure used {cpu:.1f} s of CPU ({wall:.1f} s wall)"


def test_the_project_verifiers_self_test_runs_and_its_failure_is_named(tiny_run, monkeypatch):
    import reward_fns

    calls = []

    def failing_self_test(data_sources, reward_fn=None, reward_kwargs=None, **_):
        calls.append((list(data_sources), reward_fn, reward_kwargs))
        raise reward_fns.VerifierSelfTestError("data_source 'ibpo/synthetic_arith', case math right: scored 0", [])

    monkeypatch.setattr(reward_fns, "self_test", failing_self_test)
    with pytest.raises(IBPOSetupError, match=r"reward\.custom_reward_function\.path=pkg://reward_fns: verifier self-test"):
        preflight(composed(tiny_run))
    assert calls and calls[0][0] == ["ibpo/synthetic_arith"] and calls[0][1] is reward_fns.compute_score


def test_a_user_reward_function_skips_the_project_self_test(tiny_run, tmp_path, monkeypatch):
    import reward_fns

    monkeypatch.setattr(reward_fns, "self_test", lambda *a, **k: pytest.fail("self_test ran for a user function"))
    own = tmp_path / "own_reward.py"
    own.write_text("def score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n    return 0.0\n")
    preflight(composed(tiny_run, f"reward.custom_reward_function.path={own}", "reward.custom_reward_function.name=score"))
