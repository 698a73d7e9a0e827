"""The shaping-variant registry (ibpo/variants.py): the built-in entries and a toy variant added through it."""

from __future__ import annotations

import pytest

from ibpo.options import IBPOConfig, IBPOConfigError
from ibpo.pipeline import plan_corrections, shape_batch
from ibpo.variants import get_variant, register_variant, unregister_variant, variant_names


def test_builtin_variants_are_registry_entries():
    assert variant_names()[:3] == ("binary", "ratio", "mask")
    assert [get_variant(v).delta(0.75, 0.5) for v in ("binary", "ratio", "mask")] == [0.5, 0.75, 0.5]
    assert [get_variant(v).max_delta(0.5) for v in ("binary", "ratio", "mask")] == [0.5, 1.0, 0.5]
    assert [get_variant(v).masks_tokens for v in ("binary", "ratio", "mask")] == [False, False, True]
    # the Eq. 8 start check reads max Δ from the entry: ratio's is 1 whatever β
    assert IBPOConfig(variant="ratio", lam=0.9, beta=0.1).max_delta == 1.0
    with pytest.raises(IBPOConfigError, match="max Δ"):
        IBPOConfig(variant="ratio", lam=1.0, beta=0.1)
    with pytest.raises(ValueError, match="already registered"):
        register_variant("binary", max_delta=lambda beta: beta)(lambda ratio, beta: beta)


@pytest.fixture
def half_variant():
    @register_variant("half", max_delta=lambda beta: beta / 2, masks_tokens=True)
    def half_delta(unmodified_ratio: float, beta: float) -> float:
        return beta / 2

    yield "half"
    unregister_variant("half")


def test_toy_variant_registered_runs_through_shape_batch(half_variant):
    """A variant added only through the registry validates, bounds λ via its max Δ, and drives
    ``shape_batch``: Δ = β/2 on the locally corrected wrong row, its token mask on that row only."""
    assert "half" in variant_names()
    cfg = IBPOConfig(variant="half", lam=1.9, beta=1.0)  # λ·maxΔ = 0.95 < 1 only because max Δ = β/2
    with pytest.raises(IBPOConfigError, match="max Δ"):
        IBPOConfig(variant="half", lam=2.0, beta=1.0)
    y = [[1, 2, 3, 4], [1, 2, 9, 4], [5, 6, 7, 8]]
    is_correct = [True, False, False]
    requests = plan_corrections([0, 0, 0], is_correct, [[{"role": "user", "content": "P"}]] * 3, y,
                                decode=str, config=cfg, step=0)
    assert [r.target_row for r in requests] == [1, 2]
    # row 1: corrected locally (token 2 changed); row 2: the correction failed
    outcome = shape_batch(requests, [[1, 2, 3, 4], [5, 6, 0, 8]], [True, False], y, is_correct, cfg)
    assert outcome.delta.tolist() == [0.0, 0.5, 0.0]
    assert outcome.token_masks[1].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert outcome.token_masks[2].tolist() == [1.0] * 4
    assert outcome.metrics["mask_kept_fraction"] == pytest.approx(0.25)


def test_unknown_variant_names_the_registry():
    with pytest.raises(IBPOConfigError, match="ibpo.variant='halff'.*registered variants"):
        IBPOConfig(variant="halff")
    with pytest.raises(ValueError, match="unknown IBPO variant 'halff'; registered"):
        get_variant("halff")


def test_no_variant_name_branches_outside_the_registry():
    """Behaviour per variant lives in its registry entry: no ``variant == "mask"``-style branches elsewhere."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    branch = re.compile(r"""variant\s*(==|!=|\bin\b|\bnot in\b)\s*[("'\[]|["'](binary|ratio|mask)["']\s*(==|!=)""")
    offenders = [f"{path.relative_to(root)}:{number}: {line.strip()}"
                 for folder in ("ibpo", "recipe", "lab", "evaluation") for path in sorted((root / folder).rglob("*.py"))
                 if path.name != "variants.py"
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if branch.search(line)]
    assert offenders == []
    assert branch.search('if self.ibpo.variant == "mask":') and branch.search('if cfg.variant in ("binary", "mask"):')


def test_mask_kept_fraction_is_left_out_when_nothing_is_shaped(half_variant):
    """A mean over no shaped response is left out of the step's metrics (docs/metrics.md): it was logged as
    1.0, read as "every token of the shaped responses trained" on a step that shaped none."""
    cfg = IBPOConfig(variant="half", lam=1.9, beta=1.0)
    y = [[1, 2, 3, 4], [1, 2, 9, 4]]
    requests = plan_corrections([0, 0], [True, False], [[{"role": "user", "content": "P"}]] * 2, y,
                                decode=str, config=cfg, step=0)
    outcome = shape_batch(requests, [[5, 6, 0, 8]], [False], y, [True, False], cfg)  # the only correction failed
    assert outcome.delta.tolist() == [0.0, 0.0]
    assert "mask_kept_fraction" not in outcome.metrics and outcome.metrics["num_shaped"] == 0.0
