"""The driver's pre-flight (``recipe.common.main.run_preflight``): configuration mistakes stop the run
before Ray starts, in seconds, with one line naming the option."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from recipe.ibpo.config import register_config_resolvers
from recipe.common.preflight import SetupError, preflight, resolve_config
from verl_cpu.launch import cpu_env, cpu_overrides, process_env

REPO = Path(__file__).resolve().parents[2]
# A guard against a check that starts training or Ray (minutes), not a speed target: idle it is 8.5-11 s of CPU;
# under load the CPU time of the same work grew to 16 s (cache and SMT contention). The speed is measured in
# lab/scripts/bench_preflight_rows.py.
PREFLIGHT_BUDGET_S = 30.0


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny (not warm-started) model and the synthetic task's parquet files: enough for every check."""
    from toy_task.synthetic_task import write_task_parquets
    from verl_cpu.tiny_assets import build_tiny_assets

    root = tmp_path_factory.mktemp("preflight")
    model = build_tiny_assets(root / "tiny")["model"]
    data = write_task_parquets(root / "data", n_train=8, n_val=4)
    return {"model": model, **data}


def overrides_for(tiny_run, *extra: str) -> list[str]:
    return [*cpu_overrides(tiny_run["model"], tiny_run["train"], tiny_run["val"]), *extra]


def composed(tiny_run, *extra: str):
    register_config_resolvers()  # ${ibpo_prompt_length:...}, as recipe.main does before resolving
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
    ("ibpo.lam=nan", "ibpo.lam=nan is out of range: must be a finite number"),
    ("ibpo.variant=masked", "variant"),
    ("+ibpo.group_size=3", "ibpo.group_size"),
    ("+ibpo.reference_per_group=true", "replaced by ibpo.reference_rule"),
    ("ibpo.reference_rule=nearest", "ibpo.reference_rule='nearest'"),
    ("actor_rollout_ref.rollout.prompt_length=32", "actor_rollout_ref.rollout.prompt_length"),
    ("data.train_files=/nowhere/train.parquet", "data.train_files"),
    ("algorithm.adv_estimator=gae", "algorithm.adv_estimator"),
])
def test_a_mistake_is_named(tiny_run, override, named):
    with pytest.raises((SetupError, ValueError), match=named.replace(".", r"\.")):
        preflight(composed(tiny_run, override))


def test_a_reward_function_returning_nonsense_is_caught(tiny_run, tmp_path):
    bad = tmp_path / "bad_reward.py"
    bad.write_text("def score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n    return None\n")
    with pytest.raises(SetupError, match="numeric 'score'"):
        preflight(composed(tiny_run, f"reward.custom_reward_function.path={bad}",
                           "reward.custom_reward_function.name=score"))


@pytest.mark.parametrize("value", ["float('nan')", "{'score': float('inf')}"])
def test_a_reward_function_returning_a_non_finite_score_is_caught(tiny_run, tmp_path, value):
    # before: passed the pre-flight; the first step's advantages were NaN
    bad = tmp_path / "nan_reward.py"
    bad.write_text(f"def score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n    return {value}\n")
    with pytest.raises(SetupError, match="for an empty response; verl needs a finite number"):
        preflight(composed(tiny_run, f"reward.custom_reward_function.path={bad}",
                           "reward.custom_reward_function.name=score"))


