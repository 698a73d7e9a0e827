"""Counterfactual importance weighting as pure functions (``docs/method_counterfactual.md``).

Khandoga, Yuan, Sankarapu, "Beyond Uniform Credit: Causal Credit Assignment for Policy Optimization"
(arXiv 2602.09331). Only the abstract of the paper was available; the method details are those restated
in ``docs/method_counterfactual.md`` ("Pipeline for one sampled response"), whose steps are cited below as
"[§segmentation]", "[§masking]", "[§importance]", "[§token importance]", "[§token weights]" and
"[§controls]". The pipeline for one sampled response y with its own answer a ⊂ y:

1. Segment (``segment_response``): the reasoning region is y before the first answer marker; the answer
   region is the rest. Spans are arithmetic expressions ``number (op number)+ = number`` and sentences
   (split at ``.``, ``!``, ``?`` or a blank line, >= 5 tokens); mostly-LaTeX spans and spans > 50 tokens
   are dropped; arithmetic wins on overlap; at most ``max_spans`` spans, in order of position.
2. Mask (``mask_span``): one copy of y per span s, with the span's tokens replaced by the pad token and
   every position, attention and mask unchanged [§masking].
3. Importance (``span_drops``): drop_s = log p(a | y) - log p(a | y with s masked), log p(a) being the
   teacher-forced sum of the answer tokens' log-probabilities [§importance]. drop_s < 0 is a
   "distractor": masking s raised the answer's probability (about 3.5 % of spans in the paper). Both
   terms come from one forward call: y itself is scored unmasked as one more row beside its masked
   copies (``recipe/counterfactual/batch.py``), not taken from the training batch's own log-probs.
4. Token importance (``raw_token_importance``, ``normalise_importance``): ``base_importance`` on every
   reasoning token plus drop_s / |s| on the tokens of s, then min-max normalised within the reasoning
   region to [0.5, 1.0] (all equal -> 0.5) [§token importance]. A response with no measurable span (no
   answer marker, or no span in its reasoning) gets uniform weight 1 in every mode. A distractor's tokens
   fall below the filler level and so end at the bottom of the range.
5. Token weights (``token_weights``): w = min_weight + (boost - min_weight) · importance on reasoning
   tokens, importance x ``formatting_factor`` on formatting tokens, ``answer_weight`` on answer tokens,
   then rescaled to mean 1 over the completion ("gradient conservation", ON by default, because
   unnormalised 2-4x weights scale the gradient and confound a comparison with the DAPO baseline).

Controls [§controls]: ``inverted`` reverses the order of the normalised importance within the
reasoning region, keeping its range (imp' = min + max - imp). **Deviation**: the paper writes
``1 - normalised importance``, which on the [0.5, 1] scale would push every weight below the range and
change the spread after mean-1 rescaling; reversing the order within the same range is the control the
paper describes in words (most important <-> least important). ``random`` draws each reasoning token's
importance uniformly from the normalised range and needs no masked forward pass; ``vanilla`` is all 1.

Decisions where the description leaves room (stated once here, tested in tests/unit/test_counterfactual.py, tests/integration/test_counterfactual_batch.py):
- Masking replaces the span's tokens by the pad token, keeping positions and the attention mask, as the
  description says; nothing is removed, so every copy has the original's shape and answer positions.
- log p(a | y) is scored on an unmasked copy of y in the same forward batch as y's masked copies: in bf16 a
  row's log-probs depend slightly on the batch it is in, and a drop across two batches would carry that
  difference (a span without effect reading as a small gain or loss). It costs one more no-grad row per
  measured response, which ``max_spans`` does not count: it caps the spans (masked copies), so a measured
  response adds at most ``max_spans`` + 1 forward rows (consistent with the reported "up to ~11").
- The answer region runs from the token holding the first character of the earliest answer marker
  (case-insensitive) to the end of the response, end-of-sequence token included; its tokens' log-probs
  are summed. A response without any marker has no answer to measure and keeps uniform weight 1 (in
  every mode), as does a response whose group carries no learning signal.
- "Mostly LaTeX" means more than ``max_latex_fraction`` (0.5) of a span's non-space characters are LaTeX
  markup (commands other than the arithmetic operators \\times, \\cdot, \\div, plus ``{}$^_&`` and
  ``\\\\``), so "3 \\times 4 = 12" is kept while "$$\\begin{aligned}...\\end{aligned}$$" is dropped.
- A period that only closes a list number ("2. ") or is followed by a non-space (a decimal "3.5")
  does not end a sentence.
- Text is never re-tokenised: token boundaries come from the response's own token ids through a decode
  function (``token_char_offsets``) or a caller-supplied offset mapping.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np
import torch

from option_types import mistyped_field

MODES = ("counterfactual", "inverted", "random", "vanilla")
SpanKind = Literal["arithmetic", "sentence"]
DecodeFn = Callable[[Sequence[int]], str]

DEFAULT_ANSWER_MARKERS = ("Final Answer", "####", "\\boxed{")
# [§token weights] "formatting tokens get importance x0.1"; the set the authors' code uses.
DEFAULT_FORMATTING_TOKENS = ("#", "##", "###", "####", "=", "==", "===", "====", "-", "--", "---")


class CounterfactualConfigError(ValueError):
    """A counterfactual-weighting option is unknown or out of range."""


@dataclass(frozen=True)
class CounterfactualConfig:
    """All options of counterfactual importance weighting, validated at construction.

    Defaults are the values reported in ``docs/method_counterfactual.md`` [§segmentation, §token importance,
    §token weights]; ``gradient_conservation`` is ON by default (see the module docstring). Each field carries
    its documentation (``metadata["doc"]``); the ``counterfactual:`` block of
    ``recipe/counterfactual/config/counterfactual_block.yaml`` is generated from these fields
    (``python -m recipe.common.config_blocks``, checked by tests/unit/test_config_defaults.py).
    """

    mode: str = field(default="counterfactual", metadata={
        "doc": "counterfactual | inverted | random | vanilla (the paper's controls) [§controls]"})
    max_spans: int = field(default=10, metadata={
        "doc": "masked copies (no-grad forward rows) per response, at most, plus 1 unmasked row"})
    min_sentence_tokens: int = field(default=5, metadata={
        "doc": "sentence spans shorter than this are not measured"})
    max_span_tokens: int = field(default=50, metadata={
        "doc": "longer spans (of either kind) are not measured"})
    max_latex_fraction: float = field(default=0.5, metadata={
        "doc": "spans with a larger share of LaTeX markup are not measured"})
    answer_markers: tuple[str, ...] = field(default=DEFAULT_ANSWER_MARKERS, metadata={
        "doc": "the answer starts at the first of these (case-insensitive)"})
    base_importance: float = field(default=0.2, metadata={
        "doc": "raw importance of every reasoning token before span drops are added"})
    importance_low: float = field(default=0.5, metadata={
        "doc": "min-max normalisation range [low, high] of reasoning-token importance"})
    importance_high: float = field(default=1.0, metadata={"doc": "upper end of that range"})
    min_weight: float = field(default=0.5, metadata={"doc": "weight at importance 0 (> 0)"})
    boost: float = field(default=2.0, metadata={
        "doc": "weight at importance 1: the most important reasoning tokens (paper: 2.0 or 4.0)"})
    answer_weight: float = field(default=1.5, metadata={"doc": "weight of every answer-region token"})
    formatting_factor: float = field(default=0.1, metadata={"doc": "importance multiplier of formatting tokens"})
    formatting_tokens: tuple[str, ...] = field(default=DEFAULT_FORMATTING_TOKENS, metadata={
        "doc": "formatting token texts (compared after strip())"})
    gradient_conservation: bool = field(default=True, metadata={
        "doc": "rescale weights to mean 1 over each completion (keeps the baseline comparable)"})

    def __post_init__(self) -> None:
        def bad(name: str, allowed: str) -> CounterfactualConfigError:
            return CounterfactualConfigError(
                f"counterfactual.{name}={getattr(self, name)!r} is out of range: must be {allowed}"
            )

        wrong = mistyped_field(self)  # "####" is not a list of markers, "false" is not false
        if wrong is not None:
            raise CounterfactualConfigError(wrong.message("counterfactual"))
        for option in dataclasses.fields(self):  # nan passes every comparison below (nan < 0 is False)
            if isinstance(getattr(self, option.name), float) and not math.isfinite(getattr(self, option.name)):
                raise bad(option.name, "a finite number")
        if self.mode not in MODES:
            raise bad("mode", f"one of {MODES}")
        for name in ("max_spans", "min_sentence_tokens", "max_span_tokens"):
            value = getattr(self, name)
            if value < 1:
                raise bad(name, "an integer >= 1")
        if self.max_span_tokens < self.min_sentence_tokens:
            raise bad("max_span_tokens", f">= min_sentence_tokens ({self.min_sentence_tokens})")
        if not 0.0 <= self.max_latex_fraction <= 1.0:
            raise bad("max_latex_fraction", "in [0, 1]")
        if not self.answer_markers or any(not m for m in self.answer_markers):
            raise bad("answer_markers", "a non-empty tuple of non-empty strings")
        if self.base_importance < 0.0:
            raise bad("base_importance", ">= 0")
        if not 0.0 <= self.importance_low <= self.importance_high <= 1.0:
            raise CounterfactualConfigError(
                f"counterfactual.importance_low={self.importance_low!r} and importance_high="
                f"{self.importance_high!r} are out of range: must satisfy 0 <= importance_low <= "
                "importance_high <= 1"
            )
        # Strictly positive weights keep the mean-1 rescaling defined and make "scale the advantage by w"
        # exactly equal to weighting the clipped surrogate (max(-wA·r, -wA·clip(r)) = w·max(...) for w > 0).
        if self.min_weight <= 0.0:
            raise bad("min_weight", "> 0")
        if self.boost < self.min_weight:
            raise bad("boost", f">= min_weight ({self.min_weight})")
        if self.answer_weight <= 0.0:
            raise bad("answer_weight", "> 0")
        if not 0.0 <= self.formatting_factor <= 1.0:
            raise bad("formatting_factor", "in [0, 1]")
        if self.mode == "vanilla":  # every token weighs 1 (response_weights): any other option would do nothing
            changed = [f"counterfactual.{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                       if f.name != "mode" and getattr(self, f.name) != f.default]
            if changed:
                raise CounterfactualConfigError(
                    f"{', '.join(changed)} has no effect with counterfactual.mode='vanilla' (every token weighs 1); "
                    "leave it at its default or pick another mode")

    @property
    def needs_forward_passes(self) -> bool:
        """Whether the mode measures span importance with masked copies (``random``/``vanilla`` do not)."""
        return self.mode in ("counterfactual", "inverted")

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> "CounterfactualConfig":
        """Build from a plain mapping (e.g. ``OmegaConf.to_container(cfg.counterfactual)``); unknown keys fail."""
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise CounterfactualConfigError(
                f"unknown counterfactual option(s) {unknown}; known options: {sorted(known)}"
            )
        for name in ("answer_markers", "formatting_tokens"):
            if name in options and options[name] is not None and not isinstance(options[name], str):
                options[name] = tuple(options[name])
        return cls(**options)

    def replace(self, **changes: Any) -> "CounterfactualConfig":
        """A validated copy with some options changed."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Span:
    """A reasoning span: response tokens ``[start, end)`` (0 = first response token)."""

    start: int
    end: int
    kind: SpanKind

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ResponseSegmentation:
    """Where a response's reasoning, answer and spans lie, in response-token indices.

    ``reasoning_end`` is the first answer token (== ``num_tokens`` when no marker was found). The answer
    region ``[reasoning_end, num_tokens)`` is empty exactly when ``has_answer`` is False.
    """

    num_tokens: int
    reasoning_end: int
    has_answer: bool
    spans: tuple[Span, ...]
    is_formatting: tuple[bool, ...]  # per token: its text is a formatting token

    @property
    def measurable(self) -> bool:
        """Importance can be measured: there is an answer to score and at least one span to mask."""
        return self.has_answer and len(self.spans) > 0


