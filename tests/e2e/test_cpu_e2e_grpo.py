"""verl 0.9.1's own legacy trainer runs GRPO + GSPO on CPU through the plugin (end to end, ~1-3 min).

``python -m verl.trainer.main_ppo trainer.use_v1=False`` on the SFT-warm-started tiny model and the
synthetic task, 2 steps, with the ``hf`` rollout printing weight-sync norms. Asserts mechanics, not
learning: both steps produce non-zero advantages and gradients, and the rollout server holds exactly
the weights the actor sent after each update.
"""

from __future__ import annotations

import math
import os
import re
import sys

import pytest

from verl_cpu.hf_rollout import DEBUG_ENV, DEBUG_PREFIX
from verl_cpu.launch import cpu_env, cpu_overrides, process_env, read_metrics_jsonl, run_with_timeout

pytestmark = pytest.mark.e2e

RUN_TIMEOUT_S = 600
ALGORITHM_OVERRIDES = [
    "trainer.use_v1=False",
    "algorithm.adv_estimator=grpo",
    "algorithm.use_kl_in_reward=False",
    "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.optim.lr=1e-3",
]
ADAPTER_LINE = re.compile(
    re.escape(DEBUG_PREFIX) + r" adapter replica=0 sent (\d+) tensors global_steps=(\d+) "
    r"actor_param_norm=([\d.]+) server_param_norm=([\d.]+)"
)
SERVER_LOADED = re.compile(re.escape(DEBUG_PREFIX) + r" hf_server_0 loaded \S+: param_norm=([\d.]+)")
SERVER_BATCHES = re.compile(
    re.escape(DEBUG_PREFIX) + r" hf_server_0 weights updated: .*generate_batch_sizes_since_last_sync=\[([\d, ]*)\]"
)


@pytest.fixture(scope="module")
def run(tmp_path_factory, cpu_demo_assets):
    out = tmp_path_factory.mktemp("cpu_e2e")
    assets = cpu_demo_assets
    metrics_path = out / "metrics.jsonl"
    env = process_env(os.environ, {**cpu_env(metrics_path=metrics_path), DEBUG_ENV: "1"})
    overrides = cpu_overrides(
        assets["model"], assets["train"], assets["val"], total_training_steps=2, train_batch_size=4, rollout_n=4
    )
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, *ALGORITHM_OVERRIDES]
    result = run_with_timeout(cmd, env, timeout_s=RUN_TIMEOUT_S, log_path=out / "run.log", cwd=out)
    print(
        f"\n[cpu e2e] rc={result.returncode} wall={result.wall_s:.1f}s "
        f"peak_tree_rss={result.peak_tree_rss_bytes / 2**30:.2f}GiB "
        f"peak_sys_delta={result.peak_sys_used_delta_bytes / 2**30:.2f}GiB log={result.log_path}"
    )
    assert not result.timed_out, f"run hung; killed after {RUN_TIMEOUT_S}s. Log tail:\n{result.log_tail()}"
    assert result.returncode == 0, f"run failed (rc={result.returncode}). Log tail:\n{result.log_tail()}"
    log = result.log_path.read_text(errors="replace")
    return {"result": result, "metrics": read_metrics_jsonl(metrics_path), "log": log}


def test_run_used_the_legacy_trainer_with_gspo(run):
    log = run["log"]
    for expected in (
        "'use_v1': False",
        "'adv_estimator': 'grpo'",
        "'loss_mode': 'gspo'",
        "'loss_agg_mode': 'seq-mean-token-mean'",
    ):
        assert expected in log, expected
    assert "'name': 'hf'" in log


def test_two_steps_with_mixed_groups_and_nonzero_gradients(run):
    metrics = run["metrics"]
    assert sorted(metrics) == [1, 2]
    for step, m in metrics.items():
        assert math.isfinite(m["actor/pg_loss"]), step
        assert m["actor/grad_norm"] > 0 and math.isfinite(m["actor/grad_norm"]), (step, m["actor/grad_norm"])
        assert m["critic/advantages/max"] > 0 > m["critic/advantages/min"], step  # some group mixed right and wrong
        assert m["response_length/max"] <= 16 and m["timing_s/update_weights"] >= 0
    assert any(0 < m["critic/score/mean"] < 1 for m in metrics.values())


def test_rollout_receives_the_updated_weights(run):
    syncs = {int(g): (int(n), float(a), float(s)) for n, g, a, s in ADAPTER_LINE.findall(run["log"])}
    assert {0, 1} <= set(syncs), f"weight-sync debug lines missing: {sorted(syncs)}"
    for step, (n_tensors, actor_norm, server_norm) in syncs.items():
        assert n_tensors > 0 and server_norm == pytest.approx(actor_norm, rel=1e-6), step
    # The server started from the checkpoint the actor started from ...
    (loaded,) = SERVER_LOADED.findall(run["log"])
    assert float(loaded) == pytest.approx(syncs[0][1], rel=1e-5)
    # ... and after the step-1 update it holds different weights: the update reached the rollout.
    assert abs(syncs[1][1] - syncs[0][1]) > 1e-6 * syncs[0][1]
    # The step-2 rollout then sampled from the actor's policy: rollout vs actor log-probs agree.
    for step, m in run["metrics"].items():
        assert abs(m["rollout_corr/kl"]) < 0.02, (step, m["rollout_corr/kl"])


def test_rollout_server_batched_concurrent_requests(run):
    sizes = [int(x) for group in SERVER_BATCHES.findall(run["log"]) for x in group.split(",") if x.strip()]
    assert sizes and max(sizes) > 1, sizes