def test_a_wrong_reward_name_stops_the_launcher_before_ray_within_seconds(tiny_run, tmp_path):
    """The real entry point as a subprocess: exit status 2, one line naming the option, no Ray start."""
    env = process_env(os.environ, {**cpu_env(), "PYTHONPATH": str(REPO)})
    cmd = [sys.executable, "-m", "recipe.main", "method=ibpo",
           *overrides_for(tiny_run, "reward.custom_reward_function.name=compute_scores")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert out.returncode == 2, out.stderr[-3000:]
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("[recipe] configuration error")]
    assert len(errors) == 1 and "reward.custom_reward_function.name=compute_scores" in errors[0], out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert "ray" not in (out.stdout + out.stderr).lower().replace("array", ""), "Ray started before the check"
    print(f"recipe.main with a wrong reward name exited after {wall:.1f} s wall, {cpu:.1f} s CPU "
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
    with pytest.raises(SetupError, match=r"reward\.custom_reward_function\.path=pkg://reward_fns: verifier self-test"):
        preflight(composed(tiny_run))
    assert calls and calls[0][0] == ["ibpo/synthetic_arith"] and calls[0][1] is reward_fns.compute_score


# A user's function that reads the final answer ("Answer: 42"; the self-test's other phrasings score 0 alike).
REAL_USER_REWARD = ("def score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
                    "    return float(solution_str.strip().endswith(' ' + str(ground_truth)))\n")


def test_a_user_reward_function_is_self_tested_relative_to_its_scale(tiny_run, tmp_path, monkeypatch):
    import reward_fns

    calls = []
    real_self_test = reward_fns.self_test
    monkeypatch.setattr(reward_fns, "self_test", lambda *a, **k: calls.append(k) or real_self_test(*a, **k))
    own = tmp_path / "own_reward.py"
    own.write_text(REAL_USER_REWARD)
    preflight(composed(tiny_run, f"reward.custom_reward_function.path={own}", "reward.custom_reward_function.name=score"))
    assert calls == [{"relative": True}]


@pytest.mark.parametrize("constant", ["0.0", "1.0", "{'score': -1.0}"])
def test_a_user_reward_function_that_ignores_the_response_is_refused(tiny_run, tmp_path, constant):
    # before: the self-test ran only for pkg://reward_fns, so a constant reward passed the pre-flight
    own = tmp_path / "constant_reward.py"
    own.write_text(f"def score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n    return {constant}\n")
    message = refused(tiny_run, f"reward.custom_reward_function.path={own}", "reward.custom_reward_function.name=score")
    value = float(constant.strip("{}").split(":")[-1])
    assert message.startswith(
        f"reward.custom_reward_function.path={own} reward.custom_reward_function.name=score: verifier self-test "
        "failed: reward self-test failed; the verifier cannot tell a right answer from a wrong one, so training would "
        "receive wrong rewards: | - data_source='ibpo/synthetic_arith', tells right from wrong: no right answer "
        f"scored more than its wrong one (scores seen: [{value}]); the function ignores the response or the ground "
        "truth | backend: "), message


# ---------------------------------------------------------------------------------------------------------
# Silent wrong paths (issue 17): each is refused in the driver with one line naming the key, file or row.

def refused(tiny_run, *extra: str) -> str:
    """The one-line message ``resolve_config`` + ``preflight`` (as the launcher's ``run_preflight`` runs them)
    refuse the composed config with."""
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer", overrides=overrides_for(tiny_run, *extra))
    with pytest.raises(SetupError) as info:
        resolve_config(cfg)
        preflight(cfg)
    message = str(info.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("override, expected", [
    # legacy top-level reward keys: verl 0.9.1's main_ppo reads only reward.*
    ("+custom_reward_function.path=/somewhere/my_reward.py",
     "custom_reward_function.path is a legacy top-level key that verl 0.9.1's main_ppo no longer reads (the run "
     "would use reward.custom_reward_function.path=pkg://reward_fns instead); set reward.custom_reward_function.path"),
    ("+custom_reward_function.name=my_score", "set reward.custom_reward_function.name"),
    ("+reward_model.reward_manager=dapo", "reward_model.reward_manager is a legacy top-level key"),
    ("+sandbox_fusion.url=http://localhost:8080", "set reward.sandbox_fusion.url"),
    # reward kwargs against compute_score's signature
    ("+reward.custom_reward_function.reward_kwargs.math_timout_s=5",
     "reward.custom_reward_function.reward_kwargs.math_timout_s: reward.custom_reward_function.name=compute_score "
     "takes no keyword 'math_timout_s'; it takes ['code_memory_mb', 'code_timeout_s', 'math_fallback_extraction', "
     "'math_timeout_s']"),
    ("+reward.custom_reward_function.reward_kwargs.math_timeout_s=abc",
     "reward.custom_reward_function.reward_kwargs.math_timeout_s='abc' has type str; "
     "reward.custom_reward_function.name=compute_score expects float"),
    ("+reward.custom_reward_function.reward_kwargs.ground_truth=5", "verl passes ground_truth itself"),
    ("+reward.reward_kwargs.math_timeout_s=5",
     "reward.reward_kwargs.math_timeout_s: verl's reward manager 'naive' does not read it"),
    # typed option errors, before the interpolations that read them
    ("ibpo.lam=abc", "ibpo.lam='abc' has type str; expected float (default 0.6)"),
    ("ibpo.num_references=abc", "ibpo.num_references='abc' has type str; expected int (default 1)"),
    ("ibpo.enable=maybe", "ibpo.enable='maybe' has type str; expected bool (default True)"),
    ("ibpo.num_references=1.5", "ibpo.num_references=1.5 has type float; expected int"),
    ("ibpo.candidate_labels=[1,2]", "ibpo.candidate_labels=[1, 2] has type list; expected a list of str"),
    ("data.train_batch_size=abc", "data.train_batch_size='abc' has type str; verl expects an integer (default 1024)"),
    ("data.train_batch_size=2.5", "data.train_batch_size=2.5 has type float; verl expects an integer (default 1024)"),
    ("trainer.total_epochs=1.5", "trainer.total_epochs=1.5 has type float; verl expects an integer"),
    ("actor_rollout_ref.rollout.n=4.5", "actor_rollout_ref.rollout.n=4.5 has type float; verl expects an integer"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=2.0",
     "actor_rollout_ref.actor.ppo_mini_batch_size=2.0 has type float; verl expects an integer"),
    ("actor_rollout_ref.actor.optim.lr=nan", "actor_rollout_ref.actor.optim.lr=nan is not a number verl can train with"),
    ("actor_rollout_ref.actor.entropy_coeff=abc",
     "actor_rollout_ref.actor.entropy_coeff='abc' has type str; verl expects a number (default 0)"),
    ("trainer.val_before_train=sometimes", "trainer.val_before_train='sometimes' has type str; verl expects bool"),
    # verl's own validation, in the driver
    ("+actor_rollout_ref.actor.clip_ratio_hihg=0.3",
     "actor_rollout_ref.actor.clip_ratio_hihg is not an option of verl's config"),
    ("+actor_rollout_ref.rollout.tempreture=0.3",
     "actor_rollout_ref.rollout.tempreture is not an option of verl's config"),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size=2",
     "verl's config validation (validate_config, as main_ppo runs it in the driver) failed: ValueError: "
     "[actor_rollout_ref.rollout] You have set both"),
    # the context length against the model (the tiny model: max_position_embeddings 4096)
    ("actor_rollout_ref.rollout.max_model_len=100000",
     "actor_rollout_ref.rollout.max_model_len=100000 exceeds the model's context 4096"),
    ("data.max_response_length=8000", "data.max_prompt_length=64 + data.max_response_length=8000 = 8064 exceeds "
                                      "the context 4096"),
])
def test_a_silent_wrong_path_is_refused_in_one_line(tiny_run, override, expected):
    assert expected in refused(tiny_run, override)


def test_the_counterfactual_block_is_typed_too(tiny_run):
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.counterfactual.config", version_base=None):
        cfg = compose(config_name="counterfactual_trainer", overrides=overrides_for(tiny_run, "counterfactual.boost=abc"))
    with pytest.raises(SetupError, match=r"^counterfactual\.boost='abc' has type str; expected float \(default 2\.0\)$"):
        resolve_config(cfg)


def test_the_counterfactual_method_accepts_verls_bypass_mode(tiny_run):
    # refused until the drops scored the unmasked answer in the masked copies' own call (then they would have mixed
    # the rollout engine's unmasked log-probability with the training model's masked ones); the drops no longer read
    # old_log_probs (tests/integration/test_counterfactual_batch.py), so bypass mode has nothing left to break
    from recipe.common.methods import run_method_check

    register_config_resolvers()
    with initialize_config_module(config_module="recipe.counterfactual.config", version_base=None):
        cfg = compose(config_name="counterfactual_trainer",
                      overrides=overrides_for(tiny_run, "algorithm.rollout_correction.bypass_mode=true"))
    assert cfg.algorithm.rollout_correction.bypass_mode is True
    run_method_check(cfg, "counterfactual", 4096)


@pytest.mark.parametrize("override, expected", [
    # before: "config: cannot resolve its interpolation: ZeroDivisionError ..." (rollout.prompt_length's resolver
    # divides by 1 + num_references), naming no option
    ("ibpo.num_references=-1", "ibpo.num_references=-1 is out of range: must be >= 0"),
])
def test_an_out_of_range_option_an_interpolation_reads_is_named(tiny_run, override, expected):
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer", overrides=overrides_for(tiny_run, override))
    with pytest.raises(ValueError) as info:  # IBPOConfigError; the launcher prints any ValueError in one line
        resolve_config(cfg)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value), str(info.value)


