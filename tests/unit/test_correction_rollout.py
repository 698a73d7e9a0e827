"""Start checks of the correction pass's rollout (recipe/ibpo/correction/rollout.py), the length-bound
options (ibpo/options.py) and the per-request max_tokens path (recipe/ibpo/correction/agent_loop.py)."""

from __future__ import annotations

import asyncio
import dataclasses

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
        "rollout": {"name": name, "engine_kwargs": {"vllm": vllm, "sglang": {}}, "multi_turn": {"enable": multi_turn},
                    "disable_log_stats": False},
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
    import recipe.ibpo.verl_plugin  # noqa: F401  (the verl.plugins entry point)
    from verl.experimental.agent_loop import agent_loop

    from ibpo.correction_lengths import AGENT_LOOP_NAME

    target = agent_loop._agent_loop_registry[AGENT_LOOP_NAME]["_target_"]
    module, name = target.rsplit(".", 1)
    import importlib

    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    assert issubclass(getattr(importlib.import_module(module), name), SingleTurnAgentLoop)


# ------------------------------------------------------------------ speculation that switches itself off
# The rule table is the pinned vLLM's (recipe/ibpo/correction/rollout.py SPEC_SAMPLING_RULES, read in the
# released vllm-0.24.0 sources): min_p > 1e-5 and a non-empty logit_bias are refused for every request when
# speculation is on (vllm/sampling_params.py:848-860); penalties, bad words and log-probs are verified with drafts.
from recipe.ibpo.correction.rollout import (  # noqa: E402
    PINNED_VLLM,
    SPEC_METHODS,
    SPEC_SAMPLING_RULES,
    check_speculation_stays_on,
    speculation_kept_with,
    speculation_refused_by,
)
from recipe.ibpo.correction.spec_counters import (  # noqa: E402
    SpecCounterReader,
    SpecCounters,
    spec_counter_metrics,
    spec_counters_from_prometheus,
)

REFUSED_SAMPLING = [({"min_p": 0.05}, ["min_p=0.05"]),
                    ({"logit_bias": {"42": 2.0}}, ["logit_bias={'42': 2.0}"]),
                    ({"min_p": 0.1, "logit_bias": {"7": -1.0}, "repetition_penalty": 1.2},
                     ["min_p=0.1", "logit_bias={'7': -1.0}"])]
KEPT_SAMPLING = [{}, {"logprobs": 0}, {"logprobs": None}, {"repetition_penalty": 1.05},
                 {"presence_penalty": 0.5, "frequency_penalty": -0.1}, {"bad_words": ["foo"]},
                 {"min_p": 1e-6},  # at or under vLLM's _SAMPLING_EPS: not used
                 {"min_p": 0.0, "logit_bias": {}, "logprobs": 0, "repetition_penalty": 1.0}]


def spec_config(spec, batch=8, n=4, **rollout):
    cfg = trainer_config(spec)
    cfg.actor_rollout_ref.rollout.update({"calculate_log_probs": True, "n": n, **rollout})
    cfg.data = {"train_batch_size": batch}
    return cfg


def test_the_table_has_every_method_and_cites_the_pinned_source():
    assert set(SPEC_SAMPLING_RULES) == set(SPEC_METHODS) == {"ngram", "suffix", "eagle", "eagle3", "mtp", "draft_model"}
    for rules in SPEC_SAMPLING_RULES.values():
        assert {r.option for r in rules if r.effect == "refused"} == {"min_p", "logit_bias"}
        assert {r.option for r in rules if r.effect == "kept"} == {"repetition_penalty", "frequency_penalty",
                                                                   "presence_penalty", "bad_words", "logprobs"}
        assert all(r.source.startswith("vllm/") for r in rules)
    assert PINNED_VLLM == "0.24.0"


@pytest.mark.parametrize("method", SPEC_METHODS)
@pytest.mark.parametrize("sampling, refused", REFUSED_SAMPLING)
def test_each_method_refuses_the_options_the_pinned_vllm_refuses(method, sampling, refused):
    assert speculation_refused_by(sampling, method) == refused