# ---------------------------------------------------------------------------------------------------
# Token boundaries from token ids (no re-tokenisation)
# ---------------------------------------------------------------------------------------------------


def token_char_offsets(token_ids: Sequence[int], decode: DecodeFn) -> tuple[str, list[tuple[int, int]]]:
    """Decode ``token_ids`` and return ``(text, offsets)``, ``offsets[k]`` = the characters of token k.

    Fast path: the single-token decodes concatenate to the full decode (byte-level BPE on text whose
    characters are whole tokens). Runs of tokens that split a multi-byte character (single decodes
    containing U+FFFD) are decoded together and share the run's character range. If the pieces still do
    not reproduce the text (e.g. SentencePiece dropping leading spaces), each token's end is the longest
    common prefix of ``decode(ids[:k + 1])`` with the text: quadratic, but exact.
    """
    ids = [int(t) for t in token_ids]
    text = decode(ids)
    if not ids:
        return text, []
    pieces = [decode([t]) for t in ids]
    offsets: list[tuple[int, int]] = []
    assembled: list[str] = []
    pos, k = 0, 0
    while k < len(ids):
        run_end = k + 1
        if "\ufffd" in pieces[k]:  # a split multi-byte character: decode the whole run together
            while run_end < len(ids) and "\ufffd" in pieces[run_end]:
                run_end += 1
        run_text = pieces[k] if run_end == k + 1 else decode(ids[k:run_end])
        offsets.extend([(pos, pos + len(run_text))] * (run_end - k))
        assembled.append(run_text)
        pos += len(run_text)
        k = run_end
    if "".join(assembled) == text:
        return text, offsets
    return text, _prefix_offsets(ids, decode, text)


