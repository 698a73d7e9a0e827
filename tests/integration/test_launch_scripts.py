"""The launch scripts compose against verl 0.9.1's real config: every override key exists and every IBPO
option validates. ``python3`` is replaced by a shim that records the command line instead of training."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir, initialize_config_module
from omegaconf import OmegaConf

from compute_accounting.row_lengths import phase_rows
from recipe.common.main import method_from_argv, register_config_resolvers
from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.row_limits import check_row_limits
from recipe.common.methods import method_of, method_options, recipe_top_level_keys, trainer_class_for
from recipe.common.preflight.verl_validation import check_unknown_keys, check_verl_ranges

RECIPE_DIR = Path(__file__).resolve().parents[2] / "recipe"
SCRIPT_PATHS = {p.name: p for p in sorted(RECIPE_DIR.glob("*/run_*.sh"))}  # each method folder's launch scripts
SCRIPTS = sorted(SCRIPT_PATHS)


def recorded_invocations(script: str, tmp_path: Path, env_vars: dict | None = None,
                         args: list[str] | None = None) -> list[list[str]]:
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir(parents=True)
    record = tmp_path / "calls.jsonl"
    shim = shim_dir / "python3"
    shim.write_text(f'#!/bin/sh\nexec "{os.sys.executable}" -c \'import json,sys; '
                    f'open("{record}","a").write(json.dumps(sys.argv[1:])+"\\n")\' "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{shim_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), **(env_vars or {})}
    out = subprocess.run(["bash", str(SCRIPT_PATHS[script]), *(args or [])], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_every_script_is_covered():
    assert {"run_ibpo_qwen3_32b.sh", "run_gspo_g64_qwen3_32b.sh", "run_ibpo_ratio_qwen3_32b.sh",
            "run_ibpo_mask_qwen3_32b.sh", "run_ibpo_qwen3_next_80b.sh", "run_ablation_k1_selfcorrect.sh",
            "run_ablation_shaping_only.sh", "run_sweep_lambda.sh", "run_sweep_alpha.sh",
            "run_counterfactual_gsm8k.sh", "run_counterfactual_math.sh", "run_ibpo_qwen3_1p7b_1gpu.sh",
            "run_gspo_qwen3_1p7b_1gpu.sh", "run_gspo_g8_qwen3_32b.sh"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_overrides_compose_against_verl(script, tmp_path):
    calls = recorded_invocations(script, tmp_path)
    assert calls, f"{script} launched nothing"
    for argv in calls:
        # the one launcher, the method named first (a copied script starts a new method by changing that word)
        assert argv[:2] == ["-m", "recipe.main"] and argv[2].startswith("method="), argv[:3]
        args = argv[2:]
        launched = method_from_argv(args)  # what the launcher composes: the method's own config
        config_name = launched.config_name
        register_config_resolvers()
        with initialize_config_dir(config_dir=str(launched.config_dir), version_base=None):
            cfg = compose(config_name=config_name, overrides=args)
        OmegaConf.resolve(cfg)
        method = method_of(cfg)
        check_unknown_keys(cfg, recipe_top_level_keys())  # every key is one verl or the recipe reads
        check_verl_ranges(cfg)
        assert trainer_class_for(cfg).__name__ == {"ibpo": "RayIBPOTrainer",
                                                  "counterfactual": "RayCounterfactualTrainer"}[method]
        if method == "counterfactual":
            assert "ibpo" not in cfg, argv  # a counterfactual run builds no IBPO state
            check_row_limits(cfg, phase_rows(cfg.data.max_prompt_length, cfg.actor_rollout_ref.rollout.response_length,
                                             cfg.actor_rollout_ref.rollout.prompt_length, masked_copies=True))
            continue
        ibpo = method_options(cfg, "ibpo")
        rollout = cfg.actor_rollout_ref.rollout  # every row fits verl's micro-batch limits, x~ at prompt_length
        check_row_limits(cfg, phase_rows(cfg.data.max_prompt_length, rollout.response_length, rollout.prompt_length,
                                         rollout.prompt_length if ibpo.enable else None,
                                         joint_training=ibpo.enable and ibpo.joint_training))
        if ibpo.enable:
            assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "gspo"
            assert cfg.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"
            rollout = cfg.actor_rollout_ref.rollout
            if rollout.max_model_len is not None:  # corrections fit the context: nothing is silently cut
                assert rollout.prompt_length + rollout.response_length <= rollout.max_model_len, argv
            candidates = 1 + ibpo.num_references
            assert cfg.actor_rollout_ref.rollout.prompt_length >= cfg.data.max_prompt_length + candidates * min(
                ibpo.max_candidate_tokens or cfg.data.max_response_length, cfg.data.max_response_length)


def test_sweeps_and_baseline_set_what_they_say(tmp_path):
    lam = [a for call in recorded_invocations("run_sweep_lambda.sh", tmp_path / "l") for a in call
           if a.startswith("ibpo.lam=")]
    assert lam == [f"ibpo.lam={v}" for v in ("0.2", "0.4", "0.6", "0.8", "1.0")]
    alpha = [a for call in recorded_invocations("run_sweep_alpha.sh", tmp_path / "a") for a in call
             if a.startswith("ibpo.alpha")]
    assert "ibpo.alpha_mode=adaptive" in alpha and len(alpha) == 7
    (base,) = recorded_invocations("run_gspo_g64_qwen3_32b.sh", tmp_path / "b")
    assert "ibpo.enable=False" in base and "actor_rollout_ref.rollout.n=64" in base
    (main,) = recorded_invocations("run_ibpo_qwen3_32b.sh", tmp_path / "m")
    assert "ibpo.joint_training=True" in main  # the paper's IBPO trains on its corrections too (App. E.2)
    # the paper's rule is pinned, whatever the package defaults (docs/evidence.md, section 2)
    assert {"ibpo.variant=binary", "ibpo.lam=0.6", "ibpo.shaping=reward", "ibpo.correct_groups=all"} <= set(main)
    (ratio,) = recorded_invocations("run_ibpo_ratio_qwen3_32b.sh", tmp_path / "r")
    (mask,) = recorded_invocations("run_ibpo_mask_qwen3_32b.sh", tmp_path / "k")
    assert "ibpo.variant=ratio" in ratio and "ibpo.variant=mask" in mask and "ibpo.lam=0.6" in mask
    (shaping,) = recorded_invocations("run_ablation_shaping_only.sh", tmp_path / "s")
    assert "ibpo.joint_training=False" in shaping


def test_one_gpu_scripts_fit_one_gpu_and_save_a_hf_checkpoint(tmp_path):
    for script, ibpo_on in (("run_ibpo_qwen3_1p7b_1gpu.sh", True), ("run_gspo_qwen3_1p7b_1gpu.sh", False)):
        (argv,) = recorded_invocations(script, tmp_path / script)
        with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
            cfg = compose(config_name="ibpo_trainer", overrides=argv[2:])
        OmegaConf.resolve(cfg)
        assert cfg.trainer.n_gpus_per_node == 1 and cfg.trainer.nnodes == 1
        assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
        assert cfg.actor_rollout_ref.rollout.name == "vllm"
        assert "hf_model" in cfg.actor_rollout_ref.actor.checkpoint.save_contents
        assert cfg.data.train_files[0].endswith("dapo_math_17k.parquet")
        assert [Path(f).name for f in cfg.data.val_files] == ["aime25.parquet"]
        assert method_options(cfg, "ibpo").enable is ibpo_on
        rollout = cfg.actor_rollout_ref.rollout
        assert rollout.prompt_length + rollout.response_length <= rollout.max_model_len


def composed(argv: list[str]):
    register_config_resolvers()
    with initialize_config_module(config_module="recipe.ibpo.config", version_base=None):
        cfg = compose(config_name="ibpo_trainer", overrides=argv[2:])
    OmegaConf.resolve(cfg)
    return cfg


TABLE1_ARMS = {"run_ibpo_qwen3_32b.sh": (8, True), "run_gspo_g8_qwen3_32b.sh": (8, False),
               "run_gspo_g64_qwen3_32b.sh": (64, False)}


def test_table1_arms_share_one_compute_budget_and_validate_by_it(tmp_path):
    from recipe.common.preflight.compute_budget import compute_budget_from

    budgets = set()
    for script, (group, ibpo_on) in TABLE1_ARMS.items():
        (argv,) = recorded_invocations(script, tmp_path / script)
        cfg = composed(argv)
        budget = compute_budget_from(cfg)  # also refuses a step-count validation schedule beside it
        assert budget.enabled and budget.unit == "flops" and cfg.trainer.test_freq == -1, script
        budgets.add(budget.limit)
        assert cfg.actor_rollout_ref.rollout.n == group and method_options(cfg, "ibpo").enable is ibpo_on, script
        assert [Path(f).name for f in cfg.data.val_files] == ["aime25.parquet", "hmmt_feb_2025.parquet",
                                                              "lcb_v6.parquet"], script
        # the cosine schedule's length is ~1.2x the arm's expected steps to the budget: the cheaper step, the more
        assert cfg.trainer.total_training_steps == {8: 360 if ibpo_on else 700, 64: 90}[group], script
    assert budgets == {3.3e21}
    # one variable moves every arm; GPU time is the other unit
    for script in TABLE1_ARMS:
        (argv,) = recorded_invocations(script, tmp_path / f"{script}_s",
                                       {"COMPUTE_BUDGET": "1.0e21", "BUDGET_UNIT": "gpu_seconds"})
        budget = compute_budget_from(composed(argv))
        assert (budget.limit, budget.unit) == (1.0e21, "gpu_seconds"), script
    (argv,) = recorded_invocations("run_ibpo_qwen3_32b.sh", tmp_path / "steps", {"COMPUTE_BUDGET": "0"})
    cfg = composed(argv)
    assert not compute_budget_from(cfg).enabled and cfg.trainer.test_freq == 10


@pytest.mark.parametrize("script", sorted(TABLE1_ARMS) + ["run_ibpo_qwen3_next_80b.sh"])
def test_table_scripts_offer_both_readings_of_one_update_per_iteration(script, tmp_path):
    updates = {}
    for reading in ("minibatch", "one_update"):
        (argv,) = recorded_invocations(script, tmp_path / reading, {"UPDATE_READING": reading})
        cfg = composed(argv)
        updates[reading] = cfg.data.train_batch_size // cfg.actor_rollout_ref.actor.ppo_mini_batch_size
        assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 32  # App. D
    assert updates == {"minibatch": 4, "one_update": 1}
    text = SCRIPT_PATHS[script].read_text()
    assert "UPDATE_READING" in text  # the header says which reading it follows


def test_one_gpu_pair_uses_the_paper_lr_and_one_budget(tmp_path):
    from recipe.common.preflight.compute_budget import compute_budget_from

    limits = set()
    for script in ("run_ibpo_qwen3_1p7b_1gpu.sh", "run_gspo_qwen3_1p7b_1gpu.sh"):
        (argv,) = recorded_invocations(script, tmp_path / script)
        cfg = composed(argv)
        assert cfg.actor_rollout_ref.actor.optim.lr == 5e-7  # App. D
        limits.add(compute_budget_from(cfg).limit)
        header = SCRIPT_PATHS[script].read_text().split("set -xeuo", 1)[0]
        assert "differs from the paper" in header or "What differs from the paper" in header, script
    assert limits == {1.5e19}


def test_offline_evaluation_allows_the_response_length_of_training(tmp_path):
    import importlib.util

    import sys

    # scripts/ is not a package (verl ships a top-level `scripts`): load the file by path
    spec = importlib.util.spec_from_file_location("ibpo_evaluate_script", RECIPE_DIR.parent / "evaluation" / "evaluate.py")
    evaluate = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = evaluate
    spec.loader.exec_module(evaluate)
    for preset, script in (("qwen3-32b", "run_ibpo_qwen3_32b.sh"), ("qwen3-next-thinking", "run_ibpo_qwen3_next_80b.sh"),
                           ("qwen3-next", "run_ibpo_qwen3_next_80b.sh")):
        (argv,) = recorded_invocations(script, tmp_path / preset)
        cfg = composed(argv)
        assert evaluate.PRESETS[preset].max_new_tokens == cfg.data.max_response_length, preset
        if preset != "qwen3-next":  # the launchers validate with the model's own settings, as the preset samples
            kw = cfg.actor_rollout_ref.rollout.val_kwargs
            p = evaluate.PRESETS[preset]
            assert (kw.temperature, kw.top_p, kw.top_k) == (p.temperature, p.top_p, p.top_k), preset


@pytest.mark.parametrize("script, context, native", [("run_ibpo_qwen3_32b.sh", 131072, 32768),
                                                     ("run_ibpo_qwen3_next_80b.sh", 1048576, 262144)])
def test_whole_candidates_compose_with_one_rope_scaling_for_rollout_and_actor(script, context, native, tmp_path):
    from recipe.common.preflight.model import context_length

    (argv,) = recorded_invocations(script, tmp_path / "whole", {"CANDIDATES": "whole"})
    cfg = composed(argv)
    rope = OmegaConf.to_container(cfg.actor_rollout_ref.model.override_config.rope_scaling)
    assert rope == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": native}
    assert OmegaConf.to_container(cfg.actor_rollout_ref.rollout.engine_kwargs.vllm.hf_overrides) == {"rope_scaling": rope}
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.max_model_len == context == context_length({"max_position_embeddings": native}, {"rope_scaling": rope})
    ibpo = method_options(cfg, "ibpo")
    assert ibpo.max_candidate_tokens == cfg.data.max_response_length  # nothing of an answer is cut
    assert rollout.prompt_length + rollout.response_length <= rollout.max_model_len
    (default,) = recorded_invocations(script, tmp_path / "default")
    # whole candidates are the default (docs/correction_pass.md: the cost of cutting); HOME differs per call
    assert [a.replace(str(tmp_path / "default"), "~") for a in default] == [
        a.replace(str(tmp_path / "whole"), "~") for a in argv]
    (cut,) = recorded_invocations(script, tmp_path / "cut", {"CANDIDATES": "cut"})
    cut_cfg = composed(cut)
    assert "rope_scaling" not in (cut_cfg.actor_rollout_ref.model.get("override_config") or {})
    assert method_options(cut_cfg, "ibpo").max_candidate_tokens == {"run_ibpo_qwen3_32b.sh": 3952,
                                                              "run_ibpo_qwen3_next_80b.sh": 2928}[script]


def test_one_gpu_pair_shows_whole_candidates_in_the_model_context(tmp_path):
    (argv,) = recorded_invocations("run_ibpo_qwen3_1p7b_1gpu.sh", tmp_path / "w")
    cfg = composed(argv)
    assert method_options(cfg, "ibpo").max_candidate_tokens == cfg.data.max_response_length == 8192
    assert cfg.actor_rollout_ref.rollout.max_model_len == 32768  # inside Qwen3-1.7B's 40,960: no rope scaling
    assert "rope_scaling" not in (cfg.actor_rollout_ref.model.get("override_config") or {})
    (cut,) = recorded_invocations("run_ibpo_qwen3_1p7b_1gpu.sh", tmp_path / "c", {"CANDIDATES": "cut"})
    assert method_options(composed(cut), "ibpo").max_candidate_tokens == 3440


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_table_script_names_its_reading_of_one_update_per_iteration(script):
    header = SCRIPT_PATHS[script].read_text().split("set -xeuo", 1)[0]
    if "counterfactual" in script:
        return  # not a Table-1-5 launcher of the IBPO paper
    assert "UPDATE_READING" in header, script


@pytest.mark.parametrize("script", ["run_ibpo_qwen3_1p7b_1gpu.sh", "run_gspo_qwen3_1p7b_1gpu.sh"])
def test_one_gpu_start_up_options_compose_against_verl(script, tmp_path):
    """FAST_START and ENFORCE_EAGER set the pinned verl's own keys (their step-time cost: docs/gpu.md, unmeasured)."""
    (plain,) = recorded_invocations(script, tmp_path / "plain")
    default = composed(plain)
    assert default.actor_rollout_ref.actor.use_torch_compile is True  # verl's default: what FAST_START turns off
    assert default.actor_rollout_ref.rollout.cudagraph_capture_sizes is None
    assert default.actor_rollout_ref.rollout.enforce_eager is False
    (fast,) = recorded_invocations(script, tmp_path / "fast", {"FAST_START": "1", "TRAIN_BATCH": "2"})
    cfg = composed(fast)
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert actor.use_torch_compile is False and actor.fsdp_config.use_torch_compile is False
    assert list(rollout.cudagraph_capture_sizes) == [1, 2, 4, 8, 16]  # up to the step's 2 x G = 8 requests
    assert rollout.enforce_eager is False
    assert {a for a in fast if a not in plain and str(tmp_path) not in a} == {  # nothing else moves
        "data.train_batch_size=2", "actor_rollout_ref.actor.use_torch_compile=False",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
        "actor_rollout_ref.rollout.cudagraph_capture_sizes=[1,2,4,8,16]"}
    (capped,) = recorded_invocations(script, tmp_path / "cap", {"FAST_START": "1", "CUDAGRAPH_MAX": "24"})
    assert list(composed(capped).actor_rollout_ref.rollout.cudagraph_capture_sizes) == [1, 2, 4, 8, 16, 24]
    (full,) = recorded_invocations(script, tmp_path / "full", {"FAST_START": "1"})
    assert max(composed(full).actor_rollout_ref.rollout.cudagraph_capture_sizes) == 256  # 32 x 8
    (eager,) = recorded_invocations(script, tmp_path / "eager", {"ENFORCE_EAGER": "1"})
    cfg = composed(eager)
    assert cfg.actor_rollout_ref.rollout.enforce_eager is True and cfg.actor_rollout_ref.actor.use_torch_compile