@pytest.mark.parametrize("method", SPEC_METHODS)
@pytest.mark.parametrize("sampling", KEPT_SAMPLING)
def test_each_method_keeps_speculation_with_the_options_vllm_verifies_with_drafts(method, sampling):
    assert speculation_refused_by(sampling, method) == []


def test_the_kept_options_are_named():
    assert speculation_kept_with({"repetition_penalty": 1.05, "logprobs": 0, "min_p": 0.0}, "ngram") == \
        ["repetition_penalty=1.05", "logprobs=0"]


def method_config(method, **rollout):
    """A trainer config speculating with ``method`` (ngram/suffix through speculative_config; mtp through verl's
    MTP rollout; the rest are given to check_speculation_stays_on directly: the project refuses them earlier)."""
    spec = {"ngram": NGRAM, "suffix": {"method": "suffix"}}.get(method, {"method": method, "num_speculative_tokens": 3})
    return spec_config(spec, **rollout), spec


@pytest.mark.parametrize("method", SPEC_METHODS)
@pytest.mark.parametrize("rollout, named", [({"min_p": 0.1}, "actor_rollout_ref.rollout.min_p=0.1"),
                                            ({"logit_bias": {"5": 1.5}}, "actor_rollout_ref.rollout.logit_bias=")])
def test_the_start_check_refuses_per_method(method, rollout, named):
    cfg, spec = method_config(method, **rollout)
    with pytest.raises(IBPOConfigError, match="refuses every such request") as info:
        check_speculation_stays_on(cfg, spec, method)
    assert named in str(info.value) and "vllm/sampling_params.py:848-860" in str(info.value)
    assert f"method {method!r}" in str(info.value)
    check_speculation_stays_on(spec_config(None, **rollout), None, None)  # no speculation: nothing refused


@pytest.mark.parametrize("method", SPEC_METHODS)
@pytest.mark.parametrize("rollout", [{}, {"repetition_penalty": 1.1}, {"presence_penalty": 0.3},
                                     {"frequency_penalty": 0.2}, {"calculate_log_probs": True},
                                     {"min_p": 0.0}])
def test_the_start_check_passes_what_the_pinned_vllm_verifies_with_drafts(method, rollout, monkeypatch):
    import recipe.ibpo.correction.rollout as cr

    monkeypatch.setattr(cr, "installed_vllm_version", lambda: None)
    cfg, spec = method_config(method, **rollout)
    check_speculation_stays_on(cfg, spec, method)


@pytest.mark.parametrize("rollout", [{"min_p": 0.1}, {"logit_bias": {"5": 1.5}}])
def test_the_trainer_check_refuses_ngram_suffix_and_the_mtp_rollout(rollout):
    for spec in (NGRAM, {"method": "suffix"}):
        with pytest.raises(IBPOConfigError, match="refuses every such request"):
            check_correction_rollout(spec_config(spec, **rollout), IBPOConfig())
    cfg = spec_config(None, **rollout)
    cfg.actor_rollout_ref.model.mtp = {"enable": True, "enable_rollout": True}
    with pytest.raises(IBPOConfigError, match="method 'mtp'"):
        check_correction_rollout(cfg, IBPOConfig())


def test_the_default_sampling_keeps_speculation_on():
    for spec in (NGRAM, {"method": "suffix"}):
        check_correction_rollout(spec_config(spec, repetition_penalty=1.0), IBPOConfig())


def test_speculation_without_log_stats_is_refused():
    cfg = spec_config(NGRAM, disable_log_stats=True)
    with pytest.raises(IBPOConfigError, match="disable_log_stats=False"):
        check_correction_rollout(cfg, IBPOConfig())
    del cfg.actor_rollout_ref.rollout["disable_log_stats"]  # verl's default is True
    with pytest.raises(IBPOConfigError, match="disable_log_stats"):
        check_correction_rollout(cfg, IBPOConfig())
    check_correction_rollout(spec_config(None, disable_log_stats=True), IBPOConfig())