def _prefix_offsets(ids: list[int], decode: DecodeFn, text: str) -> list[tuple[int, int]]:
    """Exact offsets: token k ends where ``decode(ids[:k+1])`` stops agreeing with ``text``."""
    offsets: list[tuple[int, int]] = []
    prev_end = 0
    for k in range(len(ids)):
        prefix = decode(ids[: k + 1])
        if text.startswith(prefix):
            common = len(prefix)
        else:  # e.g. a trailing partial character: keep only the agreeing part
            n = min(len(prefix), len(text))
            common = 0
            while common < n and prefix[common] == text[common]:
                common += 1
        end = max(prev_end, common)
        offsets.append((prev_end, end))
        prev_end = end
    if offsets and prev_end < len(text):  # trailing characters only the full decode produces
        offsets[-1] = (offsets[-1][0], len(text))
    return offsets


def char_span_to_token_span(
    char_start: int, char_end: int, offsets: Sequence[tuple[int, int]]
) -> tuple[int, int] | None:
    """Tokens ``[first, last + 1)`` whose characters overlap ``[char_start, char_end)``; None if none do."""
    first = last = None
    for k, (s, e) in enumerate(offsets):
        if e > char_start and s < char_end and e > s:
            if first is None:
                first = k
            last = k
        elif s >= char_end:
            break
    if first is None:
        return None
    return first, last + 1


