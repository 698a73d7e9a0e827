"""Start checks of the correction pass's rollout (recipe/ibpo/correction/rollout.py), the length-bound
options (ibpo/options.py) and the per-request max_tokens path (recipe/ibpo/correction/agent_loop.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from omegaconf import OmegaConf

from ibpo.options import IBPOConfig, IBPOConfigError
from recipe.ibpo.correction.rollout import (
    DEFAULT_PROXY_PARAMS,
    SPEC_OPTION,
    check_correction_rollout,
    proxy_params,
    speculative_config_of,
)

NGRAM = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5, "num_speculative_tokens": 8}


def trainer_config(spec=None, name="vllm", mtp_rollout=False, multi_turn=False, rollout_correction=None):
    vllm = {} if spec is None else {"speculative_config": spec}
    correction = {"rollout_is": None, "rollout_rs": None, "bypass_mode": False, **(rollout_correction or {})}
    return OmegaConf.create({"actor_rollout_ref": {
        "rollout": {"name": name, "engine_kwargs": {"vllm": vllm, "sglang": {}}, "multi_turn": {"enable": multi_turn}},
        "model": {"mtp": {"enable": mtp_rollout, "enable_rollout": mtp_rollout}},
    }, "algorithm": {"rollout_correction": correction}})


@pytest.mark.parametrize("spec", [None, NGRAM, {"method": "suffix"}, {"method": "suffix", "num_speculative_tokens": 16,
                                                                      "suffix_decoding_max_tree_depth": 32},
                                  '{"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3, '
                                  '"num_speculative_tokens": 4}',
                                  {**NGRAM, "rejection_sample_method": "standard"}])
def test_lossless_settings_pass(spec):
    check_correction_rollout(trainer_config(spec), IBPOConfig())


@pytest.mark.parametrize("spec, kwargs, named", [
    ({"method": "eagle", "model": "some/eagle", "num_speculative_tokens": 3}, {}, "method='eagle'"),
    ({"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3}, {}, "method='draft_model'"),
    ({"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3}, {}, "method=None"),
    ({**NGRAM, "model": "x"}, {}, "model='x'"),
    ({**NGRAM, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.0}, {}, "synthetic_acceptance"),
    ({**NGRAM, "rejection_sample_method": "synthetic"}, {}, "rejection_sample_method='synthetic'"),
    ({**NGRAM, "rejection_sample_method": "block"}, {}, "rejection_sample_method='block'"),
    ({**NGRAM, "draft_sample_method": "probabilistic"}, {}, "draft_sample_method"),
    ({**NGRAM, "prompt_lookup_min": None}, {}, "prompt_lookup_min=None"),
    ({**NGRAM, "prompt_lookup_min": 6}, {}, "prompt_lookup_min=6 > prompt_lookup_max=5"),
    ({**NGRAM, "num_speculative_tokens": 0}, {}, "num_speculative_tokens=0"),
    ({"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 2}, {}, "num_speculative_tokens=None"),
    ("{not json", {}, "not a JSON object"),
    (NGRAM, {"name": "hf"}, "rollout.name='hf'"),
    (NGRAM, {"mtp_rollout": True}, "mtp.enable_rollout"),
    (NGRAM, {"rollout_correction": {"rollout_is": "token"}}, "rollout_correction.rollout_is='token'"),
    (NGRAM, {"rollout_correction": {"bypass_mode": True}}, "rollout_correction.bypass_mode=True"),
    ({"method": "suffix"}, {"rollout_correction": {"rollout_rs": "seq_mean_k1"}}, "rollout_rs"),
])
def test_settings_that_break_exactness_fail_naming_the_option(spec, kwargs, named):
    with pytest.raises(IBPOConfigError) as err:
        check_correction_rollout(trainer_config(spec, **kwargs), IBPOConfig())
    assert named in str(err.value)
    assert SPEC_OPTION in str(err.value)


def test_rollout_correction_without_speculation_is_fine():
    check_correction_rollout(trainer_config(None, rollout_correction={"rollout_is": "token", "bypass_mode": True}),
                             IBPOConfig())


def test_the_bound_options_are_validated():
    assert IBPOConfig(correction_max_tokens_factor=1.5).correction_max_tokens_factor == 1.5
    for bad in (0.5, -1.0):
        with pytest.raises(IBPOConfigError, match="ibpo.correction_max_tokens_factor"):
            IBPOConfig(correction_max_tokens_factor=bad)
    for bad in (float("inf"), float("nan"), True, "2"):
        with pytest.raises(IBPOConfigError, match="ibpo.correction_max_tokens_factor"):
            IBPOConfig(correction_max_tokens_factor=bad)
    for bad in (-1, 16.5, True):
        with pytest.raises(IBPOConfigError, match="ibpo.correction_closing_tokens"):
            IBPOConfig(correction_closing_tokens=bad)
    assert IBPOConfig(correction_max_tokens_factor=2).correction_max_tokens_factor == 2
    with pytest.raises(IBPOConfigError, match="ibpo.lookup_proxy_interval"):
        IBPOConfig(lookup_proxy_interval=-1)
    with pytest.raises(IBPOConfigError, match="multi_turn"):
        check_correction_rollout(trainer_config(multi_turn=True), IBPOConfig(correction_max_tokens_factor=2.0))


def test_proxy_replays_the_rollouts_own_ngram_window():
    assert proxy_params(trainer_config(NGRAM)).prompt_lookup_max == 5
    assert proxy_params(trainer_config({**NGRAM, "prompt_lookup_max": 7})).prompt_lookup_max == 7
    assert proxy_params(trainer_config({"method": "suffix"})) == DEFAULT_PROXY_PARAMS
    assert proxy_params(trainer_config(None)) == DEFAULT_PROXY_PARAMS
    assert speculative_config_of(trainer_config({})) is None


def test_the_correction_loop_puts_the_rows_bound_into_the_request(monkeypatch):
    """verl's agent loop calls run(sampling_params, **row) with every non-tensor column of the row; the
    correction loop must hand verl's single-turn loop (which passes sampling_params unchanged to the
    server) a max_tokens equal to the row's ibpo_max_tokens, and leave the shared dict alone."""
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    from recipe.ibpo.correction.agent_loop import IBPOCorrectionAgentLoop
    from ibpo.correction_lengths import MAX_TOKENS_KEY

    seen = []

    async def base_run(self, sampling_params, **kwargs):
        seen.append((dict(sampling_params), sorted(kwargs)))
        return "out"

    monkeypatch.setattr(SingleTurnAgentLoop, "run", base_run)
    loop = object.__new__(IBPOCorrectionAgentLoop)
    shared = {"temperature": 1.0, "top_p": 1.0}
    assert asyncio.run(loop.run(shared, raw_prompt=[], **{MAX_TOKENS_KEY: np.int64(37)})) == "out"
    asyncio.run(loop.run(shared, raw_prompt=[], **{MAX_TOKENS_KEY: 0}))
    assert seen[0] == ({"temperature": 1.0, "top_p": 1.0, "max_tokens": 37}, ["raw_prompt"])
    assert seen[1] == ({"temperature": 1.0, "top_p": 1.0}, ["raw_prompt"])  # 0: the rollout's own bound
    assert shared == {"temperature": 1.0, "top_p": 1.0}


