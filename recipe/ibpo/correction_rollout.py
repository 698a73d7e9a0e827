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

from ibpo.config import IBPOConfig, IBPOConfigError
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
    """Start check of the correction pass's rollout settings (called from ``recipe.ibpo.preflight.check_trainer_config``)."""
    rollout = config.actor_rollout_ref.rollout
    model = config.actor_rollout_ref.get("model", {}) or {}
    mtp = _plain(model.get("mtp", None)) or {}
    spec = speculative_config_of(config)
    check_speculative_config(spec, str(rollout.get("name", "")),
                             bool(mtp.get("enable", False) and mtp.get("enable_rollout", False)))
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
           "check_speculative_config", "proxy_params", "speculative_config_of"]
