"""One validated configuration object for every IBPO option (``docs/method_ibpo.md``; paper App. C, D, E).

Every bad value fails at construction with a message naming the option and its allowed range, so a
mistyped YAML key or an out-of-range hyper-parameter stops a run before any GPU time is spent.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ibpo.advantages import SHAPING_LEVELS, mask_sign_names
from ibpo.references import reference_rule_names
from ibpo.variants import get_variant, variant_names
from option_types import mistyped_field

# The closed string modes (what each means: the option's doc below). The open ones, `variant`, `mask_sign`
# and `reference_rule`, are validated against their registries (ibpo/variants.py, ibpo/advantages.py,
# ibpo/references.py), so a registered entry is accepted without touching this file.
ALPHA_MODES = ("fixed", "adaptive")
REWRITE_CONDITIONS = ("both", "closer_to_reference")
CANDIDATE_VIEWS = ("full", "strip_thinking")
CANDIDATE_ORDERS = ("target_first", "reference_first")
LAMBDA_SCHEDULES = ("fixed", "theorem")
JOINT_GROUPINGS = ("per_prompt", "per_correction_prompt")
JOINT_MINIBATCH_MODES = ("grow", "verl")
CORRECT_GROUPS = ("all", "mixed")

# Each closed string option and its allowed values (checked in IBPOConfig.__post_init__).
CLOSED_MODES = {"alpha_mode": ALPHA_MODES, "rewrite_condition": REWRITE_CONDITIONS, "candidate_order": CANDIDATE_ORDERS,
                "candidate_view": CANDIDATE_VIEWS, "lambda_schedule": LAMBDA_SCHEDULES, "joint_grouping": JOINT_GROUPINGS,
                "joint_minibatch": JOINT_MINIBATCH_MODES, "correct_groups": CORRECT_GROUPS, "shaping": SHAPING_LEVELS}

# Each numeric option with a simple range: (test, what the message says is allowed).
NUMERIC_RANGES = {
    "alpha": (lambda v: 0.0 <= v <= 1.0, "in [0, 1]"),
    "beta": (lambda v: 0.0 <= v <= 1.0, "in [0, 1]"),
    "lam": (lambda v: v >= 0.0, ">= 0"),
    "num_references": (lambda v: v >= 0, ">= 0 (K - 1; 0 means self-correction without a reference)"),
    "corrections_per_target": (lambda v: v >= 1, ">= 1"),
    "correction_fraction": (lambda v: 0.0 < v <= 1.0, "in (0, 1] (1: every eligible wrong response)"),
    "adaptive_min_samples": (lambda v: v >= 2, ">= 2"),
    "max_candidate_tokens": (lambda v: v >= 0, ">= 0 (0 derives the budget from the model context at start)"),
    "correct_threshold": (lambda v: 0.0 < v <= 1.0, "in (0, 1]"),
    "rewrite_penalty": (lambda v: v >= 0.0, ">= 0"),
    "lambda_max_fraction": (lambda v: 0.0 < v <= 1.0, "in (0, 1]"),
    "lambda_max_momentum": (lambda v: 0.0 <= v < 1.0, "in [0, 1)"),
    "diagnostics_interval": (lambda v: v >= 1, ">= 1"),
    "grad_probe_interval": (lambda v: v >= 0, ">= 0 (0 disables the probe)"),
    "grad_probe_coordinates": (lambda v: v >= 1, ">= 1"),
    "grad_probe_micro_batch_size": (lambda v: v >= 0, ">= 0"),
    # numpy seeds the reference draw with (seed, step): a negative seed would fail there, at the first step
    "seed": (lambda v: v >= 0, ">= 0 (numpy's generator is seeded with (seed, step))"),
}

# Options that were renamed or replaced: an old key fails naming its successor instead of as merely unknown.
RENAMED_OPTIONS = {
    "reference_per_group": "ibpo.reference_per_group was replaced by ibpo.reference_rule, the name of a registered "
                           "reference rule: reference_per_group=true is reference_rule=per_group, false is "
                           "reference_rule=independent",
}

# App. C.1, verbatim (the defaults of `instruction`, `self_instruction`, `format_reminder`, `template`).
DEFAULT_INSTRUCTION = (
    "You are given two candidate solutions to the same problem. Compare them step by step, identify any "
    "inconsistencies or errors, and then produce a corrected solution and final answer."
)
DEFAULT_SELF_INSTRUCTION = (
    "You are given a candidate solution to the problem. Check it step by step, identify any errors, and then "
    "produce a corrected solution and final answer."
)
DEFAULT_FORMAT_REMINDER = (
    "Write the complete corrected solution, and give the final answer in exactly the format the problem asks for."
)
DEFAULT_TEMPLATE = "{instruction}\n\n### Problem\n{problem}\n\n{candidates}\n\n{format_reminder}"


class IBPOConfigError(ValueError):
    """An IBPO option is unknown, of the wrong type or out of range."""


@dataclass(frozen=True)
class IBPOConfig:
    """All IBPO options, validated at construction.

    Each field carries its documentation (``metadata["doc"]``; ``metadata["section"]``: a comment block for
    the group of options it opens). The ``ibpo:`` block of ``recipe/ibpo/config/ibpo_blocks.yaml`` is
    generated from these fields (``python -m recipe.common.config_blocks``) and
    tests/unit/test_config_defaults.py checks that the committed file is that text. G (the group size) is not
    an option: it is ``actor_rollout_ref.rollout.n``.
    """

    enable: bool = field(default=True, metadata={
        "doc": "false: plain GSPO through the same loop (Δ = 0, no correction pass)"})
    variant: str = field(default="binary", metadata={
        "doc": "a registered shaping variant (ibpo/variants.py): binary: Δ = β (Eq. 14/19) | ratio: Δ = |U|/T "
               "(Eq. 16) | mask: Δ = β and the gradient only on tokens the correction changed (Eq. 7/17)"})
    mask_sign: str = field(default="negative_only", metadata={
        "doc": "IBPO-mask, where m_t applies by the sign of the row's normalised advantage Â; a registered "
               "policy (ibpo.advantages.register_mask_sign). Eq. 17's rationale (\"unmodified tokens are not "
               "penalized\") presumes Â < 0, but a shaped wrong response in a hard group can get Â > 0 "
               "(r' = 0.3, 0 of 8 right: Â = +2.65), and the mask would then reinforce only the tokens the "
               "correction changed, the likely errors. negative_only: m_t where Â < 0, every token where "
               "Â >= 0 | complement_when_positive: m_t where Â < 0, 1 - m_t where Â > 0 (only the kept tokens "
               "are reinforced) | literal: m_t whatever the sign (Eq. 17 as written)\n"
               "The default is a decision, not Eq. 17: docs/method_ibpo.md (Step B)"})
    lam: float = field(default=0.6, metadata={
        "doc": "λ in r' = r + λΔ (Eq. 15/27); Table 4 optimum. Checked: λ·max Δ < 1 (Eq. 8)"})
    beta: float = field(default=0.5, metadata={"doc": "β in Δ = β·1[...] (Eq. 14/26)"})
    shaping: str = field(default="advantage", metadata={
        "doc": "where λΔ enters: reward: r' = r + λΔ before the group normalisation (Eq. 15/23, the paper) | "
               "reward_capped: the same, then a wrong response's advantage is capped at 0 | advantage: "
               "normalise r, then scale a shaped wrong response's negative advantage by (1 - λΔ)\n"
               "Beyond the paper: with reward shaping a shaped wrong answer in a group with no right one gets a "
               "full positive advantage ({0.3, 0, 0, 0} -> +1.73); docs/method_ibpo.md, \"The mechanism\". The "
               "default (advantage, with correct_groups=mixed) is the rule docs/evidence.md section 2 chose: the "
               "paper's (reward, all) unlearned on a weak warm start; the paper's scripts set it explicitly"})
    alpha: float = field(default=0.6, metadata={
        "doc": "rewrite threshold α on d(y, ŷ) (Eq. 18); Table 5 plateau 0.55-0.70"})
    alpha_mode: str = field(default="fixed", metadata={
        "doc": "fixed | adaptive: α = μ_d + 2σ_d over the batch's successful corrections (App. C.3)"})
    rewrite_condition: str = field(default="both", metadata={
        "doc": "both: Eq. 18 as written, d(y, ŷ) > α and d(y, ŷ) > d(ŷ, y_ref) | closer_to_reference: its "
               "second condition alone, d(ŷ, y_ref) < d(y, ŷ), so a right correction that copies (or stays "
               "closer to) the reference is a rewrite whatever α; when every wrong answer is a few tokens from "
               "the right one (d < α), Eq. 18 never fires and copies of a right reference are shaped "
               "(docs/evidence.md). Without a reference: α alone"})
    adaptive_min_samples: int = field(default=8, metadata={
        "doc": "adaptive α falls back to `alpha` with fewer successful corrections than this"})
    num_references: int = field(default=1, metadata={
        "doc": "K - 1 references per wrong response (Eq. 4); 0 = self-correction (Table 3, k = 1)"})
    correct_groups: str = field(default="mixed", metadata={
        "doc": "which wrong responses get a correction: all (Alg. 1: every wrong response, a wrong reference "
               "when the group has no right one) | mixed: only those with a right sibling (no correction pass "
               "for all-wrong groups: cheaper, and their shaping cannot reinforce a wrong answer)\n"
               "mixed is beyond the paper: docs/method_ibpo.md, \"The mechanism\""})
    correction_fraction: float = field(default=1.0, metadata={
        "doc": "share of the wrong responses correct_groups makes eligible that get a correction each step: "
               "ceil(f·m) of the batch's m, drawn uniformly (seed, step); the others keep Δ = 0 and a full "
               "gradient, as in GSPO. Below 1 the correction pass costs about f times as much\n"
               "Beyond the paper, designed after the ablation's results: docs/method_ibpo.md, \"Spending less "
               "on corrections\""})
    corrections_per_target: int = field(default=1, metadata={
        "doc": "corrections sampled per wrong response (Δ is their mean)"})
    instruction: str = field(default=DEFAULT_INSTRUCTION, metadata={
        "section": "The correction prompt x~ (App. C.1, Eq. 28).",
        "doc": "the instruction of x~, verbatim from the paper (App. C.1)"})
    self_instruction: str = field(default=DEFAULT_SELF_INSTRUCTION, metadata={
        "doc": "the instruction when num_references = 0 (one candidate: Table 3's k = 1 self-correction)"})
    format_reminder: str = field(default=DEFAULT_FORMAT_REMINDER, metadata={
        "doc": "the closing reminder of the answer format, so the verifier can read the corrected answer"})
    template: str = field(default=DEFAULT_TEMPLATE, metadata={
        "doc": "the layout of x~; placeholders {instruction} {problem} {candidates} {format_reminder}, literal "
               "braces doubled"})
    candidate_labels: tuple[str, ...] = field(default=("Solution 1", "Solution 2"), metadata={
        "doc": "neutral labels, whatever the order; at least 1 + num_references"})
    shuffle_candidates: bool = field(default=False, metadata={
        "doc": "random candidate order per prompt; rejected with candidate_order=reference_first (it would undo "
               "the layout)"})
    candidate_order: str = field(default="target_first", metadata={
        "section": "Correction-pass layout for vLLM's prefix cache (docs/correction_pass.md; one H100, L=2,048, 6 "
                   "of 8 wrong): target_first shares only instruction + problem: 3.5% of correction prompt "
                   "tokens cached, pass 1.44x the main generation; reference_first shares problem + reference: "
                   "35% cached, prefill -28%, whole pass -15% (1.22x). The paper's order stays the default until "
                   "a comparison shows no loss.",
        "doc": "target_first: x~ = (x; y_i; y_ref) (Eq. 13/28) | reference_first: (x; y_ref; y_i)"})
    reference_rule: str = field(default="independent", metadata={
        "doc": "a registered reference rule (ibpo.references.register_reference_rule; a rule sees the group's "
               "rows, correctness, response ids and the rng). independent: one uniform draw per wrong response "
               "(Alg. 1 l. 14-19) | per_group: one draw per group shared by all its wrong responses (each one's "
               "reference stays uniform over the correct siblings), so every correction of a prompt shares "
               "problem + reference (with reference_first)"})
    candidate_view: str = field(default="full", metadata={
        "doc": "full | strip_thinking (candidates shown without their <think> block)"})
    max_candidate_tokens: int = field(default=0, metadata={
        "doc": "middle-truncate each candidate to this many tokens of its *re-tokenised* text (a candidate can "
               "re-tokenise 1.55x longer than generated), with a visible marker; 0 = derive at start "
               "(ibpo/correction_lengths.py: correction_budget): min(max_response_length, (min(context - "
               "max_response_length, rollout.prompt_length) - max_prompt_length - template) / (1 + num_references) "
               "- marker)"})
    correction_max_tokens_factor: float = field(default=2.0, metadata={
        "section": "Per-correction length bound (docs/correction_pass.md, \"Length bound\"): the correction of "
                   "target y gets max_tokens = ceil(c·|y|) + correction_closing_tokens (capped at "
                   "max_response_length). Not exact: a long correction can still be shaped (Eq. 18); a cut one "
                   "is verified as it is and, with joint_training, trained on truncated.",
        "doc": "c; 0 = no bound; else >= 1. 2: on the toy's 252 real corrections (longest 1.81·|y|) c >= 1.5 "
               "cut none"})
    correction_closing_tokens: int = field(default=64, metadata={
        "doc": "room for the answer's closing tokens beyond c·|y|"})
    lookup_proxy_interval: int = field(default=1, metadata={
        "doc": "every N steps log ibpo/correction/lookup_*: vLLM's ngram proposer replayed on the step's "
               "corrections (decode-step reduction speculation would give; ibpo.lookup_decoding); 0 = off"})
    correct_threshold: float = field(default=0.5, metadata={
        "doc": "a response with verifier score >= this is correct (rewards are {0, 1})"})
    joint_training: bool = field(default=False, metadata={
        "doc": "App. E.2 (C): also train on the correction samples"})
    joint_grouping: str = field(default="per_prompt", metadata={
        "doc": "joint rows' advantage groups: per_prompt (all corrections for prompt x) | per_correction_prompt "
               "(the corrections_per_target samples of one x~, App. C.3's \"contrastive RL within the group\"; "
               "needs corrections_per_target >= 2)"})
    joint_minibatch: str = field(default="grow", metadata={
        "doc": "grow: the actor's mini-batch grows with the joint rows, so a step makes as many optimizer "
               "updates as without joint training (App. E.2: one update on the mixed batch; logged as "
               "actor/num_optimizer_updates) | verl: verl's fixed ppo_mini_batch_size, the joint rows add "
               "updates\n"
               "grow: each update averages over 1.6-1.9x the rows, so the main-task gradient is x0.50-0.62 "
               "(grad_clip does not adapt); why no rescaling: docs/method_ibpo.md"})
    rewrite_penalty: float = field(default=0.0, metadata={
        "doc": "App. C.3: correction-sample reward r(ŷ) - penalty·1[rewrite] (joint training)"})
    lambda_schedule: str = field(default="fixed", metadata={
        "doc": "fixed | theorem: λ_t = min(lam, lambda_max_fraction · running λ_max) (Thm. A.2)"})
    lambda_max_fraction: float = field(default=0.5, metadata={
        "doc": "theorem schedule: λ_t = min(lam, lambda_max_fraction · running λ_max)"})
    lambda_max_momentum: float = field(default=0.9, metadata={
        "doc": "EMA momentum of the running λ_max (theorem schedule)"})
    diagnostics_interval: int = field(default=1, metadata={
        "doc": "Theorem A.2 statistics (Cov(Y,φ), V_φ, λ_max, Var(A)) every N steps"})
    grad_probe_interval: int = field(default=0, metadata={
        "doc": "> 0: every N steps, per-sample policy-gradient variance under GSPO vs IBPO advantages of the "
               "same samples (App. A; the paper reports ≈30% lower); 0 = off"})
    grad_probe_coordinates: int = field(default=4096, metadata={
        "doc": "gradients are projected on this many fixed random weight entries"})
    grad_probe_micro_batch_size: int = field(default=8, metadata={
        "doc": "rows per probe forward on each rank (0 = all at once)"})
    seed: int = field(default=0, metadata={
        "doc": "reference selection / candidate shuffling RNG (per step: seed, step)"})
    resume_allow_option_changes: bool = field(default=False, metadata={
        "doc": "false: resuming from a checkpoint whose ibpo options differ (other than the diagnostics' "
               "intervals) stops the run naming them, since the shaped reward would change mid-run; true: "
               "resume anyway and print the changes"})

    def __post_init__(self) -> None:
        def bad(name: str, allowed: str) -> IBPOConfigError:
            return IBPOConfigError(f"ibpo.{name}={getattr(self, name)!r} is out of range: must be {allowed}")

        for option in dataclasses.fields(self):  # nan passes every comparison below (nan < 0 is False)
            if isinstance(getattr(self, option.name), float) and not math.isfinite(getattr(self, option.name)):
                raise bad(option.name, "a finite number")
        if self.variant not in variant_names():
            raise bad("variant", f"one of the registered variants {variant_names()} (ibpo.variants.register_variant)")
        for name, allowed in CLOSED_MODES.items():
            if getattr(self, name) not in allowed:
                raise bad(name, f"one of {allowed}")
        if self.candidate_order == "reference_first" and self.shuffle_candidates:
            raise IBPOConfigError(
                "ibpo.shuffle_candidates=True with ibpo.candidate_order='reference_first': shuffling puts the target "
                "first in half the prompts and undoes the shared problem + reference prefix; pick one")
        if self.mask_sign not in mask_sign_names():
            raise bad("mask_sign", f"one of the registered mask-sign policies {mask_sign_names()} "
                                   "(ibpo.advantages.register_mask_sign)")
        if self.reference_rule not in reference_rule_names():
            raise bad("reference_rule", f"one of the registered reference rules {reference_rule_names()} "
                                        "(ibpo.references.register_reference_rule)")
        wrong = mistyped_field(self)  # the named modes above list their allowed values; the rest is typed here
        if wrong is not None:
            raise IBPOConfigError(wrong.message("ibpo"))
        for name, (allowed, description) in NUMERIC_RANGES.items():
            if not allowed(getattr(self, name)):
                raise bad(name, description)
        inert = self.inert_settings()
        if inert:
            raise IBPOConfigError("; ".join(inert))
        if self.joint_grouping == "per_correction_prompt" and self.corrections_per_target < 2:
            raise IBPOConfigError(
                f"ibpo.joint_grouping='per_correction_prompt' needs ibpo.corrections_per_target >= 2 (got "
                f"{self.corrections_per_target}): every group would be one sample, whose advantage is 0 (Eq. 23)")
        # Eq. 8: 0 <= λΦ < 1, so a shaped wrong response never reaches a correct one's reward.
        if self.lam * self.max_delta >= 1.0:
            raise IBPOConfigError(
                f"ibpo.lam * max Δ = {self.lam} * {self.max_delta} = {self.lam * self.max_delta} must be < 1 "
                f"(Eq. 8: 0 <= λΔ < 1; max Δ of variant '{self.variant}' with beta={self.beta}, ibpo/variants.py)"
            )
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
        if len(self.candidate_labels) < 1 + self.num_references:
            raise IBPOConfigError(
                f"ibpo.candidate_labels has {len(self.candidate_labels)} labels but a correction prompt shows "
                f"1 + num_references = {1 + self.num_references} candidates"
            )
        shown = self.candidate_labels[:1 + self.num_references]  # the labels of a prompt's candidates
        if len(set(shown)) < len(shown) or not all(str(label).strip() for label in shown):
            raise bad("candidate_labels", f"distinct, non-blank labels for the {len(shown)} candidates of a "
                      "correction prompt (each is the '### <label>' heading of one candidate)")
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

    def inert_settings(self) -> list[str]:
        """An option set away from its default where it has no effect (``ibpo.joint_training=True`` with
        ``ibpo.enable=False``: joint rows come only from corrections), each named with the option that makes it
        inert: the run would silently not do what was asked. Options at their default are never named (a launch
        script may pass its whole block with ``ibpo.enable=False`` for the GSPO baseline)."""
        defaults = {f.name: f.default for f in fields(self)}
        rules = [  # (option, whether it has an effect here, the setting that decides it)
            ("joint_training", self.enable, "ibpo.enable=False: joint rows come only from corrections"),
            ("mask_sign", get_variant(self.variant).masks_tokens,
             f"ibpo.variant={self.variant!r}: only a token-masking variant reads it"),
            ("adaptive_min_samples", self.alpha_mode == "adaptive",
             f"ibpo.alpha_mode={self.alpha_mode!r}: only the adaptive threshold reads it"),
            ("lambda_max_fraction", self.lambda_schedule != "fixed",
             f"ibpo.lambda_schedule={self.lambda_schedule!r}: λ stays ibpo.lam"),
            ("lambda_max_momentum", self.lambda_schedule != "fixed",
             f"ibpo.lambda_schedule={self.lambda_schedule!r}: λ stays ibpo.lam"),
            ("rewrite_penalty", self.joint_training, "ibpo.joint_training=False: it applies to joint rows only"),
            ("joint_grouping", self.joint_training, "ibpo.joint_training=False: it groups joint rows only"),
            ("reference_rule", self.num_references > 0, "ibpo.num_references=0: no reference is drawn"),
            ("candidate_order", self.num_references > 0, "ibpo.num_references=0: a prompt shows one candidate"),
        ]
        return [f"ibpo.{name}={getattr(self, name)!r} has no effect with {why}; leave it at its default "
                f"({defaults[name]!r}) or change that setting"
                for name, active, why in rules if not active and getattr(self, name) != defaults[name]]

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
        renamed = [RENAMED_OPTIONS[name] for name in unknown if name in RENAMED_OPTIONS]
        if renamed:
            raise IBPOConfigError("; ".join(renamed))
        if unknown:
            raise IBPOConfigError(f"unknown ibpo option(s) {unknown}; known options: {sorted(known)}")
        if "candidate_labels" in options and options["candidate_labels"] is not None:
            options["candidate_labels"] = tuple(options["candidate_labels"])
        return cls(**options)

    def replace(self, **changes: Any) -> "IBPOConfig":
        """A validated copy with some options changed."""
        return dataclasses.replace(self, **changes)


# Options a resumed run may change freely: how often it measures, not what it trains on.
RESUME_FREE_OPTIONS = ("diagnostics_interval", "grad_probe_interval", "grad_probe_coordinates",
                       "grad_probe_micro_batch_size", "lookup_proxy_interval", "resume_allow_option_changes")


def saved_options(config: IBPOConfig) -> dict[str, Any]:
    """The options as a checkpoint stores them (JSON types: tuples as lists)."""
    return {name: list(value) if isinstance(value, tuple) else value
            for name, value in dataclasses.asdict(config).items()}


class _NoSuchOption:
    """The current value of a saved option the config no longer has (removed or renamed since)."""

    def __repr__(self) -> str:
        return "(no such option now)"


NO_SUCH_OPTION = _NoSuchOption()


def option_changes(saved: Mapping[str, Any], current: IBPOConfig) -> list[tuple[str, Any, Any]]:
    """(option, saved value, current value) for every option that differs between a checkpoint's
    :func:`saved_options` and the resumed run's config, but those in :data:`RESUME_FREE_OPTIONS`. An option
    the checkpoint does not know (added since) counts as changed only if it is not at its default; one the
    config does not know (removed or renamed since) always does, its current value :data:`NO_SUCH_OPTION`
    (ignoring it would resume a run trained under an option nothing now applies)."""
    now, default = saved_options(current), saved_options(IBPOConfig())
    changed = [(name, saved.get(name, default[name]), value) for name, value in now.items()
               if name not in RESUME_FREE_OPTIONS and saved.get(name, default[name]) != value]
    return changed + [(name, saved[name], NO_SUCH_OPTION) for name in saved if name not in now]


__all__ = ["IBPOConfig", "IBPOConfigError", "CANDIDATE_ORDERS", "DEFAULT_INSTRUCTION", "NO_SUCH_OPTION",
           "option_changes", "saved_options"]
