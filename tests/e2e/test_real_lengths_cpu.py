"""The one-GPU IBPO launch script itself, run on CPU (``RECIPE_DEVICE=cpu``) at shortened lengths with responses that
always run to full length (``verl_cpu.real_length_assets``): its correction prompts hold both candidates whole and
its joint-training rows reach their longest, well past the token limit the script used to pass (2 x (MAX_PROMPT +
MAX_RESPONSE)). That limit is refused before Ray, naming it; the script as it is runs a step through verl's real
trainer, and the longest rows it made are what the pre-flight bounded. The full-length run (1,024 + 8,192) is the
documented command of docs/gpu.md, "Real lengths on CPU"."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from verl_cpu.launch import read_metrics_jsonl, run_with_timeout
from verl_cpu.real_length_assets import build_real_length_assets

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[2] / "recipe" / "ibpo" / "run_ibpo_qwen3_1p7b_1gpu.sh"
MAX_PROMPT, MAX_RESPONSE = 96, 256
RUN_TIMEOUT_S = 900


def run_script(tmp: Path, assets: dict, *args: str):
    """The script as a user runs it on CPU: environment variables, one extra override (every all-wrong group is
    corrected: a random model answers nothing right, and the script's default corrects mixed groups only)."""
    env = {**os.environ, "RECIPE_DEVICE": "cpu", "MODEL_PATH": assets["model"], "DATA_DIR": assets["data"],
           "CKPTS_DIR": str(tmp / "ckpts"), "MAX_PROMPT": str(MAX_PROMPT), "MAX_RESPONSE": str(MAX_RESPONSE),
           "TRAIN_BATCH": "1", "MINI_BATCH": "1", "N_RESP": "2", "VAL_N": "1", "COMPUTE_BUDGET": "0",
           "TOTAL_STEPS": "1", "VERL_FILE_LOGGER_PATH": str(tmp / "metrics.jsonl"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = run_with_timeout(["bash", str(SCRIPT), "ibpo.correct_groups=all", "trainer.save_freq=-1", *args], env,
                              timeout_s=RUN_TIMEOUT_S, log_path=tmp / "run.log", cwd=tmp)
    return result, result.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict:
    return build_real_length_assets(tmp_path_factory.mktemp("real"), MAX_PROMPT, context=40960)


def test_the_scripts_former_actor_limit_is_refused_before_ray(assets, tmp_path):
    old = 2 * (MAX_PROMPT + MAX_RESPONSE)
    result, log = run_script(tmp_path, assets, f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={old}")
    assert result.returncode != 0 and "Started a local Ray instance" not in log
    assert re.search(rf"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={old} \(x ulysses_sequence_parallel_size 1 "
                     rf"= {old} tokens\) is below the longest joint-training x~ \+ y\^ row", log), log[-3000:]


def test_the_script_runs_a_step_and_its_longest_rows_are_the_preflights(assets, tmp_path):
    result, log = run_script(tmp_path, assets)
    assert result.returncode == 0, log[-4000:]
    bound = int(re.search(r"joint-training x~ \+ y\^: (\d+); width (\d+)", log).group(1))
    limit = int(re.search(r"ppo_max_token_len_per_gpu (\d+) x sp 1", log).group(1))
    observed = re.search(r"\[ibpo\] step 1: longest rows this step \(tokens\): main (\d+), joint-training (\d+); "
                         r"micro-batch limits x sp: ppo_max_token_len_per_gpu (\d+)", log)
    assert observed, log[-4000:]
    main, joint = int(observed.group(1)), int(observed.group(2))
    assert main == MAX_PROMPT + MAX_RESPONSE  # a prompt of MAX_PROMPT tokens, a response never cut short by EOS
    # x~ holds x and both candidates whole (no marker), the correction runs to full length: past the old limit,
    # within the pre-flight's bound and the derived limit
    assert MAX_PROMPT + 3 * MAX_RESPONSE < joint <= bound <= limit == int(observed.group(3))
    assert joint > 2 * (MAX_PROMPT + MAX_RESPONSE)
    metrics = read_metrics_jsonl(tmp_path / "metrics.jsonl")[1]
    assert metrics["ibpo/longest_joint_training_row"] == joint
    assert metrics["response_length/clip_ratio"] == 1.0  # every main response ran to MAX_RESPONSE
