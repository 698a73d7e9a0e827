"""The quickstart's pieces that need no run: logger handling, the one-GPU overrides, checkpoint lookup and
the per-step progress lines read from a growing file-logger file."""

from __future__ import annotations

import json

from recipe.ibpo.quickstart import (
    CPU_ONLY_ENV,
    StepPrinter,
    format_table,
    gpu_env,
    gpu_overrides,
    latest_hf_checkpoint,
    with_file_logger,
)
from verl_cpu.launch import cpu_overrides


def test_file_logger_is_added_to_any_logger_setting():
    assert with_file_logger(["trainer.logger=[console,tensorboard]"])[0] == ["trainer.logger=[console,tensorboard,file]"]
    assert with_file_logger(["trainer.logger=console"])[0] == ["trainer.logger=[console,file]"]
    assert with_file_logger(["++trainer.logger=['console','wandb']"])[0] == ["++trainer.logger=[console,wandb,file]"]
    kept, note = with_file_logger(["trainer.logger=[console,file]", "ibpo.lam=0.4"])
    assert kept == ["trainer.logger=[console,file]", "ibpo.lam=0.4"] and note is None
    assert with_file_logger(["trainer.logger=[console]"])[1] is not None


def test_gpu_overrides_swap_the_cpu_runtime_for_cuda_and_vllm():
    cpu = cpu_overrides("/m", "/t.parquet", "/v.parquet")
    gpu = gpu_overrides(cpu)
    assert "actor_rollout_ref.rollout.name=vllm" in gpu and "trainer.device=cuda" in gpu
    assert "actor_rollout_ref.rollout.name=hf" not in gpu and "trainer.device=cpu" not in gpu
    assert not any(a.startswith("++ray_kwargs.ray_init.num_gpus") for a in gpu)
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.3" in gpu
    env = gpu_env("/tmp/m.jsonl")
    assert not set(CPU_ONLY_ENV) & set(env) and env["VERL_FILE_LOGGER_PATH"] == "/tmp/m.jsonl"


def test_latest_hf_checkpoint_picks_the_highest_step_with_weights(tmp_path):
    for step, weights in ((2, True), (10, True), (11, False)):
        hf = tmp_path / f"global_step_{step}" / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
        if weights:
            (hf / "model.safetensors").write_bytes(b"x")
    assert latest_hf_checkpoint(tmp_path) == tmp_path / "global_step_10" / "actor" / "huggingface"
    assert latest_hf_checkpoint(tmp_path / "none") is None


def test_step_printer_prints_each_finished_step_once(tmp_path, capsys):
    metrics, log = tmp_path / "m.jsonl", tmp_path / "run.log"
    log.write_text("starting Ray\n")
    printer = StepPrinter(metrics, log, total_steps=2, heartbeat_s=10)
    printer(1.0)  # no metrics file yet, no heartbeat yet
    assert capsys.readouterr().out == ""
    record = {"step": 1, "data": {"ibpo/num_wrong": 3.0, "timing_s/step": 2.5}}
    metrics.write_text(json.dumps(record) + "\n" + '{"step": 2, "da')  # the second line is still being written
    printer(5.0)
    out = capsys.readouterr().out
    assert out.count("step 1/2") == 1 and "wrong 3" in out and "step s 2.5" in out and "2/2" not in out
    with open(metrics, "a") as handle:
        handle.write('ta": {"timing_s/step": 1.0}}\n')
    printer(6.0)
    assert "step 2/2" in capsys.readouterr().out
    printer(20.0)
    assert "running; log: starting Ray" in capsys.readouterr().out


def test_format_table_without_metrics_says_so():
    assert "no per-step metrics" in format_table(None)


def test_next_commands_evaluate_both_models_and_plot_every_run_in_the_directory(tmp_path):
    from recipe.ibpo.quickstart import next_commands

    (tmp_path / "gspo_metrics.jsonl").write_text("")
    assets = {"model": str(tmp_path / "assets/model_sft"), "val": str(tmp_path / "assets/data/val.parquet")}
    ckpt = tmp_path / "checkpoints/global_step_3/actor/huggingface"
    run_warm, run_ckpt, compare, plot = next_commands(assets, tmp_path, "ibpo_binary", ckpt, "ibpo_binary")
    assert f"--model {assets['model']}" in run_warm and f"--model {ckpt}" in run_ckpt
    assert run_warm.split("--model")[1].split("--label")[0].split(" ", 2)[2] == \
        run_ckpt.split("--model")[1].split("--label")[0].split(" ", 2)[2]  # same data and sampling
    assert compare.split()[4].endswith("ibpo_binary/results.json") and compare.split()[5].endswith("warm_start/results.json")
    assert plot.index("--run gspo=") < plot.index("--run ibpo_binary=")