def token_at_char(char_index: int, offsets: Sequence[tuple[int, int]]) -> int:
    """Index of the token holding character ``char_index`` (``len(offsets)`` if past the end)."""
    for k, (s, e) in enumerate(offsets):
        if e > char_index:
            return k
    return len(offsets)


# ---------------------------------------------------------------------------------------------------
# Span segmentation in character space [§segmentation]
# ---------------------------------------------------------------------------------------------------


def find_answer_start(text: str, markers: Sequence[str]) -> int | None:
    """Character index of the earliest answer marker (case-insensitive), or None without any marker."""
    lowered = text.lower()
    hits = [i for i in (lowered.find(m.lower()) for m in markers) if i >= 0]
    return min(hits) if hits else None


_BARE_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?%?|\d+(?:\.\d+)?%?"
_NUMBER = rf"\$?(?:{_BARE_NUMBER})"  # a leading $ is currency after an operator or "="
_OPERATOR = r"\s*(?:[+\-\u2212\u00d7*/\u00f7]|\\times|\\cdot|\\div)\s*|\s+[xX]\s+"
ARITHMETIC_PATTERN = re.compile(
    rf"(?<![\w.,])(?:{_BARE_NUMBER})(?:(?:{_OPERATOR})(?:{_NUMBER}))+\s*=\s*-?(?:{_NUMBER})(?![\d])"
)


