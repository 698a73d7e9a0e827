"""Config validation, reference selection and correction prompts."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest

from counterfactual.importance import CounterfactualConfig
from ibpo.options import DEFAULT_INSTRUCTION, IBPOConfig, IBPOConfigError
from ibpo.prompts import (
    TRUNCATION_MARKER,
    build_correction_messages,
    render_candidate,
    strip_thinking,
    truncate_middle,
)
from ibpo.references import select_references, select_references_in_group


@pytest.mark.parametrize(
    "options, message",
    [
        ({"alpha": 1.5}, r"ibpo.alpha=1.5 is out of range: must be in \[0, 1\]"),
        ({"alpha": -0.1}, "ibpo.alpha"),
        ({"lam": 2.0, "beta": 0.5}, "lam \\* max Δ"),
        ({"variant": "ratio", "lam": 1.0}, "lam \\* max Δ"),
        ({"variant": "foo"}, "ibpo.variant='foo'.*one of"),
        ({"alpha_mode": "auto"}, "ibpo.alpha_mode"),
        ({"candidate_view": "nothink"}, "ibpo.candidate_view"),
        ({"lambda_schedule": "cosine"}, "ibpo.lambda_schedule"),
        ({"num_references": 2}, "candidate_labels has 2 labels"),
        ({"template": "{problem} only"}, "placeholder"),
        ({"template": "Answer in \\boxed{} {problem} {candidates}"}, "ibpo.template does not format"),
        ({"template": "{answer} {problem} {candidates}"}, "ibpo.template does not format"),
        ({"corrections_per_target": 0}, "corrections_per_target"),
        ({"mask_sign": "positive"}, "ibpo.mask_sign='positive'.*one of the registered mask-sign policies"),
        ({"reference_rule": "nearest"}, "ibpo.reference_rule='nearest'.*registered reference rules.*'per_group'"),
        ({"reference_rule": True}, "ibpo.reference_rule=True.*registered reference rules"),
        ({"joint_grouping": "per_target"}, "ibpo.joint_grouping"),
        ({"joint_minibatch": "fixed"}, "ibpo.joint_minibatch"),
        ({"joint_grouping": "per_correction_prompt", "joint_training": True}, "needs ibpo.corrections_per_target >= 2"),
        # an option set where it has no effect: the run would silently not do it (red team 3)
        ({"enable": False, "joint_training": True}, r"ibpo.joint_training=True has no effect with ibpo.enable=False"),
        ({"mask_sign": "literal"}, r"ibpo.mask_sign='literal' has no effect with ibpo.variant='binary'"),
        ({"adaptive_min_samples": 4}, r"ibpo.adaptive_min_samples=4 has no effect with ibpo.alpha_mode='fixed'"),
        ({"lambda_max_fraction": 0.3}, r"ibpo.lambda_max_fraction=0.3 has no effect with ibpo.lambda_schedule='fixed'"),
        ({"lambda_max_momentum": 0.5}, r"ibpo.lambda_max_momentum=0.5 has no effect with ibpo.lambda_schedule='fixed'"),
        ({"rewrite_penalty": 0.5}, r"ibpo.rewrite_penalty=0.5 has no effect with ibpo.joint_training=False"),
        ({"joint_grouping": "per_correction_prompt", "corrections_per_target": 2},
         r"ibpo.joint_grouping='per_correction_prompt' has no effect with ibpo.joint_training=False"),
        ({"num_references": 0, "reference_rule": "per_group"},
         r"ibpo.reference_rule='per_group' has no effect with ibpo.num_references=0"),
        ({"num_references": 0, "candidate_order": "reference_first"},
         r"ibpo.candidate_order='reference_first' has no effect with ibpo.num_references=0"),
        # before: accepted, then np.random.default_rng([-1, step]) raised in the trainer at the first step
        ({"seed": -1}, r"ibpo.seed=-1 is out of range: must be >= 0"),
        # before: accepted; the correction prompt then showed two candidates under one heading (or none)
        ({"candidate_labels": ("A", "A")}, r"ibpo.candidate_labels=\('A', 'A'\) is out of range: must be distinct"),
        ({"candidate_labels": ("A", " ")}, r"ibpo.candidate_labels=.* must be distinct, non-blank labels for the 2"),
    ],
)
def test_bad_options_fail_at_construction(options, message):
    with pytest.raises(IBPOConfigError, match=message):
        IBPOConfig(**options)


def test_from_mapping_rejects_unknown_keys():
    with pytest.raises(IBPOConfigError, match="unknown ibpo option.*'lamda'"):
        IBPOConfig.from_mapping({"lamda": 0.5})
    with pytest.raises(IBPOConfigError, match="group_size is not an option: G is actor_rollout_ref.rollout.n"):
        IBPOConfig.from_mapping({"group_size": 8})
    # a replaced option fails naming its successor, whatever its value (not as merely unknown, not ignored)
    for old in (True, False):
        with pytest.raises(IBPOConfigError, match="reference_per_group was replaced by ibpo.reference_rule.*"
                                                  "true is reference_rule=per_group"):
            IBPOConfig.from_mapping({"reference_per_group": old, "lam": 0.5})
    cfg = IBPOConfig.from_mapping({"variant": "mask", "candidate_labels": ["A", "B", "C"], "num_references": 2})
    assert cfg.candidate_labels == ("A", "B", "C") and cfg.variant == "mask"
    # λβ < 1 is the bound for binary: λ = 1.9 with β = 0.5 is allowed
    assert IBPOConfig(lam=1.9, beta=0.5).lam == 1.9


def test_references_prefer_correct_and_are_uniform():
    rng = np.random.default_rng(0)
    counts = collections.Counter()
    for _ in range(3000):
        refs = select_references_in_group([False, True, False, True, True], 1, rng)
        assert refs[1] is None and refs[3] is None and refs[4] is None
        counts[refs[0][0]] += 1
        assert refs[2][0] in (1, 3, 4)
    assert set(counts) == {1, 3, 4}
    for k in (1, 3, 4):  # uniform: each ~1000 of 3000
        assert 850 < counts[k] < 1150


def test_references_fall_back_to_other_wrong_and_duplicate():
    rng = np.random.default_rng(1)
    refs = select_references_in_group([False, False, False], 1, rng)
    assert all(r[0] != i for i, r in enumerate(refs))
    refs = select_references_in_group([False, True], 3, rng)
    assert refs[0] == [1, 1, 1]  # duplicates when too few correct ones (Eq. 4)
    refs = select_references_in_group([False, True, True], 2, rng)
    assert sorted(refs[0]) == [1, 2]  # distinct while possible
    assert select_references_in_group([False], 1, rng) == [[]]  # G = 1: self-correction
    assert select_references_in_group([False, True], 0, rng) == [[], None]  # K = 1


def test_several_references_are_drawn_without_replacement():
    """K − 1 >= 2 (Eq. 4): the references of one wrong response are distinct while the pool allows, every
    subset equally likely; the all-wrong fallback never includes the target; a small pool is exhausted
    before any reference repeats."""
    rng = np.random.default_rng(3)
    subsets = collections.Counter()
    for _ in range(3000):
        refs = select_references_in_group([False, True, True, True, True, True], 3, rng)[0]
        assert len(refs) == 3 and len(set(refs)) == 3 and set(refs) <= {1, 2, 3, 4, 5}
        subsets[frozenset(refs)] += 1
    assert len(subsets) == 10 and all(220 < c < 380 for c in subsets.values())  # C(5, 3) = 10, ~300 each
    for _ in range(200):
        refs = select_references_in_group([False] * 5, 2, rng)
        for i, r in enumerate(refs):
            assert len(set(r)) == 2 and i not in r
        refs = select_references_in_group([False, True, True, True], 5, rng)[0]
        assert sorted(refs[:3]) == [1, 2, 3] and len(set(refs[3:])) == 2  # pool used up, then redrawn
    batch = select_references(["g"] * 6 + ["h"] * 6, [False, True, True, True, False, True] + [False] * 6, 2, seed=0)
    for row, refs in enumerate(batch):
        if refs is not None:
            assert len(set(refs)) == 2 and row not in refs


def test_batch_references_are_seeded_and_group_local():
    gids = ["x", "y", "x", "y", "x"]
    ok = [False, True, True, False, True]
    a = select_references(gids, ok, 1, seed=7, step=3)
    assert a == select_references(gids, ok, 1, seed=7, step=3)
    assert a[0][0] in (2, 4) and a[3] == [1] and a[1] is None
    different = {tuple(select_references(gids, ok, 1, seed=7, step=s)[0]) for s in range(20)}
    assert different == {(2,), (4,)}


def test_truncate_middle_and_marker():
    head, tail, omitted = truncate_middle(list(range(10)), 4)
    assert head == [0, 1] and tail == [8, 9] and omitted == 6
    assert truncate_middle([1, 2, 3], 0) == ([1, 2, 3], [], 0)
    assert truncate_middle([1, 2, 3], 3) == ([1, 2, 3], [], 0)
    cfg = IBPOConfig(max_candidate_tokens=5)
    text = render_candidate(list(range(20)), lambda ids: " ".join(map(str, ids)), cfg)
    assert text.startswith("0 1 2") and text.endswith("18 19")
    assert TRUNCATION_MARKER.format(n=15).strip() in text


def test_strip_thinking_happens_before_truncation():
    """A thinking block must not leak through a middle cut, and the budget goes to the visible answer."""
    vocab = {i: "q" for i in range(50)} | {50: "</think>"} | {51 + i: "A" for i in range(30)}
    ids = list(range(81))
    decode = lambda xs: "".join(vocab[i] for i in xs)  # noqa: E731
    assert render_candidate(ids, decode, IBPOConfig(candidate_view="strip_thinking", max_candidate_tokens=40)) == "A" * 30
    cut = render_candidate(ids, decode, IBPOConfig(candidate_view="strip_thinking", max_candidate_tokens=10))
    assert "q" not in cut and "</think>" not in cut and "[... 20 tokens omitted ...]" in cut
    # the marker split across tokens is found too
    split = {0: "x", 1: "</th", 2: "ink>", 3: "ans"}
    assert render_candidate([0, 1, 2, 3], lambda xs: "".join(split[i] for i in xs),
                            IBPOConfig(candidate_view="strip_thinking")) == "ans"


def test_strip_thinking_view():
    assert strip_thinking("<think>long musing</think>\nSo the answer is \\boxed{3}") == "So the answer is \\boxed{3}"
    assert strip_thinking("no thinking here") == "no thinking here"
    cfg = IBPOConfig(candidate_view="strip_thinking")
    pieces = {1: "<think>x", 2: "</think>", 3: " final"}
    assert render_candidate([1, 2, 3], lambda ids: "".join(pieces[i] for i in ids), cfg) == "final"


def test_correction_messages_default_template():
    original = [{"role": "system", "content": "sys"},
                {"role": "user", "content": "What is 1+1? Put the answer in \\boxed{}."}]
    cfg = IBPOConfig()
    msgs = build_correction_messages(original, "I think 3", ["It is 2"], cfg)
    assert msgs[0] == {"role": "system", "content": "sys"}
    assert len(msgs) == 2 and msgs[1]["role"] == "user"
    body = msgs[1]["content"]
    assert body.startswith(DEFAULT_INSTRUCTION)
    assert "What is 1+1? Put the answer in \\boxed{}." in body
    assert body.index("### Solution 1\nI think 3") < body.index("### Solution 2\nIt is 2")
    assert "correct" not in body.split("### Solution 1")[1].split("\n")[0]  # neutral labels
    assert cfg.format_reminder in body


def test_correction_messages_shuffle_and_self_correction():
    original = [{"role": "user", "content": "P"}]
    cfg = IBPOConfig(shuffle_candidates=True)
    orders = set()
    rng = np.random.default_rng(0)
    for _ in range(30):
        body = build_correction_messages(original, "TARGET", ["REF"], cfg, rng)[0]["content"]
        orders.add(body.index("TARGET") < body.index("REF"))
    assert orders == {True, False}
    with pytest.raises(ValueError, match="needs an rng"):
        build_correction_messages(original, "T", ["R"], cfg)
    solo = build_correction_messages(original, "T", [], IBPOConfig(num_references=0))[0]["content"]
    assert "### Solution 1\nT" in solo and "Solution 2" not in solo and "candidate solution to the problem" in solo
    with pytest.raises(ValueError, match="no user message"):
        build_correction_messages([{"role": "system", "content": "s"}], "T", ["R"], IBPOConfig())


@pytest.mark.parametrize("cls, prefix", [(IBPOConfig, "ibpo"), (CounterfactualConfig, "counterfactual")])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_every_float_option_refuses_a_non_finite_value(cls, prefix, value):
    """nan passes every range comparison (nan < 0 is False): ``ibpo.lam=nan`` would train on r' = nan."""
    default = cls()
    floats = [f.name for f in dataclasses.fields(cls) if isinstance(getattr(default, f.name), float)]
    assert len(floats) >= 5, floats
    for name in floats:
        with pytest.raises(ValueError, match=rf"^{prefix}\.{name}={value!r} is out of range: must be a finite number"):
            cls.from_mapping({name: value})


