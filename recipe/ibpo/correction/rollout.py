"""Start checks and settings of the correction pass's rollout: lookup speculation and the length bound.

Speculative decoding is a vLLM engine setting that the pinned verl forwards verbatim:
``actor_rollout_ref.rollout.engine_kwargs.vllm`` is spread into vLLM's engine arguments
(``vllm_async_server.py:287-349``), so ``engine_kwargs.vllm.speculative_config`` is vLLM's
``speculative_config``. IBPO trains on the rollout's samples as samples of π_θ, so only settings whose
sampling is exactly the policy's are allowed (docs/correction_pass.md, "Lossless"):
draft-free methods (``ngram``, ``suffix``: deterministic drafts from the context, verified by vLLM's
``standard`` rejection sampler, which is lossless for them) with the keys listed in
:data:`ALLOWED_KEYS`. Anything else (a draft model, EAGLE/MTP heads, ``synthetic`` or ``block``
acceptance, a key this check does not know) fails at start naming the option.

Speculation the pinned vLLM would refuse or switch off for the configured sampling is refused at start from one
rule table, :data:`SPEC_SAMPLING_RULES` (read in the released vLLM source, :data:`PINNED_VLLM_SOURCE`). The
per-step speculation metrics read from the rollout servers' own vLLM counters are another idea, in
``recipe.ibpo.correction.spec_counters``. Nothing here imports vLLM.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ibpo.options import IBPOConfig, IBPOConfigError
from ibpo.lookup_decoding import LOOKUP_METHODS, NgramParams, ngram_params_from_speculative_config

SPEC_OPTION = "actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config"
# keys of vLLM's SpeculativeConfig that keep a draft-free method lossless
ALLOWED_KEYS = {
    "method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
    "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob", "rejection_sample_method", "num_speculative_tokens_per_batch_size",
}
# keys of older vLLM that the pinned one's SpeculativeConfig does not have (extra fields are forbidden: the engine
# would fail at start), with what replaced them
REMOVED_KEYS = {"disable_by_batch_size": "num_speculative_tokens_per_batch_size (0 tokens = off at those batch sizes)"}
# The proxy's proposer when the rollout does not speculate with ngram: the recommended setting
# (docs/correction_pass.md, "Choosing the window": measured on the toy's corrections and synthetic ones).
DEFAULT_PROXY_PARAMS = NgramParams(prompt_lookup_min=2, prompt_lookup_max=5, num_speculative_tokens=8)


def _plain(value: Any) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf comes with verl
        pass
    return value


def speculative_config_of(config: Any) -> dict | None:
    """The rollout's vLLM ``speculative_config`` as a dict (None when unset). vLLM also takes it as a JSON
    string on its command line; a string that is not a JSON object fails naming the option."""
    rollout = config.actor_rollout_ref.rollout
    engine_kwargs = _plain(rollout.get("engine_kwargs", None)) or {}
    spec = (engine_kwargs.get("vllm") or {}).get("speculative_config")
    if spec is None or spec == {}:
        return None
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise IBPOConfigError(f"{SPEC_OPTION}={spec!r} is not a JSON object ({exc})") from exc
    if not isinstance(spec, Mapping):
        raise IBPOConfigError(f"{SPEC_OPTION} must be a mapping, got {type(spec).__name__}")
    return dict(spec)


def check_speculative_config(spec: Mapping[str, Any] | None, rollout_name: str, mtp_rollout: bool) -> None:
    """Fail unless ``spec`` (vLLM's speculative_config) samples exactly from the policy (see module doc)."""
    if spec is None:
        return
    method = spec.get("method")
    if method not in LOOKUP_METHODS:
        raise IBPOConfigError(
            f"{SPEC_OPTION}.method={method!r}: only the draft-free methods {LOOKUP_METHODS} are allowed. A draft "
            f"model, EAGLE/Medusa/MTP head is a second model verl does not update with the policy, and this "
            f"project checks exactness for deterministic context drafts only (docs/correction_pass.md)")
    if spec.get("model") is not None:
        raise IBPOConfigError(f"{SPEC_OPTION}.model={spec['model']!r}: method {method!r} drafts from the context; a "
                              f"draft model is not allowed")
    for key in sorted(set(spec) & set(REMOVED_KEYS)):
        raise IBPOConfigError(
            f"{SPEC_OPTION}.{key}: not a field of vLLM {PINNED_VLLM}'s SpeculativeConfig (vllm/config/speculative.py; "
            f"extra fields are forbidden, so the engine would fail at start); its replacement is {REMOVED_KEYS[key]}")
    unknown = sorted(set(spec) - ALLOWED_KEYS - {"model"})
    if unknown:
        raise IBPOConfigError(
            f"{SPEC_OPTION} has key(s) {unknown} whose effect on the sampled distribution is not verified here "
            f"(allowed: {sorted(ALLOWED_KEYS)})")
    acceptance = spec.get("rejection_sample_method", "standard")
    if acceptance != "standard":
        raise IBPOConfigError(
            f"{SPEC_OPTION}.rejection_sample_method={acceptance!r}: only 'standard' rejection sampling keeps the "
            f"samples distributed as the policy ('synthetic' accepts at a made-up rate; 'block' is not verified "
            f"here)")
    if rollout_name != "vllm":
        raise IBPOConfigError(f"{SPEC_OPTION} is set but actor_rollout_ref.rollout.name={rollout_name!r}: only the "
                              f"vllm rollout reads it, it would be ignored")
    if mtp_rollout:
        raise IBPOConfigError(f"{SPEC_OPTION} with actor_rollout_ref.model.mtp.enable_rollout=True: verl replaces "
                              f"the speculative method by the model's MTP heads; use one")
    k = spec.get("num_speculative_tokens")
    if method == "ngram" or k is not None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise IBPOConfigError(f"{SPEC_OPTION}.num_speculative_tokens={k!r} must be an integer >= 1")
    if method == "ngram":
        lo, hi = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
        for name, value in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise IBPOConfigError(f"{SPEC_OPTION}.{name}={value!r} must be set to an integer >= 1 (vLLM's "
                                      f"default window differs between versions)")
        if lo > hi:
            raise IBPOConfigError(f"{SPEC_OPTION}.prompt_lookup_min={lo} > prompt_lookup_max={hi}")


# ------------------------------------------------------------------ speculation that switches itself off
# The rule of the PINNED vLLM, read in its released source (docs/correction_pass.md, "Which sampling options
# speculation survives"): :data:`PINNED_VLLM_SOURCE`. Every path below is a file of that release.
#
# Per request, for EVERY method (the check is method-agnostic): ``SamplingParams._validate_spec_decode``
# (``vllm/sampling_params.py:848-860``, called by ``SamplingParams.verify``, line 728, for every request from
# ``vllm/v1/engine/input_processor.py:95``) raises ``ValueError`` for ``min_p > _SAMPLING_EPS`` (1e-5, line 27)
# or a non-empty ``logit_bias``: the request fails, so a rollout sending them fails at its first request.
# Everything else is verified WITH drafts, so speculation stays on: repetition/frequency/presence penalties and
# bad words (V1 runner: ``RejectionSampler.apply_logits_processors`` / ``apply_penalties``,
# ``vllm/v1/sample/rejection_sampler.py:285-370``; V2 runner: ``Sampler.apply_sampling_params`` on the draft
# positions, ``vllm/v1/worker/gpu/spec_decode/rejection_sampler.py:110``) and log-probs (V1 ``parse_output``
# line 275; V2 ``_get_logprobs_tensors`` line 64). There is no per-request silent switch-off in this release:
# ``is_spec_decode_unsupported`` / ``spec_decode_unsupported_reqs`` (older vLLM, which dropped speculation
# silently for penalties, min_p and log-probs) are gone, and the ngram and suffix proposers skip a request only
# in a step where it sampled nothing or reached max_model_len (``vllm/v1/spec_decode/ngram_proposer.py:148-160``,
# ``vllm/v1/spec_decode/suffix_decoding.py:50-62``).
# Engine-wide (main rollout and correction pass alike, the setting is per engine): a
# ``num_speculative_tokens_per_batch_size`` range with 0 tokens (``vllm/v1/spec_decode/dynamic/utils.py:52-55``
# allows it; ``vllm/v1/core/sched/scheduler.py:1052-1057`` picks K by the number of scheduled requests) turns
# speculation off at those batch sizes. ``disable_by_batch_size`` (older vLLM) is no field of the pinned
# ``SpeculativeConfig`` (``vllm/config/speculative.py``; extra fields are forbidden, ``vllm/config/utils.py:69``):
# the engine would fail at start.
PINNED_VLLM = "0.24.0"  # the shared GPU stack's pin (docs/gpu.md)
PINNED_VLLM_SOURCE = ("vLLM 0.24.0 as released on PyPI: vllm-0.24.0.tar.gz, sha256 "
                      "0862453adc1f3339f1a0c9dca1179c34d6ed6e118f87b6e5bddd120af614ac66, vllm/_version.py "
                      "commit_id 'gee0da84ab'")
SAMPLING_EPS = 1e-5  # vllm/sampling_params.py:27 _SAMPLING_EPS
REFUSED = "refused"  # vLLM raises ValueError for the request
KEPT = "kept"        # applied to the draft positions: speculation stays on


@dataclass(frozen=True)
class SpecSamplingRule:
    """What the pinned vLLM does to a request with speculation on when its sampling uses ``option``."""
    option: str                     # the vLLM SamplingParams field
    neutral: Callable[[Any], bool]  # True when the value does not use the option
    effect: str                     # REFUSED or KEPT
    source: str                     # file:line of the pinned release


def _unset_or(value_ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or v is False or value_ok(v)


_RULES = (
    SpecSamplingRule("min_p", _unset_or(lambda v: float(v) <= SAMPLING_EPS), REFUSED,
                     "vllm/sampling_params.py:848-860 SamplingParams._validate_spec_decode"),
    SpecSamplingRule("logit_bias", _unset_or(lambda v: not v), REFUSED,
                     "vllm/sampling_params.py:848-860 SamplingParams._validate_spec_decode"),
    SpecSamplingRule("repetition_penalty", _unset_or(lambda v: float(v) == 1.0), KEPT,
                     "vllm/v1/sample/rejection_sampler.py:285-370 apply_logits_processors/apply_penalties; "
                     "vllm/v1/worker/gpu/spec_decode/rejection_sampler.py:110 apply_sampling_params"),
    SpecSamplingRule("frequency_penalty", _unset_or(lambda v: float(v) == 0.0), KEPT,
                     "vllm/v1/sample/rejection_sampler.py:285-370; vllm/v1/worker/gpu/spec_decode/rejection_sampler.py:110"),
    SpecSamplingRule("presence_penalty", _unset_or(lambda v: float(v) == 0.0), KEPT,
                     "vllm/v1/sample/rejection_sampler.py:285-370; vllm/v1/worker/gpu/spec_decode/rejection_sampler.py:110"),
    SpecSamplingRule("bad_words", _unset_or(lambda v: not v), KEPT,
                     "vllm/v1/sample/rejection_sampler.py:331 apply_bad_words_with_drafts"),
    SpecSamplingRule("logprobs", lambda v: v is None, KEPT,  # logprobs=0 (the sampled token's) uses it
                     "vllm/v1/sample/rejection_sampler.py:275 parse_output; "
                     "vllm/v1/worker/gpu/spec_decode/rejection_sampler.py:64 _get_logprobs_tensors"),
)
# The table per method. The pinned vLLM applies one rule to all of them (the request check above does not look
# at the method); the model runner differs: ngram, suffix and draft_model run on the V1 runner, eagle/eagle3/mtp
# on the V2 runner for its default architectures (Qwen3, Llama, Mistral, ...: vllm/config/vllm.py:68-77,
# 2027-2035), else V1. The project's own check admits only ngram and suffix (check_speculative_config).
SPEC_METHODS = ("ngram", "suffix", "eagle", "eagle3", "mtp", "draft_model")
SPEC_SAMPLING_RULES: dict[str, tuple[SpecSamplingRule, ...]] = {method: _RULES for method in SPEC_METHODS}


def speculation_refused_by(sampling: Mapping[str, Any], method: str | None) -> list[str]:
    """``name=value`` of the sampling options with which the pinned vLLM refuses a request that speculates with
    ``method`` (:data:`SPEC_SAMPLING_RULES`); empty when none. A method outside the table gets the common rule."""
    rules = SPEC_SAMPLING_RULES.get(str(method), _RULES)
    return [f"{r.option}={sampling[r.option]}" for r in rules
            if r.effect == REFUSED and r.option in sampling and not r.neutral(sampling[r.option])]


def speculation_kept_with(sampling: Mapping[str, Any], method: str | None) -> list[str]:
    """``name=value`` of the options in use that the pinned vLLM verifies with drafts (speculation stays on)."""
    rules = SPEC_SAMPLING_RULES.get(str(method), _RULES)
    return [f"{r.option}={sampling[r.option]}" for r in rules
            if r.effect == KEPT and r.option in sampling and not r.neutral(sampling[r.option])]


def installed_vllm_version() -> str | None:
    """The installed vLLM's version from its package metadata (vLLM is not imported); None when absent."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version("vllm")
    except PackageNotFoundError:
        return None


def rollout_sampling(config: Any) -> dict:
    """What the pinned verl's agent loop sends vLLM for every rollout request, by the option that sets it
    (``agent_loop.py`` ``_run_agent_loop``: temperature, top_p, top_k, ``repetition_penalty=1.0`` and
    ``logprobs=calculate_log_probs``; the server turns logprobs into 0 or None and fills ``repetition_penalty``
    from the rollout config only when a caller leaves it out, ``vllm_async_server.py`` ``generate``), plus any
    penalty, ``min_p`` or ``logit_bias`` set on the rollout for an agent loop that forwards them."""
    rollout = config.actor_rollout_ref.rollout
    sampling = {"logprobs": 0 if rollout.get("calculate_log_probs", False) else None}
    for key in ("repetition_penalty", "presence_penalty", "frequency_penalty", "min_p", "logit_bias"):
        value = _plain(rollout.get(key, None))
        if value is not None:
            sampling[key] = value
    return sampling


def speculation_on(config: Any) -> str | None:
    """The speculative method the rollout's vLLM engines run: the ``speculative_config``'s, ``mtp`` for verl's
    MTP rollout (``model.mtp.enable_rollout``, verl builds the config), None without speculation."""
    spec = speculative_config_of(config)
    if spec is not None:
        return str(spec.get("method"))
    mtp = _plain((config.actor_rollout_ref.get("model", {}) or {}).get("mtp", None)) or {}
    if mtp.get("enable", False) and mtp.get("enable_rollout", False):
        return "mtp"
    return None


def _batch_size_schedule_off(schedule: Any) -> list[str]:
    """The ``num_speculative_tokens_per_batch_size`` ranges with 0 tokens (``a-b``); raises on a malformed one."""
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise IBPOConfigError(f"{SPEC_OPTION}.num_speculative_tokens_per_batch_size={schedule!r} must be a non-empty "
                              f"list of [range_start, range_end, num_speculative_tokens]")
    off = []
    for entry in schedule:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise IBPOConfigError(f"{SPEC_OPTION}.num_speculative_tokens_per_batch_size entry {entry!r} must be "
                                  f"[range_start, range_end, num_speculative_tokens]")
        if int(entry[2]) <= 0:
            off.append(f"{int(entry[0])}-{int(entry[1])}")
    return off


def check_speculation_stays_on(config: Any, spec: Mapping[str, Any] | None, method: str | None = None) -> None:
    """Refuse speculation that the pinned vLLM would refuse or switch off for this rollout, and speculation whose
    per-step statistics could not be read (see above; the table is :data:`SPEC_SAMPLING_RULES`). An installed
    vLLM other than the pin is reported loudly (a warning): the table says nothing about it."""
    method = method or (None if spec is None else spec.get("method"))
    if method is None:
        return
    refused = speculation_refused_by(rollout_sampling(config), method)
    if refused:
        names = ", ".join(f"actor_rollout_ref.rollout.{o}" for o in refused)
        raise IBPOConfigError(
            f"{SPEC_OPTION} (method {method!r}) with {names}: vLLM {PINNED_VLLM} refuses every such request with "
            f"speculative decoding on (ValueError, vllm/sampling_params.py:848-860 SamplingParams._validate_spec_decode; "
            f"the setting is per engine, so the main rollout and the correction pass alike): drop the "
            f"speculative_config or that option")
    spec = spec or {}
    if "num_speculative_tokens_per_batch_size" in spec:
        off = _batch_size_schedule_off(spec["num_speculative_tokens_per_batch_size"])
        if off:
            raise IBPOConfigError(
                f"{SPEC_OPTION}.num_speculative_tokens_per_batch_size gives 0 speculative tokens at batch sizes "
                f"{', '.join(off)}: vLLM {PINNED_VLLM} switches speculation off for the whole engine (main rollout "
                f"and correction pass) whenever that many requests are scheduled (vllm/v1/core/sched/scheduler.py:"
                f"1052-1057); give every range at least 1 token or drop the schedule")
    rollout = config.actor_rollout_ref.rollout
    if rollout.get("disable_log_stats", True):
        raise IBPOConfigError(
            f"{SPEC_OPTION} (method {method!r}) with actor_rollout_ref.rollout.disable_log_stats=True (verl's "
            f"default): vLLM then counts no drafts (vllm/v1/core/sched/scheduler.py:2274) and the per-step metric "
            f"rollout/spec_accepted_per_decode_step cannot tell 'speculation off' from 'no speed-up'; set "
            f"actor_rollout_ref.rollout.disable_log_stats=False")
    installed = installed_vllm_version()
    if installed is not None and installed.split("+")[0] != PINNED_VLLM:
        warnings.warn(
            f"speculative decoding ({method!r}) with vLLM {installed}: the start check's rule table was read from "
            f"vLLM {PINNED_VLLM} (recipe/ibpo/correction/rollout.py SPEC_SAMPLING_RULES). Older vLLM (with "
            f"vllm/v1/spec_decode/utils.py is_spec_decode_unsupported) silently drops speculation for requests with "
            f"penalties, min_p and, in some versions, log-probs; watch rollout/spec_drafted_step_share "
            f"(0 = speculation off)", stacklevel=2)


def rollout_log_probs_trained_on(config: Any) -> str | None:
    """The option through which training consumes the rollout's own log-probs (verl's rollout correction:
    IS weights, rejection sampling or bypass mode, ``ray_trainer.py:1570-1660``), or None."""
    algorithm = config.get("algorithm", None) or {}
    corr_cfg = _plain(algorithm.get("rollout_correction", None)) or {}
    for key in ("rollout_is", "rollout_rs"):
        if corr_cfg.get(key) not in (None, False, "", "null"):
            return f"algorithm.rollout_correction.{key}={corr_cfg[key]!r}"
    if corr_cfg.get("bypass_mode", False):
        return "algorithm.rollout_correction.bypass_mode=True"
    return None


def check_correction_rollout(config: Any, ibpo: IBPOConfig) -> None:
    """Start check of the correction pass's rollout settings (called from ``recipe.ibpo.start_checks.check_trainer_config``)."""
    rollout = config.actor_rollout_ref.rollout
    model = config.actor_rollout_ref.get("model", {}) or {}
    mtp = _plain(model.get("mtp", None)) or {}
    spec = speculative_config_of(config)
    check_speculative_config(spec, str(rollout.get("name", "")),
                             bool(mtp.get("enable", False) and mtp.get("enable_rollout", False)))
    check_speculation_stays_on(config, spec, speculation_on(config))
    consumer = rollout_log_probs_trained_on(config)
    if spec is not None and consumer is not None:
        raise IBPOConfigError(
            f"{SPEC_OPTION} with {consumer}: the samples stay exact under speculation, but training would use "
            f"the rollout's log-probs, whose correctness under speculative decoding is not verified here (vLLM "
            f"issue #34497 reports wrong log-probs with speculation in some versions); drop one")
    if ibpo.correction_max_tokens_factor > 0 and rollout.get("multi_turn", {}).get("enable", False):
        raise IBPOConfigError(
            "ibpo.correction_max_tokens_factor > 0 with actor_rollout_ref.rollout.multi_turn.enable=True: the bound "
            "is carried by the single-turn correction agent loop; multi-turn corrections are not supported")


def proxy_params(config: Any) -> NgramParams:
    """The ngram proposer the lookup metrics replay: the rollout's own when it speculates with ngram, else
    :data:`DEFAULT_PROXY_PARAMS` (what speculation with the recommended setting would give)."""
    return ngram_params_from_speculative_config(speculative_config_of(config)) or DEFAULT_PROXY_PARAMS


__all__ = ["ALLOWED_KEYS", "DEFAULT_PROXY_PARAMS", "PINNED_VLLM", "PINNED_VLLM_SOURCE", "REMOVED_KEYS",
           "SPEC_METHODS", "SPEC_OPTION", "SPEC_SAMPLING_RULES", "SpecSamplingRule", "check_correction_rollout",
           "check_speculation_stays_on", "check_speculative_config", "installed_vllm_version", "proxy_params",
           "rollout_sampling", "speculation_kept_with", "speculation_on", "speculation_refused_by",
           "speculative_config_of"]