def arithmetic_char_spans(text: str) -> list[tuple[int, int]]:
    """Character ranges of ``number (op number)+ = number`` expressions, e.g. "23 + 45 = 68", "$3 \\times 4 = 12".

    Numbers may carry thousands separators, decimals, a trailing ``%`` and (after the first, which may
    follow a LaTeX ``$``) a currency ``$``; operators are
    + - − × * / ÷ \\times \\cdot \\div and a spaced x. Parenthesised expressions are not matched (their
    sentence is still a sentence span).
    """
    return [(m.start(), m.end()) for m in ARITHMETIC_PATTERN.finditer(text)]


_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_LIST_ENUMERATOR = re.compile(r"\s*(?:\d+|[A-Za-z]|[Ss]tep\s+\d+)")


def sentence_char_spans(text: str) -> list[tuple[int, int]]:
    """Character ranges of sentences, stripped of surrounding whitespace.

    A sentence ends after ``.``, ``!`` or ``?`` followed by whitespace or the end of the text, or at a
    blank line; the text after the last boundary is a sentence too. A period closing a list number at the
    start of a line ("2. ", "Step 3.") is not a boundary.
    """
    cuts: set[int] = set()
    for m in _SENTENCE_END.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if _LIST_ENUMERATOR.fullmatch(text[line_start : m.start()]):
            continue
        cuts.add(m.end())
    for m in _BLANK_LINE.finditer(text):
        cuts.add(m.start())
    spans = []
    start = 0
    for cut in sorted(cuts) + [len(text)]:
        if cut <= start:
            continue
        segment = text[start:cut]
        stripped_left = len(segment) - len(segment.lstrip())
        stripped_right = len(segment.rstrip())
        if stripped_right > stripped_left:
            spans.append((start + stripped_left, start + stripped_right))
        start = cut
    return spans


_LATEX_MARKUP = re.compile(r"\\(?!times\b|cdot\b|div\b)[A-Za-z]+|\\[^A-Za-z\s]|[{}$^_&]")


def latex_fraction(text: str) -> float:
    """Share of the non-space characters of ``text`` that are LaTeX markup (0 for blank text)."""
    non_space = sum(1 for c in text if not c.isspace())
    if non_space == 0:
        return 0.0
    markup = sum(len(m.group()) for m in _LATEX_MARKUP.finditer(text))
    return markup / non_space


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def select_spans(
    text: str,
    offsets: Sequence[tuple[int, int]],
    reasoning_end: int,
    config: CounterfactualConfig,
) -> tuple[Span, ...]:
    """Token spans of the reasoning region ``[0, reasoning_end)`` under the documented limits.

    ``text``/``offsets`` describe the whole response; only characters before the first answer token are
    segmented. Arithmetic spans are kept first; a sentence overlapping a kept arithmetic span is dropped
    (arithmetic wins on overlap). Spans over ``max_span_tokens`` tokens or mostly LaTeX are dropped,
    sentences under ``min_sentence_tokens`` too; the first ``max_spans`` by position are returned.
    """
    if reasoning_end <= 0:
        return ()
    reasoning_chars = offsets[reasoning_end - 1][1]
    reasoning_text = text[:reasoning_chars]
    kept: list[Span] = []
    kept_chars: list[tuple[int, int]] = []

    def to_tokens(chars: tuple[int, int]) -> tuple[int, int] | None:
        tokens = char_span_to_token_span(chars[0], chars[1], offsets[:reasoning_end])
        if tokens is None:
            return None
        return tokens[0], min(tokens[1], reasoning_end)

    for chars in arithmetic_char_spans(reasoning_text):
        tokens = to_tokens(chars)
        if tokens is None or tokens[1] - tokens[0] > config.max_span_tokens:
            continue
        if latex_fraction(reasoning_text[chars[0] : chars[1]]) > config.max_latex_fraction:
            continue
        kept.append(Span(tokens[0], tokens[1], "arithmetic"))
        kept_chars.append(chars)
    for chars in sentence_char_spans(reasoning_text):
        if any(_overlaps(chars, a) for a in kept_chars):
            continue
        tokens = to_tokens(chars)
        if tokens is None:
            continue
        length = tokens[1] - tokens[0]
        if length < config.min_sentence_tokens or length > config.max_span_tokens:
            continue
        if latex_fraction(reasoning_text[chars[0] : chars[1]]) > config.max_latex_fraction:
            continue
        kept.append(Span(tokens[0], tokens[1], "sentence"))
    kept.sort(key=lambda s: (s.start, s.end))
    # A token straddling two spans' characters (".\n\n") belongs to the earlier span only.
    disjoint: list[Span] = []
    for span in kept:
        start = max(span.start, disjoint[-1].end) if disjoint else span.start
        if start < span.end:
            disjoint.append(Span(start, span.end, span.kind))
    return tuple(disjoint[: config.max_spans])