def test_the_loop_is_registered_with_verl():
    import recipe.verl_plugin  # noqa: F401  (the verl.plugins entry point)
    from verl.experimental.agent_loop import agent_loop

    from ibpo.correction_lengths import AGENT_LOOP_NAME

    target = agent_loop._agent_loop_registry[AGENT_LOOP_NAME]["_target_"]
    module, name = target.rsplit(".", 1)
    import importlib

    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    assert issubclass(getattr(importlib.import_module(module), name), SingleTurnAgentLoop)


# ------------------------------------------------------------------ speculation that switches itself off
def spec_config(spec, batch=8, n=4, **rollout):
    cfg = trainer_config(spec)
    cfg.actor_rollout_ref.rollout.update({"calculate_log_probs": True, "n": n, **rollout})
    cfg.data = {"train_batch_size": batch}
    return cfg


@pytest.mark.parametrize("sampling, version, off", [
    ({"repetition_penalty": 1.0, "logprobs": 0}, "0.24.0", []),
    ({"repetition_penalty": 1.05}, "0.24.0", ["repetition_penalty=1.05"]),
    ({"presence_penalty": 0.5, "frequency_penalty": -0.1}, "0.24.0", ["frequency_penalty=-0.1", "presence_penalty=0.5"]),
    ({"min_p": 0.05}, "0.24.0", ["min_p=0.05"]),
    ({"min_p": 1e-6}, "0.24.0", []),                      # vLLM's own epsilon
    ({"logprobs": 0}, "0.12.0", ["logprobs=0"]),           # older vLLM: logprobs also turned it off
    ({"logprobs": None}, "0.12.0", []),
    ({"logprobs": 0}, None, []),                           # the pinned vLLM (0.24.0)
])
def test_the_options_that_switch_speculation_off_per_vllm_version(sampling, version, off):
    from recipe.ibpo.correction.rollout import speculation_disabled_by

    assert sorted(speculation_disabled_by(sampling, version)) == sorted(off)