def test_a_step_count_or_timeout_below_one_is_refused_before_anything_runs(tmp_path, capsys):
    # before: --steps 0 trained one step ("step 1/0") and exited 0
    import pytest

    from recipe.ibpo.quickstart import main

    for option, value in (("--steps", "0"), ("--steps", "-2"), ("--timeout", "0"), ("--timeout", "nan")):
        with pytest.raises(SystemExit) as info:
            main(["--out", str(tmp_path / "q"), option, value])
        assert info.value.code == 2
        assert f"argument {option}: must be" in capsys.readouterr().err
    assert not (tmp_path / "q").exists()


def test_method_given_twice_is_refused_naming_both(capsys):
    import pytest

    from recipe.common.main import method_from_argv

    with pytest.raises(SystemExit) as info:
        method_from_argv(["method=counterfactual", "method=ibpo"])
    assert info.value.code == 2
    assert "method= is given 2 times (counterfactual, ibpo); give one" in capsys.readouterr().err


def quickstart_error(argv: list[str], capsys) -> str:
    """The one-line ``argparse`` error (status 2) the quickstart stops with for ``argv``; building the assets or
    starting the run fails the test instead (nothing is built or launched whatever the quickstart does)."""
    import pytest

    import toy_task.synthetic_task
    from recipe.ibpo import quickstart

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(toy_task.synthetic_task, "build_cpu_demo_assets", lambda *a, **k: pytest.fail("assets built"))
        patch.setattr(quickstart, "run_cpu_training", lambda *a, **k: pytest.fail("run launched"))
        with pytest.raises(SystemExit) as info:
            quickstart.main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_an_override_of_a_key_an_option_sets_is_refused_naming_the_option(tmp_path, capsys):
    # before: `-- ibpo.variant=ratio` ran ratio under the name ibpo_binary (its log, metrics and checkpoint)
    out = str(tmp_path / "q")
    assert quickstart_error(["--out", out, "--", "ibpo.variant=ratio", "++trainer.total_training_steps=9"], capsys) \
        .endswith("error: ibpo.variant (use --variant), trainer.total_training_steps (use --steps): set by a "
                  "quickstart option; give the option, not the override")
    assert not (tmp_path / "q").exists()


def test_baseline_with_an_ibpo_option_is_refused(tmp_path, capsys):
    # before: --baseline --variant mask ran GSPO and said nothing of the variant
    err = quickstart_error(["--baseline", "--variant", "mask", "--no-joint-training", "--out", str(tmp_path)], capsys)
    assert err.endswith("error: --no-joint-training, --variant: not used with --baseline (GSPO runs without the "
                        "correction pass); drop them")


def test_an_out_folder_that_is_a_file_is_refused(tmp_path, capsys):
    # before: the asset build began and failed with a NotADirectoryError traceback
    (tmp_path / "f").write_text("")
    assert quickstart_error(["--out", str(tmp_path / "f" / "q")], capsys).endswith(
        f"error: argument --out: {tmp_path / 'f'} is a file, not a folder")


def test_a_cached_warm_start_of_another_configuration_is_refused(tmp_path, capsys):
    # before: a lab.toy_tasks.warm_start folder's assets.json (another model, task and rows) was run as the quickstart's
    from toy_task.synthetic_task import demo_assets_config

    (tmp_path / "assets.json").write_text(json.dumps({"model": str(tmp_path), "train": str(tmp_path),
                                                      "val": str(tmp_path), "tokenizer": str(tmp_path), "sft": {}}))
    assert quickstart_error(["--out", str(tmp_path)], capsys).endswith(
        f"error: --out {tmp_path}: {tmp_path / 'assets.json'} was built with None, not the quickstart's "
        f"{demo_assets_config()}; pass --rebuild to build the quickstart's assets there, or another --out")
    built = {"model": str(tmp_path / "gone"), "train": str(tmp_path), "val": str(tmp_path),
             "tokenizer": str(tmp_path), "built_with": demo_assets_config()}
    (tmp_path / "assets.json").write_text(json.dumps(built))
    assert f"names {tmp_path / 'gone'}, which does not exist" in quickstart_error(["--out", str(tmp_path)], capsys)
    (tmp_path / "assets.json").write_text("{")
    assert "is not a readable asset cache (JSONDecodeError)" in quickstart_error(["--out", str(tmp_path)], capsys)


def test_gpu_without_cuda_is_refused_before_the_assets_are_built(tmp_path, capsys, monkeypatch):
    import torch

    from recipe.ibpo import quickstart

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())
    assert quickstart_error(["--gpu", "--out", str(tmp_path / "q")], capsys).endswith(
        "error: --gpu: no CUDA device is visible")
    assert quickstart.gpu_problem() == "no CUDA device is visible" and not (tmp_path / "q").exists()