def formatting_token_flags(
    text: str, offsets: Sequence[tuple[int, int]], formatting_tokens: Sequence[str]
) -> tuple[bool, ...]:
    """Per token: its stripped text is one of ``formatting_tokens`` [§token weights]."""
    formatting = set(formatting_tokens)
    return tuple(text[s:e].strip() in formatting for s, e in offsets)


def segment_response(
    token_ids: Sequence[int],
    config: CounterfactualConfig,
    decode: DecodeFn | None = None,
    offsets: Sequence[tuple[int, int]] | None = None,
    text: str | None = None,
) -> ResponseSegmentation:
    """Segment one response (its valid tokens only, no padding) [§segmentation].

    Give either ``decode`` (token ids -> text, e.g. ``tokenizer.decode`` with special tokens kept and no
    space clean-up) or ``text`` with its per-token ``offsets``.
    """
    n = len(token_ids)
    if offsets is None:
        if decode is None:
            raise ValueError("segment_response needs either `decode` or `text` + `offsets`")
        text, offsets = token_char_offsets(token_ids, decode)
    elif text is None:
        raise ValueError("segment_response: `offsets` given without the `text` they index")
    if len(offsets) != n:
        raise ValueError(f"segment_response: {len(offsets)} offsets for {n} tokens")
    answer_char = find_answer_start(text, config.answer_markers)
    reasoning_end = n if answer_char is None else token_at_char(answer_char, offsets)
    has_answer = reasoning_end < n
    spans = select_spans(text, offsets, reasoning_end, config)
    return ResponseSegmentation(
        num_tokens=n,
        reasoning_end=reasoning_end,
        has_answer=has_answer,
        spans=spans,
        is_formatting=formatting_token_flags(text, offsets, config.formatting_tokens),
    )


# ---------------------------------------------------------------------------------------------------
# Masked copies [§masking]
# ---------------------------------------------------------------------------------------------------


def mask_span(response_ids: torch.Tensor, span: Span, mask_token_id: int) -> torch.Tensor:
    """A copy of ``response_ids`` (last dim = response tokens) with ``span`` replaced by ``mask_token_id``.

    Positions and length are unchanged, so the answer tokens keep their indices in every copy.
    """
    if not 0 <= span.start < span.end <= response_ids.shape[-1]:
        raise ValueError(f"span [{span.start}, {span.end}) is outside a response of {response_ids.shape[-1]} tokens")
    masked = response_ids.clone()
    masked[..., span.start : span.end] = mask_token_id
    return masked


# ---------------------------------------------------------------------------------------------------
# Importance [§importance, §token importance]
# ---------------------------------------------------------------------------------------------------