def test_shape_bench_command_runs_the_papers_rule_and_corrects_every_wrong_response(tmp_path):
    """lab/scripts/bench_one_gpu_shape.py's launch: random weights answer every problem wrong (all groups all-wrong);
    its command, composed against verl's config, corrects each of them (the count its table prints)."""
    import importlib.util
    import sys

    from ibpo.options import IBPOConfig
    from ibpo.pipeline import plan_corrections

    path = RECIPE_DIR.parent / "lab" / "scripts" / "bench_one_gpu_shape.py"
    spec = importlib.util.spec_from_file_location("bench_one_gpu_shape_cmd", path)
    shape = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = shape
    spec.loader.exec_module(shape)
    cmd, env = shape.launch_command(tmp_path / "m", {"train": "/d/t.parquet", "val": "/d/v.parquet"}, tmp_path, 1, [])
    assert cmd[1] == str(SCRIPT_PATHS["run_ibpo_qwen3_1p7b_1gpu.sh"])
    (argv,) = recorded_invocations("run_ibpo_qwen3_1p7b_1gpu.sh", tmp_path / "b", env, args=cmd[2:])
    cfg = composed(argv)
    ibpo = method_options(cfg, "ibpo")
    assert ibpo.correct_groups == "all" and IBPOConfig().correct_groups == "mixed"
    prompts, group = int(cfg.data.train_batch_size), int(cfg.actor_rollout_ref.rollout.n)
    groups = [g for g in range(prompts) for _ in range(group)]
    messages = [[{"role": "user", "content": f"problem {g}"}] for g in groups]
    responses = [[7, i % 50 + 1] for i in range(len(groups))]
    decode = lambda ids: " ".join(map(str, ids))  # noqa: E731
    planned = plan_corrections(groups, [False] * len(groups), messages, responses, decode, ibpo, step=1)
    assert len(planned) == prompts * group == 256  # every wrong response of 32 all-wrong groups of G = 8
    mixed = plan_corrections(groups, [False] * len(groups), messages, responses, decode,
                             IBPOConfig(correct_groups="mixed"), step=1)
    assert mixed == []  # the package default corrects none of them: why the bench passes the rule