def test_an_ibpo_disabled_run_is_also_checked_against_the_context(tiny_run):
    assert "exceeds the context 4096" in refused(tiny_run, "ibpo.enable=False", "data.max_response_length=5000")


def test_a_user_reward_function_must_take_verls_keywords(tiny_run, tmp_path):
    own = tmp_path / "positional_reward.py"
    own.write_text("def score(source, text, gold, info=None):\n    return 0.0\n")
    message = refused(tiny_run, f"reward.custom_reward_function.path={own}", "reward.custom_reward_function.name=score")
    assert message == ("reward.custom_reward_function.name=score: verl calls it with the keywords ['data_source', "
                       "'solution_str', 'ground_truth', 'extra_info'] but it takes no ['data_source', 'solution_str', "
                       "'ground_truth', 'extra_info']; it takes ['source', 'text', 'gold', 'info']")


def test_kwargs_of_a_user_function_taking_star_kwargs_cannot_be_checked_and_say_so(tiny_run, tmp_path):
    own = tmp_path / "loose_reward.py"
    own.write_text(REAL_USER_REWARD)
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer", overrides=overrides_for(
            tiny_run, f"reward.custom_reward_function.path={own}", "reward.custom_reward_function.name=score",
            "+reward.custom_reward_function.reward_kwargs.tiemout=3"))
    resolve_config(cfg)
    with pytest.warns(UserWarning, match=r"\['tiemout'\]: reward\.custom_reward_function\.name=score takes \*\*kwargs"):
        preflight(cfg)