def answer_log_prob(token_log_probs: torch.Tensor, segmentation: ResponseSegmentation) -> torch.Tensor:
    """log p(answer | context): sum of the answer tokens' log-probs (last dim = response tokens)."""
    if not segmentation.has_answer:
        raise ValueError("answer_log_prob: the response has no answer region (no answer marker)")
    return token_log_probs[..., segmentation.reasoning_end : segmentation.num_tokens].double().sum(-1)


def span_drops(full_answer_log_prob: torch.Tensor | float, masked_answer_log_probs: torch.Tensor) -> torch.Tensor:
    """drop_s = log p(a | y) - log p(a | y with s masked); negative for a distractor span."""
    return torch.as_tensor(full_answer_log_prob, dtype=torch.float64) - masked_answer_log_probs.double()


def raw_token_importance(
    segmentation: ResponseSegmentation, drops: torch.Tensor, base_importance: float
) -> torch.Tensor:
    """Per response token: ``base_importance`` on reasoning tokens plus drop_s / |s| on span s; 0 elsewhere."""
    if drops.shape != (len(segmentation.spans),):
        raise ValueError(f"raw_token_importance: {tuple(drops.shape)} drops for {len(segmentation.spans)} spans")
    bad = [i for i, ok in enumerate(torch.isfinite(drops).tolist()) if not ok]
    if bad:  # an infinite drop (a masked answer log-prob of -inf) would make the min-max weights NaN, silently
        raise ValueError(f"raw_token_importance: the drops of spans {bad[:5]} are not finite "
                         f"({drops[bad[:5]].tolist()}): a masked or full answer log-prob was -inf or NaN")
    importance = torch.zeros(segmentation.num_tokens, dtype=torch.float64)
    importance[: segmentation.reasoning_end] = base_importance
    for span, drop in zip(segmentation.spans, drops.tolist(), strict=True):
        importance[span.start : span.end] += drop / span.length
    return importance


def normalise_importance(raw: torch.Tensor, reasoning_end: int, low: float = 0.5, high: float = 1.0) -> torch.Tensor:
    """Min-max map the reasoning region of ``raw`` onto ``[low, high]`` (all equal -> ``low``); 0 elsewhere."""
    out = torch.zeros_like(raw, dtype=torch.float64)
    region = raw[:reasoning_end].double()
    if region.numel() == 0:
        return out
    lo, hi = region.min(), region.max()
    if hi > lo:
        out[:reasoning_end] = low + (high - low) * (region - lo) / (hi - lo)
    else:
        out[:reasoning_end] = low
    return out


def invert_importance(importance: torch.Tensor, reasoning_end: int) -> torch.Tensor:
    """``inverted`` control: reverse the order within the reasoning region, keeping its range."""
    out = importance.clone().double()
    region = out[:reasoning_end]
    if region.numel():
        out[:reasoning_end] = region.min() + region.max() - region
    return out


