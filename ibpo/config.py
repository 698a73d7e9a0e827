"""One validated configuration object for every IBPO option (``docs/method_ibpo.md``; paper App. C, D, E).

Every bad value fails at construction with a message naming the option and its allowed range, so a
mistyped YAML key or an out-of-range hyper-parameter stops a run before any GPU time is spent.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

from ibpo.variants import get_variant, variant_names

ALPHA_MODES = ("fixed", "adaptive")
# Which part of Eq. 18 decides a rewrite (see `rewrite_condition`).
REWRITE_CONDITIONS = ("both", "closer_to_reference")
CANDIDATE_VIEWS = ("full", "strip_thinking")
# target_first: x~ = (x; y_i; y_ref), the paper's order (Eq. 13/28). reference_first: (x; y_ref; y_i), so the
# corrections of one prompt that share a reference share the prefix problem + reference (docs/correction_pass.md).
CANDIDATE_ORDERS = ("target_first", "reference_first")
LAMBDA_SCHEDULES = ("fixed", "theorem")
# Where IBPO-mask's token mask applies, by the sign of the row's normalised advantage Â (see `mask_sign`).
MASK_SIGNS = ("negative_only", "complement_when_positive", "literal")
# How the joint-training correction samples are grouped for the advantage (see `joint_grouping`).
JOINT_GROUPINGS = ("per_prompt", "per_correction_prompt")
# How the actor's mini-batches take the joint rows (see `joint_minibatch`).
JOINT_MINIBATCH_MODES = ("grow", "verl")

# App. C.1, verbatim.
DEFAULT_INSTRUCTION = (
    "You are given two candidate solutions to the same problem. Compare them step by step, identify any "
    "inconsistencies or errors, and then produce a corrected solution and final answer."
)
# Used when num_references = 0 (the "k = 1 self-correction" ablation of Table 3): one candidate only.
DEFAULT_SELF_INSTRUCTION = (
    "You are given a candidate solution to the problem. Check it step by step, identify any errors, and then "
    "produce a corrected solution and final answer."
)
# Restates the original answer-format instruction so the verifier can read the corrected answer.
DEFAULT_FORMAT_REMINDER = (
    "Write the complete corrected solution, and give the final answer in exactly the format the problem asks for."
)
# Placeholders: {instruction}, {problem}, {candidates}, {format_reminder}.
DEFAULT_TEMPLATE = "{instruction}\n\n### Problem\n{problem}\n\n{candidates}\n\n{format_reminder}"


class IBPOConfigError(ValueError):
    """An IBPO option is unknown or out of range."""


@dataclass(frozen=True)
class IBPOConfig:
    """All IBPO options, validated at construction.

    The defaults are also the ``ibpo:`` block of ``recipe/ibpo/config/ibpo_blocks.yaml``, which documents
    each option and its paper section; tests/unit/test_config_defaults.py keeps the two equal key by key.
    G (the group size) is not an option: it is ``actor_rollout_ref.rollout.n``.
    """

    enable: bool = True
    variant: str = "binary"  # binary (Eq. 14/19) | ratio (Eq. 16) | mask (Eq. 7/17)
    # IBPO-mask, where m_t applies by the sign of Â_i. Eq. 17's rationale ("unmodified tokens are not
    # penalized") presumes Â < 0, but a shaped wrong response of a hard group can have Â > 0 (r' = 0.3 with
    # 0 of 8 right: Â = +2.65); the mask would then push the whole positive update onto the tokens the
    # correction changed, the likely errors. negative_only: m_t where Â < 0, all tokens where Â >= 0;
    # complement_when_positive: m_t where Â < 0, 1 - m_t where Â > 0 (only unchanged tokens are reinforced);
    # literal: m_t whatever the sign (Eq. 17 as written).
    mask_sign: str = "negative_only"
    lam: float = 0.6  # λ in r' = r + λΔ (Eq. 15/27); Table 4 optimum 0.6
    beta: float = 0.5  # β in Δ = β·1[...] (Eq. 14/26)
    alpha: float = 0.6  # fixed rewrite threshold α (Eq. 18), Table 5 plateau 0.55-0.70
    alpha_mode: str = "fixed"  # fixed | adaptive (α = μ_d + 2σ_d over the batch, App. C.3)
    # both: Eq. 18 as written (d(y, ŷ) > α and d(y, ŷ) > d(ŷ, y_ref)) | closer_to_reference: its second
    # condition alone, d(ŷ, y_ref) < d(y, ŷ), so a right correction that copies (or stays closer to) the
    # reference is a rewrite whatever α; when every wrong answer is a few tokens from the right one (d < α),
    # Eq. 18 never fires and copies of a right reference are shaped (docs/evidence.md). No reference: α alone.
    rewrite_condition: str = "both"
    adaptive_min_samples: int = 8  # fewer successful corrections than this -> fall back to fixed α
    num_references: int = 1  # K - 1 references per wrong response (Eq. 4); 0 = self-correction (k = 1)
    corrections_per_target: int = 1  # corrections sampled per wrong response
    instruction: str = DEFAULT_INSTRUCTION
    self_instruction: str = DEFAULT_SELF_INSTRUCTION
    format_reminder: str = DEFAULT_FORMAT_REMINDER
    template: str = DEFAULT_TEMPLATE
    candidate_labels: tuple[str, ...] = ("Solution 1", "Solution 2")
    shuffle_candidates: bool = False  # rejected with candidate_order=reference_first (it would undo the layout)
    candidate_order: str = "target_first"  # target_first (paper, Eq. 13/28) | reference_first (prefix-cache layout)
    reference_per_group: bool = False  # one reference draw per group, shared by its wrong responses (each still uniform)
    candidate_view: str = "full"  # full | strip_thinking (drop text up to </think>)
    # each candidate is middle-truncated to this many tokens *of its re-tokenised text*; 0 = derived at start
    # from the model context and the response length (ibpo/budget.py: correction_budget)
    max_candidate_tokens: int = 0
    # Per-correction length bound (docs/correction_pass.md, "Length bound"): a correction of target y gets
    # max_tokens = ceil(c·|y|) + correction_closing_tokens (capped at the rollout's response_length);
    # c = correction_max_tokens_factor, 0 = no bound (every correction may use max_response_length). Default 2:
    # on the toy's 252 real corrections (longest 1.81·|y|) c >= 1.5 cut none; see docs/correction_pass.md.
    correction_max_tokens_factor: float = 2.0
    correction_closing_tokens: int = 64
    # every N steps, replay vLLM's ngram proposer on the step's corrections (ibpo/correction/lookup_*
    # metrics, ibpo.lookup_decoding); 0 = off
    lookup_proxy_interval: int = 1
    correct_threshold: float = 0.5  # a response with reward >= this is "correct" (rewards are {0, 1})
    joint_training: bool = False  # App. E.2 (C): train on correction samples too
    # joint rows' groups for the advantage: per_prompt (all corrections of prompt x form one group) |
    # per_correction_prompt (the corrections_per_target samples of one x~ form a group, App. C.3's
    # "contrastive RL within the group"; needs corrections_per_target >= 2)
    joint_grouping: str = "per_prompt"
    # grow: the actor's mini-batch grows with the joint rows, so a step makes as many optimizer updates as
    # the same run without joint training (App. E.2: one policy update on the mixed batch) | verl: verl's
    # fixed ppo_mini_batch_size, so the joint rows add updates
    joint_minibatch: str = "grow"
    rewrite_penalty: float = 0.0  # App. C.3: r_corr = r(ŷ) - penalty·1[rewrite] for correction samples
    lambda_schedule: str = "fixed"  # fixed | theorem (clip λ to a fraction of the running λ_max, Thm. A.2)
    lambda_max_fraction: float = 0.5  # theorem schedule: λ_t = min(lam, fraction · running λ_max)
    lambda_max_momentum: float = 0.9  # EMA momentum of the running λ_max
    diagnostics_interval: int = 1  # log the (costlier) variance diagnostics every N steps
    grad_probe_interval: int = 0  # every N steps compare per-sample policy-gradient variance, GSPO vs IBPO; 0 = off
    grad_probe_coordinates: int = 4096  # size of the fixed random subset of weight entries the gradients are projected on
    grad_probe_micro_batch_size: int = 8  # rows per probe forward on each rank (0 = all at once)
    seed: int = 0

    def __post_init__(self) -> None:
        def bad(name: str, allowed: str) -> IBPOConfigError:
            return IBPOConfigError(f"ibpo.{name}={getattr(self, name)!r} is out of range: must be {allowed}")

        if self.variant not in variant_names():
            raise bad("variant", f"one of the registered variants {variant_names()} (ibpo/variants.py)")
        if self.alpha_mode not in ALPHA_MODES:
            raise bad("alpha_mode", f"one of {ALPHA_MODES}")
        if self.rewrite_condition not in REWRITE_CONDITIONS:
            raise bad("rewrite_condition", f"one of {REWRITE_CONDITIONS}")
        if self.candidate_order not in CANDIDATE_ORDERS:
            raise bad("candidate_order", f"one of {CANDIDATE_ORDERS}")
        if self.candidate_order == "reference_first" and self.shuffle_candidates:
            raise IBPOConfigError(
                "ibpo.shuffle_candidates=True with ibpo.candidate_order='reference_first': shuffling puts the target "
                "first in half the prompts and undoes the shared problem + reference prefix; pick one")
        if self.candidate_view not in CANDIDATE_VIEWS:
            raise bad("candidate_view", f"one of {CANDIDATE_VIEWS}")
        if self.lambda_schedule not in LAMBDA_SCHEDULES:
            raise bad("lambda_schedule", f"one of {LAMBDA_SCHEDULES}")
        if self.mask_sign not in MASK_SIGNS:
            raise bad("mask_sign", f"one of {MASK_SIGNS}")
        if self.joint_grouping not in JOINT_GROUPINGS:
            raise bad("joint_grouping", f"one of {JOINT_GROUPINGS}")
        if self.joint_minibatch not in JOINT_MINIBATCH_MODES:
            raise bad("joint_minibatch", f"one of {JOINT_MINIBATCH_MODES}")
        if self.joint_grouping == "per_correction_prompt" and self.corrections_per_target < 2:
            raise IBPOConfigError(
                f"ibpo.joint_grouping='per_correction_prompt' needs ibpo.corrections_per_target >= 2 (got "
                f"{self.corrections_per_target}): every group would be one sample, whose advantage is 0 (Eq. 23)")
        if not 0.0 <= self.alpha <= 1.0:
            raise bad("alpha", "in [0, 1]")
        if not 0.0 <= self.beta <= 1.0:
            raise bad("beta", "in [0, 1]")
        if self.lam < 0.0:
            raise bad("lam", ">= 0")
        # Eq. 8: 0 <= λΦ < 1, so a shaped wrong response never reaches a correct one's reward.
        if self.lam * self.max_delta >= 1.0:
            raise IBPOConfigError(
                f"ibpo.lam * max Δ = {self.lam} * {self.max_delta} = {self.lam * self.max_delta} must be < 1 "
                f"(Eq. 8: 0 <= λΔ < 1; max Δ of variant '{self.variant}' with beta={self.beta}, ibpo/variants.py)"
            )
        if self.num_references < 0:
            raise bad("num_references", ">= 0 (K - 1; 0 means self-correction without a reference)")
        if self.corrections_per_target < 1:
            raise bad("corrections_per_target", ">= 1")
        if self.adaptive_min_samples < 2:
            raise bad("adaptive_min_samples", ">= 2")
        if self.max_candidate_tokens < 0:
            raise bad("max_candidate_tokens", ">= 0 (0 derives the budget from the model context at start)")
        if isinstance(self.correction_max_tokens_factor, bool) or not isinstance(
                self.correction_max_tokens_factor, (int, float)) or not math.isfinite(self.correction_max_tokens_factor):
            raise bad("correction_max_tokens_factor", "a finite number: 0 (no bound) or >= 1")
        if not (self.correction_max_tokens_factor == 0.0 or self.correction_max_tokens_factor >= 1.0):
            raise bad("correction_max_tokens_factor", "0 (no bound) or >= 1 (a correction may at least repeat its "
                      "target; a smaller bound would cut the local repairs the shaping credits)")
        for name in ("correction_closing_tokens", "lookup_proxy_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise bad(name, "an integer >= 0" + (" (0 disables the lookup metrics)"
                                                     if name == "lookup_proxy_interval" else ""))
        if not 0.0 < self.correct_threshold <= 1.0:
            raise bad("correct_threshold", "in (0, 1]")
        if self.rewrite_penalty < 0.0:
            raise bad("rewrite_penalty", ">= 0")
        if not 0.0 < self.lambda_max_fraction <= 1.0:
            raise bad("lambda_max_fraction", "in (0, 1]")
        if not 0.0 <= self.lambda_max_momentum < 1.0:
            raise bad("lambda_max_momentum", "in [0, 1)")
        if self.diagnostics_interval < 1:
            raise bad("diagnostics_interval", ">= 1")
        if self.grad_probe_interval < 0:
            raise bad("grad_probe_interval", ">= 0 (0 disables the probe)")
        if self.grad_probe_coordinates < 1:
            raise bad("grad_probe_coordinates", ">= 1")
        if self.grad_probe_micro_batch_size < 0:
            raise bad("grad_probe_micro_batch_size", ">= 0")
        if len(self.candidate_labels) < 1 + self.num_references:
            raise IBPOConfigError(
                f"ibpo.candidate_labels has {len(self.candidate_labels)} labels but a correction prompt shows "
                f"1 + num_references = {1 + self.num_references} candidates"
            )
        missing = [p for p in ("{problem}", "{candidates}") if p not in self.template]
        if missing:
            raise IBPOConfigError(f"ibpo.template lacks the placeholder(s) {missing}")
        try:  # any other brace field (e.g. a literal "\\boxed{}") would fail at the first correction
            self.template.format(instruction="", problem="", candidates="", format_reminder="")
        except (IndexError, KeyError, ValueError) as exc:
            raise IBPOConfigError(
                f"ibpo.template does not format with the placeholders {{instruction}} {{problem}} {{candidates}} "
                f"{{format_reminder}} ({type(exc).__name__}: {exc}); write literal braces as '{{{{' and '}}}}'"
            ) from exc

    @property
    def max_delta(self) -> float:
        """Largest Δ the variant can produce (its registry entry): β for binary/mask, 1 for ratio (|U|/T <= 1)."""
        return float(get_variant(self.variant).max_delta(self.beta))

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> "IBPOConfig":
        """Build from a plain mapping (e.g. ``OmegaConf.to_container(config.ibpo)``); unknown keys fail."""
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if "group_size" in unknown:
            raise IBPOConfigError("ibpo.group_size is not an option: G is actor_rollout_ref.rollout.n (the group "
                                  "size verl samples); set that instead")
        if unknown:
            raise IBPOConfigError(f"unknown ibpo option(s) {unknown}; known options: {sorted(known)}")
        if "candidate_labels" in options and options["candidate_labels"] is not None:
            options["candidate_labels"] = tuple(options["candidate_labels"])
        return cls(**options)

    def replace(self, **changes: Any) -> "IBPOConfig":
        """A validated copy with some options changed."""
        return dataclasses.replace(self, **changes)


__all__ = ["IBPOConfig", "IBPOConfigError", "CANDIDATE_ORDERS", "DEFAULT_INSTRUCTION"]