def test_gpu_bench_step_composes_against_verl(tmp_path):
    """lab/scripts/bench_gpu.py's step part: one launch of the one-GPU script at the bench's reduced shape for three
    steps with the bench-only method (IBPO, IBPO, GSPO), FAST_START, vLLM eager, one agent-loop and one reward
    worker, the paper's rule and ngram speculation with vLLM's stats, composed against verl's config."""
    import importlib.util
    import sys

    path = RECIPE_DIR.parent / "lab" / "scripts" / "bench_gpu.py"
    spec = importlib.util.spec_from_file_location("bench_gpu_cmd", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    args = bench.parse_args([])
    cmd, env = bench.step_command(args, tmp_path, tmp_path / "model", {"train": "/d/t.parquet", "val": "/d/v.parquet"})
    (argv,) = recorded_invocations("run_ibpo_qwen3_1p7b_1gpu.sh", tmp_path / "b", env, args=cmd[2:])
    assert argv[:3] == ["-m", "recipe.main", "method=ibpo_then_gspo"]
    assert env["RECIPE_METHOD_MODULES"] == "ibpo_then_gspo.method" and env["VLLM_LOGGING_LEVEL"] == "INFO"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(bench.BENCH_METHODS)
    cfg = composed(argv)
    rollout, actor = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor
    assert method_options(cfg, "ibpo").correct_groups == "all" and method_options(cfg, "ibpo").enable
    assert (cfg.data.train_batch_size, rollout.n, cfg.data.max_response_length) == (2, 8, 512)
    assert actor.ppo_mini_batch_size == 2 and cfg.trainer.total_training_steps == 3
    assert actor.use_torch_compile is False and actor.fsdp_config.use_torch_compile is False
    assert rollout.enforce_eager is True and rollout.agent.num_workers == 1 and cfg.reward.num_workers == 1
    assert rollout.prompt_length == bench.shape.correction_prompt_length(1024, 512)
    assert dict(rollout.engine_kwargs.vllm.speculative_config) == {
        "method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5, "num_speculative_tokens": 8}
    assert rollout.disable_log_stats is False and rollout.ignore_eos is True
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.compute_budget.limit == 0 and cfg.trainer.test_freq == -1 and cfg.trainer.val_before_train is False
    graphs_args = bench.parse_args(["--step-vllm", "full-graphs"])
    cmd, env = bench.step_command(graphs_args, tmp_path, tmp_path / "model",
                                  {"train": "/d/t.parquet", "val": "/d/v.parquet"})
    (argv,) = recorded_invocations("run_ibpo_qwen3_1p7b_1gpu.sh", tmp_path / "g", env, args=cmd[2:])
    graphs = composed(argv).actor_rollout_ref.rollout
    assert graphs.enforce_eager is False and max(graphs.cudagraph_capture_sizes) == 2 * 8 * (1 + 8)
    assert dict(graphs.engine_kwargs.vllm.compilation_config) == {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}


def refused(script: str, tmp_path: Path, env_vars: dict) -> str:
    """The one line a launch script stops with (status 2) for ``env_vars``; asserts that it launched nothing."""
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir(parents=True)
    (shim_dir / "python3").write_text(f'#!/bin/sh\ntouch "{tmp_path / "launched"}"\n')
    (shim_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), **env_vars}
    env.pop("RECIPE_LAUNCH_SCRIPT", None)
    out = subprocess.run(["bash", str(SCRIPT_PATHS[script])], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and not (tmp_path / "launched").exists(), out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("[recipe] launch error: ")]
    assert len(errors) == 1, out.stderr[-2000:]
    return errors[0].removeprefix("[recipe] launch error: ")


ONE_GPU = "run_ibpo_qwen3_1p7b_1gpu.sh"
TOP = "run_ibpo_qwen3_32b.sh"


@pytest.mark.parametrize("script, env_vars, message", [
    # before: FAST_START/ENFORCE_EAGER other than 1 ran as 0, an empty CANDIDATES as whole, 1e3 failed inside bash
    # arithmetic ("value too great for base") and a word was read there as a variable (MAX_RESPONSE=N_RESP: 8)
    (ONE_GPU, {"FAST_START": "yes"}, "FAST_START='yes': must be one of: 0 1"),
    (ONE_GPU, {"ENFORCE_EAGER": "2"}, "ENFORCE_EAGER='2': must be one of: 0 1"),
    (ONE_GPU, {"CANDIDATES": "cutt"}, "CANDIDATES='cutt': must be one of: whole cut"),
    (ONE_GPU, {"CANDIDATES": ""}, "CANDIDATES is set but empty: give it a value, or unset it for the script's default"),
    (ONE_GPU, {"MAX_RESPONSE": "1e3"}, "MAX_RESPONSE='1e3': must be an integer >= 1"),
    (ONE_GPU, {"MAX_RESPONSE": "N_RESP"}, "MAX_RESPONSE='N_RESP': must be an integer >= 1"),
    (ONE_GPU, {"FAST_START": "1", "CUDAGRAPH_MAX": "x"}, "CUDAGRAPH_MAX='x': must be an integer >= 1"),
    (ONE_GPU, {"COMPUTE_BUDGET": "abc"}, "COMPUTE_BUDGET='abc': must be a number >= 0 (e.g. 5e-7, 1.5e19)"),
    (ONE_GPU, {"VAL_TEMPERATURE": "hot"}, "VAL_TEMPERATURE='hot': must be a number >= 0 (e.g. 5e-7, 1.5e19)"),
    (TOP, {"LR": "-1"}, "LR='-1': must be a number >= 0 (e.g. 5e-7, 1.5e19)"),
    (TOP, {"JOINT": "maybe"}, "JOINT='maybe': must be one of: True False"),
    (TOP, {"MODEL_PATH": ""}, "MODEL_PATH is set but empty: give it a value, or unset it for the script's default"),
    # a variable this configuration does not read: before, silently ignored
    (ONE_GPU, {"CUDAGRAPH_MAX": "24"}, "CUDAGRAPH_MAX='24' is not read here: it sizes FAST_START=1's CUDA graphs; "
                                       "unset it"),
    (TOP, {"TEST_FREQ": "5"}, "TEST_FREQ='5' is not read here: validation follows COMPUTE_BUDGET (at 25/50/75/100 %; "
                              "COMPUTE_BUDGET=0 for steps); unset it"),
    (TOP, {"CANDIDATES": "cut", "ROPE_ORIGINAL": "1000"},
     "ROPE_ORIGINAL='1000' is not read here: CANDIDATES=cut runs the model's own context; unset it"),
    ("run_gspo_g8_qwen3_32b.sh", {"JOINT": "True"},
     "JOINT='True' is not read here: the GSPO baseline trains no corrections; unset it"),
    ("run_ibpo_mask_qwen3_32b.sh", {"VARIANT": "ratio"}, "VARIANT='ratio' is not read here: this script runs "
                                                         "VARIANT=mask; unset it"),
    (TOP, {"FAST_START": "1"}, "FAST_START='1' is read by other launch scripts, not by run_ibpo_qwen3_32b.sh (it "
                               "would be ignored); unset it"),
    (ONE_GPU, {"NNODES": "2"}, "NNODES='2' is read by other launch scripts, not by run_ibpo_qwen3_1p7b_1gpu.sh (it "
                               "would be ignored); unset it"),
    ("run_counterfactual_math.sh", {"COMPUTE_BUDGET": "1e19"}, "COMPUTE_BUDGET='1e19' is read by other launch "
                                                               "scripts, not by run_counterfactual_math.sh (it would "
                                                               "be ignored); unset it"),
    # a sweep's values, all before its first run (before: a bad fourth value failed after three trainings)
    ("run_sweep_alpha.sh", {"ALPHAS": "0.5 0.6x"}, "ALPHAS='0.5 0.6x': '0.6x' is not a number >= 0"),
    ("run_sweep_lambda.sh", {"LAMBDAS": " "}, "LAMBDAS=' ': must list at least one number"),
    ("run_counterfactual_math.sh", {"MODES": "random invertd"},
     "MODES='random invertd': 'invertd' is not one of: counterfactual inverted random vanilla"),
])
def test_a_bad_launch_variable_stops_the_script_naming_it(script, env_vars, message, tmp_path):
    assert refused(script, tmp_path, env_vars) == message


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_checks_its_variables(script, tmp_path):
    """Every launch script sources the one check (recipe/common/launch_env.sh): an empty DATA_DIR, which each reads,
    is refused, not read as the default."""
    assert 'source "$(dirname "$0")/../common/launch_env.sh"' in SCRIPT_PATHS[script].read_text()
    assert refused(script, tmp_path, {"DATA_DIR": ""}) == (
        "DATA_DIR is set but empty: give it a value, or unset it for the script's default")


def test_a_zero_budget_written_as_a_float_runs_by_steps_and_validates(tmp_path):
    # before: COMPUTE_BUDGET=0.0 was not "0", so test_freq stayed -1: a run with no budget and no validation at all
    (argv,) = recorded_invocations(ONE_GPU, tmp_path / "z", {"COMPUTE_BUDGET": "0.0"})
    assert "trainer.test_freq=10" in argv and "compute_budget.limit=0.0" in argv
    (argv,) = recorded_invocations(TOP, tmp_path / "t", {"COMPUTE_BUDGET": "0e0", "TEST_FREQ": "5"})
    assert "trainer.test_freq=5" in argv


def test_one_gpu_script_reads_the_validation_sampling_variables(tmp_path):
    # before: VAL_TEMPERATURE/VAL_TOP_P/VAL_TOP_K (read by the 32B and 80B scripts) were ignored here
    (argv,) = recorded_invocations(ONE_GPU, tmp_path, {"VAL_TEMPERATURE": "0.7", "VAL_TOP_P": "0.8", "VAL_TOP_K": "-1"})
    kw = composed(argv).actor_rollout_ref.rollout.val_kwargs
    assert (kw.temperature, kw.top_p, kw.top_k) == (0.7, 0.8, -1)


# ------------------------------------------------------------------ rows against verl's micro-batch token limits
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A local model folder whose tokenizer the IBPO start check measures the correction template with."""
    from verl_cpu.tiny_assets import build_tiny_assets

    return build_tiny_assets(tmp_path_factory.mktemp("rows"))["model"]


def method_check(script: str, tmp_path: Path, tiny_model: str, context: int, env_vars: dict | None = None,
                 args: list[str] | None = None) -> str:
    """The script's config through the method's own start check (as the pre-flight runs it, with the model's
    tokenizer); returns what it printed."""
    import contextlib
    import io

    from recipe.common.methods import method_of, run_method_check

    (argv,) = recorded_invocations(script, tmp_path, {"MODEL_PATH": tiny_model, **(env_vars or {})}, args)
    launched = method_from_argv(argv[2:])
    register_config_resolvers()
    with initialize_config_dir(config_dir=str(launched.config_dir), version_base=None):
        cfg = compose(config_name=launched.config_name, overrides=argv[2:])
    OmegaConf.resolve(cfg)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_method_check(cfg, method_of(cfg), context)
    return out.getvalue()


ONE_GPU = "run_ibpo_qwen3_1p7b_1gpu.sh"


def test_the_one_gpu_scripts_former_actor_limit_is_refused_and_its_default_fits(tiny_model, tmp_path):
    """Before: 2 x (1,024 + 8,192) = 18,432, and a joint row x~ + y^ of up to 17,696 + 8,192 tokens stopped the run
    at verl's assertion in the first actor update holding one; now refused before Ray, in one line."""
    with pytest.raises(SetupError) as refused_limit:
        method_check(ONE_GPU, tmp_path / "old", tiny_model, 40960,
                     args=["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=18432"])
    message = str(refused_limit.value)
    assert "\n" not in message
    assert message.startswith("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=18432 (x ulysses_sequence_parallel_"
                              "size 1 = 18432 tokens) is below the longest joint-training x~ + y^ row")
    assert "rollout.prompt_length 17696) + rollout.response_length 8192" in message  # the row's two options
    longest = int(message.split("row, ")[1].split(" tokens")[0])
    assert 18432 < longest <= 25888 and f"Set actor_rollout_ref.actor.ppo_max_token_len_per_gpu >= {longest}" in message
    printed = method_check(ONE_GPU, tmp_path / "new", tiny_model, 40960)  # the script as it is: fits
    assert "ppo_max_token_len_per_gpu 25888 x sp 1" in printed and "log_prob_max_token_len_per_gpu 36864 x sp 1" in printed
    assert f"joint-training x~ + y^: {longest}; width 25888" in printed


@pytest.mark.parametrize("args, option", [
    (["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=18432"],
     "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=18432"),
    (["actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=18432"],
     "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=18432"),
])
def test_the_log_prob_and_reference_limits_are_checked_too(args, option, tiny_model, tmp_path):
    with pytest.raises(SetupError, match=re.escape(option) + r" .*is below the longest joint-training"):
        method_check(ONE_GPU, tmp_path, tiny_model, 40960, args=args)


def test_without_remove_padding_the_padded_width_is_measured(tiny_model, tmp_path):
    """No joint rows (JOINT=False), but verl's agent loop pads every prompt to IBPO's wide prompt_length: without
    remove-padding verl's micro-batcher measures that width, 17,696 + 8,192, for every main row."""
    args = ["actor_rollout_ref.model.use_remove_padding=False"]
    with pytest.raises(SetupError, match=r"below the longest main row, 25888 tokens \(its padded width"):
        method_check(ONE_GPU, tmp_path / "old", tiny_model, 40960, {"JOINT": "False"},
                     args + ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=18432"])
    method_check(ONE_GPU, tmp_path / "new", tiny_model, 40960, {"JOINT": "False"}, args)


def test_sequence_parallelism_multiplies_the_per_gpu_limit(tiny_model, tmp_path):
    """The 32B script: its joint rows (x~ up to 63,776 tokens + 30,720) fit 8 GPUs' share of a row, not one GPU's."""
    limit = ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=11812"]  # ceil(94,496 / 8)
    method_check("run_ibpo_qwen3_32b.sh", tmp_path / "sp8", tiny_model, 131072, args=limit)
    with pytest.raises(SetupError, match=r"=11812 \(x ulysses_sequence_parallel_size 1 = 11812 tokens\)"):
        method_check("run_ibpo_qwen3_32b.sh", tmp_path / "sp1", tiny_model, 131072, {"SP_SIZE": "1"}, limit)
    method_check("run_ibpo_qwen3_32b.sh", tmp_path / "sp1_default", tiny_model, 131072, {"SP_SIZE": "1"})


def test_the_counterfactual_scripts_limits_fit_and_a_short_one_is_refused(tiny_model, tmp_path):
    env = {"MODES": "counterfactual"}
    method_check("run_counterfactual_math.sh", tmp_path / "ok", tiny_model, 40960, env)
    with pytest.raises(SetupError, match=r"actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192 .* main row, 10240"):
        method_check("run_counterfactual_math.sh", tmp_path / "short", tiny_model, 40960, env,
                     ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192"])