def test_a_zero_token_batch_size_range_is_refused_and_the_old_key_is_named():
    ok = {**NGRAM, "num_speculative_tokens_per_batch_size": [[1, 16, 8], [17, 256, 2]]}
    check_correction_rollout(spec_config(ok), IBPOConfig())
    off = {**NGRAM, "num_speculative_tokens_per_batch_size": [[1, 16, 8], [17, 1024, 0]]}
    with pytest.raises(IBPOConfigError, match=r"0 speculative tokens at batch sizes 17-1024"):
        check_correction_rollout(spec_config(off), IBPOConfig())
    with pytest.raises(IBPOConfigError, match="must be"):
        check_correction_rollout(spec_config({**NGRAM, "num_speculative_tokens_per_batch_size": [[1, 8]]}),
                                 IBPOConfig())
    with pytest.raises(IBPOConfigError, match=r"disable_by_batch_size: not a field of vLLM 0\.24\.0"):
        check_correction_rollout(spec_config({**NGRAM, "disable_by_batch_size": 64}), IBPOConfig())


def test_an_installed_vllm_other_than_the_pin_is_reported_loudly(monkeypatch):
    import recipe.ibpo.correction.rollout as cr

    monkeypatch.setattr(cr, "installed_vllm_version", lambda: "0.12.0")
    with pytest.warns(UserWarning, match=r"vLLM 0\.12\.0.*read from vLLM 0\.24\.0.*spec_drafted_step_share"):
        check_correction_rollout(spec_config(NGRAM), IBPOConfig())
    monkeypatch.setattr(cr, "installed_vllm_version", lambda: "0.24.0")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_correction_rollout(spec_config(NGRAM), IBPOConfig())


# ------------------------------------------------------------------ per-step metrics from vLLM's own counters
@dataclasses.dataclass
class FakeSpecDecodingStats:
    """Shaped exactly like vLLM 0.24.0's ``SpecDecodingStats`` (vllm/v1/spec_decode/metrics.py:17-48): the
    scheduler adds one ``observe_draft`` per request-step that carried drafts."""
    num_spec_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list = dataclasses.field(default_factory=list)
    num_draft_tokens_per_pos: list = dataclasses.field(default_factory=list)

    @classmethod
    def new(cls, num_spec_tokens):
        return cls(num_spec_tokens=num_spec_tokens, num_accepted_tokens_per_pos=[0] * num_spec_tokens,
                   num_draft_tokens_per_pos=[0] * num_spec_tokens)

    def observe_draft(self, num_draft_tokens, num_accepted_tokens):
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        assert num_accepted_tokens <= self.num_spec_tokens
        for i in range(num_accepted_tokens):
            self.num_accepted_tokens_per_pos[i] += 1
        for i in range(num_draft_tokens):
            self.num_draft_tokens_per_pos[i] += 1


def vllm_metrics_text(per_engine, model="m", with_spec=True):
    """The /metrics exposition vLLM 0.24.0's PrometheusStatLogger produces for these engines: counters named as
    in vllm/v1/spec_decode/metrics.py:229-231 (SpecDecodingProm, observed with SpecDecodingStats) and
    vllm/v1/metrics/loggers.py:667-674 (generation tokens), labels model_name/engine (loggers.py:431).
    ``per_engine``: [(FakeSpecDecodingStats, generated tokens)]."""
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    labels = ["model_name", "engine"]
    gen = prometheus_client.Counter("vllm:generation_tokens", "gen", labels, registry=registry)
    prom = {}
    if with_spec:
        for field, name in (("num_drafts", "vllm:spec_decode_num_drafts"),
                            ("num_draft_tokens", "vllm:spec_decode_num_draft_tokens"),
                            ("num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens")):
            prom[field] = prometheus_client.Counter(name, name, labels, registry=registry)
        per_pos = prometheus_client.Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "pos",
                                            labels + ["position"], registry=registry)
    for engine, (stats, generated) in enumerate(per_engine):
        gen.labels(model, str(engine)).inc(generated)
        if with_spec:
            for field, counter in prom.items():
                counter.labels(model, str(engine)).inc(getattr(stats, field))
            for pos, count in enumerate(stats.num_accepted_tokens_per_pos):
                per_pos.labels(model, str(engine), str(pos)).inc(count)
    return prometheus_client.generate_latest(registry).decode()


