"""The model, read from its config on disk (no weights loaded): the path, the context length it is built
for, the shape the FLOP counter needs and the shape the GPU-time model needs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from compute_accounting.flops import ModelShape, active_matmul_params
from compute_accounting.gpu_time import ServingShape, mixture_of_experts_shape, serving_shape
from recipe.common.preflight.errors import SetupError


def check_model_path(model_path: str) -> None:
    """A local ``actor_rollout_ref.model.path`` (absolute, ``~`` or relative) must be a directory; anything else
    is a hub id, which the model config's loading checks."""
    if model_path.startswith(("/", "~", ".")) and not Path(model_path).expanduser().is_dir():
        raise SetupError(f"actor_rollout_ref.model.path={model_path} is not a directory")


# transformers names the routed experts' weights `<layer>.mlp.experts.<weight>` (Qwen3-MoE, Mixtral, ...), with the
# expert index as a leading dimension; shared experts (`shared_expert(s)`) do not match and count in full
ROUTED_EXPERT_WEIGHT = re.compile(r"(^|\.)experts\.")
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def mixture_of_experts(text_config: Any, model_path: str) -> tuple[int, int] | None:
    """(routed experts E, experts per token k) of a mixture-of-experts model config, None for a dense one."""
    experts = next((int(v) for k in EXPERT_COUNT_KEYS if (v := getattr(text_config, k, None))), None)
    if experts is None:
        return None
    per_token = getattr(text_config, "num_experts_per_tok", None)
    if not per_token:
        raise SetupError(f"actor_rollout_ref.model.path={model_path}: the config names {experts} experts but no "
                         "num_experts_per_tok, which the FLOP and GPU-time counts need")
    return experts, int(per_token)


