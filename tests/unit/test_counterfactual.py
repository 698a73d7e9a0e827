"""Counterfactual importance weighting, pure functions (counterfactual/importance.py).

Segmentation runs on real-looking reasoning text tokenised by the locally built tiny BPE tokenizer;
weights are checked against a hand-computed example written out below; mean-1 is a property test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from counterfactual.importance import (
    CounterfactualConfig,
    CounterfactualConfigError,
    ResponseSegmentation,
    Span,
    answer_log_prob,
    arithmetic_char_spans,
    find_answer_start,
    group_has_signal,
    latex_fraction,
    mask_span,
    mean_one,
    response_weights,
    segment_response,
    sentence_char_spans,
    span_drops,
    token_char_offsets,
)
from counterfactual.importance import _prefix_offsets  # the slow, obviously exact offsets
from verl_cpu.tiny_assets import build_tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tiny_tokenizer(tmp_path_factory.mktemp("cf_tok"))


@pytest.fixture(scope="module")
def decode(tokenizer):
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def span_texts(ids, seg: ResponseSegmentation, decode) -> list[tuple[str, str]]:
    return [(s.kind, decode(ids[s.start : s.end]).strip()) for s in seg.spans]


# --------------------------------------------------------------------------------------------------
# Token offsets
# --------------------------------------------------------------------------------------------------


def test_offsets_cover_text_with_split_multibyte_characters(tokenizer, decode):
    text = "Price: 3 × 4 = 12 €, café 漢字.<|im_end|>"
    ids = encode(tokenizer, text)
    assert any("\ufffd" in decode([t]) for t in ids), "the tiny tokenizer should split some multi-byte chars"
    full, offsets = token_char_offsets(ids, decode)
    assert full == text
    assert len(offsets) == len(ids)
    assert offsets[0][0] == 0 and offsets[-1][1] == len(text)
    distinct = [rng for k, rng in enumerate(offsets) if k == 0 or rng != offsets[k - 1]]  # runs share a range
    for (_, e0), (s1, _) in zip(distinct, distinct[1:]):
        assert e0 == s1  # contiguous
    for t, (s, e) in zip(ids, offsets):
        piece = decode([t])
        if "\ufffd" not in piece:
            assert text[s:e] == piece
    # every character belongs to some token
    covered = set()
    for s, e in offsets:
        covered.update(range(s, e))
    assert covered == set(range(len(text)))


def test_fast_offsets_equal_the_exact_prefix_reference(tokenizer, decode):
    """On text whose characters are whole tokens, the single-token fast path equals the slow exact one."""
    ids = encode(tokenizer, "Let me think. 1. 48 / 2 = 24 clips.\n\n$3 \\times 4 = 12$ #### 72<|im_end|>")
    text, offsets = token_char_offsets(ids, decode)
    assert offsets == _prefix_offsets(ids, decode, text)


def test_offsets_fallback_for_sentencepiece_style_decoding():
    """A decoder that drops the leading space of a lone token (SentencePiece) forces the exact fallback."""
    vocab = {0: "\u2581Hello", 1: "\u2581world", 2: ".", 3: "\u25814"}

    def sp_decode(ids):
        return "".join(vocab[i] for i in ids).replace("\u2581", " ").lstrip(" ")

    text, offsets = token_char_offsets([0, 1, 2, 3], sp_decode)
    assert text == "Hello world. 4"
    assert offsets == [(0, 5), (5, 11), (11, 12), (12, 14)]


# --------------------------------------------------------------------------------------------------
# Character-level segmentation
# --------------------------------------------------------------------------------------------------


def test_arithmetic_expressions():
    text = (
        "She has 23 + 45 = 68 apples. Then 12 + 24 + 72 = 108 and 7 × 7 = 49, "
        "$3 \\times 4 = 12$, 1,200 / 4 = 300, 2.5 * 4 = 10. The year 2024 is not a calculation, "
        "nor is x = 5, nor (3 + 4) alone."
    )
    found = [text[s:e] for s, e in arithmetic_char_spans(text)]
    assert found == [
        "23 + 45 = 68", "12 + 24 + 72 = 108", "7 × 7 = 49", "3 \\times 4 = 12", "1,200 / 4 = 300", "2.5 * 4 = 10"
    ]


def test_sentences_keep_decimals_and_list_numbers():
    text = "1. Each costs 3.5 dollars. So two cost 7!\n2. Is that right? Yes\n\nNext paragraph here"
    found = [text[s:e] for s, e in sentence_char_spans(text)]
    assert found == ["1. Each costs 3.5 dollars.", "So two cost 7!", "2. Is that right?", "Yes", "Next paragraph here"]


def test_latex_fraction():
    assert latex_fraction("3 \\times 4 = 12") == 0.0  # operators are content, not markup
    assert latex_fraction("$$\\begin{aligned} x &= 1 \\\\ y &= 2 \\end{aligned}$$") > 0.5
    assert latex_fraction("So the probability is $\\frac{3}{4}$.") < 0.5
    assert latex_fraction("   ") == 0.0


def test_answer_marker_is_earliest_and_case_insensitive():
    markers = CounterfactualConfig().answer_markers
    assert find_answer_start("so x = 4. final answer: 4", markers) == len("so x = 4. ")
    assert find_answer_start("we get \\boxed{4}\n#### 4", markers) == len("we get ")
    assert find_answer_start("no marker at all", markers) is None


# --------------------------------------------------------------------------------------------------
# Token-level segmentation on real-looking reasoning text
# --------------------------------------------------------------------------------------------------

GSM8K_RESPONSE = (
    "Let me think step by step about this problem.\n\n"
    "1. Natalia sold 48 clips in April.\n"
    "2. In May she sold half as many, so 48 / 2 = 24 clips.\n"
    "3. Altogether she sold 48 + 24 = 72 clips in April and May.\n\n"
    "#### 72<|im_end|>"
)


def test_segmentation_numbered_steps_gsm8k(tokenizer, decode):
    ids = encode(tokenizer, GSM8K_RESPONSE)
    seg = segment_response(ids, CounterfactualConfig(), decode=decode)
    assert seg.has_answer and seg.num_tokens == len(ids)
    assert decode(ids[seg.reasoning_end :]).lstrip() == "#### 72<|im_end|>"
    assert span_texts(ids, seg, decode) == [
        ("sentence", "Let me think step by step about this problem."),
        ("sentence", "1. Natalia sold 48 clips in April."),
        ("arithmetic", "48 / 2 = 24"),  # its sentence overlaps it and is dropped: arithmetic wins
        ("arithmetic", "48 + 24 = 72"),
    ]
    for a, b in zip(seg.spans, seg.spans[1:]):
        assert a.end <= b.start
    assert all(s.end <= seg.reasoning_end for s in seg.spans)
    # "####" is formatting; here it is tokenised as "##" "##", both flagged
    assert any(seg.is_formatting[seg.reasoning_end :])


LATEX_RESPONSE = (
    "To find the area, we multiply the side lengths. The rectangle has sides 3 and 4.\n\n"
    "$$\\begin{aligned} A &= \\ell \\cdot w \\\\ &= \\text{len} \\end{aligned}$$\n\n"
    "Computing, we get $3 \\times 4 = 12$ square units in total.\n"
    "Therefore, the area is $\\boxed{12}$.<|im_end|>"
)


def test_segmentation_latex_boxed(tokenizer, decode):
    ids = encode(tokenizer, LATEX_RESPONSE)
    seg = segment_response(ids, CounterfactualConfig(), decode=decode)
    assert seg.has_answer
    assert decode(ids[seg.reasoning_end :]) == "\\boxed{12}$.<|im_end|>"
    assert span_texts(ids, seg, decode) == [
        ("sentence", "To find the area, we multiply the side lengths."),
        ("sentence", "The rectangle has sides 3 and 4."),
        # the display-math block is mostly LaTeX markup: dropped
        ("arithmetic", "3 \\times 4 = 12"),  # wins over its sentence "Computing, we get ..."
        ("sentence", "Therefore, the area is $"),  # the reasoning region ends at the marker
    ]
    assert all(s.end <= seg.reasoning_end for s in seg.spans)


def test_segmentation_without_answer_marker(tokenizer, decode):
    text = "We add the two numbers together now. 17 + 25 = 42 so that is our total count.<|im_end|>"
    ids = encode(tokenizer, text)
    config = CounterfactualConfig()
    seg = segment_response(ids, config, decode=decode)
    assert not seg.has_answer and seg.reasoning_end == len(ids)
    assert [k for k, _ in span_texts(ids, seg, decode)] == ["sentence", "arithmetic"]
    assert not seg.measurable
    for mode in ("counterfactual", "inverted", "random"):
        w = response_weights(seg, config.replace(mode=mode), drops=torch.zeros(len(seg.spans)))
        assert torch.equal(w, torch.ones(len(ids), dtype=torch.float64))


def test_segmentation_limits(tokenizer, decode):
    long_sentence = "This is a very long sentence that " + "keeps going and going " * 12 + "until it stops."
    text = (
        "Ok. "  # too short (3 tokens < 5)
        + long_sentence
        + " We now compute the first part. 1 + 1 = 2 and 2 + 2 = 4 and 4 + 4 = 8. Final Answer: 8"
    )
    ids = encode(tokenizer, text)
    config = CounterfactualConfig(max_span_tokens=50)
    seg = segment_response(ids, config, decode=decode)
    texts = span_texts(ids, seg, decode)
    assert len(ids[: seg.spans[0].start]) > 50  # the long sentence was skipped
    assert texts == [
        ("sentence", "We now compute the first part."),
        ("arithmetic", "1 + 1 = 2"),
        ("arithmetic", "2 + 2 = 4"),
        ("arithmetic", "4 + 4 = 8"),
    ]
    capped = segment_response(ids, config.replace(max_spans=2), decode=decode)
    assert capped.spans == seg.spans[:2]  # the first max_spans by position
    short = segment_response(ids, config.replace(min_sentence_tokens=2), decode=decode)
    assert ("sentence", "Ok.") in span_texts(ids, short, decode)


def test_offsets_instead_of_decode(tokenizer, decode):
    ids = encode(tokenizer, GSM8K_RESPONSE)
    text, offsets = token_char_offsets(ids, decode)
    config = CounterfactualConfig()
    assert segment_response(ids, config, text=text, offsets=offsets) == segment_response(ids, config, decode=decode)
    with pytest.raises(ValueError, match="offsets"):
        segment_response(ids, config, text=text, offsets=offsets[:-1])


# --------------------------------------------------------------------------------------------------
# Masking and importance
# --------------------------------------------------------------------------------------------------


def test_mask_span_replaces_only_the_span():
    ids = torch.arange(10, 20)
    masked = mask_span(ids, Span(2, 5, "sentence"), mask_token_id=0)
    assert masked.tolist() == [10, 11, 0, 0, 0, 15, 16, 17, 18, 19]
    assert ids.tolist() == list(range(10, 20))  # the original is untouched
    with pytest.raises(ValueError, match="outside"):
        mask_span(ids, Span(8, 11, "sentence"), 0)


# The hand-computed example. 10 response tokens; reasoning = tokens 0-7, answer = tokens 8-9.
# Spans: A = [1, 3) arithmetic (drop +0.6), B = [4, 7) sentence (drop -0.3: a distractor).
# Token 3 is a formatting token ("=").
HAND_SEG = ResponseSegmentation(
    num_tokens=10,
    reasoning_end=8,
    has_answer=True,
    spans=(Span(1, 3, "arithmetic"), Span(4, 7, "sentence")),
    is_formatting=(False, False, False, True, False, False, False, False, False, False),
)
# raw importance: 0.2 on 0-7, + 0.6/2 on A, - 0.3/3 on B
#   t0 .2 | t1 .5 | t2 .5 | t3 .2 | t4 .1 | t5 .1 | t6 .1 | t7 .2
# min-max to [0.5, 1] (min .1, max .5): imp = 0.5 + 0.5 (raw - .1) / .4
#   t0 .625 | t1 1 | t2 1 | t3 .625 | t4 .5 | t5 .5 | t6 .5 | t7 .625
# formatting t3: .625 x 0.1 = .0625; w = 0.5 + 1.5 imp; answer tokens 1.5
HAND_WEIGHTS_RAW = [1.4375, 2.0, 2.0, 0.59375, 1.25, 1.25, 1.25, 1.4375, 1.5, 1.5]
# sum = 14.21875, mean = 1.421875
HAND_WEIGHTS_MEAN1 = [w / 1.421875 for w in HAND_WEIGHTS_RAW]
# inverted: imp' = (.5 + 1) - imp on reasoning tokens:
#   t0 .875 | t1 .5 | t2 .5 | t3 .875 (x.1 = .0875) | t4-6 1 | t7 .875
HAND_WEIGHTS_INVERTED_RAW = [1.8125, 1.25, 1.25, 0.63125, 2.0, 2.0, 2.0, 1.8125, 1.5, 1.5]


def hand_drops_from_log_probs() -> torch.Tensor:
    """log p(answer) of the full response and of the two masked copies, as a log-prob table would give."""
    full = torch.tensor([-1.0] * 8 + [-0.5, -0.25])  # answer log-prob -0.75
    masked_a = torch.tensor([-9.0] * 8 + [-0.9, -0.45])  # -1.35: masking A hurts by 0.6
    masked_b = torch.tensor([-9.0] * 8 + [-0.3, -0.15])  # -0.45: masking B helps by 0.3
    full_lp = answer_log_prob(full, HAND_SEG)
    masked_lp = answer_log_prob(torch.stack([masked_a, masked_b]), HAND_SEG)
    assert full_lp.item() == pytest.approx(-0.75)
    assert masked_lp.tolist() == pytest.approx([-1.35, -0.45])
    return span_drops(full_lp, masked_lp)


def test_drops_from_answer_log_probs_and_distractor():
    drops = hand_drops_from_log_probs()
    assert drops.tolist() == pytest.approx([0.6, -0.3])
    assert (drops < 0).tolist() == [False, True]  # B raised the answer's probability: a distractor


def test_weights_match_hand_computed_example():
    drops = hand_drops_from_log_probs()
    config = CounterfactualConfig()
    raw = response_weights(HAND_SEG, config.replace(gradient_conservation=False), drops)
    assert raw.tolist() == pytest.approx(HAND_WEIGHTS_RAW, abs=1e-12)
    conserved = response_weights(HAND_SEG, config, drops)  # gradient conservation is on by default
    assert config.gradient_conservation is True
    assert conserved.tolist() == pytest.approx(HAND_WEIGHTS_MEAN1, abs=1e-12)
    assert conserved.mean().item() == pytest.approx(1.0, abs=1e-12)
    # the distractor's tokens end below the filler tokens
    assert raw[4] < raw[0] and raw[1] == raw.max()


def test_inverted_control_matches_hand_computed_example():
    drops = hand_drops_from_log_probs()
    config = CounterfactualConfig(mode="inverted", gradient_conservation=False)
    assert response_weights(HAND_SEG, config, drops).tolist() == pytest.approx(HAND_WEIGHTS_INVERTED_RAW, abs=1e-12)


def test_completion_mask_sets_the_mean():
    drops = hand_drops_from_log_probs()
    mask = torch.tensor([1, 1, 1, 1, 1, 1, 1, 1, 1, 0])  # e.g. a token outside the loss
    w = response_weights(HAND_SEG, CounterfactualConfig(), drops, completion_mask=mask)
    assert (w[:9].sum() / 9).item() == pytest.approx(1.0, abs=1e-12)


def test_all_equal_drops_and_no_spans():
    config = CounterfactualConfig(gradient_conservation=False)
    seg = ResponseSegmentation(6, 4, True, (Span(0, 2, "sentence"), Span(2, 4, "sentence")), (False,) * 6)
    w = response_weights(seg, config, torch.tensor([0.4, 0.4]))  # every reasoning token equal -> 0.5
    assert w.tolist() == pytest.approx([1.25] * 4 + [1.5, 1.5])
    no_spans = ResponseSegmentation(6, 4, True, (), (False,) * 6)
    assert torch.equal(response_weights(no_spans, config), torch.ones(6, dtype=torch.float64))


def test_random_control_needs_no_drops_and_is_seeded():
    config = CounterfactualConfig(mode="random", gradient_conservation=False)
    assert not config.needs_forward_passes
    w1 = response_weights(HAND_SEG, config, None, torch.Generator().manual_seed(3))
    w2 = response_weights(HAND_SEG, config, None, torch.Generator().manual_seed(3))
    w3 = response_weights(HAND_SEG, config, None, torch.Generator().manual_seed(4))
    assert torch.equal(w1, w2) and not torch.equal(w1, w3)
    reasoning = w1[[0, 1, 2, 4, 5, 6, 7]]  # non-formatting reasoning tokens
    assert ((reasoning >= 0.5 + 1.5 * 0.5) & (reasoning <= 2.0)).all()  # importance within [0.5, 1]
    assert w1[8:].tolist() == [1.5, 1.5]
    assert len(set(reasoning.tolist())) == 7


def test_vanilla_control_is_all_ones():
    w = response_weights(HAND_SEG, CounterfactualConfig(mode="vanilla"), torch.tensor([5.0, -5.0]))
    assert torch.equal(w, torch.ones(10, dtype=torch.float64))


def test_a_drop_that_is_not_finite_is_refused_naming_its_span():
    # a masked answer log-prob of -inf makes that span's drop +inf: min-max over it would give NaN weights
    full = torch.tensor(-0.75, dtype=torch.float64)
    drops = span_drops(full, torch.tensor([-float("inf"), -0.45], dtype=torch.float64))
    assert drops.tolist()[0] == float("inf")
    for bad, span in ((drops, 0), (torch.tensor([0.6, float("nan")]), 1)):
        with pytest.raises(ValueError, match=rf"spans \[{span}\] are not finite"):
            response_weights(HAND_SEG, CounterfactualConfig(), bad)


def test_counterfactual_needs_drops():
    with pytest.raises(ValueError, match="drops"):
        response_weights(HAND_SEG, CounterfactualConfig(), None)


# --------------------------------------------------------------------------------------------------
# Mean-1 invariant (property test)
# --------------------------------------------------------------------------------------------------


@st.composite
def weighted_responses(draw):
    n = draw(st.integers(2, 40))
    reasoning_end = draw(st.integers(1, n - 1))
    cuts = sorted(draw(st.lists(st.integers(0, reasoning_end), min_size=2, max_size=10, unique=True)))
    kinds = st.sampled_from(["arithmetic", "sentence"])
    spans = tuple(Span(a, b, draw(kinds)) for a, b in zip(cuts[::2], cuts[1::2]) if b > a)
    fmt = tuple(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    seg = ResponseSegmentation(n, reasoning_end, True, spans, fmt)
    drop_values = draw(st.lists(st.floats(-20, 20), min_size=len(spans), max_size=len(spans)))
    drops = torch.tensor(drop_values, dtype=torch.float64)
    min_weight = draw(st.floats(0.05, 2.0))
    config = CounterfactualConfig(
        mode=draw(st.sampled_from(["counterfactual", "inverted", "random"])),
        min_weight=min_weight,
        boost=min_weight + draw(st.floats(0.0, 4.0)),
        answer_weight=draw(st.floats(0.05, 3.0)),
        formatting_factor=draw(st.floats(0.0, 1.0)),
    )
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    if not mask.any():
        mask[draw(st.integers(0, n - 1))] = True
    return seg, drops, config, mask, draw(st.integers(0, 2**31))


@settings(max_examples=150, deadline=None)
@given(weighted_responses())
def test_mean_one_over_the_completion(case):
    seg, drops, config, mask, seed = case
    assert seg.spans  # two distinct cuts always make a span
    w = response_weights(seg, config, drops, torch.Generator().manual_seed(seed), completion_mask=mask)
    assert (w > 0).all()
    assert w[mask].mean().item() == pytest.approx(1.0, rel=1e-9)
    raw = response_weights(seg, config.replace(gradient_conservation=False), drops, torch.Generator().manual_seed(seed))
    ratio = w / raw  # rescaling is one factor per response: it redistributes, never reorders
    assert torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=1e-9)
    assert torch.allclose(raw[seg.reasoning_end :], torch.full_like(raw[seg.reasoning_end :], config.answer_weight))
    lo = config.min_weight
    assert (raw[: seg.reasoning_end] >= lo - 1e-12).all() and (raw[: seg.reasoning_end] <= config.boost + 1e-12).all()


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 30), st.integers(0, 2**31))
def test_batched_mean_one(bs, t, seed):
    g = torch.Generator().manual_seed(seed)
    weights = torch.rand(bs, t, generator=g, dtype=torch.float64) * 4 + 0.01
    mask = torch.rand(bs, t, generator=g) > 0.4
    mask[:, 0] = True
    out = mean_one(weights, mask)
    for row in range(bs):
        assert out[row][mask[row]].mean().item() == pytest.approx(1.0, rel=1e-9)
    empty = torch.zeros(1, t, dtype=torch.bool)
    assert torch.equal(mean_one(weights[:1], empty), weights[:1].double())


# --------------------------------------------------------------------------------------------------
# Group skip and configuration
# --------------------------------------------------------------------------------------------------


def test_group_has_signal():
    uids = np.array(["a", "a", "b", "b", "c", "a"], dtype=object)
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert group_has_signal(uids, rewards).tolist() == [True, True, False, False, False, True]
    tiny_gap = torch.tensor([0.5, 0.5, 0.0, 1e-9, 2.0, 0.5])
    assert group_has_signal(uids, tiny_gap).tolist() == [False, False, True, True, False, False]
    assert group_has_signal(uids, [0.5, 0.5, 0.0, 1e-9, 2.0, 0.5], atol=1e-6).tolist() == [False] * 6
    with pytest.raises(ValueError, match="group ids"):
        group_has_signal(uids, [1.0, 2.0])


@pytest.mark.parametrize(
    ("changes", "option"),
    [
        ({"mode": "uniform"}, "counterfactual.mode"),
        ({"max_spans": 0}, "counterfactual.max_spans"),
        ({"max_spans": 2.5}, "counterfactual.max_spans"),
        ({"min_sentence_tokens": 0}, "counterfactual.min_sentence_tokens"),
        ({"max_span_tokens": 3}, "counterfactual.max_span_tokens"),
        ({"max_latex_fraction": 1.5}, "counterfactual.max_latex_fraction"),
        ({"answer_markers": ()}, "counterfactual.answer_markers"),
        ({"base_importance": -0.1}, "counterfactual.base_importance"),
        ({"importance_low": 0.8, "importance_high": 0.6}, "counterfactual.importance_low"),
        ({"min_weight": 0.0}, "counterfactual.min_weight"),
        ({"boost": 0.4}, "counterfactual.boost"),
        ({"answer_weight": 0.0}, "counterfactual.answer_weight"),
        ({"formatting_factor": 2.0}, "counterfactual.formatting_factor"),
        # a bare string would be iterated as one-character markers / tokens ("####" -> "#"), "false" is truthy
        ({"answer_markers": "####"}, "counterfactual.answer_markers"),
        ({"formatting_tokens": "#="}, "counterfactual.formatting_tokens"),
        ({"gradient_conservation": "false"}, "counterfactual.gradient_conservation"),
    ],
)
def test_config_rejects_bad_values(changes, option):
    with pytest.raises(CounterfactualConfigError, match=option.replace(".", r"\.")):
        CounterfactualConfig(**changes)


def test_config_from_mapping():
    cfg = CounterfactualConfig.from_mapping({"mode": "inverted", "boost": 4.0, "answer_markers": ["####"]})
    assert cfg.mode == "inverted" and cfg.boost == 4.0 and cfg.answer_markers == ("####",)
    assert cfg.gradient_conservation is True
    with pytest.raises(CounterfactualConfigError, match="unknown counterfactual option"):
        CounterfactualConfig.from_mapping({"boots": 4.0})
    with pytest.raises(CounterfactualConfigError, match="answer_markers"):
        CounterfactualConfig.from_mapping({"answer_markers": "####"})
    with pytest.raises(CounterfactualConfigError, match="boost"):
        cfg.replace(boost=0.1)


def test_a_weighting_option_with_the_vanilla_mode_is_refused():
    # vanilla weighs every token 1: a changed option would silently do nothing (red team 3)
    with pytest.raises(CounterfactualConfigError, match=r"counterfactual.boost=3.0 has no effect with "
                                                         r"counterfactual.mode='vanilla'"):
        CounterfactualConfig(mode="vanilla", boost=3.0)
    assert CounterfactualConfig(mode="vanilla").mode == "vanilla"
    assert CounterfactualConfig(mode="random", boost=3.0).boost == 3.0  # random draws importance: weights apply
