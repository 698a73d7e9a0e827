"""What one RL step costs: FLOPs per phase and measured seconds per phase (paper §5, App. B: methods are
compared at matched compute, so the counter must not flatter the method that does more work).

A method's own passes (a no-grad forward over extra rows, a per-sample-gradient probe) are phases the method
names in its :class:`StepWork` (``forward_phases``, ``backward_phases``): they are counted and logged under those
names, so this package names no method and a new method's phase needs no edit here.

FLOPs of a dense decoder-only transformer, per sequence of ``s`` tokens, one forward pass:

    F(s) = 2·N·s + 2·L·d·s·(s + 1)

N = weight-matrix parameters used per token (every weight matrix but the embedding lookup; a tied LM head
counts once), L layers, d = query width (heads × head dim). The second term is causal attention: the
query at position t scores and mixes t keys (QKᵀ and A·V, 2·t·d each), Σ_t 4·t·d = 2·d·s(s+1) per layer.
Generation with a KV cache computes every position once, so a prompt of p tokens plus g generated
tokens costs F(p + g) (every sampled row counted; a server with prefix caching computes the shared
prompt less often). Backward ≈ 2 forwards; gradient checkpointing recomputes one more forward.
Tokens are each row's valid tokens (``attention_mask``), as verl's remove-padding path computes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from numbers import Integral, Real
from typing import Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class ModelShape:
    """The numbers the FLOP formula needs from a model."""

    matmul_params: int  # N: weight-matrix parameters used per token (no embedding lookup, biases, norms)
    num_layers: int  # L
    attention_dim: int  # d: num_attention_heads × head_dim

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"ModelShape.{f.name}={value!r} must be a finite number > 0")


def active_matmul_params(matrices: int, routed_expert_matrices: int, experts: int, experts_per_token: int) -> int:
    """N of a mixture-of-experts model: each token computes with ``experts_per_token`` of the ``experts`` routed
    experts, so their ``routed_expert_matrices`` count k/E of themselves; every other weight matrix (attention,
    router, shared experts, the LM head) counts in full: N = matrices − routed · (1 − k/E)."""
    if not 0 < experts_per_token <= experts:
        raise ValueError(f"{experts_per_token} experts per token of {experts}")
    if not 0 < routed_expert_matrices <= matrices:
        raise ValueError(f"{routed_expert_matrices} routed-expert parameters of {matrices} weight-matrix parameters")
    return int(round(matrices - routed_expert_matrices * (1 - experts_per_token / experts)))


def _not_counts(lengths: Sequence[float] | np.ndarray) -> list:
    """The entries of ``lengths`` that are bools or strings (up to 3): ``np.asarray(..., float)`` would read
    ``True`` as 1 and ``"10"`` as 10, and a list mixing bools with ints becomes an int array."""
    raw = np.asarray(lengths, dtype=object) if isinstance(lengths, (list, tuple)) else np.asarray(lengths)
    if raw.dtype.kind in "bUS":
        return raw.ravel()[:3].tolist()
    if raw.dtype.kind != "O":
        return []
    return [v for v in raw.ravel() if isinstance(v, (bool, np.bool_, str, bytes))][:3]


def token_counts(lengths: Sequence[float] | np.ndarray, name: str = "sequence lengths") -> np.ndarray:
    """``lengths`` as a 1-D float array, refused (a ValueError naming ``name``) unless every entry is a finite
    number >= 0 (a bool or a string is not one): a NaN, infinite or negative count would price a step at NaN, inf
    or a negative cost."""
    wrong = _not_counts(lengths)
    if wrong:
        raise ValueError(f"{name} must be numbers, not bools or strings: got {wrong!r}")
    try:
        s = np.asarray(lengths, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numbers: {exc}") from None
    if s.ndim != 1:
        raise ValueError(f"{name} must be one count per row (a 1-D sequence), got shape {s.shape}")
    if not (np.isfinite(s).all() and (s >= 0).all()):
        raise ValueError(f"{name} must be finite numbers >= 0, got {s[~(np.isfinite(s) & (s >= 0))][:3].tolist()}")
    return s


# the phases every step has (a method's own are named in its StepWork), and the per-row shares inside them
SHARED_PHASES = ("main_gen", "correction_gen", "old_log_prob", "ref_log_prob", "actor_update")
ROW_SHARES = ("joint_rows", "padding_rows")


def check_step_work(work: "StepWork") -> None:
    """Refuse a :class:`StepWork` no step can have done (a ValueError naming the field): ``ppo_epochs`` not an
    integer >= 1, a row length that is negative, NaN or infinite, or a method phase named like a shared phase (of
    this counter or of the GPU-time model) or twice."""
    epochs = work.ppo_epochs
    if isinstance(epochs, bool) or not isinstance(epochs, Integral) or epochs < 1:
        raise ValueError(f"ppo_epochs must be an integer >= 1, got {epochs!r}")
    for name in ("main_gen", "correction_gen", "train_main", "train_joint", "train_padding"):
        token_counts(getattr(work, name), f"StepWork.{name}")
    taken = set(SHARED_PHASES + ROW_SHARES) | {"main_gen_prefill", "main_gen_decode", "correction_gen_prefill",
                                                "correction_gen_decode", "weight_sync"}
    for kind in ("forward_phases", "backward_phases"):
        for phase, rows in getattr(work, kind).items():
            if phase in taken or not isinstance(phase, str) or not phase:
                raise ValueError(f"StepWork.{kind}: phase {phase!r} is a shared phase's name, another of the step's "
                                 "phases or not a name; name a method's phase for what it does")
            taken.add(phase)
            token_counts(rows, f"StepWork.{kind}[{phase!r}]")


def forward_flops(lengths: Sequence[int] | np.ndarray, shape: ModelShape) -> float:
    """Σ_rows F(s) = 2·N·s + 2·L·d·s·(s+1) for one forward pass over rows of ``lengths`` valid tokens."""
    s = token_counts(lengths)
    return float(2.0 * shape.matmul_params * s.sum() + 2.0 * shape.num_layers * shape.attention_dim * (s * (s + 1)).sum())


@dataclass(frozen=True)
class StepWork:
    """The rows one step processed, as valid-token lengths (prompt + response) per row."""

    main_gen: Sequence[int]  # main generation rows (prefill + decode)
    correction_gen: Sequence[int] = ()  # correction prompts x~ + corrections ŷ (prefill + decode)
    train_main: Sequence[int] = ()  # training-batch rows: main responses
    train_joint: Sequence[int] = ()  # training-batch rows: joint-training correction samples
    train_padding: Sequence[int] = ()  # training-batch rows: no-op padding (2 tokens each)
    # a method's own passes, by the phase name it declares (counted and logged under it): no-grad forwards and
    # forward + backward passes, each over rows of these valid-token lengths
    forward_phases: Mapping[str, Sequence[int]] = field(default_factory=dict)
    backward_phases: Mapping[str, Sequence[int]] = field(default_factory=dict)
    ppo_epochs: int = 1
    gradient_checkpointing: bool = False  # actor update recomputes the forward during backward
    old_log_prob_forward: bool = True  # False under verl's rollout-correction bypass mode
    reference_forward: bool = False  # a reference policy forward (KL) over the training batch


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one step, per phase (the shared ones, then ``own``: the method's, by the names its
    :class:`StepWork` declares); ``joint_rows`` / ``padding_rows`` are the shares (already inside the training
    phases) spent on those rows."""

    main_gen: float
    correction_gen: float
    old_log_prob: float
    ref_log_prob: float
    actor_update: float
    own: Mapping[str, float]
    joint_rows: float
    padding_rows: float
    total: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", self.main_gen + self.correction_gen + self.old_log_prob + self.ref_log_prob
                           + self.actor_update + sum(self.own.values()))

    def as_metrics(self, prefix: str) -> dict[str, float]:
        """Per-phase metrics under ``prefix`` (the method's; its trainer logs the total)."""
        return {**{f"{prefix}{k}": float(getattr(self, k)) for k in SHARED_PHASES},
                **{f"{prefix}{k}": float(v) for k, v in self.own.items()},
                **{f"{prefix}{k}": float(getattr(self, k)) for k in ROW_SHARES}}