def _weight_matrices(hf_config: Any) -> tuple[int, int]:
    """The model's weight-matrix parameters as a forward pass uses them (the input embedding excluded unless the LM
    head is tied to it; biases and norm scales are no matmuls) and, of those, the routed experts' (0 for a dense
    model). Built on the meta device from its config: no weights loaded."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    tied = output is not None and output.weight is embedding
    # named_parameters yields a shared tensor once
    named = [(n, p) for n, p in model.named_parameters() if p.dim() >= 2]
    matrices = int(sum(p.numel() for _, p in named)) - (0 if tied else int(embedding.numel()))
    routed = int(sum(p.numel() for n, p in named if ROUTED_EXPERT_WEIGHT.search(n)))
    return matrices, routed


def _active_matrices(hf_config: Any, model_path: str) -> tuple[int, int]:
    """(weight-matrix parameters, those a token computes with) of the model of ``hf_config``
    (:func:`_weight_matrices`; of a mixture of experts, k routed experts of E:
    :func:`compute_accounting.flops.active_matmul_params`)."""
    matrices, routed = _weight_matrices(hf_config)
    routing = mixture_of_experts(getattr(hf_config, "text_config", None) or hf_config, model_path)
    if routing is None:
        return matrices, matrices
    if routed == 0:
        raise SetupError(f"actor_rollout_ref.model.path={model_path}: the config names {routing[0]} experts but no "
                         "weight is named like transformers' routed experts ('mlp.experts.'), so the FLOP and "
                         "GPU-time counts cannot tell the active parameters")
    return matrices, active_matmul_params(matrices, routed, *routing)


def model_flop_shape(model_path: str) -> ModelShape:
    """The FLOP counter's :class:`compute_accounting.flops.ModelShape` of the HF model at ``model_path``, built on
    the meta device (no weights loaded): N = the weight matrices a token computes with (:func:`_weight_matrices`;
    of a mixture of experts, its k routed experts of E: :func:`compute_accounting.flops.active_matmul_params`),
    L = ``num_hidden_layers``, d = heads × head dim."""
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)
    text = getattr(hf_config, "text_config", None) or hf_config
    _, active = _active_matrices(hf_config, model_path)
    heads = int(text.num_attention_heads)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return ModelShape(matmul_params=active, num_layers=int(text.num_hidden_layers), attention_dim=heads * int(head_dim))


def model_serving_shape(model_path: str) -> ServingShape:
    """The GPU-time model's :class:`compute_accounting.gpu_time.ServingShape` of the HF model at ``model_path``
    (``compute_budget.cost_model=roofline:<GPU>`` prices the run's own model), from its config (no weights):
    hidden size, layers, attention and key-value heads, head dim (hidden / heads when unset), the MLP's
    intermediate size and the vocabulary (a multimodal model's ``text_config`` first). A mixture of experts is
    counted on the meta device instead (:func:`compute_accounting.gpu_time.mixture_of_experts_shape`: its
    active parameters per token, every expert's bytes per decode pass). A config without one of them raises
    :class:`SetupError` naming it."""
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)
    text = getattr(hf_config, "text_config", None) or hf_config
    name = Path(str(model_path)).name or str(model_path)
    moe = mixture_of_experts(text, model_path) is not None
    needed = ("hidden_size", "num_hidden_layers", "num_attention_heads") + (
        () if moe else ("intermediate_size", "vocab_size"))
    missing = [k for k in needed if getattr(text, k, None) is None]
    if missing:
        raise SetupError(f"actor_rollout_ref.model.path={model_path}: the model config has no {missing}, which the "
                         "roofline GPU-time model needs (compute_budget.cost_model=roofline:<GPU>); give "
                         "compute_budget.cost_model the path of a lab/scripts/bench_gpu.py JSON instead")
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    if moe:
        matrices, active = _active_matrices(hf_config, model_path)
        return mixture_of_experts_shape(name, matrices, active, int(text.num_hidden_layers), kv_heads, head_dim)
    return serving_shape(name, int(text.hidden_size), int(text.num_hidden_layers), heads, kv_heads, head_dim,
                         int(text.intermediate_size), int(text.vocab_size))


def context_length(hf_config: Mapping[str, Any], override: Mapping[str, Any] | None = None) -> int | None:
    """The longest sequence a model is built for, from its config as a dict (``config.json``, or a transformers
    config's ``to_dict()``; a multimodal model's ``text_config`` first): ``max_position_embeddings`` (with
    ``actor_rollout_ref.model.override_config`` applied), times a rope-scaling ``factor`` where the scaling
    extends it (``yarn``/``dynamic``/``linear``: of ``original_max_position_embeddings`` when given), as vLLM
    derives its max_model_len. None when the config has no such field. The one reader of a model's context:
    the pre-flight, the trainers' start checks and a method's config resolvers all use it."""
    text = dict(hf_config.get("text_config") or hf_config)
    text.update(override or {})
    positions = text.get("max_position_embeddings")
    if positions is None:
        return None
    # transformers 5 writes rope_parameters, older configs rope_scaling; an override may use either
    scaling = text.get("rope_scaling") or text.get("rope_parameters") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = scaling.get("factor")
    if factor and kind in ("yarn", "dynamic", "linear"):
        base = scaling.get("original_max_position_embeddings") or positions
        return int(base * float(factor)) if kind == "yarn" else int(positions * float(factor))
    return int(positions)


def model_context_length(model_path: str, override: Mapping[str, Any] | None = None) -> int | None:
    """:func:`context_length` of the HF model at ``model_path`` (its config read by transformers)."""
    from transformers import AutoConfig

    try:
        hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise SetupError(f"actor_rollout_ref.model.path={model_path}: cannot read the model's config "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]})") from exc
    return context_length(hf_config.to_dict(), override)


def configured_context_length(model: DictConfig) -> int | None:
    """:func:`model_context_length` of ``actor_rollout_ref.model``: its ``path`` with its ``override_config``
    (what the pre-flight checks and the trainer's start checks use)."""
    override = model.get("override_config")
    # An empty DictConfig is falsy: ``x or {}`` handed omegaconf a plain dict, whose ValueError ("Input cfg is not
    # an OmegaConf config object") then stood in for whatever the later checks (every data row) would have named.
    override = OmegaConf.to_container(override, resolve=True) if OmegaConf.is_config(override) else dict(override or {})
    return model_context_length(str(model.path), override)


def check_context_length(config: DictConfig, context: int | None) -> None:
    """``rollout.max_model_len`` must not exceed the model's context (its positions beyond were never
    trained; the HF rollout accepts it silently), and a prompt of ``data.max_prompt_length`` plus a response
    of ``data.max_response_length`` must fit the context the rollout serves."""
    if context is None:
        return
    rollout = config.actor_rollout_ref.rollout
    max_model_len = rollout.get("max_model_len")
    if max_model_len is not None and int(max_model_len) > context:
        raise SetupError(
            f"actor_rollout_ref.rollout.max_model_len={max_model_len} exceeds the model's context {context} "
            f"(max_position_embeddings of {config.actor_rollout_ref.model.path}, with rope scaling): lower it, or "
            "extend the context with actor_rollout_ref.model.override_config.rope_scaling")
    served = int(max_model_len) if max_model_len is not None else context
    total = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    if total > served:
        raise SetupError(
            f"data.max_prompt_length={config.data.max_prompt_length} + data.max_response_length="
            f"{config.data.max_response_length} = {total} exceeds the context {served} "
            f"({'rollout.max_model_len' if max_model_len is not None else 'the model max_position_embeddings'}): "
            "long prompts would leave no room to answer; lower one of them")


SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")


def model_sampling_defaults(model_path: str) -> tuple[str, dict[str, float]] | None:
    """(source file, sampling settings) of the model's own ``generation_config.json`` (the model's recommended
    temperature / top-p / top-k / min-p, as its authors ship them); None when the local model has none."""
    import json

    path = Path(str(model_path)).expanduser() / "generation_config.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return str(path), {k: data[k] for k in SAMPLING_KEYS if k in data}


def sampling_report(sampling: Mapping[str, Any], model_path: str, what: str) -> str:
    """One line comparing ``sampling`` (e.g. ``rollout.val_kwargs``) with the model's generation config, the
    source named; a differing value is flagged ``!=`` (a deliberate choice stays possible: this informs)."""
    found = model_sampling_defaults(model_path)
    used = {k: sampling[k] for k in SAMPLING_KEYS if sampling.get(k) is not None}
    if found is None:
        return (f"{what}: {used}; the model at {model_path} has no generation_config.json to check them against "
                "(compare with its model card)")
    source, recommended = found
    parts, differ = [], []
    for key, value in used.items():
        if key in recommended:
            same = abs(float(value) - float(recommended[key])) < 1e-9
            parts.append(f"{key} {value}" + ("" if same else f" != {recommended[key]}"))
            differ += [] if same else [key]
        else:
            parts.append(f"{key} {value} (not in the generation config)")
    verdict = f"DIFFERS in {differ}" if differ else "matches"
    return f"{what}: {', '.join(parts)}; {verdict} the model's own {source}"