def write_variant(tiny_run, tmp_path, name: str, edit) -> str:
    """The synthetic training parquet with ``edit(rows)`` applied (rows as dicts), written to ``tmp_path`` with
    the original schema, or an inferred one when ``edit`` returns True (a column changes type)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(tiny_run["train"])
    rows = table.to_pylist()
    schema = None if edit(rows) else table.schema
    path = tmp_path / f"{name}.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return str(path)


def set_gold(row: int, gold: str):
    def edit(rows):
        rows[row]["reward_model"]["ground_truth"] = gold
    return edit


def set_field(row: int, name: str, value):
    def edit(rows):
        rows[row][name] = value
    return edit


@pytest.mark.parametrize("name, edit, expected", [
    ("unknown_source", set_field(5, "data_source", "synthetic_arith"),
     "row 5, field data_source: 'synthetic_arith' is not a data source the reward function knows"),
    ("truncated_gold", set_gold(6, "\\frac{1}{"),
     "row 6, field reward_model.ground_truth: gold answer '\\\\frac{1}{' is unusable: math ground truth "
     "'\\\\frac{1}{' has an unclosed '{'"),
    ("prose_gold", set_gold(3, "some words"),
     "row 3, field reward_model.ground_truth: gold answer 'some words' is unusable: math ground truth 'some words' "
     "is prose, not a math answer"),
    ("empty_gold", set_gold(7, " "), "row 7, field reward_model.ground_truth: expected a non-empty string"),
    ("empty_prompt", set_field(4, "prompt", []), "row 4, field prompt: no messages"),
    ("bad_role", set_field(2, "prompt", [{"role": "human", "content": "What is 1 + 1?"}]),
     "row 2, field prompt: a message's role is not one of"),
    ("no_user", set_field(1, "prompt", [{"role": "system", "content": "Be brief."}]),
     "row 1, field prompt: no user message with non-empty content"),
])
def test_every_row_is_checked_not_row_0(tiny_run, tmp_path, name, edit, expected):
    path = write_variant(tiny_run, tmp_path, name, edit)
    message = refused(tiny_run, f"data.train_files={path}")
    assert message.startswith(path) and expected in message, message


def test_a_prompt_stored_as_a_string_is_refused(tiny_run, tmp_path):
    def stringify(rows):
        for row in rows:
            row["prompt"] = row["prompt"][0]["content"]
        return True
    path = write_variant(tiny_run, tmp_path, "string_prompt", stringify)
    assert refused(tiny_run, f"data.train_files={path}").startswith(
        f"{path}, row 0, field prompt: stored as string, not a chat list")


def test_a_bad_row_of_the_validation_file_is_named_too(tiny_run, tmp_path):
    path = write_variant(tiny_run, tmp_path, "val_bad", set_gold(2, "\\sqrt{"))
    assert refused(tiny_run, f"data.val_files={path}").startswith(f"{path}, row 2, field reward_model.ground_truth")


@pytest.mark.slow  # a fresh interpreter imports verl and Hydra (≈8 s)
@pytest.mark.parametrize("launcher", [["recipe.main", "method=ibpo"], ["recipe.ibpo.main_ibpo"]])
def test_cfg_job_resolve_prints_the_resolved_config(tiny_run, tmp_path, launcher):
    """The launcher, and the alias kept for old installs (which says it is one), compose the same config."""
    env = process_env(os.environ, {**cpu_env(), "PYTHONPATH": str(REPO)})
    cmd = [sys.executable, "-m", *launcher, *overrides_for(tiny_run), "--cfg", "job", "--resolve"]
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    cfg = OmegaConf.create(out.stdout)
    assert cfg.method == "ibpo" and isinstance(cfg.actor_rollout_ref.rollout.prompt_length, int)
    assert cfg.actor_rollout_ref.rollout.prompt_length > cfg.data.max_prompt_length
    said_alias = "is an alias of `python -m recipe.main method=ibpo`" in out.stderr
    assert said_alias == (launcher[0] == "recipe.ibpo.main_ibpo"), out.stderr[-2000:]


def test_the_readme_byo_yaml_passes_the_preflight(tiny_run, tmp_path):
    """README "Bring your own verl YAML", composed from its own directory (as ``python -m recipe.main --config-path DIR --config-name NAME method=ibpo``)."""
    from hydra import initialize_config_dir

    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from test_byo_yaml import readme_yaml

    (tmp_path / "my_ibpo_run.yaml").write_text(readme_yaml())
    register_config_resolvers()
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        cfg = compose(config_name="my_ibpo_run", overrides=overrides_for(tiny_run))
    resolve_config(cfg)
    preflight(cfg)
    assert cfg.actor_rollout_ref.rollout.prompt_length > cfg.data.max_prompt_length == 64


@pytest.mark.parametrize("override", [
    "actor_rollout_ref.actor.entropy_coeff=0.001",  # int default 0, verl's ActorConfig declares a float
    "actor_rollout_ref.rollout.top_p=0.9",  # int default 1, RolloutConfig: float
    "actor_rollout_ref.rollout.val_kwargs.temperature=0.6",
    "trainer.esi_redundant_time=0.5",  # no dataclass, not a count
])
def test_a_fraction_where_verl_takes_one_passes_the_type_check(override):
    from recipe.common.preflight.verl_validation import check_verl_option_types, verl_default_config

    check_verl_option_types(OmegaConf.merge(verl_default_config(), OmegaConf.from_dotlist([override])),
                            resolve=False)


@pytest.mark.parametrize("extra, expected", [
    (("compute_budget.limit=1.0e9", "trainer.test_freq=5"), "set trainer.test_freq=-1"),
    (("compute_budget.limit=1.0e9", "compute_budget.unit=tokens"), "compute_budget.unit='tokens' must be one of"),
    (("compute_budget.limit=abc",), "compute_budget.limit='abc' has type str; expected float"),
])
def test_a_bad_compute_budget_stops_the_preflight_naming_the_option(tiny_run, extra, expected):
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer", overrides=overrides_for(tiny_run, *extra))
    with pytest.raises(ValueError) as info:  # SetupError is one too; the launcher prints either in one line
        resolve_config(cfg)
        preflight(cfg)
    assert expected in str(info.value)


def test_the_preflight_prints_the_candidate_share_and_the_sampling_check(tiny_run, capsys):
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer", overrides=overrides_for(
            tiny_run, "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
            "actor_rollout_ref.rollout.val_kwargs.temperature=0.6"))
    resolve_config(cfg)
    preflight(cfg)
    out = capsys.readouterr().out
    assert "[ibpo] correction candidates (whole text):" in out
    assert "[recipe] validation sampling (rollout.val_kwargs): temperature 0.6" in out


def test_a_data_folder_is_named_as_a_folder_with_its_parquet_files(tmp_path):
    from omegaconf import OmegaConf

    from recipe.common.preflight.data_files import data_files

    (tmp_path / "data").mkdir()
    config = OmegaConf.create({"data": {"train_files": str(tmp_path / "data")}})
    with pytest.raises(SetupError, match=r"is a folder; give the parquet file\(s\) in it \(it holds no \.parquet"):
        data_files(config, "train_files")
    (tmp_path / "data" / "train.parquet").write_bytes(b"")
    with pytest.raises(SetupError, match=r"is a folder; give the parquet file\(s\) in it \(e\.g\. .*train\.parquet\)"):
        data_files(config, "train_files")
    config.data.train_files = [str(tmp_path / "data" / "train.parquet"), str(tmp_path / "missing.parquet")]
    with pytest.raises(SetupError, match="missing.parquet does not exist"):
        data_files(config, "train_files")


@pytest.mark.parametrize("override, key", [
    ("ibpo.lam=${nope}", "ibpo.lam"),  # before: "config: cannot resolve its interpolation: ... key 'nope' ..."
    ("++trainer.project_name=run_${oc.env:IBPO_NO_SUCH_VARIABLE}", "trainer.project_name"),
])
def test_an_interpolation_that_does_not_resolve_names_its_option(tiny_run, override, key):
    """OmegaConf names the key an interpolation reads (``nope``); the user needs the option that holds it."""
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer", overrides=overrides_for(tiny_run, override))
    with pytest.raises(SetupError) as info:
        resolve_config(cfg)
    assert str(info.value).startswith(f"{key}: cannot resolve its interpolation: "), str(info.value)


@pytest.mark.parametrize("override, expected", [
    # a key verl's config does not have, added with '+': dropped without a word before (red team 3)
    ("+trainer.total_trainng_steps=5",
     "trainer.total_trainng_steps is not an option of verl's config (nor of this recipe); did you mean "
     "trainer.total_training_steps?"),
    ("+foo=1", "foo is not an option of verl's config"),
    ("+reward.custom_reward_function.reward_kwarg.x=1",
     "reward.custom_reward_function.reward_kwarg is not an option of verl's config"),
    ("+data.train_file=x.parquet", "did you mean data.train_files?"),
    # verl numbers whose wrong value trains silently
    ("actor_rollout_ref.actor.optim.lr=-1e-6", "actor_rollout_ref.actor.optim.lr=-1e-06 is out of range: must be a "
                                               "finite number >= 0 (a negative rate is gradient ascent)"),
    ("actor_rollout_ref.actor.optim.lr=inf", "actor_rollout_ref.actor.optim.lr=inf is out of range"),
    ("actor_rollout_ref.rollout.temperature=-1.0", "actor_rollout_ref.rollout.temperature=-1.0 is out of range"),
    ("trainer.total_training_steps=0", "trainer.total_training_steps=0 is out of range: must be null"),
    ("trainer.total_training_steps=-5", "trainer.total_training_steps=-5 is out of range"),
    ("algorithm.adv_estimator=grpo ibpo.enable=false actor_rollout_ref.rollout.n=0",
     "actor_rollout_ref.rollout.n=0 is out of range: must be >= 1"),
    ("actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n must be >= 2"),  # IBPO's own check names it
    ("algorithm.adv_estimator=grpo ibpo.enable=false actor_rollout_ref.rollout.n=1",
     "actor_rollout_ref.rollout.n=1 with algorithm.adv_estimator='grpo': the advantage is normalised within"),
    ("ibpo.enable=false actor_rollout_ref.rollout.n=1",
     "actor_rollout_ref.rollout.n=1 with algorithm.adv_estimator='ibpo'"),
    ("ibpo.num_references=0 actor_rollout_ref.rollout.n=1",
     "actor_rollout_ref.rollout.n=1 with algorithm.adv_estimator='ibpo'"),
    # verl ignores a reward function's name without its path, and scores with its own default
    ("reward.custom_reward_function.path=null reward.custom_reward_function.name=my_fn",
     "reward.custom_reward_function.name=my_fn is set but reward.custom_reward_function.path is empty"),
])
def test_a_key_or_value_verl_would_drop_or_misuse_is_refused(tiny_run, override, expected):
    assert expected in refused(tiny_run, *override.split())


def test_free_form_nodes_and_dataclass_fields_take_keys_verls_yaml_lacks(tiny_run):
    # Ray's init keywords, an empty-default node, and a field of the FSDP engine's dataclass absent from the yaml
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer", overrides=overrides_for(
            tiny_run, "++ray_kwargs.ray_init.num_gpus=0", "+actor_rollout_ref.rollout.engine_kwargs.vllm.x=1",
            "++actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32}"))
    from recipe.common.methods import recipe_top_level_keys
    from recipe.common.preflight.verl_validation import check_unknown_keys

    check_unknown_keys(cfg, recipe_top_level_keys())
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        custom = compose(config_name="ibpo_trainer", overrides=overrides_for(
            tiny_run, "data.custom_cls.path=my_dataset.py", "data.custom_cls.name=MyDataset", "+data.my_option=3"))
    check_unknown_keys(custom, recipe_top_level_keys())  # a custom dataset class may read data.my_option


@pytest.mark.parametrize("overrides, named", [
    (["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1"],
     "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1: the counterfactual method scores"),
    (["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
      "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
      "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=100"],  # one row of 64 + 16 tokens
     "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu="),
])
def test_a_counterfactual_log_prob_micro_batch_of_one_row_is_refused(tiny_run, overrides, named):
    """Before: accepted; a response's unmasked row and its masked copies were then scored in different
    micro-batches (one row each, or as verl's dynamic batching scattered them), not beside each other."""
    from recipe.common.methods import run_method_check

    register_config_resolvers()
    with initialize_config_module(config_module="recipe.counterfactual.config", version_base=None):
        cfg = compose(config_name="counterfactual_trainer", overrides=overrides_for(tiny_run, *overrides))
    OmegaConf.resolve(cfg)
    with pytest.raises(SetupError, match=re.escape(named)):
        run_method_check(cfg, "counterfactual", 4096)
    with initialize_config_module(config_module="recipe.counterfactual.config", version_base=None):
        cfg = compose(config_name="counterfactual_trainer", overrides=overrides_for(tiny_run, *overrides,
                                                                                      "counterfactual.mode=random"))
    OmegaConf.resolve(cfg)
    run_method_check(cfg, "counterfactual", 4096)  # a mode without masked copies needs no such micro-batch