def step_flops(work: StepWork, shape: ModelShape) -> StepFlops:
    """FLOPs of one step (module docstring): both generations, the old-log-prob and reference forwards
    and ``ppo_epochs`` actor updates (3 forwards each, 4 with gradient checkpointing) over every training
    row (main, joint and padding), and the method's own phases: a no-grad forward, or a forward + backward
    (3 forwards, 4 with gradient checkpointing), over each of their rows."""
    check_step_work(work)
    per_row_kind = {kind: forward_flops(rows, shape) for kind, rows in (
        ("main", work.train_main), ("joint", work.train_joint), ("padding", work.train_padding))}
    train_forward = sum(per_row_kind.values())
    update_passes = work.ppo_epochs * (3 + int(work.gradient_checkpointing))
    training_passes = update_passes + int(work.old_log_prob_forward) + int(work.reference_forward)
    return StepFlops(
        main_gen=forward_flops(work.main_gen, shape),
        correction_gen=forward_flops(work.correction_gen, shape),
        old_log_prob=train_forward if work.old_log_prob_forward else 0.0,
        ref_log_prob=train_forward if work.reference_forward else 0.0,
        actor_update=update_passes * train_forward,
        own={**{phase: forward_flops(rows, shape) for phase, rows in work.forward_phases.items()},
             **{phase: (3 + int(work.gradient_checkpointing)) * forward_flops(rows, shape)
                for phase, rows in work.backward_phases.items()}},
        joint_rows=training_passes * per_row_kind["joint"],
        padding_rows=training_passes * per_row_kind["padding"],
    )