def test_option_changes_between_a_checkpoint_and_a_resumed_run():
    from ibpo.options import option_changes, saved_options

    saved = saved_options(IBPOConfig(lam=0.6, candidate_labels=("A", "B")))
    assert option_changes(saved, IBPOConfig(lam=0.6, candidate_labels=("A", "B"))) == []
    assert option_changes(saved, IBPOConfig(lam=0.4, candidate_labels=("A", "C"))) == [
        ("lam", 0.6, 0.4), ("candidate_labels", ["A", "B"], ["A", "C"])]
    # measuring more or less often is not a change of what is trained on
    assert option_changes(saved, IBPOConfig(lam=0.6, candidate_labels=("A", "B"), diagnostics_interval=7,
                                            grad_probe_interval=3, lookup_proxy_interval=0)) == []
    # an option the checkpoint predates compares as its default
    older = {k: v for k, v in saved.items() if k != "rewrite_condition"}
    assert option_changes(older, IBPOConfig(lam=0.6, candidate_labels=("A", "B"))) == []
    assert option_changes(older, IBPOConfig(lam=0.6, candidate_labels=("A", "B"),
                                            rewrite_condition="closer_to_reference")) == [
        ("rewrite_condition", "both", "closer_to_reference")]
    # an option the checkpoint has and this version does not (removed or renamed since) is a change, not ignored
    from ibpo.options import NO_SUCH_OPTION

    removed = {**saved, "reference_per_group": True}
    assert option_changes(removed, IBPOConfig(lam=0.6, candidate_labels=("A", "B"))) == [
        ("reference_per_group", True, NO_SUCH_OPTION)]
    assert repr(NO_SUCH_OPTION) == "(no such option now)"