@pytest.mark.parametrize("rollout, named", [
    ({"repetition_penalty": 1.1}, "actor_rollout_ref.rollout.repetition_penalty=1.1"),
    ({"min_p": 0.1}, "actor_rollout_ref.rollout.min_p=0.1"),
    ({"presence_penalty": 0.3}, "actor_rollout_ref.rollout.presence_penalty=0.3"),
])
def test_a_speculative_config_the_sampling_would_switch_off_is_refused(rollout, named):
    with pytest.raises(IBPOConfigError, match="WITHOUT speculation") as info:
        check_correction_rollout(spec_config(NGRAM, **rollout), IBPOConfig())
    assert named in str(info.value) and "is_spec_decode_unsupported" in str(info.value)
    check_correction_rollout(spec_config(None, **rollout), IBPOConfig())  # no speculation: nothing to lose


def test_the_default_sampling_keeps_speculation_on():
    check_correction_rollout(spec_config(NGRAM, repetition_penalty=1.0), IBPOConfig())


def test_old_vllm_with_log_probs_would_switch_it_off():
    from recipe.ibpo.correction.rollout import check_speculation_stays_on

    with pytest.raises(IBPOConfigError, match=r"calculate_log_probs \(vLLM logprobs=True\).*0\.12\.0"):
        check_speculation_stays_on(spec_config(NGRAM), NGRAM, "0.12.0")


def test_disable_by_batch_size_below_the_step_is_refused():
    spec = {**NGRAM, "disable_by_batch_size": 16}
    with pytest.raises(IBPOConfigError, match=r"disable_by_batch_size=16.*= 32"):
        check_correction_rollout(spec_config(spec, batch=8, n=4), IBPOConfig())
    check_correction_rollout(spec_config({**NGRAM, "disable_by_batch_size": 64}, batch=8, n=4), IBPOConfig())


def test_spec_step_metrics_tell_off_from_no_speed_up():
    import numpy as np

    from recipe.ibpo.correction.rollout import spec_decode_step_metrics

    assert spec_decode_step_metrics(False, None, None, None) == {}
    assert spec_decode_step_metrics(True, None, None, None) == {"rollout/spec_stats_reported": 0.0}
    m = spec_decode_step_metrics(True, np.array([16, 0, 8]), np.array([6, 0, 2]), np.array([4, 10, 4]))
    assert m["rollout/spec_stats_reported"] == 1.0
    assert m["rollout/spec_accepted_per_decode_step"] == pytest.approx(8 / 18)
    assert m["rollout/spec_requests_without_drafts"] == pytest.approx(1 / 3)
    off = spec_decode_step_metrics(True, [0, 0], [0, 0], [10, 12])  # reported, but no drafts: speculation off
    assert off["rollout/spec_requests_without_drafts"] == 1.0 and off["rollout/spec_accepted_per_decode_step"] == 0