def ngram_engine_stats():
    """Engine 0: 3 request-steps with drafts of 4 (accepted 4, 1, 0) and 10 generated tokens; engine 1: one draft
    of 2 tokens, 2 accepted, 7 generated."""
    a = FakeSpecDecodingStats.new(4)
    for accepted in (4, 1, 0):
        a.observe_draft(4, accepted)
    b = FakeSpecDecodingStats.new(4)
    b.observe_draft(2, 2)
    return [(a, 10), (b, 7)]


def test_counters_are_read_from_vllms_exposition_exactly():
    counters = spec_counters_from_prometheus(vllm_metrics_text(ngram_engine_stats()))
    assert counters == SpecCounters(drafts=4, draft_tokens=14, accepted_tokens=7, generated_tokens=17)


def test_counters_from_a_hand_written_exposition():
    text = "\n".join([
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="a b"} 5.0',
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="a b"} 1.7e9',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="a b"} 20.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="a b"} 6.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="a b",position="0"} 4.0',
        'vllm:generation_tokens_total{engine="0",model_name="a b"} 30.0',
        'vllm:generation_tokens_total{engine="1",model_name="a b"} 2.0'])
    assert spec_counters_from_prometheus(text) == SpecCounters(5, 20, 6, 32)
    assert spec_counters_from_prometheus("# nothing\n") is None  # stats off: unknown
    # an engine without speculation registers no spec counters: drafts count 0 (speculation off)
    assert spec_counters_from_prometheus('vllm:generation_tokens_total{engine="0"} 9\n') == SpecCounters(0, 0, 0, 9)


def test_ngram_and_suffix_report_accepted_tokens_per_decode_step():
    """The same counters for every method (SpecDecodingProm is method-agnostic): exact numbers for a step."""
    step = spec_counters_from_prometheus(vllm_metrics_text(ngram_engine_stats()))
    m = spec_counter_metrics(True, step)
    assert m == {"rollout/spec_stats_reported": 1.0, "rollout/spec_drafts": 4, "rollout/spec_draft_tokens": 14,
                 "rollout/spec_accepted_tokens": 7, "rollout/spec_decode_steps": 10,
                 "rollout/spec_accepted_per_decode_step": 0.7, "rollout/spec_drafted_step_share": 0.4,
                 "rollout/spec_accepted_per_draft": 1.75, "rollout/spec_acceptance_rate": 0.5}


def test_metrics_tell_off_from_no_speed_up():
    assert spec_counter_metrics(False, None) == {}
    assert spec_counter_metrics(True, None) == {"rollout/spec_stats_reported": 0.0}  # unknown, said so
    off = spec_counter_metrics(True, SpecCounters(0, 0, 0, 50))  # tokens generated, no draft: OFF
    assert off["rollout/spec_drafted_step_share"] == 0.0 and off["rollout/spec_decode_steps"] == 50
    assert off["rollout/spec_stats_reported"] == 1.0
    # a rate over no draft is left out, not 0 ("none accepted" of drafts never made)
    assert "rollout/spec_accepted_per_draft" not in off and "rollout/spec_acceptance_rate" not in off
    idle = SpecCounters(40, 160, 0, 50)  # drafted every step, nothing accepted: on, no speed-up
    m = spec_counter_metrics(True, idle)
    assert m["rollout/spec_drafted_step_share"] == 0.8 and m["rollout/spec_accepted_per_decode_step"] == 0.0