def random_importance(
    num_tokens: int, reasoning_end: int, low: float, high: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``random`` control: i.i.d. U(low, high) importance on reasoning tokens, 0 elsewhere."""
    out = torch.zeros(num_tokens, dtype=torch.float64)
    draws = torch.rand(reasoning_end, generator=generator, dtype=torch.float64)
    out[:reasoning_end] = low + (high - low) * draws
    return out


# ---------------------------------------------------------------------------------------------------
# Token weights [§token weights]
# ---------------------------------------------------------------------------------------------------


def token_weights(
    importance: torch.Tensor, segmentation: ResponseSegmentation, config: CounterfactualConfig
) -> torch.Tensor:
    """Unnormalised weights of one response's tokens.

    Reasoning token t: ``min_weight + (boost - min_weight) · importance_t`` (importance x
    ``formatting_factor`` on formatting tokens); answer tokens: ``answer_weight``.
    """
    n, r = segmentation.num_tokens, segmentation.reasoning_end
    imp = importance.double().clone()
    formatting = torch.tensor(segmentation.is_formatting, dtype=torch.bool)
    imp[formatting] *= config.formatting_factor
    weights = config.min_weight + (config.boost - config.min_weight) * imp
    weights[r:n] = config.answer_weight
    return weights


def mean_one(weights: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Gradient conservation: rescale so the mean weight over ``mask`` (default: all) is 1, per row.

    Works on a single response ``(T,)`` or a batch ``(bs, T)``; rows whose mask is empty are returned
    unchanged. Positions outside the mask are scaled too (they carry no gradient).
    """
    w = weights.double()
    m = torch.ones_like(w) if mask is None else mask.to(w.dtype)
    count = m.sum(-1, keepdim=True)
    total = (w * m).sum(-1, keepdim=True)
    ones = torch.ones_like(total)
    scale = torch.where(count > 0, count / torch.where(total > 0, total, ones), ones)
    return w * scale


def response_importance(
    segmentation: ResponseSegmentation,
    config: CounterfactualConfig,
    drops: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Normalised importance of one measurable response under ``config.mode`` (not used for ``vanilla``)."""
    r, n = segmentation.reasoning_end, segmentation.num_tokens
    if config.mode == "random":
        return random_importance(n, r, config.importance_low, config.importance_high, generator)
    if drops is None:
        raise ValueError(f"mode '{config.mode}' needs the spans' drops (masked forward passes)")
    raw = raw_token_importance(segmentation, drops, config.base_importance)
    importance = normalise_importance(raw, r, config.importance_low, config.importance_high)
    if config.mode == "inverted":
        importance = invert_importance(importance, r)
    return importance


def response_weights(
    segmentation: ResponseSegmentation,
    config: CounterfactualConfig,
    drops: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    completion_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Final per-token weights ``(num_tokens,)`` of one response.

    ``vanilla`` and responses that are not measurable (no answer marker or no span) get all ones.
    ``completion_mask`` (default: all tokens) is the set the mean-1 rescaling averages over.
    """
    n = segmentation.num_tokens
    if config.mode == "vanilla" or not segmentation.measurable:
        return torch.ones(n, dtype=torch.float64)
    importance = response_importance(segmentation, config, drops, generator)
    weights = token_weights(importance, segmentation, config)
    if config.gradient_conservation:
        weights = mean_one(weights, completion_mask)
    return weights


# ---------------------------------------------------------------------------------------------------
# Which responses to measure
# ---------------------------------------------------------------------------------------------------


def group_has_signal(
    group_ids: Sequence[Any] | np.ndarray,
    values: Sequence[float] | np.ndarray | torch.Tensor,
    atol: float = 0.0,
) -> np.ndarray:
    """Per row: its group (rows sharing a group id, e.g. verl's ``uid``) holds values that are not all equal.

    With GRPO/DAPO, a group whose rewards (or advantages) are all equal has zero advantage everywhere, so
    its token weights cannot change the update and its masked forward passes are skipped.
    """
    ids = np.asarray(group_ids, dtype=object)
    if isinstance(values, torch.Tensor):
        vals = values.detach().double().cpu().numpy()
    else:
        vals = np.asarray(values, dtype=np.float64)
    if vals.shape != ids.shape:
        raise ValueError(f"group_has_signal: {vals.shape} values for {ids.shape} group ids")
    spread: dict[Any, tuple[float, float]] = {}
    for gid, v in zip(ids.tolist(), vals.tolist(), strict=True):
        lo, hi = spread.get(gid, (v, v))
        spread[gid] = (min(lo, v), max(hi, v))
    return np.array([spread[g][1] - spread[g][0] > atol for g in ids.tolist()], dtype=bool)


__all__ = [
    "MODES",
    "CounterfactualConfig",
    "CounterfactualConfigError",
    "Span",
    "ResponseSegmentation",
    "token_char_offsets",
    "char_span_to_token_span",
    "token_at_char",
    "find_answer_start",
    "arithmetic_char_spans",
    "sentence_char_spans",
    "latex_fraction",
    "select_spans",
    "formatting_token_flags",
    "segment_response",
    "mask_span",
    "answer_log_prob",
    "span_drops",
    "raw_token_importance",
    "normalise_importance",
    "invert_importance",
    "random_importance",
    "token_weights",
    "mean_one",
    "response_importance",
    "response_weights",
    "group_has_signal",
]
