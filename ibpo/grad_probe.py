"""Gradient-variance probe: per-sample policy-gradient projections on a fixed random subset of parameters,
under two advantage vectors of the *same* samples (paper App. A, "Empirical Verification": IBPO reduces
policy-gradient variance by ≈30%).

For sample i with response tokens t, advantage a_{i,t} and aggregation weight w_{i,t}, the per-sample
policy gradient at the rollout policy (θ = θ_old, so GSPO's sequence ratio s_i = 1) is

    g_i = Σ_t a_{i,t} w_{i,t} ∇_θ log π_θ(y_{i,t} | x_i, y_{i,<t}),

with w = 1/|y_i| (``token_mean``: GSPO with ``seq-mean-token-mean``, and the gradient of s_i at s_i = 1)
or w = 1 (``sum``: Eq. 3). A sequence advantage (shape ``(B,)``) is broadcast over the response tokens;
a token-level one (``(B, R)``, e.g. IBPO-mask's m_t·Â_i) is used as given.

Only the coordinates of a fixed random subset of entries of the model's ``nn.Linear`` weights are kept.
They are obtained for the whole batch in one backward pass, without per-sample loops: a forward hook on
each selected linear layer adds ``Σ_k x[b, ..., in_k] · δ[b, k]`` to output unit ``out_k`` of sample b,
with δ = 0. The output is unchanged, and ∂L/∂δ[b, k] is exactly sample b's gradient with respect to
weight entry (out_k, in_k) (an output is linear in the weight: ∂y_o/∂W_{o,i} = x_i). Samples do not
interact in a causal LM forward, so row b of ∂(Σ_i L_i)/∂δ is g_b. Memory is ``B × num_coordinates``;
no parameter ``.grad`` is touched. Weights shared between modules (tied embeddings / ``lm_head``) are
excluded, because a hook on one use would miss the other's contribution.

Variance (**Decision**): the total variance of the per-sample projections over the batch,
tr Cov(g) = Σ_k Var_i(g_{i,k}) with the unbiased (B − 1) denominator. Both advantage vectors are
group-normalised in the trainer, so their scales are comparable and the ratio var_ibpo / var_gspo is the
number the paper's "≈30% lower" refers to (0.7).

Inputs follow verl's layout: ``input_ids``/``attention_mask`` of shape ``(B, L)`` hold prompt then
response, the response being the last ``R`` positions, ``response_mask`` ``(B, R)``. Position ids default
to ``cumsum(attention_mask) − 1`` (verl's convention for left-padded prompts). Run the model with
dropout off (``model.eval()``); the probe does not change the model's mode.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ibpo.diagnostics import total_variance

AGGREGATIONS = ("token_mean", "sum")


@dataclass(frozen=True)
class ParameterSubset:
    """A fixed set of weight entries: for each selected ``nn.Linear`` (by module name), the (out, in)
    coordinates of its chosen entries. Coordinates are ordered module by module, in the order listed."""

    module_names: tuple[str, ...]
    out_index: tuple[torch.Tensor, ...]  # int64 per module
    in_index: tuple[torch.Tensor, ...]  # int64 per module

    @property
    def num_coordinates(self) -> int:
        return int(sum(int(t.numel()) for t in self.out_index))

    def offsets(self) -> list[int]:
        """Start of every module's block of coordinates in the projected vector."""
        sizes = [int(t.numel()) for t in self.out_index]
        return [int(x) for x in np.concatenate([[0], np.cumsum(sizes)[:-1]])] if sizes else []


@dataclass(frozen=True)
class GradProbeResult:
    """Variances of per-sample projected policy gradients under two advantage vectors."""

    var_baseline: float  # tr Cov(g) under the baseline advantages (GSPO)
    var_candidate: float  # tr Cov(g) under the candidate advantages (IBPO)
    ratio: float  # var_candidate / var_baseline (nan when the baseline variance is 0)
    mean_sq_norm_baseline: float  # mean_i ||g_i||² (the second moment, for reference)
    mean_sq_norm_candidate: float
    num_samples: int
    num_coordinates: int

    def as_metrics(self, prefix: str = "ibpo/grad_probe/") -> dict[str, float]:
        """Flat metrics for verl's logger."""
        return {prefix + k: float(v) for k, v in asdict(self).items()}


def _shared_weight_ids(model: nn.Module) -> set[int]:
    """ids of weight tensors used by more than one module (tied embeddings)."""
    seen: dict[int, int] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            seen[id(param)] = seen.get(id(param), 0) + 1
    return {pid for pid, count in seen.items() if count > 1}


