"""The method's extension points follow one pattern: a registry of named entries, one decorated function
each (shaping variants, reference rules, mask-sign policies), resolved once and passed down as objects."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ibpo.advantages import (MaskSignPolicy, get_mask_sign, mask_sign_names, register_mask_sign, signed_token_mask,
                             unregister_mask_sign)
from ibpo.alignment import align
from ibpo.options import IBPOConfig, IBPOConfigError
from ibpo.pipeline import plan_corrections
from ibpo.references import (GroupView, ReferenceRule, get_reference_rule, reference_rule_names,
                             register_reference_rule, select_references, select_references_in_group,
                             unregister_reference_rule)
from ibpo.shaping import shape_targets, shaping_delta
from ibpo.variants import get_variant, register_variant, unregister_variant


# ------------------------------------------------------------------ reference rules
def test_builtin_reference_rules_are_selected_by_name():
    assert reference_rule_names()[:2] == ("independent", "per_group")
    assert IBPOConfig().reference_rule == "independent"
    assert IBPOConfig(reference_rule="per_group").reference_rule == "per_group"
    gids, ok = ["a"] * 5 + ["b"] * 4, [False, True, False, True, True, False, False, False, True]
    assert select_references(gids, ok, 2, seed=3, step=4) == select_references(
        gids, ok, 2, seed=3, step=4, rule=get_reference_rule("independent"))  # the default is the paper's
    for name in ("independent", "per_group"):
        rule = get_reference_rule(name)
        assert isinstance(rule, ReferenceRule) and rule.name == name
        batch = select_references(gids, ok, 2, seed=3, step=4, rule=rule)
        rng = np.random.default_rng([3, 4])
        local_a = select_references_in_group(ok[:5], 2, rng, rule=rule)
        assert [None if r is None else list(r) for r in batch[:5]] == local_a  # group a: rows 0..4
    with pytest.raises(TypeError, match="expected a ReferenceRule"):  # names are resolved once, by the caller
        select_references(gids, ok, 2, seed=3, rule="per_group")
    with pytest.raises(ValueError, match="unknown reference rule 'nearest'; registered: .*'independent'"):
        get_reference_rule("nearest")


def test_an_unknown_or_old_reference_option_is_refused_naming_the_choices():
    with pytest.raises(IBPOConfigError, match=r"ibpo.reference_rule='nearest'.*\('independent', 'per_group'"):
        IBPOConfig(reference_rule="nearest")
    with pytest.raises(IBPOConfigError, match="reference_per_group was replaced by ibpo.reference_rule"):
        IBPOConfig.from_mapping({"reference_per_group": True})


def test_a_registered_rule_is_selectable_by_name_through_the_config_and_the_pipeline():
    """``ibpo.reference_rule=<new name>`` validates once registered and is what plan_corrections draws with."""
    seen = []

    @register_reference_rule("last_correct")
    def last_correct(group: GroupView, num_references: int, rng: np.random.Generator):
        seen.append(group.rows)
        pool = [j for j, ok in enumerate(group.is_correct) if ok][-1:] or [0]
        return [None if ok else pool * num_references for ok in group.is_correct]

    try:
        config = IBPOConfig.from_mapping({"reference_rule": "last_correct"})
        gids = ["x", "x", "x", "y", "y", "y"]
        ok = [False, True, True, True, False, True]
        ids = [[i + 1] * (i + 1) for i in range(6)]
        requests = plan_corrections(gids, ok, [[{"role": "user", "content": f"p{g}"}] for g in gids], ids,
                                    lambda t: " ".join(map(str, t)), config, step=0)
        # group x: rows 0-2, last correct row 2; group y: rows 3-5, last correct row 5 (batch indices)
        assert [(r.target_row, r.reference_rows) for r in requests] == [(0, (2,)), (4, (5,))]
        assert seen == [(0, 1, 2), (3, 4, 5)]
        prompt = requests[0].messages[-1]["content"]  # shows row 2's response (3 3 3), not row 1's (2 2)
        assert "3 3 3" in prompt and "2 2" not in prompt
    finally:
        unregister_reference_rule("last_correct")
    with pytest.raises(IBPOConfigError, match="ibpo.reference_rule='last_correct'"):
        IBPOConfig(reference_rule="last_correct")  # unregistered again: refused


def test_a_registered_rule_sees_rows_correctness_response_ids_and_rng():
    seen = []

    @register_reference_rule("shortest_correct")
    def shortest_correct(group: GroupView, num_references: int, rng: np.random.Generator):
        seen.append((group.rows, group.is_correct, group.response_ids, isinstance(rng, np.random.Generator)))
        correct = [j for j, ok in enumerate(group.is_correct) if ok]
        pool = sorted(correct, key=lambda j: len(group.response_ids[j]))[:1]
        return [None if ok else pool * num_references for ok in group.is_correct]

    try:
        gids = ["x", "y", "x", "y", "x"]
        ok = [False, True, True, False, True]
        ids = [[1, 2], [3], [4, 5, 6], [7], [8]]
        refs = select_references(gids, ok, 2, seed=0, rule=get_reference_rule("shortest_correct"), response_ids=ids)
        # group x = rows 0, 2, 4 (shortest correct: row 4); group y = rows 1, 3 (row 1); batch row indices
        assert refs == [[4, 4], None, None, [1, 1], None]
        assert seen == [((0, 2, 4), (False, True, True), ([1, 2], [4, 5, 6], [8]), True),
                        ((1, 3), (True, False), ([3], [7]), True)]
        with pytest.raises(ValueError, match="already registered"):
            register_reference_rule("shortest_correct")(shortest_correct)
    finally:
        unregister_reference_rule("shortest_correct")
    with pytest.raises(ValueError, match="unknown reference rule 'shortest_correct'; registered: .*independent"):
        get_reference_rule("shortest_correct")


@pytest.mark.parametrize("bad_output,message", [
    (lambda g: [None] * len(g.is_correct), "position 0 is wrong but got None"),
    (lambda g: [[0]] * len(g.is_correct), "position 1 is correct but got"),
    (lambda g: [[5], None], "outside the group"),
    (lambda g: [[1]], "returned 1 entries for a group of 2"),
])
def test_a_malformed_rule_fails_naming_itself(bad_output, message):
    register_reference_rule("broken")(lambda group, k, rng: bad_output(group))
    try:
        with pytest.raises(ValueError, match=f"reference rule 'broken'.*{message}|{message}"):
            select_references(["g", "g"], [False, True], 1, seed=0, rule=get_reference_rule("broken"))
    finally:
        unregister_reference_rule("broken")


# ------------------------------------------------------------------ mask-sign policies
def test_mask_sign_registry_is_what_the_config_accepts():
    assert mask_sign_names()[:3] == ("negative_only", "complement_when_positive", "literal")
    assert IBPOConfig().mask_sign == "negative_only"
    for name in mask_sign_names():
        assert IBPOConfig(variant="mask", mask_sign=name).mask_sign == name
    with pytest.raises(IBPOConfigError, match="ibpo.mask_sign='zero_all'.*registered mask-sign policies"):
        IBPOConfig(variant="mask", mask_sign="zero_all")


def test_a_registered_mask_sign_policy_is_accepted_by_the_config_and_applies_to_shaped_rows_only():
    @register_mask_sign("zero_all")
    def zero_all(token_mask, shaped, negative, positive):
        return torch.zeros_like(token_mask)  # even for unshaped rows: signed_token_mask must not let it

    try:
        config = IBPOConfig.from_mapping({"variant": "mask", "mask_sign": "zero_all"})
        policy = get_mask_sign(config.mask_sign)
        assert isinstance(policy, MaskSignPolicy) and policy.name == "zero_all"
        adv = torch.tensor([1.0, -1.0, 2.0])
        m = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        out = signed_token_mask(adv, m, torch.tensor([True, True, False]), policy)
        assert out.tolist() == [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
        with pytest.raises(ValueError, match="already registered"):
            register_mask_sign("zero_all")(zero_all)
    finally:
        unregister_mask_sign("zero_all")
    with pytest.raises(ValueError, match="unknown ibpo.mask_sign 'zero_all'; registered: .*negative_only"):
        get_mask_sign("zero_all")
    with pytest.raises(IBPOConfigError, match="ibpo.mask_sign='zero_all'"):
        IBPOConfig(mask_sign="zero_all")


# ------------------------------------------------------------------ variants passed down as objects
def test_the_variant_object_flows_down_to_delta():
    calls = []

    @register_variant("third", max_delta=lambda beta: 1 / 3)
    def third(unmodified_ratio: float, beta: float) -> float:
        calls.append(unmodified_ratio)
        return 1 / 3

    try:
        variant = get_variant("third")
        assert shaping_delta(variant, True, True, False, 0.5, beta=0.5) == pytest.approx(1 / 3)
        assert shaping_delta(variant, True, False, False, 0.5, beta=0.5) == 0.0
        with pytest.raises(TypeError, match="takes a ShapingVariant"):
            shaping_delta("third", True, True, False, 0.5, beta=0.5)
        y, y_hat = [1, 2, 3, 4], [1, 2, 9, 4]
        results, _, _ = shape_targets([align(y, y_hat)], [True], [4], [y_hat], [[]], IBPOConfig(variant="third"))
        assert results[0].delta == pytest.approx(1 / 3) and calls[-1] == 0.75
    finally:
        unregister_variant("third")


def test_no_name_branches_on_mask_signs_or_reference_rules_outside_their_registries():
    """Behaviour per entry lives in the registry: no ``mask_sign == "literal"`` or ``reference_rule ==
    "per_group"``-style branches elsewhere (the variants' own scan: tests/unit/test_ibpo_variants.py)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    names = "|".join(mask_sign_names()[:3] + reference_rule_names()[:2])
    branch = re.compile(r"""(mask_sign|reference_rule)\s*(==|!=|\bin\b|\bnot in\b)\s*[("'\[]|"""
                        rf"""["']({names})["']\s*(==|!=)""")
    offenders = [f"{path.relative_to(root)}:{number}: {line.strip()}"
                 for folder in ("ibpo", "recipe", "lab", "evaluation") for path in sorted((root / folder).rglob("*.py"))
                 if path.name not in ("advantages.py", "references.py")
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if branch.search(line)]
    assert offenders == []
    assert branch.search('if config.mask_sign == "literal":') and branch.search('"per_group" == rule')