def test_the_reader_returns_what_each_step_added_over_all_servers():
    a, b = ngram_engine_stats()
    pages = {"h0:1": [vllm_metrics_text([a]), None], "h1:2": [vllm_metrics_text([b]), None]}
    a2 = FakeSpecDecodingStats.new(4)
    for accepted in (4, 1, 0, 3):  # one more draft of 4 with 3 accepted, 5 more tokens on h0
        a2.observe_draft(4, accepted)
    pages["h0:1"][1] = vllm_metrics_text([(a2, 15)])
    pages["h1:2"][1] = pages["h1:2"][0]
    calls = []

    def fetch(url, timeout):
        calls.append(url)
        host = url.split("//")[1].split("/")[0]
        return pages[host][0 if len(calls) <= 2 else 1]

    reader = SpecCounterReader(["h0:1", "h1:2"], fetch=fetch)
    assert reader.step() == SpecCounters(4, 14, 7, 17)  # first step: from the servers' start
    assert reader.step() == SpecCounters(1, 4, 3, 5)
    assert calls[:2] == ["http://h0:1/metrics", "http://h1:2/metrics"]


def test_the_reader_says_unknown_when_a_server_cannot_be_read():
    def broken(url, timeout):
        raise OSError("connection refused")

    reader = SpecCounterReader(["h:1"], fetch=broken)
    assert reader.step() is None and "connection refused" in reader.last_error
    assert SpecCounterReader([]).step() is None
    assert SpecCounters(5, 5, 5, 5).since(SpecCounters(9, 9, 9, 9)) == SpecCounters(5, 5, 5, 5)  # restarted


def test_the_trainer_reads_the_rollout_servers_counters_each_step(monkeypatch, capsys):
    """RayIBPOTrainer's step metric path: verl's LLMServerManager addresses -> /metrics -> what the step added."""
    from types import SimpleNamespace

    import recipe.ibpo.correction.rollout as cr
    import recipe.ibpo.correction.spec_counters as sc
    from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer
    from recipe.ibpo.step_metrics import SpeculationCounters

    a, b = ngram_engine_stats()
    pages = iter([vllm_metrics_text([a, b]), vllm_metrics_text([a, b])])
    urls = []

    def fetch(url, timeout):
        urls.append(url)
        page = next(pages, None)
        if page is None:
            raise OSError("server gone")
        return page

    monkeypatch.setattr(sc, "_http_get", fetch)
    trainer = RayIBPOTrainer.__new__(RayIBPOTrainer)
    trainer.config = spec_config({"method": "suffix"})
    counters = SpeculationCounters(cr.speculation_on(trainer.config))
    servers = ["10.0.0.1:8000"]  # the servers of verl's LLMServerManager
    first = counters.step_metrics(1, servers)
    assert counters.method == "suffix" and urls == ["http://10.0.0.1:8000/metrics"]
    assert first["rollout/spec_accepted_per_decode_step"] == 0.7 and first["rollout/spec_stats_reported"] == 1.0
    second = counters.step_metrics(2, servers)  # nothing new generated
    assert second["rollout/spec_decode_steps"] == 0 and "rollout/spec_accepted_per_decode_step" not in second
    assert counters.step_metrics(3, servers) == {"rollout/spec_stats_reported": 0.0}
    assert "step 3: speculation ('suffix') counters unreadable" in capsys.readouterr().out


def test_a_step_that_generated_nothing_logs_its_counts_and_no_rate():
    """No token generated since the last read: the per-decode-step rates are over no step and are left out (a
    drafted-step share of 0 would read as "speculation was off"); the counts say what happened."""
    assert spec_counter_metrics(True, SpecCounters(0, 0, 0, 0)) == {
        "rollout/spec_stats_reported": 1.0, "rollout/spec_drafts": 0, "rollout/spec_draft_tokens": 0,
        "rollout/spec_accepted_tokens": 0, "rollout/spec_decode_steps": 0}