def eligible_linear_modules(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """``nn.Linear`` modules with a trainable weight that no other module shares, in model order."""
    shared = _shared_weight_ids(model)
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and module.weight.requires_grad and id(module.weight) not in shared
    ]


def select_parameter_subset(model: nn.Module, num_coordinates: int, seed: int = 0) -> ParameterSubset:
    """``num_coordinates`` distinct weight entries drawn uniformly from all eligible linear weights
    (so a layer's share is proportional to its size), reproducible from ``seed`` and the architecture."""
    modules = eligible_linear_modules(model)
    if not modules:
        raise ValueError("grad probe: the model has no nn.Linear with an unshared trainable weight")
    sizes = np.array([m.out_features * m.in_features for _, m in modules], dtype=np.int64)
    total = int(sizes.sum())
    if not 1 <= num_coordinates <= total:
        raise ValueError(f"grad probe: num_coordinates={num_coordinates} must lie in [1, {total}] for this model")
    rng = np.random.default_rng(seed)
    chosen: np.ndarray = np.zeros(0, dtype=np.int64)
    while chosen.size < num_coordinates:  # rejection of duplicates; O(k) memory even for 10^10 entries
        draw = rng.integers(0, total, size=2 * (num_coordinates - chosen.size) + 8)
        chosen = np.unique(np.concatenate([chosen, draw]))
    chosen = np.sort(rng.permutation(chosen)[:num_coordinates])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    owner = np.searchsorted(starts, chosen, side="right") - 1
    names, outs, ins = [], [], []
    for m, (name, module) in enumerate(modules):
        local = chosen[owner == m] - starts[m]
        if local.size == 0:
            continue
        names.append(name)
        outs.append(torch.as_tensor(local // module.in_features, dtype=torch.long))
        ins.append(torch.as_tensor(local % module.in_features, dtype=torch.long))
    return ParameterSubset(tuple(names), tuple(outs), tuple(ins))


@contextmanager
def _perturbation_hooks(model: nn.Module, subset: ParameterSubset, delta: torch.Tensor) -> Iterator[None]:
    """Install the δ hooks for the duration of one forward (see the module docstring)."""
    modules = dict(model.named_modules())
    handles = []
    for name, out_idx, in_idx, offset in zip(subset.module_names, subset.out_index, subset.in_index,
                                             subset.offsets()):
        if name not in modules or not isinstance(modules[name], nn.Linear):
            raise ValueError(f"grad probe: module {name!r} of the parameter subset is not an nn.Linear of this model")
        block = slice(offset, offset + int(out_idx.numel()))

        def hook(module, inputs, output, out_idx=out_idx, in_idx=in_idx, block=block):
            x = inputs[0]
            if x.shape[0] != delta.shape[0]:
                raise ValueError(f"grad probe: layer input batch dim {x.shape[0]} != batch size {delta.shape[0]} "
                                 "(packed/remove-padding inputs are not supported; use padded (B, L) tensors)")
            d = delta[:, block].view(delta.shape[0], *([1] * (x.dim() - 2)), -1)
            contribution = x.index_select(-1, in_idx.to(x.device)).to(delta.dtype) * d
            return output.index_add(-1, out_idx.to(output.device), contribution.to(output.dtype))

        handles.append(modules[name].register_forward_hook(hook))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """verl's position ids for left-padded rows: cumsum(mask) − 1, clipped at 0."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def loss_token_coefficients(advantages: torch.Tensor, response_mask: torch.Tensor, aggregation: str) -> torch.Tensor:
    """(B, R) coefficients a_{i,t}·w_{i,t} of log π(y_{i,t}) in the per-sample surrogate."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"grad probe: aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    mask = response_mask.to(torch.float64)
    adv = advantages.to(torch.float64)
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(mask)
    if adv.shape != mask.shape:
        raise ValueError(f"grad probe: advantages shape {tuple(advantages.shape)} must be (B,) or {tuple(mask.shape)}")
    coeff = adv * mask
    if aggregation == "token_mean":
        coeff = coeff / mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
    return coeff


def response_log_probs(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       position_ids: torch.Tensor, response_length: int) -> torch.Tensor:
    """(B, R) log π of the last ``response_length`` tokens of ``input_ids`` given everything before them."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).logits
    length = input_ids.shape[1]
    pred = logits[:, length - response_length - 1: length - 1]
    pred = pred.to(torch.promote_types(pred.dtype, torch.float32))  # bf16 logits -> fp32 log-softmax
    targets = input_ids[:, length - response_length:]
    return torch.log_softmax(pred, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def projected_per_sample_gradients(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    advantages: Sequence[torch.Tensor],
    subset: ParameterSubset,
    position_ids: torch.Tensor | None = None,
    aggregation: str = "token_mean",
    micro_batch_size: int | None = None,
) -> list[torch.Tensor]:
    """Per-sample policy gradients projected on ``subset``, one ``(B, num_coordinates)`` float64 tensor per
    advantage tensor in ``advantages`` (all from one forward per micro-batch)."""
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(f"grad probe: input_ids {tuple(input_ids.shape)} and attention_mask "
                         f"{tuple(attention_mask.shape)} must both be (B, L)")
    batch, resp_len = response_mask.shape
    if batch != input_ids.shape[0] or resp_len >= input_ids.shape[1]:
        raise ValueError(f"grad probe: response_mask {tuple(response_mask.shape)} does not fit input_ids "
                         f"{tuple(input_ids.shape)} (responses are the last R positions)")
    if not advantages:
        raise ValueError("grad probe: give at least one advantage tensor")
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)
    coeffs = [loss_token_coefficients(a, response_mask, aggregation) for a in advantages]
    step = micro_batch_size or batch
    first = next(model.parameters())
    device = first.device
    # δ (and so the accumulated gradient) in at least fp32, in fp64 for an fp64 model
    delta_dtype = torch.promote_types(first.dtype, torch.float32)
    outputs: list[list[torch.Tensor]] = [[] for _ in advantages]
    for lo in range(0, batch, step):
        hi = min(batch, lo + step)
        delta = torch.zeros(hi - lo, subset.num_coordinates, dtype=delta_dtype, device=device, requires_grad=True)
        with torch.enable_grad(), _perturbation_hooks(model, subset, delta):
            logp = response_log_probs(model, input_ids[lo:hi].to(device), attention_mask[lo:hi].to(device),
                                      position_ids[lo:hi].to(device), resp_len)
            for j, coeff in enumerate(coeffs):
                surrogate = (coeff[lo:hi].to(device) * logp.to(torch.float64)).sum()
                (grad,) = torch.autograd.grad(surrogate, delta, retain_graph=j < len(coeffs) - 1)
                outputs[j].append(grad.detach().to(torch.float64).cpu())
    result = [torch.cat(chunks, dim=0) for chunks in outputs]
    for j, grads in enumerate(result):
        bad = (~torch.isfinite(grads)).any(dim=1).nonzero().flatten().tolist()
        if bad:
            raise FloatingPointError(f"grad probe: non-finite per-sample gradients for rows {bad[:10]} under advantage "
                                     f"tensor {j} (NaN log-probs? some attention implementations produce NaN on "
                                     "padded rows; use sdpa)")
    return result


def probe_gradient_variance(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    advantages_baseline: torch.Tensor,
    advantages_candidate: torch.Tensor,
    subset: ParameterSubset,
    position_ids: torch.Tensor | None = None,
    aggregation: str = "token_mean",
    micro_batch_size: int | None = None,
) -> GradProbeResult:
    """Both variances and their ratio for the same samples under baseline (GSPO) and candidate (IBPO)
    advantages."""
    g_base, g_cand = projected_per_sample_gradients(
        model, input_ids, attention_mask, response_mask, [advantages_baseline, advantages_candidate], subset,
        position_ids, aggregation, micro_batch_size)
    var_base, var_cand = total_variance(g_base), total_variance(g_cand)
    return GradProbeResult(
        var_baseline=var_base,
        var_candidate=var_cand,
        ratio=var_cand / var_base if var_base > 0 else float("nan"),
        mean_sq_norm_baseline=float((g_base ** 2).sum(dim=1).mean()),
        mean_sq_norm_candidate=float((g_cand ** 2).sum(dim=1).mean()),
        num_samples=int(g_base.shape[0]),
        num_coordinates=subset.num_coordinates,
    )


__all__ = [
    "ParameterSubset", "GradProbeResult", "eligible_linear_modules", "select_parameter_subset",
    "projected_per_sample_gradients", "probe_gradient_variance", "loss_token_coefficients",
    "position_ids_from_mask", "response_log_probs",
]
