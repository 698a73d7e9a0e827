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
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ibpo.options import IBPOConfig, IBPOConfigError
from ibpo.lookup_decoding import LOOKUP_METHODS, NgramParams, ngram_params_from_speculative_config

SPEC_OPTION = "actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config"
# keys of vLLM's SpeculativeConfig that keep a draft-free method lossless
ALLOWED_KEYS = {
    "method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
    "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob", "rejection_sample_method", "disable_by_batch_size",
}
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
# vLLM drops speculation for a REQUEST whose sampling it cannot verify with drafts: V1's
# ``vllm/v1/spec_decode/utils.py: is_spec_decode_unsupported(sampling_params)`` -- frequency_penalty != 0,
# presence_penalty != 0, repetition_penalty != 1, min_p > 1e-5 and, in the versions that still list it (up to
# about 0.13; later ones verify log-probs with drafts), logprobs is not None -- read by
# ``InputBatch.add_request`` into ``spec_decode_unsupported_reqs``, whose requests the model runner's
# ``propose_draft_token_ids`` (and the ngram/suffix proposers) skip: no error, no log, the request just decodes
# one token per step. ``disable_by_batch_size`` in ``speculative_config`` turns it off for the whole ENGINE while
# more requests than that are running, and the setting is engine-wide, so the main rollout is affected as much
# as the correction pass. The rule per vLLM version is :data:`SPEC_OFF_BY_SAMPLING`.
SAMPLING_EPS = 1e-5
LOGPROBS_SPEC_SUPPORTED_FROM = (0, 14)  # vLLM versions before this also drop speculation for logprobs requests
PINNED_VLLM = (0, 24, 0)  # shared GPU stack pin (docs/gpu.md)


def _version_tuple(version: str | tuple | None) -> tuple:
    if version is None:
        return PINNED_VLLM
    if isinstance(version, tuple):
        return version
    parts = []
    for piece in str(version).split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def speculation_disabled_by(sampling: Mapping[str, Any], vllm_version: str | tuple | None = None) -> list[str]:
    """The sampling options (``name=value``) for which vLLM ``vllm_version`` (default: the pinned one) silently
    decodes a request without speculation (vLLM's ``is_spec_decode_unsupported``); empty when none."""
    out = []
    for key, neutral in (("frequency_penalty", 0.0), ("presence_penalty", 0.0), ("repetition_penalty", 1.0)):
        value = sampling.get(key)
        if value is not None and float(value) != neutral:
            out.append(f"{key}={value}")
    min_p = sampling.get("min_p")
    if min_p is not None and float(min_p) > SAMPLING_EPS:
        out.append(f"min_p={min_p}")
    if _version_tuple(vllm_version) < LOGPROBS_SPEC_SUPPORTED_FROM and sampling.get("logprobs") is not None \
            and sampling.get("logprobs") is not False:  # logprobs=0 (the sampled token's) counts
        out.append(f"logprobs={sampling['logprobs']}")
    return out


def rollout_sampling(config: Any) -> dict:
    """What the pinned verl's agent loop sends vLLM for every rollout request, by the option that sets it
    (``agent_loop.py`` ``_run_agent_loop``: temperature, top_p, top_k, ``repetition_penalty`` and
    ``logprobs=calculate_log_probs``; the server fills ``repetition_penalty`` from the rollout config when a
    caller leaves it out, ``vllm_async_server.py`` ``generate``), plus any penalty/min_p set on the rollout."""
    rollout = config.actor_rollout_ref.rollout
    sampling = {"logprobs": bool(rollout.get("calculate_log_probs", False)) or None}
    for key in ("repetition_penalty", "presence_penalty", "frequency_penalty", "min_p"):
        value = rollout.get(key, None)
        if value is not None:
            sampling[key] = value
    return sampling


def check_speculation_stays_on(config: Any, spec: Mapping[str, Any] | None,
                               vllm_version: str | tuple | None = None) -> None:
    """Refuse a ``speculative_config`` that the configured sampling or batch would switch off (see above)."""
    if spec is None:
        return
    off = speculation_disabled_by(rollout_sampling(config), vllm_version)
    if off:
        names = ", ".join(f"actor_rollout_ref.rollout.{o}" if not o.startswith("logprobs")
                          else f"actor_rollout_ref.rollout.calculate_log_probs (vLLM logprobs={o.split('=')[1]})"
                          for o in off)
        raise IBPOConfigError(
            f"{SPEC_OPTION} is set but {names} makes vLLM {'.'.join(map(str, _version_tuple(vllm_version)))} decode "
            f"every request WITHOUT speculation (vllm/v1/spec_decode/utils.py is_spec_decode_unsupported; silently, "
            f"for the main rollout and the correction pass alike): drop the speculative_config or that option")
    limit = spec.get("disable_by_batch_size")
    if limit is not None:
        data = config.get("data", None) or {}
        rollout = config.actor_rollout_ref.rollout
        concurrent = int(data.get("train_batch_size", 0) or 0) * int(rollout.get("n", 1) or 1)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1 or concurrent > limit:
            raise IBPOConfigError(
                f"{SPEC_OPTION}.disable_by_batch_size={limit!r}: vLLM turns speculation off for the whole engine "
                f"while more requests than that are running, and one step sends data.train_batch_size x "
                f"rollout.n = {concurrent}: speculation would be off for most of the rollout; remove it or raise it "
                f"above {concurrent}")


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
    check_speculation_stays_on(config, spec)
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


__all__ = ["ALLOWED_KEYS", "DEFAULT_PROXY_PARAMS", "SPEC_OPTION", "check_correction_rollout",
           "check_speculation_stays_on", "check_speculative_config", "proxy_params", "rollout_sampling",
           "spec_decode_step_metrics", "speculation_disabled_by", "speculative_config_of"]


def spec_decode_step_metrics(spec_configured: bool, drafts: Any, accepts: Any, verifies: Any) -> dict:
    """Per-step speculation metrics read from the rollout's own per-request statistics (vLLM's
    ``request_spec_decode_stats``, forwarded by verl as ``spec_num_draft_tokens`` / ``spec_num_accepted_tokens``
    / ``spec_num_verify_steps``): ``rollout/spec_accepted_per_decode_step`` = accepted draft tokens per
    verification (decode) step over the whole batch, ``rollout/spec_requests_without_drafts`` = the fraction of
    requests that got no draft at all (speculation off for them), and ``rollout/spec_stats_reported`` = 1.
    With a ``speculative_config`` but no statistics, ``rollout/spec_stats_reported`` = 0: "off" and "no
    speed-up" cannot be told apart, and the metric says so instead of staying silent."""
    if not spec_configured:
        return {}
    if drafts is None or accepts is None or verifies is None:
        return {"rollout/spec_stats_reported": 0.0}
    d = [int(x or 0) for x in (drafts.tolist() if hasattr(drafts, "tolist") else drafts)]
    a = [int(x or 0) for x in (accepts.tolist() if hasattr(accepts, "tolist") else accepts)]
    v = [int(x or 0) for x in (verifies.tolist() if hasattr(verifies, "tolist") else verifies)]
    if not d:
        return {"rollout/spec_stats_reported": 0.0}
    steps = sum(v)
    return {"rollout/spec_stats_reported": 1.0,
            "rollout/spec_accepted_per_decode_step": (sum(a) / steps) if steps else 0.0,
            "rollout/spec_requests_without_drafts": sum(1 for x in d if x == 0) / len(d)}
